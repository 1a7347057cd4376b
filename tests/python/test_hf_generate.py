"""tools/bench/hf_generate.py without torch or a GPU: its arguments, its rows, and the results
page's family for them."""

import contextlib
import io
import json
import pathlib
import sys
import tempfile
import unittest

from support import REPO

sys.path.insert(0, str(REPO / "tools" / "bench"))
import hf_generate as G  # noqa: E402
import results_page as R  # noqa: E402


class HfGenerateTest(unittest.TestCase):
    def test_defaults_are_the_issue_shape(self):
        args = G.parse_args([])
        self.assertEqual((args.batches, args.prompts, args.new_tokens, args.layers),
                         ([1, 8, 32], [1024, 8192], 128, 32))
        self.assertEqual(args.impls, ["flexjit", "sdpa", "flex_attention"])
        shape = G.LLAMA3_8B
        self.assertEqual((shape["hidden_size"], shape["num_attention_heads"],
                          shape["num_key_value_heads"], shape["head_dim"],
                          shape["intermediate_size"], shape["vocab_size"]),
                         (4096, 32, 8, 128, 14336, 128256))

    def test_quick_and_bad_arguments(self):
        args = G.parse_args(["--quick", "--impls", "sdpa,flexjit"])
        self.assertEqual((args.batches, args.prompts, args.new_tokens, args.impls),
                         ([1, 8], [1024], 32, ["sdpa", "flexjit"]))
        for argv in (["--impls", "eager"], ["--impls", ""], ["--new-tokens", "1"]):
            with self.subTest(argv=argv), contextlib.redirect_stderr(io.StringIO()):
                with self.assertRaises(SystemExit):
                    G.parse_args(argv)

    def test_rows(self):
        row = G.row_of(8, 1024, "flexjit", 128, [2000.0, 1000.0, 1500.0], 200.0)
        self.assertEqual(row["workload"], "hf_llama3_8b_b8_p1024")
        self.assertEqual(row["ms"], 1500.0)
        self.assertAlmostEqual(row["tok_s"], 8 * 128 / 1.5)
        self.assertAlmostEqual(row["decode_tok_s"], 8 * 127 / 1.3)
        failed = G.row_of(32, 8192, "sdpa", 128, [], None, note="OutOfMemoryError: CUDA")
        self.assertIsNone(failed["ms"])
        self.assertIsNone(failed["tok_s"])
        self.assertEqual(failed["note"], "OutOfMemoryError: CUDA")

    def test_append_merges_rows(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / "hf.json"
            self.assertEqual(G.previous_rows(path, True), [])
            old = [G.row_of(1, 1024, impl, 128, [1000.0], 100.0) for impl in ("flexjit", "sdpa")]
            path.write_text(json.dumps({"meta": {}, "rows": old}))
            self.assertEqual(G.previous_rows(path, False), [])
            previous = G.previous_rows(path, True)
            self.assertEqual(previous, old)
            new = [G.row_of(1, 1024, "sdpa", 128, [900.0], 90.0),
                   G.row_of(1, 8192, "flexjit", 128, [5000.0], 900.0)]
            rows = G.merged(previous, new)
            self.assertEqual([(r["workload"], r["impl"], r["ms"]) for r in rows], [
                ("hf_llama3_8b_b1_p1024", "flexjit", 1000.0),
                ("hf_llama3_8b_b1_p1024", "sdpa", 900.0),
                ("hf_llama3_8b_b1_p8192", "flexjit", 5000.0)])
        with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(SystemExit):
            G.parse_args(["--append"])

    def test_results_page_family(self):
        rows = [G.row_of(1, 1024, "flexjit", 128, [1000.0], 100.0),
                dict(G.row_of(1, 1024, "sdpa", 128, [2000.0], 100.0), agreement=1.0),
                G.row_of(1, 1024, "flex_attention", 128, [], None, note="OutOfMemoryError")]
        self.assertEqual({R.family_of(row) for row in rows}, {"transformers"})
        self.assertAlmostEqual(R.ratio(rows, rows[0]["workload"], "sdpa"), 2.0)
        result = {"family": "transformers", "meta": {"date": "d", "device": "H100"},
                  "rows": rows, "metadata": []}
        text = "\n".join(R.family_section("transformers", result)[0])
        self.assertIn("transformers generate()", text)
        self.assertIn("| hf_llama3_8b_b1_p1024 | 128 |", text)
        self.assertIn("flexjit 2.00×", text)


if __name__ == "__main__":
    unittest.main()
