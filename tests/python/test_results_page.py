"""The results page generator (tools/bench/results_page.py): family files from a bench.py run,
ratios against the peers of the run, targets met and missed, missing peers and families."""

import contextlib
import io
import json
import pathlib
import tempfile
import unittest

import support  # noqa: F401  (sets sys.path)
import results_page as R

META = {"date": "2026-11-24 11:25 UTC", "device": "NVIDIA H100 80GB HBM3", "commit": "abc1234",
        "torch": "2.11.0", "cuda": "13.0", "command": "bench.py --only causal"}


def row(workload, impl, ms, **fields):
    out = {"workload": workload, "impl": impl, "layout": "", "ms": ms, "note": ""}
    out.update(fields)
    return out


# One bench.py run: a prefill workload (flexjit at two page sizes, flex, cuDNN, a peer that
# could not run), a decode workload, a mixed one and one of a family the table does not know.
RUN = {
    "meta": META,
    "rows": [
        row("prefill_causal_16k", "flexjit page 16", 1.25, tflops=400.0, call_us=15.0,
            launch_us=4.0),
        row("prefill_causal_16k", "flexjit page 64", 1.0, tflops=500.0, call_us=25.0),
        row("prefill_causal_16k", "flex_attention", 1.5, tflops=333.3),
        row("prefill_causal_16k", "sdpa cudnn", 0.8, tflops=625.0),
        row("prefill_causal_16k", "sdpa flash", None,
            note="n/a: mask/score or ragged batch not expressible"),
        row("decode_b1_128k", "flexjit page 16", 0.5, gbps=2900.0),
        row("decode_b1_128k", "flex_attention", 0.55, gbps=2636.0),
        row("mixed_4x2k_chunks+60_decodes", "flexjit page 16", 0.2),
        row("elementwise_dilated_8k", "flexjit page 16", 2.0, tflops=100.0),
        row("elementwise_dilated_8k", "flex_attention", 1.0, tflops=200.0),
    ],
    "metadata": [{"workload": "prefill_causal_16k", "launch_us": 4.0},
                 {"workload": "decode_b1_128k", "plan_us": 2.0}],
}

COMPILE = {
    "family": "compile",
    "meta": dict(META, device="CPU", command="results_page.py compile", kernel="k_sm90a"),
    "rows": [
        {"workload": "cold_compile", "impl": "flexjit", "measure": "cold compile",
         "value": 3.5, "min": 3.2, "unit": "s"},
        {"workload": "disk_hit_new_process", "impl": "flexjit", "measure": "disk hit",
         "value": 4.0, "min": 3.0, "unit": "ms"},
        {"workload": "memory_hit_memo", "impl": "flexjit", "measure": "memo", "value": 0.02,
         "min": None, "unit": "us"},
    ],
    "metadata": [],
}


def line_of(page, start):
    lines = [line for line in page.splitlines() if line.startswith(start)]
    if len(lines) != 1:
        raise AssertionError(f"{len(lines)} lines start with {start!r} in:\n{page}")
    return lines[0]


class SplitTest(unittest.TestCase):
    def test_rows_and_metadata_go_to_their_family(self):
        parts = R.split_by_family(RUN)
        self.assertEqual(sorted(parts), ["decode", "elementwise", "mixed", "prefill"])
        self.assertEqual(len(parts["prefill"]["rows"]), 5)
        self.assertEqual(parts["decode"]["metadata"], [{"workload": "decode_b1_128k",
                                                        "plan_us": 2.0}])
        self.assertEqual(parts["prefill"]["meta"], META)

    def test_a_row_may_name_its_family(self):
        tagged = dict(RUN, rows=[row("prefill_x", "flexjit page 16", 1.0, family="masks")],
                      metadata=[])
        self.assertEqual(list(R.split_by_family(tagged)), ["masks"])


class PageTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        results = pathlib.Path(self.tmp.name) / "results"
        page = pathlib.Path(self.tmp.name) / "RESULTS.md"
        bench_json = pathlib.Path(self.tmp.name) / "bench.json"
        bench_json.write_text(json.dumps(RUN))
        (results).mkdir()
        (results / "compile.json").write_text(json.dumps(COMPILE))
        with contextlib.redirect_stdout(io.StringIO()):
            self.assertEqual(R.main(["--results", str(results), "--page", str(page), "ingest",
                                     str(bench_json)]), 0)
        self.page = page.read_text()
        self.results = results

    def tearDown(self):
        self.tmp.cleanup()

    def test_ingest_of_a_partial_run_names_the_workloads_the_page_loses(self):
        # A run with a second prefill workload, then RUN again (prefill_causal_16k only).
        wider = dict(RUN, rows=RUN["rows"] + [row("prefill_sliding_16k", "flexjit page 16", 0.5,
                                                  tflops=300.0)])
        page = pathlib.Path(self.tmp.name) / "page.md"
        errors = io.StringIO()
        for run in (wider, RUN):
            bench_json = pathlib.Path(self.tmp.name) / "run.json"
            bench_json.write_text(json.dumps(run))
            errors = io.StringIO()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(errors):
                self.assertEqual(R.main(["--results", str(self.results), "--page", str(page),
                                         "ingest", str(bench_json)]), 0)
        self.assertIn("prefill: this run replaces", errors.getvalue())
        self.assertIn("prefill_sliding_16k", errors.getvalue())
        self.assertNotIn("decode", errors.getvalue())  # every decode workload ran again

    def test_ingest_add_joins_a_later_run_to_the_family(self):
        # A later run of one prefill workload, added: the family keeps RUN's other rows and its
        # provenance, the added run's rows replace the workload's, and the page names both runs.
        later_meta = dict(META, date="2026-11-25 09:00 UTC", commit="def5678",
                          command="bench.py --only prefill_sliding_16k")
        for workload, ms in (("prefill_sliding_16k", 0.5), ("prefill_causal_16k", 2.0)):
            later = {"meta": later_meta, "metadata": [{"workload": workload, "launch_us": 9.0}],
                     "rows": [row(workload, "flexjit page 16", ms, tflops=300.0)]}
            bench_json = pathlib.Path(self.tmp.name) / "later.json"
            bench_json.write_text(json.dumps(later))
            page = pathlib.Path(self.tmp.name) / "page.md"
            errors = io.StringIO()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(errors):
                self.assertEqual(R.main(["--results", str(self.results), "--page", str(page),
                                         "ingest", "--add", str(bench_json)]), 0)
            self.assertEqual(errors.getvalue(), "")
        prefill = json.loads((self.results / "prefill.json").read_text())
        self.assertEqual(prefill["meta"], META)
        workloads = [r["workload"] for r in prefill["rows"]]
        self.assertEqual(workloads.count("prefill_causal_16k"), 1)  # RUN's five rows replaced
        self.assertEqual(workloads.count("prefill_sliding_16k"), 1)
        self.assertEqual([(e["meta"]["commit"], e["workloads"]) for e in prefill["added"]],
                         [("def5678", ["prefill_sliding_16k"]),
                          ("def5678", ["prefill_causal_16k"])])
        self.assertEqual(sorted(m["workload"] for m in prefill["metadata"]),
                         ["prefill_causal_16k", "prefill_sliding_16k"])
        text = page.read_text()
        self.assertIn("prefill_sliding_16k: measured 2026-11-25 09:00 UTC", text)
        self.assertIn("commit `abc1234`", text)
        # A plain ingest replaces the family, the added runs with it.
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            bench_json = pathlib.Path(self.tmp.name) / "run.json"
            bench_json.write_text(json.dumps(RUN))
            R.main(["--results", str(self.results), "--page", str(page), "ingest",
                    str(bench_json)])
        self.assertNotIn("added", json.loads((self.results / "prefill.json").read_text()))

    def test_ingest_writes_one_file_per_family(self):
        self.assertEqual(sorted(p.name for p in self.results.glob("*.json")),
                         ["compile.json", "decode.json", "elementwise.json", "mixed.json",
                          "prefill.json"])

    def test_flexjit_pages_peers_and_ratios(self):
        line = line_of(self.page, "| prefill_causal_16k |")
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        self.assertEqual(cells[1], "400 / 500 (page 16 / page 64)")
        # Ratios use flexjit's best page (1.0 ms): flex 1.5 ms -> 1.50x, cuDNN 0.8 ms -> 0.80x.
        self.assertEqual(cells[2], "333 (flexjit 1.50×)")
        self.assertIn("625 (flexjit 0.80×)", cells)
        # sdpa flash ran on no workload: no column, a note.
        self.assertIn("| workload | flexjit | flex_attention | sdpa cudnn | targets |", self.page)

    def test_targets_met_and_missed(self):
        line = line_of(self.page, "| prefill_causal_16k |")
        self.assertIn("≥ 1.3× flex_attention: 1.50× met ✓", line)
        self.assertIn("≥ 1× sdpa cudnn: 0.80× missed ✗", line)
        # Host times: the worst page counts; a page without the figure makes it n/a.
        self.assertIn("≤ 20 µs: 25.0 missed ✗", line)
        self.assertIn("≤ 5 µs: n/a", line)
        decode = line_of(self.page, "| decode_b1_128k |")
        self.assertIn("≥ 2800 GB/s: 2900 met ✓", decode)

    def test_a_missing_peer_makes_the_target_na(self):
        slow = dict(RUN, rows=[r for r in RUN["rows"] if r["impl"] != "sdpa cudnn"])
        page = R.render(R.split_by_family(slow))
        line = line_of(page, "| prefill_causal_16k |")
        self.assertIn("≥ 1× sdpa cudnn: n/a", line)

    def test_a_failed_workload_is_a_note_not_a_peer(self):
        rows = [row("prefill_causal_8k", "all", None, note="error: RuntimeError: out of memory")]
        page = R.render({"prefill": {"meta": META, "rows": rows, "metadata": []}})
        self.assertIn("| workload | flexjit | targets |", page)
        self.assertIn("| prefill_causal_8k | n/a |", page)
        self.assertIn("- prefill_causal_8k: error: RuntimeError: out of memory", page)

    def test_absolute_target_takes_the_worst_page(self):
        rows = [row("decode_b64_16k", "flexjit page 16", 1.0, gbps=2990.0),
                row("decode_b64_16k", "flexjit page 64", 0.9, gbps=3100.0)]
        page = R.render({"decode": {"meta": META, "rows": rows, "metadata": []}})
        self.assertIn("≥ 3000 GB/s: 2990 missed ✗", line_of(page, "| decode_b64_16k |"))

    def test_a_peer_with_other_output_is_no_comparison(self):
        rows = [row("family_8k_dilated", "flexjit page 16", 2.0, tflops=100.0,
                    dense_tflops=300.0),
                row("family_8k_dilated", "flexjit page 128", 1.0, tflops=200.0,
                    dense_tflops=600.0),
                row("family_8k_dilated", "flex_attention", 1.5, tflops=133.3,
                    diff_flexjit=0.004),
                row("family_8k_dilated", "fa4 mask_mod", 0.5, tflops=400.0, diff_flexjit=1.2,
                    note="mask_mod on every tile")]
        page = R.render({"family_8k": {"meta": META, "rows": rows, "metadata": []}})
        cells = [c.strip() for c in line_of(page, "| family_8k_dilated |").strip("|")
                 .split(" | ")]
        self.assertEqual(cells[1], "100 / 200 (page 16 / page 128); dense-equivalent "
                                   "TFLOP/s 300 / 600")
        self.assertEqual(cells[2], "133 (flexjit 1.50×, Δ 0.004)")
        self.assertEqual(cells[3], "wrong output (Δ 1.2 vs flexjit)")
        # A wrong output makes its target n/a rather than met.
        self.assertIn("≥ 0.8× fa4 mask_mod: n/a", cells[4])
        self.assertIn("≥ 1.3× flex_attention: 1.50× met ✓", cells[4])
        self.assertIn("- fa4 mask_mod on family_8k_dilated: mask_mod on every tile", page)

    def test_fp8_beside_bf16_and_the_copy_floor(self):
        name = "fp8_decode_b64_16k_p16"
        rows = [row(name, "flexjit page 16", 1.0, tokens_s=64000.0, gbps=2150.0),
                row(name, "bf16 cache (flexjit page 16)", 1.6, tokens_s=40000.0,
                    diff_flexjit=0.001),
                row(name, "copy floor fp8", 0.8, tokens_s=80000.0,
                    note="page_read's head reader"),
                row(name, "copy floor bf16", 1.5, tokens_s=42666.7)]
        parts = R.split_by_family({"meta": META, "rows": rows, "metadata": []})
        self.assertEqual(list(parts), ["fp8"])
        page = R.render(parts)
        header = [c.strip() for c in line_of(page, "| workload |").strip("|").split(" | ")]
        self.assertEqual(header, ["workload", "flexjit", "bf16 cache (flexjit page 16)",
                                  "copy floor fp8", "copy floor bf16", "targets"])
        cells = [c.strip() for c in line_of(page, f"| {name} |").strip("|").split(" | ")]
        self.assertEqual(cells[1], "64000 (page 16); GB/s of K/V read 2150")
        # fp8's speed over bf16's (1.6 ms / 1.0 ms) and over the floors'.
        self.assertEqual(cells[2], "40000 (flexjit 1.60×, Δ 0.001)")
        self.assertEqual(cells[3], "80000 (flexjit 0.80×)")
        self.assertEqual(cells[4], "42667 (flexjit 1.50×)")
        # The targets: 2.9 TB/s of fp8 bytes, 0.97x the fp8 copy floor, 1.8x the bf16 cache.
        self.assertIn("≥ 2900 GB/s: 2150 missed ✗", cells[5])
        self.assertIn("≥ 0.97× copy floor fp8: 0.80× missed ✗", cells[5])
        self.assertIn("≥ 1.8× bf16 cache (flexjit page 16): 1.60× missed ✗", cells[5])
        self.assertIn("No peer here takes an fp8 paged cache", page)
        self.assertIn("[FP8 (e4m3) K/V cache beside bf16 (issue 34)](#fp8): targets 0 met, "
                      "3 missed", page)

    def test_host_time_against_an_empty_ops_floor(self):
        rows = [{"workload": "overhead_torch_op", "impl": "flexjit", "measure": "op",
                 "value": 14.0, "min": 13.0, "unit": "us"},
                {"workload": "overhead_torch_op", "impl": "floor", "measure": "empty op",
                 "value": 5.0, "min": 4.5, "unit": "us"},
                {"workload": "overhead_prepared_launch", "impl": "flexjit", "measure": "launch",
                 "value": 6.0, "min": 5.5, "unit": "us"}]
        page = R.render({"overhead": {"meta": META, "rows": rows, "metadata": []}})
        self.assertIn("≤ 15 us: 14.0 met ✓", line_of(page, "| op |"))
        self.assertIn("| empty op (floor) | 5.000 us | 4.500 us | — |", page)
        self.assertIn("≤ 5 us: 6.000 missed ✗", line_of(page, "| launch |"))

    def test_block_mask_builds_and_first_calls_beside_the_kernel(self):
        rows = [row("family_8k_modular", "flexjit page 16", 2.0, tflops=100.0)]
        metadata = [{"workload": "family_8k_modular", "kernel_ms": 2.0, "block_mask_ms": 4.25,
                     "fa4_block_sparsity_ms": 0.125, "fa4_compile_s": 9.5}]
        page = R.render({"family_8k": {"meta": META, "rows": rows, "metadata": metadata}})
        self.assertIn("| family_8k_modular | 2.000 | 4.25 | 0.12 | 9.5 |", page)
        # A family whose run built no block masks gets no such table.
        self.assertNotIn("create_block_mask", self.page)
        # A run without FA4: no FA4 columns.
        metadata = [{"workload": "family_8k_modular", "kernel_ms": 2.0, "block_mask_ms": 4.25}]
        page = R.render({"family_8k": {"meta": META, "rows": rows, "metadata": metadata}})
        self.assertIn("| workload | flexjit kernel (ms) | flex create_block_mask (ms) |", page)
        self.assertIn("| family_8k_modular | 2.000 | 4.25 |", page)
        self.assertNotIn("FA4", page)

    def test_peer_notes_are_listed(self):
        self.assertIn("- sdpa flash: no figure in this run (n/a: mask/score or ragged batch "
                      "not expressible)", self.page)
        # A peer with a figure somewhere keeps its column, and its n/a cells are notes.
        rows = RUN["rows"] + [
            row("prefill_causal_8k", "flexjit page 16", 1.0, tflops=400.0),
            row("prefill_causal_8k", "sdpa flash", 2.0, tflops=200.0)]
        page = R.render(R.split_by_family(dict(RUN, rows=rows)))
        self.assertIn("- sdpa flash on prefill_causal_16k: n/a: mask/score or ragged batch "
                      "not expressible", page)
        self.assertIn("| workload | flexjit | flex_attention | sdpa cudnn | sdpa flash | targets |",
                      page)

    def test_compile_measures_against_their_targets(self):
        self.assertIn("≤ 3 s: 3.500 missed ✗", line_of(self.page, "| cold compile |"))
        self.assertIn("≤ 10 ms: 4.000 met ✓", line_of(self.page, "| disk hit |"))
        memo = line_of(self.page, "| memo |")
        self.assertIn("| 0.020 us | — |", memo)
        self.assertIn("≤ 1 us: 0.020 met ✓", memo)

    def test_summary_counts_and_provenance(self):
        self.assertIn("[Prefill](#prefill): targets 1 met, 2 missed (NVIDIA H100 80GB HBM3)",
                      self.page)
        self.assertIn("[Compile path](#compile): targets 2 met, 1 missed (CPU)", self.page)
        self.assertIn("[Mixed batches (prefill chunks + decodes in one plan)](#mixed): no targets "
                      "set", self.page)
        self.assertIn("commit `abc1234`", self.page)
        self.assertIn("command: `bench.py --only causal`", self.page)

    def test_unknown_family_gets_a_section_and_a_missing_one_points_at_history(self):
        self.assertIn('<a id="elementwise"></a>', self.page)
        self.assertIn("100 (page 16) | 200 (flexjit 0.50×)",
                      line_of(self.page, "| elementwise_dilated_8k |"))
        page = R.render({})
        self.assertIn("[Decode](#decode): not yet measured at HEAD", page)
        self.assertIn("Not yet measured at HEAD. Last measurement: [bench/history/2026-11-24.md]"
                      "(history/2026-11-24.md)", page)


if __name__ == "__main__":
    unittest.main()
