"""Per-item phase times of the planned decode kernel, from the stamps that timeline.patch makes
it write (README.md). Runs bench.py's decode workloads through a plan, then reads each item's
32 64-bit words back from the buffer whose address FLEXJIT_DECODE_TIMELINE names."""
import argparse
import os
import pathlib
import sys

import numpy as np
import torch

REPO = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tools" / "bench"))
import bench as B  # noqa: E402
import workloads as W  # noqa: E402
import flexjit  # noqa: E402

MAX_ITEMS = 1 << 13
WORDS = 32  # per item: 6 phase stamps, meta, CTA, 16 progress stamps


def pct(v):
    return (f"mean {v.mean():7.2f}  p10 {np.percentile(v, 10):7.2f}  p50 {np.median(v):7.2f}  "
            f"p90 {np.percentile(v, 90):7.2f}  max {v.max():7.2f}")


def report(name, page, words, ms, tile_bytes):
    a = words[words[:, 0] != 0]
    t0 = a[:, 0].min()
    t = {k: (a[:, i] - t0).astype(np.float64) / 1e3 for k, i in
         (("start", 0), ("listed", 1), ("first", 2), ("tiles", 3), ("written", 4), ("end", 5))}
    t["first"] = np.where(a[:, 2] == 0, t["listed"], t["first"])
    sm = a[:, 6] & 0xFFFF
    last = (a[:, 6] >> 16) & 0xFFFF
    tiles = (a[:, 6] >> 32).astype(np.float64)
    cta = a[:, 7]
    span = t["end"].max()
    print(f"== {name} page {page}: {ms:.3f} ms (bench.py's median), stamped span {span:.1f} us, "
          f"{len(a)} items on {len(set(cta.tolist()))} CTAs, {len(set(sm.tolist()))} SMs, "
          f"{tiles.mean():.1f} tiles per item")
    for label, lo, hi in (("listing", "start", "listed"), ("first", "listed", "first"),
                          ("loop", "first", "tiles"), ("combine", "tiles", "written")):
        print(f"  {label:8s} us {pct(t[hi] - t[lo])}")
    if last.any():
        m = last == 1
        print(f"  merge    us {pct((t['end'] - t['written'])[m])}  ({m.sum()} merges)")
    rate = tiles / np.maximum(t["tiles"] - t["first"], 1e-3)
    print(f"  loop tiles/us per item: {pct(rate)}")
    starts, ends, gaps, busy = [], [], [], []
    for c in set(cta.tolist()):
        idx = np.where(cta == c)[0]
        order = idx[np.argsort(t["start"][idx])]
        starts.append(t["start"][order[0]])
        ends.append(t["end"][order].max())
        gaps += list(t["start"][order][1:] - t["end"][order][:-1])
        busy.append(tiles[idx].sum())
    starts, ends = np.array(starts), np.array(ends)
    print(f"  CTA first start  us {pct(starts)}")
    print(f"  CTA end          us {pct(ends)}")
    if gaps:
        print(f"  gap between items us {pct(np.array(gaps))}")
    idle = (span - ends).sum() + starts.sum()
    print(f"  idle CTA time at the ends: {100 * idle / (len(ends) * span):.1f}% of CTAs x span; "
          f"tiles per CTA min {min(busy):.0f} max {max(busy):.0f}")
    # K/V bytes streamed per time bin: the tiles between two progress stamps (16 per item's
    # first batch) spread evenly between them.
    bins = 24
    edges = np.linspace(0.0, span, bins + 1)
    streamed = np.zeros(bins)
    for row, lo, n in zip(a, t["first"], tiles):
        done = 0
        for k in range(16):
            if row[8 + k] == 0:
                continue
            hi = (row[8 + k] - t0) / 1e3
            now = -(-(k + 1) * min(int(n), 128) // 16)  # tiles computed at stamp k
            overlap = np.clip(np.minimum(edges[1:], hi) - np.maximum(edges[:-1], lo), 0, None)
            streamed += (now - done) * overlap / max(hi - lo, 1e-3)
            lo, done = hi, now
    rate = streamed * tile_bytes / (span / bins) / 1e6  # TB/s
    active = [int(((t["first"] <= (a + b) / 2) & (t["tiles"] > (a + b) / 2)).sum())
              for a, b in zip(edges[:-1], edges[1:])]
    print("  TB/s by time:  " + " ".join(f"{r:4.2f}" for r in rate))
    print("  items looping: " + " ".join(f"{n:4d}" for n in active))
    sm_end = [t["end"][sm == s].max() for s in set(sm.tolist())]
    print(f"  SMs finish between {min(sm_end):.1f} and {max(sm_end):.1f} us")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="decode_b64_4k,decode_b1_128k",
                        help="comma-separated workload names of bench.py")
    parser.add_argument("--page-size", type=int, default=16)
    B.add_layout_arguments(parser)
    args = parser.parse_args()
    B.set_layout(parser, args)
    ctx = flexjit.Context()
    program = ctx.program_from_file(str(REPO / "dsl" / "lib" / "standard.mask"))
    buffer = torch.zeros(MAX_ITEMS * WORDS, dtype=torch.int64, device="cuda")
    os.environ["FLEXJIT_DECODE_TIMELINE"] = str(buffer.data_ptr())
    for w in W.select(W.workloads(), only=args.only):
        if w.kind != "decode":
            continue
        inputs = B.Inputs(w)
        fn, _, _, _ = B.make_flexjit(ctx, program, inputs, args.page_size, 1)
        ms, _ = B.gpu_time_ms(fn, 1, False)
        buffer.zero_()  # the stamps of one more run
        fn(0)
        torch.cuda.synchronize()
        report(w.name, args.page_size, buffer.view(-1, WORDS).cpu().numpy(), ms,
               64 * w.head_dim * 2 * 2)
        del inputs, fn
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
