"""The benchmark's pure logic (tools/bench/workloads.py): workloads, visible-pair counts,
block tables, sampling, tables."""

import dataclasses
import itertools
import random
import unittest

import support  # (sets sys.path)
from support import library_available
import workloads as W

import flexjit
from flexjit import ParamType


def small(mask, requests, **params):
    return W.Workload(name=f"t_{mask}", kind="prefill", flexjit_mask=mask, mask=mask, score=None,
                      requests=tuple(requests), params=params)


class VisiblePairsTest(unittest.TestCase):
    def test_closed_forms_match_brute_force(self):
        rng = random.Random(7)
        shapes = [[(40, 40)], [(1, 37)], [(5, 50), (13, 13), (1, 1)], [(16, 70), (70, 70)]]
        for requests, trial in itertools.product(shapes, range(4)):
            n = len(requests)
            window = rng.choice([1, 3, 16, 100])
            prefix = [rng.choice([0, 1, 9, 40, 200]) for _ in range(n)]
            docs = [W.document_ids(W.document_lengths(s, 1, 9, seed=rng.random()))
                    for _, s in requests]
            cases = [small("causal", requests), small("sliding", requests, window=window),
                     small("prefix_lm", requests, prefix_len=prefix),
                     small("rswa", requests, prefix_len=prefix, window=window),
                     small("document", requests, doc=docs)]
            for w in cases:
                with self.subTest(mask=w.mask, requests=requests, trial=trial):
                    self.assertEqual(W.visible_pairs(w), W.brute_force_pairs(w))

    def test_known_values(self):
        self.assertEqual(W.visible_pairs(small("causal", [(8192, 8192)])), 8192 * 8193 // 2)
        self.assertEqual(W.visible_pairs(small("causal", [(1, 4096)] * 64)), 64 * 4096)
        w = small("sliding", [(10, 10)], window=3)
        self.assertEqual(W.visible_pairs(w), 1 + 2 + 3 * 8)

    def test_flops_and_bytes(self):
        w = dataclasses.replace(small("causal", [(1, 4096)] * 64))
        self.assertEqual(W.flops(w, 10), 4 * 128 * 32 * 10)
        self.assertEqual(W.kv_bytes(w), 2 * 64 * 4096 * 8 * 128 * 2)


class WorkloadTableTest(unittest.TestCase):
    def test_issue_7_workloads(self):
        ws = {w.name: w for w in W.workloads()}
        self.assertEqual(len(ws), len(W.workloads()), "names are unique")
        for name in ("prefill_causal_16k", "prefill_sliding1024_8k", "prefill_prefix_lm_16k",
                     "prefill_rswa_8k", "prefill_document_16k", "prefill_causal+softcap_8k",
                     "prefill_causal+alibi_16k", "decode_b64_4k", "decode_b64_16k",
                     "prefill_causal_8k_hd64", "prefill_causal_8k_hd256"):
            self.assertIn(name, ws)
        self.assertEqual(ws["prefill_prefix_lm_16k"].params["prefix_len"], [4096])
        self.assertEqual(ws["decode_b64_16k"].page_sizes, (16,))
        self.assertEqual(ws["decode_b64_16k"].sdpa, "full")
        self.assertEqual(ws["prefill_causal_8k"].sdpa, "causal")
        self.assertIsNone(ws["prefill_sliding1024_8k"].sdpa)
        self.assertIsNone(ws["prefill_causal+softcap_8k"].sdpa)
        mixed = ws["mixed_4x2k_chunks+60_decodes"]
        self.assertFalse(mixed.uniform)
        self.assertIsNone(mixed.sdpa)
        self.assertEqual(sum(1 for q, _ in mixed.requests if q == 1), 60)
        lengths = [sum(1 for _ in group) for _, group in
                   itertools.groupby(ws["prefill_document_8k"].params["doc"][0])]
        self.assertEqual(sum(lengths), 8192)
        self.assertTrue(all(512 <= n <= 2048 for n in lengths[:-1]))
        for w in ws.values():
            self.assertIn(w.mask, W.MASKS)
            self.assertTrue(w.score is None or w.score in W.SCORES)

    def test_fp8_workloads_take_the_bf16_shapes(self):
        ws = {w.name: w for w in W.workloads()}
        for page in (16, 64):
            for name, bf16 in ((f"fp8_decode_b64_16k_p{page}", ws["decode_b64_16k"]),
                               (f"fp8_prefill_causal_16k_p{page}", ws["prefill_causal_16k"])):
                with self.subTest(name):
                    w = ws[name]
                    self.assertEqual((w.kv_dtype, w.page_sizes), ("fp8", (page,)))
                    self.assertEqual((w.kind, w.requests, w.head_dim, w.num_heads,
                                      w.num_kv_heads, w.flexjit_mask, w.mask),
                                     (bf16.kind, bf16.requests, bf16.head_dim, bf16.num_heads,
                                      bf16.num_kv_heads, bf16.flexjit_mask, bf16.mask))
                    # One byte per element, unless asked for bf16's two.
                    self.assertEqual(2 * W.kv_bytes(w), W.kv_bytes(bf16))
                    self.assertEqual(W.kv_bytes(w, 2), W.kv_bytes(bf16))
                    self.assertIsNone(w.sdpa)
        self.assertEqual({w.name for w in W.select(W.workloads(), only="fp8")},
                         {"fp8_decode_b64_16k_p16", "fp8_decode_b64_16k_p64",
                          "fp8_prefill_causal_16k_p16", "fp8_prefill_causal_16k_p64"})
        self.assertIn("64×(1×16384), hd 128, 32/8 heads, fp8 cache",
                      W.workload_table([ws["fp8_decode_b64_16k_p16"]]))

    def test_select(self):
        ws = W.workloads()
        self.assertLess(len(W.select(ws, quick=True)), len(ws))
        self.assertEqual([w.name for w in W.select(ws, only="prefill_causal_8k")],
                         ["prefill_causal_8k"])
        self.assertEqual({w.name for w in W.select(ws, only="decode_b64_4k_")},
                         {"decode_b64_4k_pages", "decode_b64_4k_mha", "decode_b64_4k_gqa8",
                          "decode_b64_4k_mqa"})
        self.assertEqual([w.name for w in W.select(ws, only="decode_b1_128k,decode_b4_128k")],
                         ["decode_b1_128k", "decode_b4_128k"])
        self.assertEqual(W.select(ws, only="nothing"), [])
        family = W.select(ws, only="family")
        self.assertEqual(len(family), 2 * (len(W.FAMILY_MASKS) + 1))
        self.assertTrue(all(w.family and w.page_sizes == (16, 64, 128) for w in family))
        standard = W.select(ws, only="standard")
        self.assertEqual(len(standard) + len(family), len(ws))
        self.assertFalse(any(w.family for w in standard))
        self.assertEqual([w.name for w in W.select(ws, only="standard,prefill_causal_8k")],
                         ["prefill_causal_8k"])


class FlexjitArgumentsTest(unittest.TestCase):
    def test_alibi_slopes(self):
        self.assertEqual(W.alibi_slopes(8), [2.0 ** -(h + 1) for h in range(8)])
        self.assertEqual(W.alibi_slopes(32)[0], 2.0 ** -0.25)
        self.assertEqual(W.alibi_slopes(32)[-1], 2.0 ** -8)
        # Not a power of two: 8 geometric slopes, then every other one of 16's (BLOOM's).
        twelve = W.alibi_slopes(12)
        self.assertEqual(twelve[:8], W.alibi_slopes(8))
        self.assertEqual(twelve[8:], W.alibi_slopes(16)[0:8:2])
        self.assertEqual(W.alibi_slopes(0), [])

    def test_scalars_and_arrays(self):
        ws = {w.name: w for w in W.workloads()}
        scalars, arrays = W.flexjit_arguments(ws["prefill_rswa_8k"])
        self.assertEqual(scalars, {"window": W.WINDOW})
        self.assertEqual(arrays, {"prefix_len": ("int32", [2048])})
        scalars, arrays = W.flexjit_arguments(ws["prefill_causal+alibi_8k"])
        self.assertEqual(scalars, {})
        self.assertEqual(arrays["slopes"], ("float32", W.alibi_slopes(32)))
        w = ws["prefill_document_16k"]
        _, arrays = W.flexjit_arguments(w)
        self.assertEqual(arrays["doc"], ("int32", w.params["doc"]))  # the peer's very ids
        self.assertEqual(W.flexjit_arguments(ws["decode_b64_4k"]), ({}, {}))

    def test_ragged_document_rows_are_padded(self):
        w = small("document", [(2, 3), (4, 5)], doc=[[0, 0, 1], [0, 1, 1, 2, 2]])
        _, arrays = W.flexjit_arguments(w)
        self.assertEqual(arrays["doc"], ("int32", [[0, 0, 1, -1, -1], [0, 1, 1, 2, 2]]))
        with self.assertRaisesRegex(ValueError, "one row of seq_len ids per request"):
            W.flexjit_arguments(small("document", [(2, 3), (4, 5)], doc=[[0, 0, 1]]))
        with self.assertRaisesRegex(ValueError, "prefix_len has 1 entries, expected 2"):
            W.flexjit_arguments(small("prefix_lm", [(2, 3), (4, 5)], prefix_len=[1]))

    def test_defines(self):
        ws = {w.name: w for w in W.workloads()}
        self.assertEqual(W.flexjit_defines(ws["prefill_causal+softcap_8k"]), {})
        self.assertEqual(W.flexjit_defines(ws["prefill_causal_8k"]), {})
        original = W.SOFTCAP
        try:
            W.SOFTCAP = 30.0
            self.assertEqual(W.flexjit_defines(ws["prefill_causal+softcap_8k"]), {"cap": 30.0})
            self.assertEqual(W.flexjit_defines(ws["prefill_causal+alibi_8k"]), {})
        finally:
            W.SOFTCAP = original

    def test_standard_cap_is_the_files(self):
        text = (support.REPO / "dsl" / "lib" / "standard.mask").read_text()
        self.assertIn(f"const cap: float = {W.STANDARD_CAP}", text)

    @unittest.skipUnless(library_available(), "libflexjit_runtime.so not found")
    def test_flexjit_takes_every_workload(self):
        # What bench.py asks flexjit for, checked against the real standard.mask and
        # tools/bench/family.mask: each workload's mask or variant compiles, and its arguments
        # match the declarations.
        ctx = flexjit.Context()
        programs = {}
        types = {"int32": ParamType.INT_ARRAY, "float32": ParamType.FLOAT_ARRAY}
        compiled = set()
        for w in W.workloads():
            with self.subTest(workload=w.name):
                path = w.mask_file or "dsl/lib/standard.mask"
                if path not in programs:
                    programs[path] = ctx.program_from_file(str(support.REPO / path))
                program = programs[path]
                scalars, arrays = W.flexjit_arguments(w)
                program.param_values(scalars)
                for name, (dtype, rows) in arrays.items():
                    info = program.param_info(name)
                    self.assertEqual(info.type, types[dtype])
                    shape = (len(rows), len(rows[0])) if isinstance(rows[0], list) else \
                        (len(rows),)
                    self.assertEqual(len(shape), info.rank)
                    for extent, dim in zip(shape, info.dims):
                        need = {"b": len(w.requests), "h": w.num_heads,
                                "kv": max(s for _, s in w.requests)}.get(dim, 0)
                        self.assertGreaterEqual(extent, need, dim)
                if "bits_seed" in w.params:  # built by bench.py: [seq_len, seq_len / 32]
                    self.assertEqual(program.param_info("bits").type, ParamType.INT_ARRAY)
                key = (w.flexjit_mask, tuple(sorted(W.flexjit_defines(w).items())),
                       w.kv_dtype)
                if key not in compiled:
                    kernel = ctx.kernel(program, w.flexjit_mask, defines=W.flexjit_defines(w),
                                        arch="sm_90a", kv_dtype=w.kv_dtype)
                    self.assertIn(w.flexjit_mask, kernel.name)
                    self.assertEqual("_kvfp8_" in kernel.name, w.kv_dtype == "fp8", kernel.name)
                    compiled.add(key)
        self.assertIn(("causal", (), "fp8"), compiled)
        self.assertEqual({mask for mask, _, _ in compiled},
                         {"causal", "sliding", "prefix_lm", "rswa", "document", "causal_softcap",
                          "causal_alibi", "causal_t5"} | set(W.FAMILY_MASKS))


class LayoutTest(unittest.TestCase):
    def test_block_table(self):
        seq_lens = [33, 16, 1, 0]
        rows, num_blocks = W.block_table(seq_lens, 16, seed=3)
        self.assertEqual(num_blocks, 3 + 1 + 1)
        used = [b for row, s in zip(rows, seq_lens) for b in row[:-(-s // 16)]]
        self.assertEqual(sorted(used), list(range(num_blocks)))
        self.assertTrue(all(len(row) == 3 for row in rows))
        shuffled, _ = W.block_table([1600] * 4, 16, seed=1)
        self.assertNotEqual([b for row in shuffled for b in row], list(range(400)))

    def test_block_table_runs(self):
        seq_lens = [16 * 10, 16 * 3 + 1, 16]
        rows, num_blocks = W.block_table(seq_lens, 16, seed=5, run=4)
        self.assertEqual(num_blocks, 10 + 4 + 1)
        used = [b for row, s in zip(rows, seq_lens) for b in row[:-(-s // 16)]]
        self.assertEqual(len(set(used)), len(used))
        self.assertEqual(sorted(used), list(range(num_blocks)))
        # Logical blocks 4k .. 4k + 3 of a request are consecutive physical blocks.
        for row, s in zip(rows, seq_lens):
            n = -(-s // 16)
            for j in range(1, n):
                if j % 4:
                    self.assertEqual(row[j], row[j - 1] + 1)
        sequential, num_blocks = W.block_table([160, 80], 16, seed=5, run=1 << 20)
        self.assertEqual(num_blocks, 15)
        self.assertIn(sequential[0], (list(range(10)), list(range(5, 15))))

    def test_block_table_ascending(self):
        seq_lens = [16 * 20, 16 * 7 + 3, 0, 16 * 12]
        shuffled, num_blocks = W.block_table(seq_lens, 16, seed=7)
        ascending, same_count = W.block_table(seq_lens, 16, seed=7, ascending=True)
        self.assertEqual(same_count, num_blocks)
        for old, new, s in zip(shuffled, ascending, seq_lens):
            n = -(-s // 16)
            # The same blocks per request, now in ascending order; the padding is untouched.
            self.assertEqual(new[:n], sorted(old[:n]))
            self.assertEqual(new[n:], old[n:])
        # Requests still interleave: the first request's blocks are not one run.
        first = ascending[0][:20]
        self.assertNotEqual(first, list(range(first[0], first[0] + 20)))

    def test_query_start_loc_and_positions(self):
        w = small("causal", [(3, 10), (1, 5)])
        self.assertEqual(W.query_start_loc(w), [0, 3, 4])
        self.assertEqual(list(W.query_positions(3, 10)), [7, 8, 9])

    def test_sample_rows(self):
        w = small("causal", [(2048, 4096)] * 4 + [(1, 4096)] * 60)
        rows = W.sample_rows(w, 100)
        self.assertLessEqual(len(rows), 100)
        self.assertEqual(rows, sorted(set(rows)))
        self.assertTrue(all(0 <= t < w.requests[r][0] for r, t in rows))
        self.assertIn((0, 2047), rows)
        self.assertIn((63, 0), rows)
        big = W.sample_rows(small("causal", [(16384, 16384)]), 256)
        self.assertGreater(len(big), 200)
        self.assertIn((0, 16383), big)

    def test_rotation_copies(self):
        self.assertEqual(W.rotation_copies(1 << 30, 50 << 20), 1)
        self.assertEqual(W.rotation_copies(100 << 20, 50 << 20), 2)
        self.assertEqual(W.rotation_copies(1 << 20, 50 << 20), 8)


class TableTest(unittest.TestCase):
    def test_ratios_and_table(self):
        rows = [
            {"workload": "a", "impl": "flexjit page 16", "layout": "paged 16", "ms": 2.0},
            {"workload": "a", "impl": "flexjit page 64", "layout": "paged 64", "ms": 1.0},
            {"workload": "a", "impl": "flex_attention", "layout": "contiguous", "ms": 1.5,
             "tflops": 400.0, "gbps": 10.0, "err_ref": 3e-3},
            {"workload": "b", "impl": "flexjit page 16", "ms": None,
             "note": "n/a: no mask named `prefix_lm`"},
            {"workload": "b", "impl": "flex_attention", "ms": 4.0},
        ]
        W.add_ratios(rows)
        self.assertAlmostEqual(rows[2]["ratio"], 1.5)
        self.assertNotIn("ratio", rows[4])
        table = W.results_table(rows)
        lines = table.splitlines()
        self.assertEqual(len(lines), 2 + len(rows))
        self.assertTrue(all(line.count(" | ") == 11 for line in lines if line[:2] == "| "))
        self.assertIn("| 1.50 |", lines[4])
        self.assertIn("3.0e-03", lines[4])
        self.assertIn("n/a: no mask named `prefix_lm`", lines[5])

    def test_report(self):
        chosen = W.select(W.workloads(), quick=True)
        meta = dict(date="2025-01-01 00:00 UTC", device="H100", commit="abc", torch="2.11",
                    cuda="13.0", command="bench.py --quick", matmul_tflops=700.0,
                    copy_gbps=3000.0)
        text = W.report(meta, [], [{"workload": w.name} for w in chosen], chosen)
        self.assertTrue(text.startswith("## 2025-01-01 00:00 UTC · H100"))
        self.assertIn("bf16 matmul 700 TFLOP/s", text)
        for w in chosen:
            self.assertIn(f"| {w.name} |", text)
        table = W.workload_table(W.workloads())
        for line in table.splitlines()[2:]:  # the `|` of prefix_lm's mask is escaped
            self.assertEqual(line.replace("\\|", "").count("|"), 6, line)
        self.assertIn("q >= kv \\| kv < prefix_len[b]", table)


if __name__ == "__main__":
    unittest.main()
