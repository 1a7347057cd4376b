"""FlashAttention-4 (CuTe DSL, `flash-attn-4` on PyPI) as a peer of bench.py (issue 28).

Optional and loaded lazily: load() imports it from $FA4_SITE (default /tmp/fa4site, unpacked as
docs/python.md says) or from the environment, and raises Unavailable with the
reason when it cannot; bench.py then shows the FA4 rows as n/a and runs the rest.

What FA4 runs, per workload (plan()):
- causal: natively (causal=True), and as a mask_mod with its block sparsity;
- sliding: natively (window_size=(window - 1, 0));
- causal + softcap: natively (softcap=);
- the sinks workloads (gpt-oss's causal and sliding layers): natively, with learnable_sink;
- the element-wise family (tools/bench/family.mask): a mask_mod with its block sparsity
  (compute_block_sparsity at 128 x 128, timed apart as flex's create_block_mask is), arrays as
  aux_tensors; causal + t5 as causal=True with a score_mod reading the bias table.
Every family mask is expressible. Two things FA4's DSL does differently, handled here: `%` on
Int32 is the truncating remainder (arith.remsi) while `//` floors, so every mask takes `%` of
a non-negative value only (the distance q - kv under causal, or positions); and the mask_mods
see TensorSSA values of one element, read aux tensors through `[x[0]]` and build constants
with utils.scalar_to_ssa. Constants are baked into each function, as family.mask's consts are
(FA4 hashes a mask_mod's source for its compile cache).
"""

import os
import statistics
import sys
import time
import types

import workloads as W

FA4_SITE = os.environ.get("FA4_SITE", "/tmp/fa4site")

# Module globals the mask_mods read at trace time; set by load().
cutlass = cute = utils = None
_loaded = None  # a namespace once loaded, or the exception that stopped it


class Unavailable(Exception):
    """FA4 cannot run here, or cannot run this workload; the message says why."""


def load():
    """The FA4 entry points and the family's mods, importing them on the first call."""
    global _loaded, cutlass, cute, utils
    if _loaded is None:
        try:
            if os.path.isdir(FA4_SITE):
                import site
                site.addsitedir(FA4_SITE)
                sys.path.insert(0, os.path.join(FA4_SITE, "nvidia_cutlass_dsl", "dsl_packages"))
                sys.path.insert(0, FA4_SITE)
            import cutlass as cutlass_module
            import cutlass.cute as cute_module
            from flash_attn.cute import flash_attn_func, flash_attn_varlen_func
            from flash_attn.cute import utils as utils_module
            from flash_attn.cute.compute_block_sparsity import compute_block_sparsity
            cutlass, cute, utils = cutlass_module, cute_module, utils_module
            version = "unknown"
            try:
                from importlib import metadata
                version = metadata.version("flash-attn-4")
            except Exception:  # the version is informative only
                pass
            _loaded = types.SimpleNamespace(
                func=flash_attn_func, varlen_func=flash_attn_varlen_func,
                block_sparsity=compute_block_sparsity, version=version,
                masks={name: cute.jit(fn) for name, fn in MASK_MODS.items()},
                scores={name: cute.jit(fn) for name, fn in SCORE_MODS.items()})
        except Exception as error:  # ImportError, or a broken install
            _loaded = error
    if isinstance(_loaded, Exception):
        raise Unavailable(f"FA4 not importable ({type(_loaded).__name__}: "
                          f"{str(_loaded).splitlines()[0][:120] if str(_loaded) else ''})")
    return _loaded


# --- mask_mods and score_mods --------------------------------------------------------------------
# (batch, head, q_idx, kv_idx, seqlen_info, aux_tensors) -> Boolean TensorSSA; every value is a
# TensorSSA of one Int32. Comparisons are parenthesised: Python's `&` binds tighter than `==`.

def _i(value):
    return utils.scalar_to_ssa(value, cutlass.Int32)


def fa4_causal(batch, head, q_idx, kv_idx, seqlen_info, aux_tensors):
    return q_idx >= kv_idx


def fa4_dilated(batch, head, q_idx, kv_idx, seqlen_info, aux_tensors):
    d = q_idx - kv_idx
    return (d >= _i(0)) & (d < _i(1024)) & ((d % _i(2)) == _i(0))


def fa4_strided(batch, head, q_idx, kv_idx, seqlen_info, aux_tensors):
    d = q_idx - kv_idx
    return (d >= _i(0)) & ((d < _i(128)) | ((d % _i(128)) == _i(0)))


def fa4_fixed(batch, head, q_idx, kv_idx, seqlen_info, aux_tensors):
    d = q_idx - kv_idx
    same_block = (q_idx // _i(128)) == (kv_idx // _i(128))
    return (d >= _i(0)) & (same_block | ((kv_idx % _i(128)) >= _i(120)))


def fa4_image2d(batch, head, q_idx, kv_idx, seqlen_info, aux_tensors):
    rows = q_idx // _i(128) - kv_idx // _i(128)
    cols = q_idx % _i(128) - kv_idx % _i(128)
    return (rows <= _i(7)) & (rows >= _i(-7)) & (cols <= _i(7)) & (cols >= _i(-7))


def fa4_modular(batch, head, q_idx, kv_idx, seqlen_info, aux_tensors):
    # (kv - q) % 3 != 1 with floor semantics is (q - kv) % 3 != 2; q - kv >= 0 here.
    d = q_idx - kv_idx
    return (d >= _i(0)) & ((d % _i(3)) < _i(2))


def fa4_longformer(batch, head, q_idx, kv_idx, seqlen_info, aux_tensors):
    flags = aux_tensors[0]  # int32 [seq_len]: global_token
    global_q = utils.scalar_to_ssa(flags[q_idx[0]], cutlass.Int32)
    global_kv = utils.scalar_to_ssa(flags[kv_idx[0]], cutlass.Int32)
    d = q_idx - kv_idx
    near = (d <= _i(256)) & (d >= _i(-256))
    return near | (global_kv > _i(0)) | (global_q > _i(0))


def fa4_bigbird(batch, head, q_idx, kv_idx, seqlen_info, aux_tensors):
    blocks = aux_tensors[0]  # int32 [query blocks, key blocks]: random_block
    qb = q_idx // _i(64)
    kb = kv_idx // _i(64)
    chosen = utils.scalar_to_ssa(blocks[qb[0], kb[0]], cutlass.Int32)
    db = qb - kb
    return (((db <= _i(1)) & (db >= _i(-1))) | (qb < _i(2)) | (kb < _i(2))
            | (chosen > _i(0)))


def fa4_random_bits(batch, head, q_idx, kv_idx, seqlen_info, aux_tensors):
    bits = aux_tensors[0]  # int32 [seq_len, seq_len / 32], 32 bits per word
    word = bits[q_idx[0], kv_idx[0] // 32]
    bit = (word >> (kv_idx[0] % 32)) & 1
    own = q_idx == kv_idx  # the query's own key: no row is empty
    return (q_idx >= kv_idx) & (own | (utils.scalar_to_ssa(bit, cutlass.Int32) > _i(0)))


def fa4_streaming(batch, head, q_idx, kv_idx, seqlen_info, aux_tensors):
    d = q_idx - kv_idx
    return (d >= _i(0)) & ((kv_idx < _i(4)) | (d < _i(1024)))


def fa4_head_windows(batch, head, q_idx, kv_idx, seqlen_info, aux_tensors):
    windows = aux_tensors[0]  # int32 [num_heads]: head_window
    window = utils.scalar_to_ssa(windows[head[0]], cutlass.Int32)
    d = q_idx - kv_idx
    return (d >= _i(0)) & (d < window)


def fa4_t5(tSrS_ssa, b_idx, h_idx, q_idx, kv_idx, seqlen_info, aux_tensors):
    table = aux_tensors[0]  # float32 [num_heads, 256]: t5_bias
    d = q_idx - kv_idx
    low, high = cute.full_like(d, 0), cute.full_like(d, 255)
    d = cute.where(d < low, low, d)
    d = cute.where(d > high, high, d)
    d_frag = cute.make_rmem_tensor(1, cutlass.Int32)
    d_frag.store(d)
    h_frag = cute.make_rmem_tensor(1, cutlass.Int32)
    h_frag.store(h_idx)
    bias_frag = cute.make_rmem_tensor(1, table.element_type)
    bias_frag[0] = table[h_frag[0], d_frag[0]]
    return tSrS_ssa + (bias_frag.load()).to(cutlass.Float32)


MASK_MODS = {"causal": fa4_causal, "dilated": fa4_dilated, "strided": fa4_strided,
             "fixed": fa4_fixed, "image2d": fa4_image2d, "modular": fa4_modular,
             "longformer": fa4_longformer, "bigbird": fa4_bigbird,
             "random_bits": fa4_random_bits, "streaming": fa4_streaming,
             "head_windows": fa4_head_windows}
SCORE_MODS = {"t5": fa4_t5}
# The aux tensor each mod reads (bench.py builds it as it does flexjit's array).
AUX = {"longformer": "global_token", "bigbird": "random_block", "random_bits": "bits",
       "head_windows": "head_window", "t5": "t5_bias"}


def plan(w):
    """[(label, spec)] of the FA4 runs of workload w, spec a dict: causal (bool), window (int
    or None), softcap (float or None), mask (a MASK_MODS name or None), score (a SCORE_MODS
    name or None). Empty where FA4 is not compared (the other standard masks, decode)."""
    if w.kind != "prefill" or not w.uniform or w.requests[0][0] != w.requests[0][1]:
        return []
    base = {"causal": False, "window": None, "softcap": None, "mask": None, "score": None,
            "sink": False}
    if w.sinks:  # learnable_sink with FA4's native masks (gpt-oss's layers)
        if w.mask == "causal" and w.score is None:
            return [("native causal + learnable_sink", dict(base, causal=True, sink=True))]
        if w.mask == "sliding" and w.score is None:
            return [("native window + learnable_sink",
                     dict(base, window=w.params["window"], sink=True))]
        return []
    if w.mask == "causal" and w.score is None:
        return [("native causal", dict(base, causal=True)),
                ("causal mask_mod", dict(base, mask="causal"))]
    if w.mask == "sliding" and w.score is None:
        return [("native window", dict(base, window=w.params["window"]))]
    if w.mask == "causal" and w.score == "softcap":
        return [("native softcap", dict(base, causal=True, softcap=W.SOFTCAP))]
    if w.mask == "causal" and w.score in SCORE_MODS:
        return [(f"causal + {w.score} score_mod", dict(base, causal=True, score=w.score))]
    if w.mask in MASK_MODS and w.score is None and w.family:
        return [("mask_mod", dict(base, mask=w.mask))]
    return []


# --- runs ----------------------------------------------------------------------------------------

def _first(result):
    return result[0] if isinstance(result, tuple) else result


def make(torch, inputs, spec, aux, page_size, copies, quick, head_dependent):
    """(fn(i) -> out [B, S, H, D], rows, tokens, extra) for one FA4 run, as bench.py's make_*
    return them. page_size None: contiguous [B, S, H_kv, D] K/V (flash_attn_func); else the
    paged cache of bench.py's Inputs.paged (same shuffled block table as flexjit), split into
    K and V caches [pages, page, H_kv, D], through flash_attn_varlen_func with page_table."""
    fa4 = load()
    B, H, S, D = inputs.q_p.shape
    mask_mod = fa4.masks[spec["mask"]] if spec["mask"] else None
    score_mod = fa4.scores[spec["score"]] if spec["score"] else None
    aux_tensors = [aux] if aux is not None else None
    extra = {"fa4_version": fa4.version}

    sparse = None
    if mask_mod is not None and page_size is not None:
        # FA4 4.0.0b36's sm90 block-sparse producer (block_sparse_utils.produce_block_sparse_loads)
        # loads key blocks with page_idx=None: at page 128 (TMA) it reads physical page n for
        # logical block n, ignoring the page table (wrong output on a shuffled table, seen on the
        # H100), and below 128 (cp.async) it fails with a TypeError. So paged runs apply the
        # mask_mod to every tile, without block sparsity.
        extra["note"] = ("mask_mod on every tile: FA4's sm90 block-sparse loader ignores the "
                         "page table")
    elif mask_mod is not None:
        # Head-independent masks build one head's map, broadcast over the heads (FA4 then
        # keeps its GQA packing); per-head masks build every head's.
        heads = H if head_dependent else 1

        def build():
            return fa4.block_sparsity(tile_m=128, tile_n=128, batch_size=B, num_heads=heads,
                                      seqlen_q=S, seqlen_k=S, mask_mod=mask_mod,
                                      aux_tensors=aux_tensors, device="cuda")

        t0 = time.perf_counter()
        sparse = build()
        torch.cuda.synchronize()
        extra["block_sparsity_first_ms"] = (time.perf_counter() - t0) * 1e3
        times = []
        for _ in range(2 if quick else 5):
            t0 = time.perf_counter()
            sparse = build()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
        extra["block_sparsity_ms"] = statistics.median(times)

    options = {"causal": spec["causal"], "mask_mod": mask_mod, "score_mod": score_mod,
               "aux_tensors": aux_tensors, "block_sparse_tensors": sparse}
    if spec["window"] is not None:
        options["window_size"] = (spec["window"] - 1, 0)
    if spec["softcap"]:
        options["softcap"] = spec["softcap"]
    if spec.get("sink"):
        options["learnable_sink"] = inputs.sinks
    options = {k: v for k, v in options.items() if v is not None}

    q = inputs.q_p.transpose(1, 2).contiguous()  # [B, S, H, D]
    if page_size is None:
        k = inputs.k_p.transpose(1, 2).contiguous()  # [B, S, H_kv, D]
        v = inputs.v_p.transpose(1, 2).contiguous()
        data = [(q, k, v)] + [(q.clone(), k.clone(), v.clone()) for _ in range(1, copies)]

        def fn(i):
            qi, ki, vi = data[i]
            return _first(fa4.func(qi, ki, vi, **options))
    else:
        cache, table = inputs.paged(page_size)
        k_cache, v_cache = cache[:, 0].contiguous(), cache[:, 1].contiguous()
        del cache
        seqused = inputs.meta["seq_lens"]
        data = [(q, k_cache, v_cache)] + [(q.clone(), k_cache.clone(), v_cache.clone())
                                          for _ in range(1, copies)]

        def fn(i):
            qi, ki, vi = data[i]
            return _first(fa4.varlen_func(qi, ki, vi, seqused_k=seqused, page_table=table,
                                          **options))

    t0 = time.perf_counter()
    try:
        out = fn(0)
    except Exception as first:
        if page_size is None or sparse is not None:
            raise
        # The form the README saw work: q packed [tokens, H, D] with cu_seqlens_q (block
        # sparsity would need its varlen layout, so only the native runs fall back to it).
        cu_seqlens_q = torch.arange(0, (B + 1) * S, S, dtype=torch.int32, device=q.device)
        packed = [(qi.reshape(B * S, H, D), ki, vi) for qi, ki, vi in data]

        def fn(i):
            qi, ki, vi = packed[i]
            return _first(fa4.varlen_func(
                qi, ki, vi, cu_seqlens_q=cu_seqlens_q, max_seqlen_q=S, seqused_k=seqused,
                page_table=table, **options)).view(B, S, H, D)

        out = fn(0)
        fallback = (f"q as [tokens, H, D] with cu_seqlens_q ([B, S, H, D] failed: "
                    f"{type(first).__name__}: {str(first).splitlines()[0][:80]})")
        extra["note"] = "; ".join(filter(None, [extra.get("note"), fallback]))
    torch.cuda.synchronize()
    extra["compile_s"] = time.perf_counter() - t0
    if tuple(out.shape) != (B, S, H, D):
        raise Unavailable(f"unexpected output shape {tuple(out.shape)}")

    def rows(out, r, picked):
        return out[r][picked].transpose(0, 1)  # [H, n, D]

    def tokens(out):
        return out.reshape(-1, H, D)

    return fn, rows, tokens, extra
