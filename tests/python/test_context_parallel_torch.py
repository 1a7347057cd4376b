"""Context parallelism over torch.distributed (examples/context_parallel_torch.py), as users run
it: 2 and 4 ranks started with --spawn, each attending over its shard of the paged cache through
torch.ops.flexjit.paged_attention, all-gathering out and lse and merging them with
torch.ops.flexjit.merge_states_n, checked by the example against the unsharded call. On CPU
tensors with flexjit's CPU kernels over gloo; on a GPU, gloo with every rank on GPU 0 and,
with two GPUs or more, nccl with a GPU per rank. And the decode benchmark of context
parallelism (tools/bench/cp_decode.py) at a small shape on the CPU (--device cpu, its check of
itself without a GPU), whose JSON results_page.py files as the family context_parallel.

Skipped with the reason when torch, torch.distributed (gloo; nccl for its case), the library
or (for the GPU cases) CUDA is missing. On the GPU machine (library staged in .carry/lib):

    cd tests/python && FLEXJIT_LIBRARY=$PWD/../../.carry/lib/libflexjit_runtime.so \\
        python3 -m unittest -v test_context_parallel_torch
"""

import contextlib
import io
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import unittest

from support import REPO, library_available
import results_page

try:
    import torch
    import torch.distributed as dist
except ImportError:
    torch = dist = None

EXAMPLE = REPO / "examples" / "context_parallel_torch.py"
BENCHMARK = REPO / "tools" / "bench" / "cp_decode.py"
NO_TORCH = "torch is not installed (CI has none)"
NO_GLOO = "torch.distributed with gloo is not available in this torch build"
NO_LIBRARY = "libflexjit_runtime.so not found (set FLEXJIT_LIBRARY)"
NO_CUDA = "no CUDA device (torch.cuda.is_available() is False)"
NO_GPUS = "nccl needs a GPU per rank: fewer than 2 CUDA devices"
# The example's masks, each reported on a line of its own.
MASKS = ("causal", "sliding window 256", "causal_alibi")


def gloo_available():
    return dist is not None and dist.is_available() and dist.is_gloo_available()


def gpu_count():
    return torch.cuda.device_count() if torch is not None and torch.cuda.is_available() else 0


@unittest.skipIf(torch is None, NO_TORCH)
@unittest.skipUnless(gloo_available(), NO_GLOO)
@unittest.skipUnless(library_available(), NO_LIBRARY)
class ContextParallelTorchTest(unittest.TestCase):
    def run_example(self, ranks, *options, env=None):
        """The example's report, after checking that it passed on every rank: its exit status,
        a line per request with the keys of each rank (a rank holding none of the short
        request), a line per mask within tolerance and with rows that merged away."""
        done = subprocess.run([sys.executable, str(EXAMPLE), "--spawn", str(ranks), *options],
                              capture_output=True, text=True, timeout=240,
                              env=dict(os.environ, **(env or {})))
        report = done.stdout
        self.assertEqual(done.returncode, 0, f"{report}\n{done.stderr}")
        self.assertIn(f"{ranks} ranks over ", report)
        held = [list(map(int, match.split(", "))) for match in
                re.findall(r"keys per rank \[([0-9, ]+)\]", report)]
        self.assertEqual(len(held), 5, report)
        self.assertTrue(all(len(counts) == ranks for counts in held), report)
        self.assertIn(0, held[1], "no rank holds none of the short request")
        for mask in MASKS:
            line = next((line for line in report.splitlines()
                         if line.strip().startswith(mask + ":")), None)
            self.assertIsNotNone(line, f"no line for {mask}:\n{report}")
            self.assertTrue(line.endswith(": OK"), line)
            empty = int(re.search(r"; (\d+) gathered rows saw no key", line).group(1))
            self.assertGreater(empty, 0, line)
        self.assertEqual(report.splitlines()[-1], "OK", report)
        return report

    def test_two_ranks_on_cpu(self):
        report = self.run_example(2, "--device", "cpu", "--backend", "gloo")
        self.assertIn("over gloo on CPU", report)

    def test_four_ranks_on_cpu(self):
        report = self.run_example(4, "--device", "cpu", "--backend", "gloo", "--interleave", "3",
                                  "--dtype", "fp16")
        self.assertIn("interleave 3, fp16", report)

    def test_a_backend_that_cannot_run_is_refused(self):
        done = subprocess.run([sys.executable, str(EXAMPLE), "--spawn", "2", "--device", "cpu",
                               "--backend", "nccl"], capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn("--backend nccl gathers CUDA tensors only", done.stderr)

    @unittest.skipUnless(gpu_count() >= 1, NO_CUDA)
    def test_ranks_sharing_one_gpu_over_gloo(self):
        # One GPU visible, so that both ranks take it however many the machine has.
        first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
        report = self.run_example(2, "--device", "cuda", "--backend", "gloo",
                                  env={"CUDA_VISIBLE_DEVICES": first})
        self.assertIn("over gloo on GPU 0 (shared by every rank)", report)

    @unittest.skipUnless(gpu_count() >= 2, NO_GPUS)
    def test_a_gpu_per_rank_over_nccl(self):
        ranks = min(gpu_count(), 4)
        report = self.run_example(ranks, "--device", "cuda", "--backend", "auto")
        self.assertIn("over nccl on GPU 0", report)


@unittest.skipIf(torch is None, NO_TORCH)
@unittest.skipUnless(gloo_available(), NO_GLOO)
@unittest.skipUnless(library_available(), NO_LIBRARY)
class DecodeBenchmarkTest(unittest.TestCase):
    def test_two_ranks_on_cpu_and_the_results_page(self):
        # A request of 100 keys and one of 3000, two of each: every rank's merged output must
        # match the one-rank decode of the same keys (a rank drawing other keys than the one
        # rank does would differ by about 1), and the page must take the rows.
        with tempfile.TemporaryDirectory() as tmp:
            tmp = pathlib.Path(tmp)
            done = subprocess.run(
                [sys.executable, str(BENCHMARK), "--device", "cpu", "--quick", "--ranks", "2",
                 "--requests", "2", "--keys", "100,3000", "--json", str(tmp / "cp.json")],
                capture_output=True, text=True, timeout=240)
            self.assertEqual(done.returncode, 0, f"{done.stdout}\n{done.stderr}")
            rows = json.loads((tmp / "cp.json").read_text())["rows"]
            self.assertEqual([(r["workload"], r["impl"]) for r in rows],
                             [("cp_decode_b2_100", "one rank"),
                              ("cp_decode_b2_100", "flexjit 2 ranks"),
                              ("cp_decode_b2_3000", "one rank"),
                              ("cp_decode_b2_3000", "flexjit 2 ranks")])
            for r in rows:
                self.assertGreater(r["ms"], 0, r)
                self.assertAlmostEqual(r["tokens_s"] * r["ms"], 2e3)  # 2 tokens a step
            for one, sharded in (rows[0:2], rows[2:4]):
                self.assertLess(sharded["diff_one_gpu"], results_page.WRONG_OUTPUT, sharded)
                self.assertGreater(sharded["attn_ms"], 0, sharded)
                self.assertAlmostEqual(sharded["speedup"], one["ms"] / sharded["ms"])
                self.assertLess(one["diff_flexjit"], results_page.WRONG_OUTPUT, one)
            with contextlib.redirect_stdout(io.StringIO()):
                status = results_page.main(["--results", str(tmp / "results"), "--page",
                                            str(tmp / "RESULTS.md"), "ingest",
                                            str(tmp / "cp.json")])
            self.assertEqual(status, 0)
            filed = json.loads((tmp / "results" / "context_parallel.json").read_text())
            self.assertEqual(len(filed["rows"]), 4)
            page = (tmp / "RESULTS.md").read_text()
            self.assertIn(results_page.FAMILIES["context_parallel"]["title"], page)
            self.assertRegex(page, r"\| cp_decode_b2_3000 \| \d+ \(2 ranks\)")


if __name__ == "__main__":
    unittest.main()
