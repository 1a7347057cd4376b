"""tools/bench/flex_compare.py without torch or a GPU: its arguments, its rows, and the
results page's family for them."""

import contextlib
import io
import pathlib
import sys
import unittest

from support import REPO

sys.path.insert(0, str(REPO / "tools" / "bench"))
import flex_compare as C  # noqa: E402
import results_page as R  # noqa: E402


class FlexCompareTest(unittest.TestCase):
    def test_defaults_are_the_issue_shape(self):
        args = C.parse_args([])
        self.assertEqual((args.batch, args.heads, args.kv_heads, args.seq, args.head_dim),
                         (1, 32, 8, 8192, 128))
        self.assertEqual(args.cases, list(C.CASES))
        for case in ("causal", "sliding_1024", "prefix_lm", "document", "alibi", "softcap",
                     "dilated", "neighbourhood_2d", "sinks_window", "head_window"):
            self.assertIn(case, C.CASES)

    def test_only_and_bad_arguments(self):
        self.assertEqual(C.parse_args(["--only", "alibi,causal"]).cases, ["alibi", "causal"])
        for argv in (["--only", "nope"], ["--heads", "32", "--kv-heads", "5"]):
            with self.subTest(argv=argv), contextlib.redirect_stderr(io.StringIO()):
                with self.assertRaises(SystemExit):
                    C.parse_args(argv)

    def test_rows(self):
        pairs = 32 * 8192 * 8193 // 2
        rows = C.rows_of("causal", (1, 32, 8192, 128), pairs, 2.0, 4.0, 1e-3,
                         {"block_mask_ms": 0.5})
        flexjit, torch_row = rows
        self.assertEqual([r["workload"] for r in rows], ["pyflex_causal"] * 2)
        self.assertEqual([r["impl"] for r in rows], ["flexjit", "flex_attention"])
        self.assertAlmostEqual(flexjit["tflops"], 4 * 128 * pairs / 2.0 / 1e9)
        self.assertAlmostEqual(torch_row["tflops"], flexjit["tflops"] / 2)
        self.assertEqual(flexjit["pairs"], pairs / 32)
        self.assertEqual((torch_row["diff_flexjit"], torch_row["block_mask_ms"]), (1e-3, 0.5))
        self.assertNotIn("diff_flexjit", flexjit)
        failed = C.rows_of("dilated", (1, 32, 8192, 128), 10, None, 1.0, None,
                           notes={"flexjit": "error: X"})
        self.assertEqual((failed[0]["ms"], failed[0]["tflops"], failed[0]["note"]),
                         (None, None, "error: X"))

    def test_results_page_family(self):
        rows = C.rows_of("causal", (1, 32, 8192, 128), 1 << 30, 2.0, 4.0, 1e-3)
        self.assertEqual({R.family_of(r) for r in rows}, {"python_frontend"})
        self.assertEqual(R.FAMILIES["python_frontend"]["metric"], "ms")
        run = {"meta": {"date": "2026-12-01 10:00 UTC", "device": "H100", "commit": "abc",
                        "torch": "2.11", "cuda": "13.0", "command": "flex_compare.py"},
               "rows": rows, "metadata": []}
        text = R.render({"python_frontend": dict(run, family="python_frontend")})
        self.assertIn("pyflex_causal", text)
        self.assertIn("flex_attention", text)


if __name__ == "__main__":
    unittest.main()
