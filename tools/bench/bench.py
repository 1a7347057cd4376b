#!/usr/bin/env python3
"""flexjit against PyTorch FlexAttention, SDPA and FlashAttention-4 on the same GPU, same data,
same run (issues 7 and 28).

    PYTHONPATH=tools/python python3 tools/bench/bench.py [--quick] [--only NAME[,NAME]]
        [--json PATH] [--report PATH] [--no-fa4] [--fa4-pages LIST] [--flexjit-cli PATH]
        [--page-read PATH] [--time-limit S]

`--only family` runs the element-wise family (tools/bench/family.mask), `--only standard`
everything else; other words select workloads by name.

Per workload (tools/bench/workloads.py): builds the inputs once; runs flexjit paged (page 16
and 64, and 128 for causal and the family; shuffled block table, joint K/V cache) and the peers on
contiguous [B, H, S, D] copies of the same data, FA4 also paged on the same block table at the
same page sizes; checks every output against an fp32 reference on sampled rows and against
flex_attention's and flexjit's whole outputs; times each with CUDA events (median over many
runs after warm-up, inputs rotated among copies so L2 does not flatter); prints one table last.
Every figure of a workload comes from this one process.

FA4 (flash-attn-4, CuTe DSL) is optional: fa4_peer.py imports it from $FA4_SITE (default
/tmp/fa4site, unpacked as docs/python.md says); without it its rows read n/a
with the reason.

JSON (--json): {"meta": ..., "rows": [...], "metadata": [...]}. A row is one (workload,
implementation): workload, impl, layout, ms (median kernel time), runs, tflops (visible-pair
FLOP / time, 10^12/s), gbps (K/V bytes that must be read / time, 10^9/s), err_ref (max |out -
fp32 ref| / max |ref| on sampled rows), diff_flex (the same against flex_attention's whole
output), ratio (this impl's time / flexjit's best: > 1, flexjit is faster), note, pairs
(visible pairs per head; the mean over heads for a mask that reads h), flop, kv_bytes, copies,
and per implementation launch_us, call_us, plan_us, run_us, graph_ms (flexjit), block_mask_ms,
block_mask_first_ms, compile_s (flex). Added by issue 28:
- diff_flexjit: max |out - flexjit's out| / max |flexjit's out| over the whole output, on every
  peer row (flexjit's output: its first page size that ran);
- tiles (flexjit rows): tiles flexjit's kernel computes (full or partial), summed over kv heads;
  tile (string "QxK": query positions x keys; 128 rows of the MMA = Q positions x the GQA
  group, or 128 positions of one query head for a mask that reads h: workloads.head_major); tiles_source ("flexjit hints": the library's own tile map through the CLI;
  "predicate": tiles with a visible pair, counted on the GPU, where the CLI is missing);
  dense_flop (4 * head_dim * 128 * K per computed tile) and dense_tflops (dense_flop / time,
  10^12/s): the throughput over computed tiles, partial tiles counted whole;
- FA4 rows (impl "fa4 ..."): block_sparsity_ms (median of FA4's compute_block_sparsity, ms,
  not in ms), block_sparsity_first_ms (its first call, compile included), compile_s (the first
  attention call, s, compile included), fa4_version;
- runs_scale of the workload is in the metadata rows (the family times half the usual runs).
Added by issue 34 (the fp8 cache):
- tokens_s on every timed row: query tokens of the workload / time (10^0/s);
- the fp8 workloads (fp8_*, workloads.fp8_workloads) run flexjit over an fp8 (e4m3) cache (impl
  "flexjit page N", kv_bytes and gbps of fp8 bytes) beside flexjit over a bf16 cache holding
  the same values ("bf16 cache (flexjit page N)", a peer: the keys and values are quantized to
  e4m3 with power-of-two scales first, so both caches hold them exactly and the reference is
  theirs) and, for decode, the copy floor of either cache ("copy floor fp8", "copy floor bf16":
  tools/dev/page_read's head reader over a shuffled table at the workload's page; readers: the
  median ms of each reader). No other peer takes an fp8 paged cache.
"""

import argparse
import ctypes
import datetime
import hashlib
import json
import math
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import types

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tools" / "python"))

import fa4_peer  # noqa: E402  (imports nothing heavy until load())
import workloads as W  # noqa: E402
from results_page import git_commit  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import flexjit  # noqa: E402

DTYPE = torch.bfloat16


class NotAvailable(Exception):
    """An implementation cannot run this workload (yet); the message says why."""


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# --- timing --------------------------------------------------------------------------------------

def gpu_time_ms(fn, copies, quick, scale=1.0):
    """Median GPU time of fn(i) in ms, i cycling over `copies` input copies. Each run is timed
    by its own pair of events; the GPU first sleeps while the host enqueues every run, so host
    launch overhead is not counted (kernel time, as triton.testing.do_bench measures). `scale`
    shortens the warm-up and the timed runs (the family's workloads take half)."""
    fn(0)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(3):
        fn(i % copies)
    end.record()
    torch.cuda.synchronize()
    estimate = max(start.elapsed_time(end) / 3, 1e-3)
    warmup, runs = run_counts(estimate, quick, scale)
    for i in range(warmup):
        fn(i % copies)
    return event_times_ms(lambda i: fn(i % copies), runs, estimate), runs


def run_counts(estimate, quick, scale=1.0):
    """(warm-up runs, timed runs) for a run of about `estimate` ms: gpu_time_ms's counts."""
    warmup = int(min(max(25 * scale / estimate, 2), 50))
    runs = int(min(max((60 if quick else 200) * scale / estimate, 10), 30 if quick else 100))
    return warmup, runs


def event_times_ms(fn, runs, estimate, device=None):
    """Median ms of `runs` runs of fn(i), each timed by its own pair of CUDA events; for short
    runs (`estimate` < 2 ms) the GPU first sleeps while the host enqueues them all."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
    if hasattr(torch.cuda, "_sleep") and estimate < 2:
        torch.cuda._sleep(int(runs * 2e5))  # ~0.1 ms of host time per run at ~2 GHz
    for i in range(runs):
        starts[i].record()
        fn(i)
        ends[i].record()
    torch.cuda.synchronize(device)
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def host_time_us(fn, calls):
    times = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        fn()
        times.append((time.perf_counter_ns() - t0) / 1e3)
    torch.cuda.synchronize()
    return statistics.median(times)


def ceilings(quick):
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=DTYPE)
    b = torch.randn(n, n, device="cuda", dtype=DTYPE)
    c = torch.empty(n, n, device="cuda", dtype=DTYPE)
    ms, _ = gpu_time_ms(lambda i: torch.matmul(a, b, out=c), 1, quick)
    matmul = 2 * n ** 3 / ms / 1e9
    del a, b, c
    nbytes = 1 << 30
    src = torch.empty(nbytes, device="cuda", dtype=torch.uint8).random_()
    dst = torch.empty_like(src)
    ms, _ = gpu_time_ms(lambda i: dst.copy_(src), 1, quick)
    copy = 2 * nbytes / ms / 1e6
    del src, dst
    torch.cuda.empty_cache()
    return matmul, copy


# --- inputs --------------------------------------------------------------------------------------

def torch_params(w, device):
    """P (see workloads.py) over device tensors for mask_mod, score_mod and the reference."""
    p = w.params
    P = types.SimpleNamespace(window=p.get("window", 0), cap=W.SOFTCAP, tanh=torch.tanh)
    prefix = torch.tensor(p.get("prefix_len", [0] * len(w.requests)), dtype=torch.int32,
                          device=device)
    doc = torch.tensor(p["doc"], dtype=torch.int32, device=device) if "doc" in p else None
    slopes = torch.tensor(p["slopes"], dtype=torch.float32, device=device) \
        if "slopes" in p else None
    P.prefix_len = lambda b: prefix[b]
    P.doc = lambda b, pos: doc[b, pos]
    P.slope = lambda h: slopes[h]
    family = {name: torch.tensor(p[name], dtype=torch.float32 if name == "t5_bias"
                                 else torch.int32, device=device)
              for name in W.FAMILY_ARRAY_PARAMS if name in p}
    P.arrays = dict(family)
    if "bits_seed" in p:
        P.arrays["bits"] = random_bits_array(w, p["bits_seed"], device)
    P.global_token = lambda pos: family["global_token"][pos]
    P.random_block = lambda qb, kb: family["random_block"][qb, kb]
    P.bits = lambda q, j: P.arrays["bits"][q, j]
    P.head_window = lambda h: family["head_window"][h]
    P.t5_bias = lambda h, d: family["t5_bias"][h, d.clamp(0, W.T5_DISTANCES - 1)]
    return P


def random_bits_array(w, seed, device):
    """The random_bits mask's bits int32 [seq_len, seq_len / 32] (W.random_word), built on the
    GPU in int64 and stored as int32 (every word lies in the int32 range)."""
    seq_len = max(s for _, s in w.requests)
    words = -(-seq_len // W.BITS_PER_WORD)
    q = torch.arange(seq_len, device=device, dtype=torch.int64).view(-1, 1)
    j = torch.arange(words, device=device, dtype=torch.int64).view(1, -1)
    return W.random_word(seed, q, j).to(torch.int32).contiguous()


# How the paged cache is laid out (--block-run, --heads-first, --ascending): by default every
# block is placed on its own in a shuffled order, in vLLM's [block, 2, slot, kv head, D].
CACHE_LAYOUT = {"block_run": 1, "heads_first": False, "ascending": False}


def add_layout_arguments(parser):
    """The options that set CACHE_LAYOUT (set_layout), for bench.py and the tools that run its
    workloads."""
    parser.add_argument("--block-run", type=int, default=1, metavar="N",
                        help="place a request's physical blocks in shuffled runs of N consecutive "
                             "blocks (default 1: every block on its own; a large N: sequential)")
    parser.add_argument("--heads-first", action="store_true",
                        help="store each block's kv heads one after the other ([block, 2, kv "
                             "head, slot, D], the HND order) instead of vLLM's slot-major order")
    parser.add_argument("--ascending", action="store_true",
                        help="give each request its blocks in ascending physical order (still "
                             "spread over the cache among the other requests' blocks)")


def set_layout(parser, args):
    if args.block_run < 1:
        parser.error("--block-run must be at least 1")
    CACHE_LAYOUT.update(block_run=args.block_run, heads_first=args.heads_first,
                        ascending=args.ascending)


class Inputs:
    """One workload's data. Peers: q_p [B, H, Sq, D], k_p/v_p [B, Hkv, Skv, D] (B = requests
    when all are alike, else one packed sequence). flexjit: q [tokens, H, D] and, per page
    size, a joint paged cache [blocks, 2, page, Hkv, D] holding the same keys."""

    def __init__(self, w, seed=0):
        gen = torch.Generator(device="cuda").manual_seed(seed)
        H, Hkv, D = w.num_heads, w.num_kv_heads, w.head_dim
        self.w = w
        self.qsl = W.query_start_loc(w)
        self.seq_lens = [s for _, s in w.requests]
        self.kv_start = [0]
        for s in self.seq_lens:
            self.kv_start.append(self.kv_start[-1] + s)
        if w.uniform:
            (query_len, seq_len), B = w.requests[0], len(w.requests)
            shape_q, shape_kv = (B, H, query_len, D), (B, Hkv, seq_len, D)
        else:
            shape_q, shape_kv = (1, H, self.qsl[-1], D), (1, Hkv, self.kv_start[-1], D)

        def randn(shape):
            return torch.randn(shape, generator=gen, device="cuda", dtype=DTYPE)

        self.q_p, self.k_p, self.v_p = randn(shape_q), randn(shape_kv), randn(shape_kv)
        # An fp8 workload's keys and values are e4m3 values times a power of two (fp8_values):
        # its fp8 cache, the bf16 cache beside it and the reference all hold the same numbers.
        self.kv_scales = None
        if w.kv_dtype == "fp8":
            (self.k_p, k_scale), (self.v_p, v_scale) = fp8_values(self.k_p), fp8_values(self.v_p)
            self.kv_scales = (k_scale, v_scale)
            self.k_scale, self.v_scale = (torch.tensor([x], dtype=torch.float32, device="cuda")
                                          for x in self.kv_scales)
        self.q = self.q_p.transpose(1, 2).reshape(-1, H, D).contiguous()
        self.P = torch_params(w, "cuda")
        self.meta = {
            "query_start_loc": torch.tensor(self.qsl, dtype=torch.int32, device="cuda"),
            "seq_lens": torch.tensor(self.seq_lens, dtype=torch.int32, device="cuda"),
        }
        self.max_query_len = max(q for q, _ in w.requests)
        # [H] float32 sink logits, or None.
        self.sinks = torch.tensor(W.sink_logits(H), dtype=torch.float32, device="cuda") \
            if w.sinks else None

    def keys(self, tensor, r):
        """[Hkv, seq_len, D] keys (or values) of request r in a peer tensor."""
        if self.w.uniform:
            return tensor[r]
        return tensor[0, :, self.kv_start[r]:self.kv_start[r + 1]]

    def queries(self, tensor, r, rows):
        """[H, len(rows), D] query rows of request r in a peer-layout tensor."""
        if self.w.uniform:
            return tensor[r][:, rows]
        return tensor[0][:, [self.qsl[r] + t for t in rows]]

    def paged(self, page_size, kv_dtype="bf16"):
        """(joint cache, block table) for page_size, in CACHE_LAYOUT; kv_dtype "fp8": the cache
        in e4m3 bytes (torch.float8_e4m3fn) of the values divided by their scale."""
        w = self.w
        rows, num_blocks = W.block_table(self.seq_lens, page_size, seed=page_size,
                                         run=CACHE_LAYOUT["block_run"],
                                         ascending=CACHE_LAYOUT["ascending"])
        if CACHE_LAYOUT["heads_first"]:  # [block, 2, kv head, slot, D], seen as vLLM's order
            cache = torch.zeros((num_blocks, 2, w.num_kv_heads, page_size, w.head_dim),
                                device="cuda", dtype=DTYPE).transpose(2, 3)
        else:
            cache = torch.zeros((num_blocks, 2, page_size, w.num_kv_heads, w.head_dim),
                                device="cuda", dtype=DTYPE)
        for r, seq_len in enumerate(self.seq_lens):
            n = -(-seq_len // page_size)
            physical = torch.tensor(rows[r][:n], device="cuda", dtype=torch.long)
            for which, tensor in ((0, self.k_p), (1, self.v_p)):
                keys = self.keys(tensor, r).transpose(0, 1)  # [S, Hkv, D]
                padded = torch.zeros((n * page_size,) + tuple(keys.shape[1:]), device="cuda",
                                     dtype=DTYPE)
                padded[:seq_len] = keys
                cache[physical, which] = padded.view(n, page_size, *keys.shape[1:])
        table = torch.tensor(rows, dtype=torch.int32, device="cuda")
        if kv_dtype == "fp8":
            fp8 = torch.empty_like(cache, dtype=torch.float8_e4m3fn)
            for which, scale in enumerate(self.kv_scales):  # exact: see fp8_values
                fp8[:, which].copy_((cache[:, which] / scale).to(torch.float8_e4m3fn))
            del cache
            return fp8, table
        return cache, table

    def to_tokens(self, out_p):
        """A peer output [B, H, S, D] as flexjit's [tokens, H, D]."""
        return out_p.transpose(1, 2).reshape(-1, self.w.num_heads, self.w.head_dim)


def fp8_values(tensor):
    """(tensor's values rounded to e4m3 times a power-of-two scale, as bf16; the scale): the
    scale is the smallest power of two that keeps the largest |value| / scale within e4m3's
    448, so dividing by it, rounding to e4m3 and multiplying back are exact in bf16 (e4m3's 3
    mantissa bits and exponents fit bf16's)."""
    largest = tensor.abs().max().item()
    scale = 2.0 ** math.ceil(math.log2(largest / W.FP8_MAX)) if largest > 0 else 1.0
    rounded = (tensor / scale).to(torch.float8_e4m3fn).to(tensor.dtype) * scale
    return rounded, scale


# --- the fp32 reference --------------------------------------------------------------------------

def reference(inputs, rows_by_request):
    """{request: [H, n, D] fp32} attention over the sampled query rows, from the peer tensors."""
    w, P = inputs.w, inputs.P
    mask_fn, score_fn = W.MASKS[w.mask], W.SCORES.get(w.score)
    group = w.num_heads // w.num_kv_heads
    scale = 1.0 / math.sqrt(w.head_dim)
    result = {}
    for r, rows in rows_by_request.items():
        query_len, seq_len = w.requests[r]
        q = inputs.queries(inputs.q_p, r, rows).float()
        k = inputs.keys(inputs.k_p, r).float().repeat_interleave(group, 0)
        v = inputs.keys(inputs.v_p, r).float().repeat_interleave(group, 0)
        h = torch.arange(w.num_heads, device="cuda").view(-1, 1, 1)
        qpos = torch.tensor([seq_len - query_len + t for t in rows], device="cuda").view(1, -1, 1)
        kvpos = torch.arange(seq_len, device="cuda").view(1, 1, -1)
        scores = torch.matmul(q, k.transpose(-1, -2)) * scale
        if score_fn is not None:
            scores = score_fn(scores, r, h, qpos, kvpos, P)
        visible = mask_fn(r, h, qpos, kvpos, P)
        scores = scores.masked_fill(~visible, -math.inf)
        if inputs.sinks is not None:  # one more logit per row, with no value
            sink = inputs.sinks.view(-1, 1, 1).expand(-1, scores.shape[1], 1)
            probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
        else:
            probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        result[r] = torch.matmul(probs, v)
    return result


def relative_error(out_rows, ref_rows):
    worst, scale = 0.0, 0.0
    for r, ref in ref_rows.items():
        diff = (out_rows[r].float() - ref).abs().max().item()
        worst = max(worst, diff if not math.isnan(diff) else math.inf)
        scale = max(scale, ref.abs().max().item())
    return worst / scale if scale else worst


# --- implementations -----------------------------------------------------------------------------
# Each make_* returns (fn(i) -> output of copy i, rows(output, r, rows) -> [H, n, D],
# tokens(output) -> [tokens, H, D], extra dict) or raises NotAvailable.

def flexjit_arrays(w, device, P=None):
    """flexjit's scalar params and array params of workload w, the arrays as device tensors
    (the family's bits array: P's, the one the peers read)."""
    scalars, specs = W.flexjit_arguments(w)
    dtypes = {"int32": torch.int32, "float32": torch.float32}
    arrays = {name: torch.tensor(rows, dtype=dtypes[dtype], device=device).contiguous()
              for name, (dtype, rows) in specs.items()}
    if "bits_seed" in w.params:
        arrays["bits"] = P.arrays["bits"] if P is not None else \
            random_bits_array(w, w.params["bits_seed"], device)
    return scalars, arrays


def make_flexjit(ctx, program, inputs, page_size, copies, kv_dtype="bf16"):
    """flexjit over the workload's paged cache at page_size, its K/V in kv_dtype ("bf16", or
    "fp8": inputs.paged's e4m3 bytes, read with the inputs' scales)."""
    w = inputs.w
    scales = dict(k_scale=inputs.k_scale, v_scale=inputs.v_scale) if kv_dtype == "fp8" else {}
    try:
        kernel = ctx.kernel(program, w.flexjit_mask, defines=W.flexjit_defines(w),
                            head_dim=w.head_dim, dtype="bf16", page_size=page_size,
                            kv_dtype=kv_dtype)
    except flexjit.FlexjitError as error:
        if error.status in (flexjit.Status.NOT_FOUND, flexjit.Status.UNSUPPORTED):
            raise NotAvailable(error.message.strip().splitlines()[0]) from None
        raise
    params, arrays = flexjit_arrays(w, "cuda", inputs.P)
    try:  # the mask file may lack a parameter the workload sets
        program.param_values(params)
        for name in arrays:
            program.param_info(name)
    except (TypeError, flexjit.FlexjitError) as error:
        raise NotAvailable(f"parameters: {getattr(error, 'message', error)}") from None
    cache, table = inputs.paged(page_size, kv_dtype)
    launches = []
    for i in range(copies):
        q = inputs.q if i == 0 else inputs.q.clone()
        kv = cache if i == 0 else cache.clone()
        launches.append(kernel.prepare(q, kv[:, 0], kv[:, 1], table,
                                       inputs.meta["query_start_loc"], inputs.meta["seq_lens"],
                                       out=torch.empty_like(q),
                                       max_query_len=inputs.max_query_len, params=params,
                                       arrays=arrays, sinks=inputs.sinks, **scales))
    stream = torch.cuda.current_stream().cuda_stream
    extra = {"kv_bytes": W.kv_bytes(w, 1 if kv_dtype == "fp8" else 2)}
    if w.kind == "prefill":
        def fn(i):
            launches[i].launch(stream)
            return launches[i].out
    else:
        # Decode and mixed batches run through a plan (split-KV decode, one launch per path);
        # its update is host work done once per batch, so it is timed apart (plan_us), and a
        # CUDA graph of one run is timed too (graph_ms), as an engine would replay it.
        plan = kernel.plan(max_num_reqs=len(w.requests), max_num_tokens=inputs.qsl[-1],
                           max_query_len=inputs.max_query_len, num_heads=w.num_heads,
                           num_kv_heads=w.num_kv_heads)
        max_blocks = table.shape[1]
        # Host copies as an engine keeps them (int32 arrays), so plan_us is the C call's time.
        qsl_host = (ctypes.c_int32 * len(inputs.qsl))(*inputs.qsl)
        lens_host = (ctypes.c_int32 * len(inputs.seq_lens))(*inputs.seq_lens)

        def update():
            plan.update(qsl_host, lens_host, max_blocks, stream)

        update()

        def fn(i):
            plan.run(launches[i], stream)
            return launches[i].out

        extra["plan_us"] = host_time_us(update, 30)
        extra["run_us"] = host_time_us(lambda: plan.run(launches[0], stream), 30)
        graph = torch.cuda.CUDAGraph()
        capture_stream = torch.cuda.Stream()
        capture_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(capture_stream):
            with torch.cuda.graph(graph, stream=capture_stream):
                plan.run(launches[0], capture_stream.cuda_stream)
        torch.cuda.current_stream().wait_stream(capture_stream)
        extra["graph"] = graph  # timed by run_workload as the kernel is, then released

    def rows(out, r, picked):
        return out[[inputs.qsl[r] + t for t in picked]].transpose(0, 1)

    def call():
        kernel(inputs.q, cache[:, 0], cache[:, 1], table, inputs.meta["query_start_loc"],
               inputs.meta["seq_lens"], out=launches[0].out, max_query_len=inputs.max_query_len,
               params=params, arrays=arrays, sinks=inputs.sinks, **scales)

    extra.update({"kernel": kernel.name,
                  "launch_us": host_time_us(lambda: launches[0].launch(stream), 30),
                  "call_us": host_time_us(call, 30)})
    return fn, rows, (lambda out: out), extra


_flex_compiled = None


def flex_peer_inputs(inputs, copies):
    out = [(inputs.q_p, inputs.k_p, inputs.v_p)]
    for _ in range(1, copies):
        out.append((inputs.q_p.clone(), inputs.k_p.clone(), inputs.v_p.clone()))
    return out


def peer_rows(inputs):
    def rows(out, r, picked):
        return inputs.queries(out, r, picked)
    return rows


def flex_mods(inputs):
    """mask_mod and score_mod of the workload over flex's indices: positions are logical
    (queries end at the last key); a packed batch maps indices to (request, position)."""
    w, P = inputs.w, inputs.P
    mask_fn, score_fn = W.MASKS[w.mask], W.SCORES.get(w.score)
    if w.uniform:
        query_len, seq_len = w.requests[0]
        offset = seq_len - query_len

        def mask_mod(b, h, q_idx, kv_idx):
            return mask_fn(b, h, q_idx + offset, kv_idx, P)

        def score_mod(score, b, h, q_idx, kv_idx):
            return score_fn(score, b, h, q_idx + offset, kv_idx, P)
    else:
        q_req = torch.tensor([r for r, (n, _) in enumerate(w.requests) for _ in range(n)],
                             dtype=torch.int32, device="cuda")
        q_pos = torch.tensor([p for n, s in w.requests for p in W.query_positions(n, s)],
                             dtype=torch.int32, device="cuda")
        kv_req = torch.tensor([r for r, (_, s) in enumerate(w.requests) for _ in range(s)],
                              dtype=torch.int32, device="cuda")
        kv_pos = torch.tensor([p for _, s in w.requests for p in range(s)], dtype=torch.int32,
                              device="cuda")

        def mask_mod(b, h, q_idx, kv_idx):
            r = q_req[q_idx]
            return (kv_req[kv_idx] == r) & mask_fn(r, h, q_pos[q_idx], kv_pos[kv_idx], P)

        def score_mod(score, b, h, q_idx, kv_idx):
            return score_fn(score, q_req[q_idx], h, q_pos[q_idx], kv_pos[kv_idx], P)
    return mask_mod, (score_mod if score_fn is not None else None)


def make_flex(inputs, copies, quick):
    import inspect

    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    global _flex_compiled
    w = inputs.w
    if _flex_compiled is None:
        _flex_compiled = torch.compile(flex_attention, dynamic=False)
    mask_mod, score_mod = flex_mods(inputs)
    q_len, kv_len = inputs.q_p.shape[2], inputs.k_p.shape[2]
    options = {}
    if "_compile" in inspect.signature(create_block_mask).parameters:
        options["_compile"] = True

    heads = w.num_heads if w.mask in W.HEAD_DEPENDENT_MASKS else None  # None: broadcast

    def build():
        return create_block_mask(mask_mod, B=None, H=heads, Q_LEN=q_len, KV_LEN=kv_len,
                                 device="cuda", **options)

    t0 = time.perf_counter()
    block_mask = build()
    torch.cuda.synchronize()
    first_ms = (time.perf_counter() - t0) * 1e3
    times = []
    for _ in range(2 if quick else 5):
        t0 = time.perf_counter()
        block_mask = build()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    data = flex_peer_inputs(inputs, copies)

    if inputs.sinks is None:
        def fn(i):
            q, k, v = data[i]
            return _flex_compiled(q, k, v, score_mod=score_mod, block_mask=block_mask,
                                  enable_gqa=True)
    else:
        # flex_attention has no sinks: its LSE rescales the output, out * e^lse / (e^lse +
        # e^sink) = out * sigmoid(lse - sink), one elementwise pass after the kernel (timed).
        sink = inputs.sinks.view(1, -1, 1)

        def fn(i):
            q, k, v = data[i]
            out, lse = _flex_compiled(q, k, v, score_mod=score_mod, block_mask=block_mask,
                                      enable_gqa=True, return_lse=True)
            return out * torch.sigmoid(lse - sink).unsqueeze(-1).to(out.dtype)

    t0 = time.perf_counter()
    fn(0)
    torch.cuda.synchronize()
    extra = {"block_mask_ms": statistics.median(times), "block_mask_first_ms": first_ms,
             "compile_s": time.perf_counter() - t0}
    return fn, peer_rows(inputs), inputs.to_tokens, extra


def make_sdpa(inputs, backend, copies):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    w = inputs.w
    if w.sdpa is None:
        raise NotAvailable("mask/score or ragged batch not expressible with SDPA's fast backends")
    chosen = getattr(SDPBackend, backend)
    causal = w.sdpa == "causal"
    data = flex_peer_inputs(inputs, copies)

    def gqa(i):
        q, k, v = data[i]
        with sdpa_kernel(chosen):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)

    note = ""
    try:
        gqa(0)
        fn = gqa
    except RuntimeError as first:
        group = w.num_heads // w.num_kv_heads
        repeated = [(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1))
                    for q, k, v in data]

        def fn(i):
            q, k, v = repeated[i]
            with sdpa_kernel(chosen):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        try:
            fn(0)
        except RuntimeError as second:
            raise NotAvailable(f"{backend}: {str(second).splitlines()[0]}") from None
        note = f"K/V heads repeated (enable_gqa failed: {str(first).splitlines()[0][:80]})"
    return fn, peer_rows(inputs), inputs.to_tokens, {"note": note}


# --- tiles and pairs -----------------------------------------------------------------------------

def flexjit_cli(explicit=None):
    """The flexjit CLI for `flexjit hints`: --flexjit-cli, $FLEXJIT_CLI, .carry/bin/flexjit (as
    tools/dev/stage_gpu.sh stages it), build/bin/flexjit; None if none is there."""
    for path in (explicit, os.environ.get("FLEXJIT_CLI"), REPO / ".carry" / "bin" / "flexjit",
                 REPO / "build" / "bin" / "flexjit"):
        if path and pathlib.Path(path).is_file() and os.access(path, os.X_OK):
            return pathlib.Path(path)
    return None


def emitted_key_tile(cli, mask_file, w):
    """Keys per K/V tile of the workload's Hopper prefill kernel (W.key_tile), from the variant
    struct `flexjit emit` writes; None without the CLI or where it fails."""
    if cli is None:
        return None
    done = subprocess.run([str(cli), "emit", str(mask_file), "--mask", w.flexjit_mask,
                           "--head-dim", str(w.head_dim), "--arch", "sm_90a"],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        log(f"{w.name}: flexjit emit failed: {done.stderr.strip().splitlines()[:1]}")
        return None
    operations = re.search(r"kElementOperations = (\d+);", done.stdout)
    wide = re.search(r"kWideKeyTiles = true;", done.stdout) is not None
    narrow_hd64 = re.search(r"kNarrowKeyTilesHd64 = true;", done.stdout) is not None
    return W.key_tile(w.head_dim, int(operations.group(1)) if operations else 0, wide,
                      w.kv_dtype == "fp8", narrow_hd64)


def hints_tiles(cli, mask_file, w, tile_k):
    """W.computed_tiles through the CLI: the library's own tile map of the workload."""
    command = W.hints_command(cli, mask_file, w, tile_k)

    def hints(extra):
        done = subprocess.run(command + extra, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"flexjit hints: {done.stderr.strip().splitlines()[:1]}")
        return json.loads(done.stdout)
    return W.computed_tiles(w, hints, tile_k)


def mask_census(inputs, tile, device="cuda"):
    """(visible pairs per head, tiles with a visible pair summed over kv heads) of a one-request
    workload, from the mask predicate on the GPU: exact pairs for the family (too many for
    Python), and the truly non-empty tiles of flexjit_tile() (a tile counts when a head of its
    kv head's group sees a pair in it, or per query head where the rows are head-major), or
    None for tile None."""
    w, P = inputs.w, inputs.P
    mask_fn = W.MASKS[w.mask]
    query_len, seq_len = w.requests[0]
    group = w.num_heads // w.num_kv_heads
    per_head = W.head_major(w)
    heads = torch.arange(w.num_heads if per_head else 1, device=device).view(-1, 1, 1)
    kv = torch.arange(seq_len, device=device).view(1, 1, -1)
    tile_q, tile_k = tile if tile else (1, 1)
    chunk = max(tile_q, (256 // tile_q) * tile_q)
    pairs, tiles = 0, 0
    offset = seq_len - query_len
    for row0 in range(0, query_len, chunk):
        rows = min(chunk, query_len - row0)
        q = torch.arange(offset + row0, offset + row0 + rows, device=device).view(1, -1, 1)
        visible = mask_fn(0, heads, q, kv, P).expand(heads.shape[0], rows, seq_len)
        pairs += int(visible.sum().item())
        if tile:
            padded_q, padded_k = -(-rows // tile_q) * tile_q, -(-seq_len // tile_k) * tile_k
            grid = torch.zeros((heads.shape[0], padded_q, padded_k), dtype=torch.bool,
                               device=device)
            grid[:, :rows, :seq_len] = visible
            hit = grid.view(heads.shape[0], padded_q // tile_q, tile_q, padded_k // tile_k,
                            tile_k).any(dim=4).any(dim=2)
            if per_head:  # head-major rows: each query head's tiles are its own
                tiles += int(hit.sum().item())
            else:
                tiles += int(hit.sum().item()) * w.num_kv_heads
        del visible
    heads_counted = w.num_heads if per_head else 1
    mean = pairs // heads_counted if pairs % heads_counted == 0 else pairs / heads_counted
    return mean, (tiles if tile else None)


# --- one workload --------------------------------------------------------------------------------

def run_workload(w, ctx, program, mask_file, l2_bytes, quick, settle, cli=None, fa4=True,
                 fa4_pages=None, page_read=None):
    log(f"{w.name}: building inputs")
    inputs = Inputs(w)
    tile_k = (emitted_key_tile(cli, mask_file, w)
              if (w.kind == "prefill" and len(w.requests) == 1) else None)
    tile = W.flexjit_tile(w, tile_k)
    census = None
    if w.family:
        census = mask_census(inputs, tile)
        pairs = census[0]
    else:
        pairs = W.visible_pairs(w)
    tiles, tiles_source = None, None
    if tile is not None:
        try:
            if cli is None:
                raise RuntimeError("no flexjit CLI")
            tiles, tiles_source = hints_tiles(cli, mask_file, w, tile_k), "flexjit hints"
        except Exception as error:  # the predicate's count: a floor under the kernel's
            log(f"{w.name}: tiles from the predicate ({type(error).__name__}: "
                f"{str(error)[:120]})")
            if census is None or census[1] is None:
                census = mask_census(inputs, tile)
            tiles, tiles_source = census[1], "predicate"
    flop, nbytes = W.flops(w, pairs), W.kv_bytes(w)
    per_copy = sum(t.numel() * t.element_size() for t in (inputs.q_p, inputs.k_p, inputs.v_p))
    copies = W.rotation_copies(per_copy, l2_bytes)
    picked = W.sample_rows(w, 64 if quick else 256)
    rows_by_request = {}
    for r, t in picked:
        rows_by_request.setdefault(r, []).append(t)
    ref = reference(inputs, rows_by_request)

    if w.kv_dtype == "fp8":
        # No peer takes an fp8 paged cache: flexjit over a bf16 cache of the same values is
        # the comparison (and, for decode, the copy floors, after the timed implementations).
        impls = [(f"flexjit page {p}", f"paged {p}, joint fp8 KV",
                  lambda p=p: make_flexjit(ctx, program, inputs, p, copies, "fp8"))
                 for p in w.page_sizes]
        impls += [(f"bf16 cache (flexjit page {p})", f"paged {p}, joint bf16 KV",
                   lambda p=p: make_flexjit(ctx, program, inputs, p, copies))
                  for p in w.page_sizes]
    else:
        impls = [(f"flexjit page {p}", f"paged {p}, joint KV",
                  lambda p=p: make_flexjit(ctx, program, inputs, p, copies))
                 for p in w.page_sizes]
        impls += [("flex_attention", "contiguous" + ("" if w.uniform else ", packed")
                   + (", sinks from its LSE" if w.sinks else ""),
                   lambda: make_flex(inputs, copies, quick))]
    if not w.family and not w.sinks and w.kv_dtype != "fp8":
        impls += [(f"sdpa {name}", "contiguous", lambda b=backend: make_sdpa(inputs, b, copies))
                  for name, backend in (("flash", "FLASH_ATTENTION"),
                                        ("cudnn", "CUDNN_ATTENTION"))]
    pages = tuple(p for p in w.page_sizes if fa4_pages is None or p in fa4_pages)
    for label, spec in fa4_peer.plan(w) if w.kv_dtype != "fp8" else ():
        for page in (None,) + pages:
            layout = "contiguous" if page is None else f"paged {page}, page_table"
            impls.append((f"fa4 {label}" + ("" if page is None else f" page {page}"), layout,
                          lambda s=spec, p=page: make_fa4(inputs, s, p, copies, quick, fa4)))

    results, outputs, meta = [], {}, {"workload": w.name, "runs_scale": w.runs_scale}
    for impl, layout, make in impls:
        row = {"workload": w.name, "impl": impl, "layout": layout, "ms": None}
        results.append(row)
        try:
            fn, rows_of, tokens_of, extra = make()
            out = fn(0)
            torch.cuda.synchronize()
            row["err_ref"] = relative_error({r: rows_of(out, r, t)
                                             for r, t in rows_by_request.items()}, ref)
            outputs[impl] = tokens_of(out).clone()
            if torch.isnan(outputs[impl]).any().item():
                extra["note"] = (extra.get("note", "") + " NaN in output").strip()
            # Every implementation starts its timed runs from an idle GPU: otherwise one timed
            # right after another (flexjit's second page size) runs at the clocks its
            # predecessor's power draw left, and one timed after a long compile does not.
            torch.cuda.synchronize()
            time.sleep(settle)
            row["ms"], row["runs"] = gpu_time_ms(fn, copies, quick, w.runs_scale)
            if "graph" in extra:
                # The captured run, timed as the kernel was (from an idle GPU, as many runs),
                # so that the two compare; it replays the first input copy only.
                graph = extra.pop("graph")
                torch.cuda.synchronize()
                time.sleep(settle)
                extra["graph_ms"] = gpu_time_ms(lambda i: graph.replay(), 1, quick,
                                                w.runs_scale)[0]
                del graph
            row["tflops"] = flop / row["ms"] / 1e9
            row["kv_bytes"] = extra.pop("kv_bytes", nbytes)
            row["gbps"] = row["kv_bytes"] / row["ms"] / 1e6
            row["tokens_s"] = inputs.qsl[-1] / row["ms"] * 1e3
            row["note"] = extra.pop("note", "")
            row.update(extra)
            if impl.startswith("flexjit") and tiles is not None:
                row.update(tiles=tiles, tile=f"{tile[0]}x{tile[1]}", tiles_source=tiles_source,
                           dense_flop=W.dense_equivalent_flops(w, tiles, tile_k))
                row["dense_tflops"] = row["dense_flop"] / row["ms"] / 1e9
            for key in ("launch_us", "call_us", "block_mask_ms", "plan_us", "run_us",
                        "graph_ms"):
                if key in extra and key not in meta:
                    meta[key] = extra[key]
            if impl.startswith("fa4") and "block_sparsity_ms" in extra \
                    and "fa4_block_sparsity_ms" not in meta:
                meta["fa4_block_sparsity_ms"] = extra["block_sparsity_ms"]
            if impl.startswith("fa4") and "fa4_compile_s" not in meta:
                meta["fa4_compile_s"] = extra.get("compile_s")
            if impl.startswith("flexjit") and "kernel_ms" not in meta:
                meta["kernel_ms"] = row["ms"]
        except (NotAvailable, fa4_peer.Unavailable) as reason:
            row["note"] = f"n/a: {reason}"
        except Exception as error:  # keep going: one failing peer must not hide the rest
            row["note"] = f"error: {type(error).__name__}: {str(error).splitlines()[0][:160]}" \
                if str(error) else f"error: {type(error).__name__}"
            traceback.print_exc()
            torch.cuda.synchronize()
        summary = f"{row['ms']:.3f} ms" if row["ms"] is not None else row["note"]
        log(f"{w.name}: {impl}: {summary}")
    reference_out = outputs.get("flex_attention")
    flexjit_impl = next((r["impl"] for r in results if r["impl"].startswith("flexjit")
                         and r["impl"] in outputs), None)
    for base, key in ((reference_out, "diff_flex"),
                      (outputs.get(flexjit_impl) if flexjit_impl else None, "diff_flexjit")):
        if base is None:
            continue
        scale = base.float().abs().max().item()
        for row in results:
            if row["impl"] in outputs and outputs[row["impl"]] is not base \
                    and (key == "diff_flex" or not row["impl"].startswith("flexjit")):
                diff = (outputs[row["impl"]].float() - base.float()).abs().max().item()
                row[key] = diff / scale if scale else diff
    tokens = inputs.qsl[-1]
    del inputs, outputs, ref
    torch.cuda.empty_cache()
    if w.kv_dtype == "fp8" and w.kind == "decode":
        results += floor_rows(w, page_read, tokens)
    for row in results:
        row.update(pairs=pairs, flop=flop, copies=copies)
        row.setdefault("kv_bytes", nbytes)
    return results, meta


# --- the copy floor (tools/dev/page_read) -------------------------------------------------------

PAGE_READ_SOURCE = REPO / "tools" / "dev" / "page_read" / "page_read.cu"
PAGE_READ_BUILDS = pathlib.Path(tempfile.gettempdir()) / "flexjit-page-read"
FLOOR_READER = "head"  # the decode kernel's copies (templates/paged_decode.cuh)


def page_read_binary(explicit=None):
    """(path of tools/dev/page_read's binary, None) or (None, why not): --page-read,
    $FLEXJIT_PAGE_READ, .carry/bin/page_read, else built with nvcc for the current device into
    PAGE_READ_BUILDS (once per source and architecture)."""
    for path in (explicit, os.environ.get("FLEXJIT_PAGE_READ"),
                 REPO / ".carry" / "bin" / "page_read"):
        if path and pathlib.Path(path).is_file() and os.access(path, os.X_OK):
            return pathlib.Path(path), None
    if explicit:
        return None, f"--page-read {explicit}: not an executable file"
    nvcc = shutil.which("nvcc") or next(
        (str(p) for p in (pathlib.Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" /
                          "nvcc", pathlib.Path("/usr/local/cuda/bin/nvcc")) if p.is_file()), None)
    if nvcc is None:
        return None, "no page_read binary (--page-read, $FLEXJIT_PAGE_READ, .carry/bin) and no " \
            "nvcc to build one"
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}" + ("a" if major == 9 else "")
    digest = hashlib.sha256(PAGE_READ_SOURCE.read_bytes() + arch.encode() +
                            (REPO / "templates" / "fj_device.cuh").read_bytes()).hexdigest()[:16]
    binary = PAGE_READ_BUILDS / f"page_read-{arch}-{digest}"
    if not binary.is_file():
        PAGE_READ_BUILDS.mkdir(parents=True, exist_ok=True)
        partial = binary.with_name(f"{binary.name}.{os.getpid()}")
        done = subprocess.run([nvcc, "-O3", "-std=c++17", f"-arch={arch}", "-I",
                               str(REPO / "templates"), "-o", str(partial),
                               str(PAGE_READ_SOURCE)], capture_output=True, text=True)
        if done.returncode != 0:
            return None, f"building page_read failed: {done.stderr.strip()[:200]}"
        partial.rename(binary)
    return binary, None


def page_read_medians(binary, requests, keys, page_size, element_bytes, rounds=20):
    """{reader: median ms} of page_read over the shuffled table (the median of its passes'
    medians), for `requests` x `keys` at page_size with elements of element_bytes."""
    done = subprocess.run([str(binary), str(requests), str(keys), str(rounds), "--page",
                           str(page_size), "--element-bytes", str(element_bytes)],
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"page_read: {(done.stderr or done.stdout).strip()[:200]}")
    medians = {}
    for line in done.stdout.splitlines():
        fields = line.split()
        if len(fields) == 5 and fields[1] == "shuffled":
            medians.setdefault(fields[0], []).append(float(fields[2]))
    return {reader: statistics.median(times) for reader, times in medians.items()}


def floor_rows(w, page_read, tokens):
    """The copy floors of decode workload w (uniform requests, 8 kv heads of 128: page_read's
    shape) at its page size, for an fp8 and a bf16 cache: rows "copy floor fp8" and "copy floor
    bf16", the FLOOR_READER's median with every reader's in `readers`. `page_read` is
    page_read_binary()'s pair."""
    binary, why = page_read or (None, "page_read not looked for")
    (_, keys), requests, page = w.requests[0], len(w.requests), w.page_sizes[0]
    if binary is not None and (not w.uniform or w.num_kv_heads != 8 or w.head_dim != 128):
        binary, why = None, "page_read reads 8 kv heads of 128, requests alike"
    rows = []
    for label, element_bytes in (("fp8", 1), ("bf16", 2)):
        row = {"workload": w.name, "impl": f"copy floor {label}", "ms": None,
               "layout": f"paged {page}, joint {label} KV, shuffled, page_read {FLOOR_READER}"}
        rows.append(row)
        try:
            if binary is None:
                raise NotAvailable(why)
            medians = page_read_medians(binary, requests, keys, page, element_bytes)
            row["ms"] = medians[FLOOR_READER]
            row["kv_bytes"] = W.kv_bytes(w, element_bytes)
            row.update(readers=medians, gbps=row["kv_bytes"] / row["ms"] / 1e6,
                       tokens_s=tokens / row["ms"] * 1e3)
            best = min(medians, key=medians.get)
            row["note"] = f"page_read's {FLOOR_READER} reader (the decode kernel's copies); " \
                f"fastest reader {best} {medians[best]:.3f} ms"
        except NotAvailable as reason:
            row["note"] = f"n/a: {reason}"
        except Exception as error:
            row["note"] = f"error: {type(error).__name__}: {str(error)[:160]}"
        log(f"{w.name}: {row['impl']}: " +
            (f"{row['ms']:.3f} ms" if row["ms"] is not None else row["note"]))
    return rows


def make_fa4(inputs, spec, page_size, copies, quick, enabled):
    if not enabled:
        raise NotAvailable("FA4 disabled (--no-fa4)")
    w = inputs.w
    aux_name = fa4_peer.AUX.get(spec["mask"] or spec["score"])
    aux = inputs.P.arrays[aux_name] if aux_name else None
    return fa4_peer.make(torch, inputs, spec, aux, page_size, copies, quick,
                         w.mask in W.HEAD_DEPENDENT_MASKS)


# --- main ----------------------------------------------------------------------------------------

def run_meta(argv, **extra):
    """The "meta" object of a harness's JSON: date, device, commit, torch and CUDA versions, the
    command line (the script's name and `argv`, else sys.argv's), the flexjit library, and
    `extra`."""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "device": torch.cuda.get_device_name(0), "commit": git_commit(),
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "command": " ".join([pathlib.Path(sys.argv[0]).name] +
                            list(argv if argv is not None else sys.argv[1:])),
        "flexjit_library": flexjit.library_path(), **extra,
    }


def raise_dynamo_limits():
    config = torch._dynamo.config
    for name, value in (("cache_size_limit", 1024), ("recompile_limit", 1024),
                        ("accumulated_cache_size_limit", 8192),
                        ("accumulated_recompile_limit", 8192)):
        if hasattr(config, name):
            setattr(config, name, value)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few workloads, fewer runs")
    parser.add_argument("--only", help="comma-separated workload names or parts of names")
    parser.add_argument("--list", action="store_true", help="list the workloads and exit")
    parser.add_argument("--json", metavar="PATH", help="write every figure as JSON")
    parser.add_argument("--report", metavar="PATH",
                        help="write this run's table alone to PATH (overwritten)")
    parser.add_argument("--settle", type=float, default=None, metavar="SECONDS",
                        help="idle time before each implementation's timed runs "
                             "(default 1, 0 with --quick)")
    parser.add_argument("--masks", default=str(REPO / "dsl" / "lib" / "standard.mask"),
                        help="mask file flexjit compiles for the standard workloads (default: "
                             "dsl/lib/standard.mask; the family's is tools/bench/family.mask)")
    parser.add_argument("--time-limit", type=float, default=None, metavar="SECONDS",
                        help="start no workload after SECONDS (the rest are listed as skipped), "
                             "so that a run inside a time box still writes its table")
    parser.add_argument("--fa4-pages", metavar="LIST",
                        help="page sizes FA4 runs paged at, among each workload's (comma-"
                             "separated, or 'none': contiguous only; default: all of them)")
    parser.add_argument("--no-fa4", action="store_true",
                        help="leave FlashAttention-4 out (its rows read n/a)")
    parser.add_argument("--flexjit-cli", metavar="PATH",
                        help="the flexjit CLI for tile maps (default: $FLEXJIT_CLI, "
                             ".carry/bin/flexjit, build/bin/flexjit)")
    parser.add_argument("--page-read", metavar="PATH",
                        help="tools/dev/page_read's binary, for the fp8 decode workloads' copy "
                             "floors (default: $FLEXJIT_PAGE_READ, .carry/bin/page_read, else "
                             "built with nvcc)")
    add_layout_arguments(parser)
    args = parser.parse_args(argv)
    set_layout(parser, args)

    chosen = W.select(W.workloads(), quick=args.quick, only=args.only)
    if args.list or not chosen:
        print(W.workload_table(chosen) if chosen else f"no workload matches {args.only!r}")
        return 0 if chosen else 2
    if not torch.cuda.is_available():
        print("bench.py needs a CUDA GPU", file=sys.stderr)
        return 2
    settle = args.settle if args.settle is not None else (0.0 if args.quick else 1.0)
    raise_dynamo_limits()
    started = time.perf_counter()
    props = torch.cuda.get_device_properties(0)
    l2_bytes = getattr(props, "L2_cache_size", 50 << 20) or (50 << 20)
    meta = run_meta(argv, l2_bytes=l2_bytes)
    log(f"{meta['device']}, torch {meta['torch']}, CUDA {meta['cuda']}, flexjit "
        f"{flexjit.runtime_version()} from {meta['flexjit_library']}")
    # FA4 is imported first (before flex compiles anything) so that its `cutlass` is the one
    # found; a failure only marks its rows n/a.
    fa4 = not args.no_fa4 and any(fa4_peer.plan(w) for w in chosen)
    if fa4:
        try:
            meta["fa4"] = f"flash-attn-4 {fa4_peer.load().version}"
        except fa4_peer.Unavailable as reason:
            meta["fa4"] = f"n/a: {reason}"
        log(f"FA4: {meta['fa4']}")
    fa4_pages = None
    if args.fa4_pages is not None:
        fa4_pages = set() if args.fa4_pages == "none" else \
            {int(p) for p in args.fa4_pages.split(",") if p}
    cli = flexjit_cli(args.flexjit_cli)
    meta["flexjit_cli"] = str(cli) if cli else None
    log(f"flexjit CLI for tile maps: {cli or 'none (tiles from the predicate)'}")
    page_read = None
    if any(w.kv_dtype == "fp8" and w.kind == "decode" for w in chosen):
        page_read = page_read_binary(args.page_read)
        meta["page_read"] = str(page_read[0]) if page_read[0] else f"n/a: {page_read[1]}"
        log(f"page_read for the copy floors: {meta['page_read']}")
    meta["matmul_tflops"], meta["copy_gbps"] = ceilings(args.quick)
    log(f"ceilings: bf16 matmul {meta['matmul_tflops']:.0f} TFLOP/s, copy "
        f"{meta['copy_gbps']:.0f} GB/s")

    ctx = flexjit.Context()
    programs = {}
    rows, metadata_rows = [], []
    def write_json():
        if args.json:
            pathlib.Path(args.json).write_text(json.dumps(
                {"meta": meta, "rows": rows, "metadata": metadata_rows}, indent=1, default=str))

    for w in chosen:
        if args.time_limit and time.perf_counter() - started > args.time_limit:
            rows.append({"workload": w.name, "impl": "all", "ms": None,
                         "note": f"skipped: --time-limit {args.time_limit:g} s reached"})
            metadata_rows.append({"workload": w.name})
            log(f"{w.name}: skipped (time limit)")
            continue
        try:
            mask_file = str(REPO / w.mask_file) if w.mask_file else args.masks
            if mask_file not in programs:
                programs[mask_file] = ctx.program_from_file(mask_file)
            results, meta_row = run_workload(w, ctx, programs[mask_file], mask_file, l2_bytes,
                                             args.quick, settle, cli, fa4, fa4_pages, page_read)
        except Exception as error:
            traceback.print_exc()
            results = [{"workload": w.name, "impl": "all", "ms": None,
                        "note": f"error: {type(error).__name__}: {str(error)[:160]}"}]
            meta_row = {"workload": w.name}
            torch.cuda.empty_cache()
        rows += results
        metadata_rows.append(meta_row)
        log(f"{w.name} done, {time.perf_counter() - started:.0f} s elapsed")
        write_json()  # after every workload: a run cut short still leaves its figures
    W.add_ratios(rows)
    meta["elapsed_s"] = time.perf_counter() - started
    text = W.report(meta, rows, metadata_rows, chosen)
    write_json()
    if args.report:
        pathlib.Path(args.report).write_text(text)
    print(f"\n(total {meta['elapsed_s']:.0f} s)\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
