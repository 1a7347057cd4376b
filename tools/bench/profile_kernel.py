#!/usr/bin/env python3
"""Launches workloads' flexjit kernels a few times each, for a profiler to attach to.

    ncu -k regex:prefill_ --launch-skip 3 --launch-count 1 --section SpeedOfLight \\
        python3 tools/bench/profile_kernel.py prefill_causal_16k --page-size 16

The inputs, parameters and paged cache are the benchmark's (bench.py), so that what the profiler
sees is what the results page times. Prints each kernel's name and the median time of the timed
launches (CUDA events) when not under a profiler's replay. Needs torch and a GPU, like bench.py.
To compare libraries (an A/B of a template change), run it once per library with
FLEXJIT_LIBRARY set, in one device call, alternating their order.
"""

import argparse
import dataclasses
import pathlib
import statistics
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench  # noqa: E402
import workloads as W  # noqa: E402

import torch  # noqa: E402
import flexjit  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", nargs="+", help="workload names (bench.py --list)")
    parser.add_argument("--page-size", type=int, default=16)
    parser.add_argument("--launches", type=int, default=5)
    parser.add_argument("--masks", default=None, help="mask file (default: each workload's)")
    parser.add_argument("--head-dim", type=int, default=None,
                        help="run the workloads at this head dim instead of their own")
    parser.add_argument("--compare-dir", default=None,
                        help="the first run saves each workload's output here, later runs print "
                             "their max |difference| from it over max |saved| (A/B correctness)")
    args = parser.parse_args(argv)

    known = {w.name: w for w in W.workloads()}
    missing = [name for name in args.workload if name not in known]
    if missing:
        parser.error(f"no workload {missing[0]!r}")
    ctx = flexjit.Context()
    for name in args.workload:
        w = known[name]
        if args.head_dim is not None:
            w = dataclasses.replace(w, name=f"{w.name}@hd{args.head_dim}", head_dim=args.head_dim)
        profile(ctx, w, args)


def profile(ctx, w, args):
    mask_file = args.masks or str(bench.REPO / (w.mask_file or "dsl/lib/standard.mask"))
    program = ctx.program_from_file(mask_file)
    inputs = bench.Inputs(w)
    # The workload's cache dtype (fp8_* read an e4m3 cache), at --page-size.
    fn, _, _, extra = bench.make_flexjit(ctx, program, inputs, args.page_size, 1, w.kv_dtype)
    times = []
    for _ in range(args.launches):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(0)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    print(f"{w.name} {extra['kernel']}: median {statistics.median(times):.3f} ms over "
          f"{len(times)} launches (first {times[0]:.3f} ms)", flush=True)
    if args.compare_dir:
        out = fn(0).float()
        saved = pathlib.Path(args.compare_dir) / f"{w.name}.pt"
        if saved.exists():
            first = torch.load(saved).to(out.device)
            delta = ((out - first).abs().max() / first.abs().max()).item()
            print(f"{w.name} output against the first run's: {delta:.3g}"
                  f"{' MISMATCH' if not delta <= 2e-2 else ''}", flush=True)
        else:
            saved.parent.mkdir(parents=True, exist_ok=True)
            torch.save(out.cpu(), saved)
    del inputs, fn
    torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
