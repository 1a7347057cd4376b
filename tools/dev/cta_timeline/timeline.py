"""Per-CTA phase times of the wgmma prefill kernel, from the stamps that timeline.patch makes
it write (README.md). Runs bench.py's workloads through flexjit's Python module, then reads
each CTA's eight 64-bit words back from the first output row of its block."""
import argparse
import pathlib
import sys

import numpy as np
import torch

REPO = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tools" / "bench"))
import bench as B  # noqa: E402
import workloads as W  # noqa: E402
import flexjit  # noqa: E402

BLOCK_M = 128  # rows per CTA of the two-consumer wgmma kernel


def stats(name, values_us, busy_us):
    v = values_us
    print(f"  {name:9s} mean {v.mean():7.2f} us  p10 {np.percentile(v, 10):7.2f}  "
          f"p50 {np.median(v):7.2f}  p90 {np.percentile(v, 90):7.2f}  "
          f"share {100 * v.sum() / busy_us:5.1f}%")


def report(w, page, out, ms):
    heads, kv_heads = w.num_heads, w.num_kv_heads
    group = heads // kv_heads
    tokens = out.shape[0]
    words = out.contiguous().view(torch.int64).view(tokens, heads, -1)[:, :, :8].cpu().numpy()
    rows = []
    for kv_head in range(kv_heads):
        for row0 in range(0, tokens * group, BLOCK_M):
            rows.append(words[row0 // group, kv_head * group + row0 % group])
    a = np.array(rows, dtype=np.int64)
    t = {k: a[:, i].astype(np.float64) for k, i in
         (("start", 0), ("listed", 1), ("first", 2), ("tiles", 3), ("end", 4),
          ("listing", 6), ("classified", 7))}
    sm = a[:, 5] & 0xFFFF
    listed = (a[:, 5] >> 16) & 0xFFFF
    span = a[:, 5] >> 32
    sms = len(set(sm.tolist()))
    kernel_us = (t["end"].max() - t["start"].min()) / 1e3
    busy = sms * kernel_us
    print(f"== {w.name} page {page}: {ms:.3f} ms (bench.py's median), stamped span "
          f"{kernel_us:.1f} us, {len(a)} CTAs on {sms} SMs")
    for name, lo, hi in (("start", "start", "listing"), ("classify", "listing", "classified"),
                         ("barriers", "classified", "listed"), ("first", "listed", "first"),
                         ("loop", "first", "tiles"), ("epilogue", "tiles", "end"),
                         ("total", "start", "end")):
        stats(name, (t[hi] - t[lo]) / 1e3, busy)
    loop_us = ((t["tiles"] - t["first"]) / 1e3).sum()
    print(f"  tiles listed {listed.mean():.1f} of {span.mean():.1f} in the kv range; "
          f"{loop_us / max(listed.sum(), 1):.3f} us per tile")
    gaps, ends = [], []
    for s in set(sm.tolist()):
        idx = np.where(sm == s)[0]
        order = idx[np.argsort(t["start"][idx])]
        gaps += list((t["start"][order][1:] - t["end"][order][:-1]) / 1e3)
        ends.append(t["end"][idx].max())
    gaps = np.array(gaps)
    print(f"  gap to the SM's next CTA: mean {gaps.mean():.2f} us, share "
          f"{100 * gaps.sum() / busy:.1f}%; SMs finish within {(max(ends) - min(ends)) / 1e3:.1f} us")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="prefill_document_16k,prefill_sliding1024_16k",
                        help="comma-separated workload names of bench.py")
    parser.add_argument("--page-size", type=int, default=16)
    args = parser.parse_args()
    ctx = flexjit.Context()
    program = ctx.program_from_file(str(REPO / "dsl" / "lib" / "standard.mask"))
    for w in W.select(W.workloads(), only=args.only):
        if w.kind != "prefill" or w.head_dim not in (64, 128):
            continue
        inputs = B.Inputs(w)
        fn, _, _, _ = B.make_flexjit(ctx, program, inputs, args.page_size, 1)
        ms, _ = B.gpu_time_ms(fn, 1, False)
        out = fn(0)  # the stamps of one more run
        torch.cuda.synchronize()
        report(w, args.page_size, out, ms)


if __name__ == "__main__":
    main()
