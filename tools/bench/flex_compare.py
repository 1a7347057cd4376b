#!/usr/bin/env python3
"""flexjit.flex_attention against torch's own flex_attention on FlexAttention-style functions
(issue 33): the same Python mask_mod / score_mod given to both.

    PYTHONPATH=tools/python FLEXJIT_LIBRARY=... python3 tools/bench/flex_compare.py \
        --json /tmp/pyflex.json [--only causal,alibi] [--seq 8192] [--quick]
    python3 tools/bench/results_page.py ingest /tmp/pyflex.json

B=1, H=32 query heads over 8 key/value heads (enable_gqa), S=8192, D=128, bf16 by default.
flexjit runs flexjit.flex_attention on the contiguous [B, H, S, D] tensors (no block mask:
the kernel classifies tiles itself); torch runs torch.compile(flex_attention) with a BlockMask
from create_block_mask built once beforehand and timed apart (block_mask_ms), as bench.py does.
Kernel time is bench.py's gpu_time_ms. The JSON is bench.py --json's ({"meta", "rows",
"metadata"}), workloads "pyflex_<case>", impls "flexjit" and "flex_attention"; the torch row
carries diff_flexjit (max |torch - flexjit| / max |flexjit|). Torch is imported by main() only,
so the argument parsing and the rows are tested without it (tests/python/test_flex_compare.py).
"""

import argparse
import json
import pathlib
import sys
import time
import traceback

HERE = pathlib.Path(__file__).resolve().parent
PREFIX = "pyflex_"
FLEXJIT_IMPL, TORCH_IMPL = "flexjit", "flex_attention"
# name -> (mask, score, one line); the functions are made by make_case(name, ...).
CASES = {
    "causal": "q_idx >= kv_idx",
    "sliding_1024": "causal within 1024 keys",
    "prefix_lm": "a 2048-key bidirectional prefix, causal after it",
    "document": "causal within documents of a captured doc[b, q_idx] tensor",
    "alibi": "causal; score - slopes[h] * (q_idx - kv_idx), slopes a captured tensor",
    "softcap": "causal; 30 * tanh(score / 30)",
    "dilated": "causal, every second key ((q_idx - kv_idx) % 2 == 0)",
    "neighbourhood_2d": "a 64x128 grid of positions, keys within 8 rows and columns",
    "sinks_window": "4 sink keys + a 1024-key causal window",
    "head_window": "causal window from a captured windows[h] tensor (256 to 8192)",
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated cases (default: all); "
                        "known: " + ", ".join(CASES))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--seq", type=int, default=8192)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--quick", action="store_true", help="fewer timed runs")
    parser.add_argument("--json", help="write bench.py-style JSON here")
    args = parser.parse_args(argv)
    args.cases = [c for c in args.only.split(",") if c] or list(CASES)
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    if args.kv_heads <= 0 or args.heads % args.kv_heads:
        parser.error(f"--heads {args.heads} is not a multiple of --kv-heads {args.kv_heads}")
    return args


def make_case(name, torch, heads, seq, device):
    """(mask_mod, score_mod) of case `name`, written the FlexAttention way."""
    doc = (torch.arange(seq, device=device) // 1000).view(1, seq)  # documents of 1000 tokens
    slopes = torch.exp2(-8.0 * torch.arange(1, heads + 1, device=device) / heads)
    windows = (256 * 2 ** (torch.arange(heads, device=device) % 6)).to(torch.int32)

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    def sliding(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < 1024)

    def prefix_lm(b, h, q_idx, kv_idx):
        return (kv_idx < 2048) | (q_idx >= kv_idx)

    def document(b, h, q_idx, kv_idx):
        return (doc[b, q_idx] == doc[b, kv_idx]) & (q_idx >= kv_idx)

    def alibi(score, b, h, q_idx, kv_idx):
        return score - slopes[h] * (q_idx - kv_idx)

    def softcap(score, b, h, q_idx, kv_idx):
        return 30.0 * torch.tanh(score / 30.0)

    def dilated(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & ((q_idx - kv_idx) % 2 == 0)

    def neighbourhood(b, h, q_idx, kv_idx):
        return (torch.abs(q_idx // 128 - kv_idx // 128) <= 8) & \
            (torch.abs(q_idx % 128 - kv_idx % 128) <= 8)

    def sinks_window(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & ((kv_idx < 4) | (q_idx - kv_idx < 1024))

    def head_window(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < windows[h])

    return {"causal": (causal, None), "sliding_1024": (sliding, None),
            "prefix_lm": (prefix_lm, None), "document": (document, None),
            "alibi": (causal, alibi), "softcap": (causal, softcap),
            "dilated": (dilated, None), "neighbourhood_2d": (neighbourhood, None),
            "sinks_window": (sinks_window, None), "head_window": (head_window, None)}[name]


def rows_of(case, shape, pairs, flexjit_ms, torch_ms, diff, extra=None, notes=None):
    """The two bench.py-style rows of one case. shape (B, H, S, D); pairs: visible (query, key)
    pairs summed over batch and heads; times in ms (None: did not run, `notes` say why); diff:
    max |torch - flexjit| / max |flexjit| or None; extra: the torch row's other fields."""
    batch, heads, seq, dim = shape
    flop = 4 * dim * pairs
    notes = notes or {}
    rows = []
    for impl, ms in ((FLEXJIT_IMPL, flexjit_ms), (TORCH_IMPL, torch_ms)):
        row = {"workload": PREFIX + case, "impl": impl, "layout": "contiguous [B, H, S, D]",
               "ms": ms, "tflops": flop / ms / 1e9 if ms else None, "note": notes.get(impl, ""),
               "pairs": pairs / (batch * heads), "flop": flop}
        if impl == TORCH_IMPL:
            row.update(extra or {})
            if diff is not None:
                row["diff_flexjit"] = diff
        rows.append(row)
    return rows


def visible_pairs(torch, mask_mod, batch, heads, seq, device, chunk=512):
    """Visible pairs summed over batch and heads, evaluating mask_mod on index tensors."""
    h = torch.arange(heads, device=device).view(heads, 1, 1)
    kv = torch.arange(seq, device=device).view(1, 1, seq)
    total = 0
    for b in range(batch):
        bt = torch.full((1, 1, 1), b, device=device)
        for start in range(0, seq, chunk):
            q = torch.arange(start, min(start + chunk, seq), device=device).view(1, -1, 1)
            total += int(mask_mod(bt, h, q, kv).expand(heads, q.shape[1], seq).sum().item())
    return total


def run_case(case, args, torch, flexjit, gpu_time_ms):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    B, H, Hkv, S, D = args.batch, args.heads, args.kv_heads, args.seq, args.head_dim
    mask_mod, score_mod = make_case(case, torch, H, S, "cuda")
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(B, H, S, D, dtype=torch.bfloat16, device="cuda", generator=gen)
    k = torch.randn(B, Hkv, S, D, dtype=torch.bfloat16, device="cuda", generator=gen)
    v = torch.randn(B, Hkv, S, D, dtype=torch.bfloat16, device="cuda", generator=gen)
    pairs = visible_pairs(torch, mask_mod, B, H, S, "cuda")
    notes, extra, times, outs = {}, {}, {}, {}
    try:
        t0 = time.perf_counter()
        outs[FLEXJIT_IMPL] = flexjit.flex_attention(q, k, v, score_mod=score_mod,
                                                    mask_mod=mask_mod, enable_gqa=True)
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - t0
        times[FLEXJIT_IMPL] = gpu_time_ms(
            lambda i: flexjit.flex_attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod,
                                             enable_gqa=True), 1, args.quick)[0]
        notes[FLEXJIT_IMPL] = f"first call (trace + compile) {compile_s:.1f} s"
    except Exception as error:
        traceback.print_exc()
        notes[FLEXJIT_IMPL] = f"error: {type(error).__name__}: {str(error)[:160]}"
    try:
        compiled = torch.compile(flex_attention, dynamic=False)
        heads = H if case == "head_window" else None
        build = lambda: create_block_mask(mask_mod, B=None, H=heads, Q_LEN=S,  # noqa: E731
                                          KV_LEN=S, device="cuda")
        block_mask = build()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(3):
            block_mask = build()
        torch.cuda.synchronize()
        extra["block_mask_ms"] = (time.perf_counter() - t0) * 1e3 / 3
        run = lambda i: compiled(q, k, v, score_mod=score_mod,  # noqa: E731
                                 block_mask=block_mask, enable_gqa=True)
        outs[TORCH_IMPL] = run(0)
        torch.cuda.synchronize()
        times[TORCH_IMPL] = gpu_time_ms(run, 1, args.quick)[0]
    except Exception as error:
        traceback.print_exc()
        notes[TORCH_IMPL] = f"error: {type(error).__name__}: {str(error)[:160]}"
    diff = None
    if len(outs) == 2:
        base = outs[FLEXJIT_IMPL].float()
        scale = base.abs().max().item()
        diff = (outs[TORCH_IMPL].float() - base).abs().max().item() / (scale or 1.0)
    return rows_of(case, (B, H, S, D), pairs, times.get(FLEXJIT_IMPL), times.get(TORCH_IMPL),
                   diff, extra, notes)


def main(argv=None):
    args = parse_args(argv)
    sys.path.insert(0, str(HERE))
    import torch
    import flexjit
    from bench import gpu_time_ms, raise_dynamo_limits, run_meta
    if not torch.cuda.is_available():
        print("flex_compare.py needs a CUDA GPU", file=sys.stderr)
        return 2
    raise_dynamo_limits()
    meta = run_meta(argv)
    rows = []
    for case in args.cases:
        case_rows = run_case(case, args, torch, flexjit, gpu_time_ms)
        rows += case_rows
        for row in case_rows:
            shown = f"{row['ms']:.3f} ms, {row['tflops']:.0f} TFLOP/s" if row["ms"] else \
                row["note"]
            print(f"{row['workload']}: {row['impl']}: {shown}" +
                  (f", diff {row['diff_flexjit']:.2e}" if "diff_flexjit" in row else ""),
                  flush=True)
        if args.json:
            pathlib.Path(args.json).write_text(json.dumps(
                {"meta": meta, "rows": rows, "metadata": []}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
