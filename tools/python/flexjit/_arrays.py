"""Device arrays seen by the launcher: pointer, shape, strides in elements, dtype, device.

Accepts PyTorch tensors (recognised without importing torch) and any object with
`__cuda_array_interface__`. Pure logic: tested without a GPU on stand-in objects.
"""

from typing import NamedTuple, Optional, Tuple

from ._capi import Dtype

_TORCH_DTYPES = {
    "torch.bfloat16": "bf16",
    "torch.float16": "fp16",
    "torch.float32": "fp32",
    "torch.int32": "int32",
    "torch.int64": "int64",
    "torch.float8_e4m3fn": "fp8",
    "torch.uint8": "uint8",
}
_TYPESTRS = {"<f2": ("fp16", 2), "<f4": ("fp32", 4), "<i4": ("int32", 4), "<i8": ("int64", 8),
             "|u1": ("uint8", 1), "<u1": ("uint8", 1)}
_ITEMSIZES = {"bf16": 2, "fp16": 2, "fp32": 4, "int32": 4}
# What an fp8 (e4m3, the "fn" variant) K/V cache may be: torch.float8_e4m3fn, or uint8 bytes
# holding e4m3 values (as vLLM allocates its fp8 caches).
FP8_CACHE_DTYPES = ("fp8", "uint8")


class Array(NamedTuple):
    name: str
    ptr: int
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]  # in elements
    dtype: str  # "bf16", "fp16", "fp32", "int32", or the source's own spelling
    is_cuda: bool
    device_index: Optional[int]  # None where the source does not say (cuda array interface)


_is_torch_type = {}  # type -> whether its instances are torch tensors
_dtype_names = {}  # torch dtype -> our name (its str where we have none)


def is_torch_tensor(obj):
    kind = type(obj)
    known = _is_torch_type.get(kind)
    if known is None:
        known = _is_torch_type[kind] = (kind.__module__.startswith("torch") and
                                        hasattr(obj, "data_ptr"))
    return known


def describe(obj, name):
    """The Array view of `obj`; raises TypeError for objects that are neither."""
    if is_torch_tensor(obj):
        dtype = obj.dtype
        dtype_name = _dtype_names.get(dtype)
        if dtype_name is None:
            dtype_name = _dtype_names[dtype] = _TORCH_DTYPES.get(str(dtype), str(dtype))
        is_cuda = bool(obj.is_cuda)
        return Array(name, obj.data_ptr(), tuple(obj.shape), tuple(obj.stride()), dtype_name,
                     is_cuda, obj.device.index if is_cuda else None)
    own = getattr(obj, "__flexjit_array__", None)  # a view that describes itself (an Array)
    if own is not None:
        return own._replace(name=name)
    interface = getattr(obj, "__cuda_array_interface__", None)
    if interface is None:
        raise TypeError(f"{name}: expected a torch tensor or an object with "
                        f"__cuda_array_interface__, got {type(obj).__name__}")
    shape = tuple(int(n) for n in interface["shape"])
    typestr = interface["typestr"]
    dtype, itemsize = _TYPESTRS.get(typestr, (typestr, None))
    byte_strides = interface.get("strides")
    if byte_strides is None:
        strides = contiguous_strides(shape)
    elif itemsize is None or any(s % itemsize for s in byte_strides):
        raise TypeError(f"{name}: strides {tuple(byte_strides)} (bytes) are not whole elements "
                        f"of type {typestr}")
    else:
        strides = tuple(s // itemsize for s in byte_strides)
    return Array(name, int(interface["data"][0]), shape, strides, dtype, True, None)


def contiguous_strides(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


# The checks below build their messages only when they fail: a call checks some sixty
# conditions, and formatting every message up front cost most of a call's host time.


def _rank(a, rank, what):
    if len(a.shape) != rank:
        raise ValueError(f"{a.name}: expected {rank} dimensions {what}, got shape {a.shape}")


def _dtype(a, want):
    if a.dtype != want:
        raise ValueError(f"{a.name}: dtype {a.dtype}, expected {want}")


def _unit_last(a):
    if not (a.shape[-1] <= 1 or a.strides[-1] == 1):
        raise ValueError(f"{a.name}: last dimension must be contiguous (stride 1), strides "
                         f"{a.strides}")


def _check_where(arrays, host):
    """Device arrays for a CUDA kernel; host memory for a CPU kernel (`host`): torch CPU tensors,
    or stand-ins whose interface names no device."""
    for a in arrays:
        if host:
            if a.is_cuda and a.device_index is not None:
                raise ValueError(f"{a.name}: on cuda:{a.device_index}, but the kernel runs on "
                                 f"the host (arch 'cpu'): pass host memory")
        elif not a.is_cuda:
            raise ValueError(f"{a.name}: not a CUDA device array")
    _same_device(arrays)


def _kv_layout_dims(kv_layout):
    """(dimension names, slot dim, kv head dim) of a cache in kv_layout "NHD" or "HND"."""
    if kv_layout not in ("NHD", "HND"):
        raise ValueError(f"kv_layout must be 'NHD' or 'HND', got {kv_layout!r}")
    if kv_layout == "NHD":
        return "[num_blocks, page_size, num_kv_heads, head_dim]", 1, 2
    return "[num_blocks, num_kv_heads, page_size, head_dim]", 2, 1


def _cache_dtype(a, dtype, kv_dtype):
    """Checks the dtype of cache `a`: kv_dtype "fp8" takes FP8_CACHE_DTYPES, else `dtype`."""
    if kv_dtype == "fp8":
        if a.dtype not in FP8_CACHE_DTYPES:
            raise ValueError(f"{a.name}: dtype {a.dtype}, expected an fp8 cache "
                             f"(torch.float8_e4m3fn, or uint8 holding e4m3 bytes) for kv_dtype "
                             f"'fp8'")
    elif a.dtype in FP8_CACHE_DTYPES:
        raise ValueError(f"{a.name}: dtype {a.dtype} is an fp8 cache, but the K/V cache is "
                         f"{dtype} here (an fp8 cache needs a kernel created with "
                         f"kv_dtype='fp8')")
    else:
        _dtype(a, dtype)


def paged_fields(*, head_dim, page_size, dtype, q, out, k_cache, v_cache, block_table,
                 query_start_loc, seq_lens, lse=None, sinks=None, k_scale=None, v_scale=None,
                 kv_layout="NHD", kv_dtype=None, host=False, kv_shard_offsets=None,
                 global_seq_lens=None, kv_shard_rank=0, kv_shard_count=0, kv_shard_interleave=0):
    """Checks the arrays of one paged attention call (docs/architecture.md#call-contract) and
    returns the fields of fj_paged_attention_args they determine (pointers, counts and strides in
    elements).

    q, out: [num_tokens, num_heads, head_dim]. k_cache, v_cache: [num_blocks, page_size,
    num_kv_heads, head_dim] for kv_layout "NHD", [num_blocks, num_kv_heads, page_size, head_dim]
    for "HND"; any strides (a joint cache's [:, 0] / [:, 1] views work); of `dtype`, or, with
    kv_dtype "fp8", fp8 bytes (FP8_CACHE_DTYPES: their strides are bytes) dequantized by k_scale
    and v_scale (scale_fields). block_table: int32 [num_reqs, >= max blocks], query_start_loc
    int32 [num_reqs + 1], seq_lens int32 [num_reqs], lse float32 [num_tokens, num_heads] or None,
    sinks float32 [num_heads] or None (sinks_pointer). `host`: the kernel runs on the CPU, so
    the arrays are host memory (_check_where). Context parallelism (since 0.9): kv_shard_offsets
    and global_seq_lens int32 [num_reqs] or None, and the shard's rank, count and interleave
    (checked by KvShard; 0 for count and interleave reads as 1), passed on as the struct's
    kv_shard_* fields.
    """
    kv_dims, slot_dim, head_dim_index = _kv_layout_dims(kv_layout)
    kv_dtype = kv_dtype or dtype
    arrays = [q, out, k_cache, v_cache, block_table, query_start_loc, seq_lens]
    arrays += [a for a in (lse, sinks, k_scale, v_scale, kv_shard_offsets, global_seq_lens)
               if a is not None]
    _check_where(arrays, host)

    for a in (q, out):
        _rank(a, 3, "[num_tokens, num_heads, head_dim]")
        _dtype(a, dtype)
        _unit_last(a)
    if out.shape != q.shape:
        raise ValueError(f"out: shape {out.shape} differs from q's {q.shape}")
    num_tokens, num_heads, q_head_dim = q.shape
    if q_head_dim != head_dim:
        raise ValueError(f"q: head_dim {q_head_dim}, the kernel's is {head_dim}")

    for a in (k_cache, v_cache):
        _rank(a, 4, kv_dims)
        _cache_dtype(a, dtype, kv_dtype)
        _unit_last(a)
        if a.shape[3] != head_dim:
            raise ValueError(f"{a.name}: head_dim {a.shape[3]}, the kernel's is "
                             f"{head_dim}")
        if a.shape[slot_dim] != page_size:
            raise ValueError(f"{a.name}: page size {a.shape[slot_dim]} "
                             f"(shape {a.shape}, layout {kv_layout}), the kernel's is {page_size}")
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"v_cache: shape {v_cache.shape} differs from k_cache's {k_cache.shape}")
    num_kv_heads = k_cache.shape[head_dim_index]

    _rank(block_table, 2, "[num_reqs, max_blocks]")
    for a in (block_table, query_start_loc, seq_lens):
        _dtype(a, "int32")
        _unit_last(a)
    _rank(query_start_loc, 1, "[num_reqs + 1]")
    _rank(seq_lens, 1, "[num_reqs]")
    num_reqs = seq_lens.shape[0]
    if query_start_loc.shape[0] != num_reqs + 1:
        raise ValueError(f"query_start_loc: {query_start_loc.shape[0]}"
                         f" entries, expected num_reqs + 1 = {num_reqs + 1}")
    if block_table.shape[0] != num_reqs:
        raise ValueError(f"block_table: {block_table.shape[0]} rows, "
                         f"expected num_reqs = {num_reqs}")

    fields = dict(
        q=q.ptr, out=out.ptr, k_cache=k_cache.ptr, v_cache=v_cache.ptr,
        query_start_loc=query_start_loc.ptr, seq_lens=seq_lens.ptr, block_table=block_table.ptr,
        lse=0, lse_stride_token=0, sinks=0 if sinks is None else sinks_pointer(sinks, num_heads),
        num_tokens=num_tokens, num_reqs=num_reqs, num_heads=num_heads, num_kv_heads=num_kv_heads,
        max_blocks_per_req=block_table.shape[1], num_blocks=k_cache.shape[0],
        q_stride_token=q.strides[0], q_stride_head=q.strides[1],
        out_stride_token=out.strides[0], out_stride_head=out.strides[1],
        k_stride_block=k_cache.strides[0], k_stride_slot=k_cache.strides[slot_dim],
        k_stride_head=k_cache.strides[head_dim_index],
        v_stride_block=v_cache.strides[0], v_stride_slot=v_cache.strides[slot_dim],
        v_stride_head=v_cache.strides[head_dim_index],
        block_table_stride=block_table.strides[0],
        **scale_fields(kv_dtype, k_scale, v_scale, num_kv_heads),
        kv_shard_offsets=_request_array(kv_shard_offsets, num_reqs),
        global_seq_lens=_request_array(global_seq_lens, num_reqs),
        kv_shard_rank=kv_shard_rank, kv_shard_count=kv_shard_count,
        kv_shard_interleave=kv_shard_interleave,
    )
    if lse is not None:
        _rank(lse, 2, "[num_tokens, num_heads]")
        _dtype(lse, "fp32")
        _unit_last(lse)
        if lse.shape != (num_tokens, num_heads):
            raise ValueError(f"lse: shape {lse.shape}, expected {(num_tokens, num_heads)}")
        fields.update(lse=lse.ptr, lse_stride_token=lse.strides[0])
    return fields


def _request_array(a, num_reqs):
    """The pointer of an int32 [num_reqs] array of one entry per request (a shard's offsets or
    global lengths), contiguous and 4-byte aligned; 0 for None."""
    if a is None:
        return 0
    _rank(a, 1, "[num_reqs]")
    _dtype(a, "int32")
    _unit_last(a)
    if a.shape[0] != num_reqs:
        raise ValueError(f"{a.name}: {a.shape[0]} entries, expected one per request "
                         f"(num_reqs = {num_reqs})")
    if a.ptr % 4 != 0:
        raise ValueError(f"{a.name}: data pointer {a.ptr:#x} is not 4-byte aligned")
    return a.ptr


def scale_fields(kv_dtype, k_scale, v_scale, num_kv_heads):
    """Checks the dequantization scales of a K/V cache of `kv_dtype` (Arrays or None) and
    returns the fields k_scale, v_scale, kv_scale_stride (fj_paged_attention_args,
    fj_kv_cache_write_args): an fp8 cache needs both, float32, 0-d or 1-D, of one element (per
    tensor: stride 0) or num_kv_heads contiguous elements (per kv head: stride 1), both alike
    since they share the stride, 4-byte aligned; a 16-bit cache takes none."""
    if kv_dtype != "fp8":
        for a in (k_scale, v_scale):
            if a is not None:
                raise ValueError(f"{a.name}: given for a {kv_dtype} K/V cache; scales "
                                 f"dequantize an fp8 cache (kv_dtype='fp8')")
        return dict(k_scale=0, v_scale=0, kv_scale_stride=0)
    missing = [name for name, a in (("k_scale", k_scale), ("v_scale", v_scale)) if a is None]
    if missing:
        raise ValueError(f"{' and '.join(missing)}: required with an fp8 K/V cache (a number, "
                         f"or float32 of 1 or num_kv_heads = {num_kv_heads} elements)")
    counts = []
    for a in (k_scale, v_scale):
        if len(a.shape) > 1:
            raise ValueError(f"{a.name}: shape {a.shape}, expected a 0-d or 1-D array of 1 or "
                             f"num_kv_heads = {num_kv_heads} elements")
        _dtype(a, "fp32")
        count = a.shape[0] if a.shape else 1
        if count not in (1, num_kv_heads):
            raise ValueError(f"{a.name}: {count} elements, expected 1 (one scale for the cache) "
                             f"or num_kv_heads = {num_kv_heads} (one per kv head)")
        if count > 1 and a.strides[0] != 1:
            raise ValueError(f"{a.name}: one scale per kv head must be contiguous, stride "
                             f"{a.strides[0]}")
        if a.ptr % 4 != 0:
            raise ValueError(f"{a.name}: data pointer {a.ptr:#x} is not 4-byte aligned")
        counts.append(count)
    if counts[0] != counts[1]:
        raise ValueError(f"k_scale has {counts[0]} element(s), v_scale {counts[1]}: they share "
                         f"one kv_scale_stride, so give both one scale or both one per kv head")
    return dict(k_scale=k_scale.ptr, v_scale=v_scale.ptr,
                kv_scale_stride=0 if counts[0] == 1 else 1)


def cache_write_fields(*, key, value, k_cache, v_cache, slot_mapping, k_scale=None,
                       v_scale=None, kv_layout="NHD", host=False):
    """Checks the arrays of one KV-cache write (fj_kv_cache_write) and returns the fields of
    fj_kv_cache_write_args they determine, device aside. key, value: [num_tokens, num_kv_heads,
    head_dim] bf16 or fp16; caches as paged_fields has them, of key's dtype (a copy) or fp8
    (quantized with k_scale and v_scale, scale_fields); slot_mapping int64 [num_tokens]."""
    kv_dims, slot_dim, head_dim_index = _kv_layout_dims(kv_layout)
    arrays = [key, value, k_cache, v_cache, slot_mapping]
    arrays += [a for a in (k_scale, v_scale) if a is not None]
    _check_where(arrays, host)
    for a in (key, value):
        _rank(a, 3, "[num_tokens, num_kv_heads, head_dim]")
        if a.dtype not in ("bf16", "fp16"):
            raise ValueError(f"{a.name}: dtype {a.dtype}, expected bf16 or fp16")
        _unit_last(a)
    if value.shape != key.shape or value.dtype != key.dtype:
        raise ValueError(f"value: {value.dtype} {value.shape} differs from key's {key.dtype} "
                         f"{key.shape}")
    num_tokens, num_kv_heads, head_dim = key.shape
    fp8 = k_cache.dtype in FP8_CACHE_DTYPES
    for a in (k_cache, v_cache):
        _rank(a, 4, kv_dims)
        _cache_dtype(a, key.dtype, "fp8" if fp8 else key.dtype)
        _unit_last(a)
        if (a.shape[head_dim_index], a.shape[3]) != (num_kv_heads, head_dim):
            raise ValueError(f"{a.name}: shape {a.shape} (layout {kv_layout}) does not hold "
                             f"{num_kv_heads} kv heads of {head_dim}, key's")
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"v_cache: shape {v_cache.shape} differs from k_cache's {k_cache.shape}")
    _rank(slot_mapping, 1, "[num_tokens]")
    _dtype(slot_mapping, "int64")
    _unit_last(slot_mapping)
    if slot_mapping.shape[0] != num_tokens:
        raise ValueError(f"slot_mapping: {slot_mapping.shape[0]} entries, key has {num_tokens} "
                         f"tokens")
    scales = scale_fields("fp8" if fp8 else key.dtype, k_scale, v_scale, num_kv_heads)
    return dict(
        key=key.ptr, value=value.ptr, k_cache=k_cache.ptr, v_cache=v_cache.ptr,
        slot_mapping=slot_mapping.ptr, num_tokens=num_tokens, num_kv_heads=num_kv_heads,
        head_dim=head_dim, page_size=k_cache.shape[slot_dim], num_blocks=k_cache.shape[0],
        key_stride_token=key.strides[0], key_stride_head=key.strides[1],
        value_stride_token=value.strides[0], value_stride_head=value.strides[1],
        k_stride_block=k_cache.strides[0], k_stride_slot=k_cache.strides[slot_dim],
        k_stride_head=k_cache.strides[head_dim_index],
        v_stride_block=v_cache.strides[0], v_stride_slot=v_cache.strides[slot_dim],
        v_stride_head=v_cache.strides[head_dim_index],
        dtype=int(Dtype[key.dtype.upper()]), cache_dtype=int(Dtype.FP8_E4M3) if fp8 else 0,
        **scales)


def varlen_fields(*, head_dim, dtype, q, k, v, out, cu_seqlens, lse=None, sinks=None):
    """Checks the arrays of one contiguous-K/V (encoder) call and returns the fields of
    fj_varlen_attention_args they determine.

    q, out: [num_tokens, num_heads, head_dim]; k, v: [num_tokens, num_kv_heads, head_dim] (any
    strides, head_dim contiguous); cu_seqlens int32 [num_seqs + 1]; lse float32
    [num_tokens, num_heads] or None; sinks float32 [num_heads] or None (sinks_pointer).
    """
    arrays = [q, k, v, out, cu_seqlens] + [a for a in (lse, sinks) if a is not None]
    for a in arrays:
        if not a.is_cuda:
            raise ValueError(f"{a.name}: not a CUDA device array")
    _same_device(arrays)
    for a in (q, k, v, out):
        _rank(a, 3, "[num_tokens, heads, head_dim]")
        _dtype(a, dtype)
        _unit_last(a)
        if a.shape[2] != head_dim:
            raise ValueError(f"{a.name}: head_dim {a.shape[2]}, the kernel's is "
                             f"{head_dim}")
    if out.shape != q.shape:
        raise ValueError(f"out: shape {out.shape} differs from q's {q.shape}")
    if v.shape != k.shape:
        raise ValueError(f"v: shape {v.shape} differs from k's {k.shape}")
    num_tokens, num_heads, _ = q.shape
    if k.shape[0] != num_tokens:
        raise ValueError(f"k: {k.shape[0]} tokens, q has {num_tokens} (K/V are "
                         "packed like q)")
    _rank(cu_seqlens, 1, "[num_seqs + 1]")
    _dtype(cu_seqlens, "int32")
    _unit_last(cu_seqlens)
    if cu_seqlens.shape[0] < 1:
        raise ValueError("cu_seqlens: needs num_seqs + 1 >= 1 entries")
    fields = dict(
        q=q.ptr, k=k.ptr, v=v.ptr, out=out.ptr, cu_seqlens=cu_seqlens.ptr, lse=0,
        lse_stride_token=0, sinks=0 if sinks is None else sinks_pointer(sinks, num_heads),
        num_tokens=num_tokens, num_seqs=cu_seqlens.shape[0] - 1,
        num_heads=num_heads, num_kv_heads=k.shape[1],
        q_stride_token=q.strides[0], q_stride_head=q.strides[1],
        k_stride_token=k.strides[0], k_stride_head=k.strides[1],
        v_stride_token=v.strides[0], v_stride_head=v.strides[1],
        out_stride_token=out.strides[0], out_stride_head=out.strides[1],
    )
    if lse is not None:
        _rank(lse, 2, "[num_tokens, num_heads]")
        _dtype(lse, "fp32")
        _unit_last(lse)
        if lse.shape != (num_tokens, num_heads):
            raise ValueError(f"lse: shape {lse.shape}, expected {(num_tokens, num_heads)}")
        fields.update(lse=lse.ptr, lse_stride_token=lse.strides[0])
    return fields


def _attention_rows(a, lead, what):
    """Checks `a`, partial attention outputs [*lead, num_tokens, num_heads, head_dim] of bf16 or
    fp16 with head_dim contiguous."""
    _rank(a, len(lead) + 3, what)
    if a.dtype not in ("bf16", "fp16"):
        raise ValueError(f"{a.name}: dtype {a.dtype}, expected bf16 or fp16")
    _unit_last(a)


def _lse_rows(a, shape, what):
    """Checks `a`, float32 LSEs of `shape` with heads contiguous."""
    _rank(a, len(shape), what)
    _dtype(a, "fp32")
    _unit_last(a)
    if a.shape != shape:
        raise ValueError(f"{a.name}: shape {a.shape}, expected {shape}")


def merge_states_fields(*, out_a, lse_a, out_b, lse_b, out, lse=None, sinks=None, host=False):
    """Checks the arrays of a two-way merge (fj_merge_states) and returns the fields of
    fj_merge_states_args they determine, device aside: out_a, out_b, out [num_tokens,
    num_heads, head_dim] of one dtype (bf16 or fp16), lse_a, lse_b float32 [num_tokens,
    num_heads], lse like them or None, sinks float32 [num_heads] or None. `host`: host memory
    (FJ_DEVICE_CPU)."""
    arrays = [out_a, lse_a, out_b, lse_b, out] + [a for a in (lse, sinks) if a is not None]
    _check_where(arrays, host)
    what = "[num_tokens, num_heads, head_dim]"
    for a in (out_a, out_b, out):
        _attention_rows(a, (), what)
        if a.shape != out_a.shape or a.dtype != out_a.dtype:
            raise ValueError(f"{a.name}: {a.dtype} {a.shape} differs from out_a's "
                             f"{out_a.dtype} {out_a.shape}")
    num_tokens, num_heads, head_dim = out_a.shape
    for a in (lse_a, lse_b) + ((lse,) if lse is not None else ()):
        _lse_rows(a, (num_tokens, num_heads), "[num_tokens, num_heads]")
    return dict(
        dtype=int(Dtype[out_a.dtype.upper()]), out_a=out_a.ptr, lse_a=lse_a.ptr, out_b=out_b.ptr,
        lse_b=lse_b.ptr, out=out.ptr, lse=0 if lse is None else lse.ptr,
        num_tokens=num_tokens, num_heads=num_heads, head_dim=head_dim,
        out_a_stride_token=out_a.strides[0], out_a_stride_head=out_a.strides[1],
        out_b_stride_token=out_b.strides[0], out_b_stride_head=out_b.strides[1],
        out_stride_token=out.strides[0], out_stride_head=out.strides[1],
        lse_a_stride_token=lse_a.strides[0], lse_b_stride_token=lse_b.strides[0],
        lse_stride_token=0 if lse is None else lse.strides[0],
        sinks=0 if sinks is None else sinks_pointer(sinks, num_heads))


def merge_states_n_fields(*, states_out, states_lse, out, lse=None, sinks=None, host=False):
    """Checks the arrays of an n-way merge (fj_merge_states_n, since 0.9) and returns the
    fields of fj_merge_states_n_args they determine, device aside: states_out [num_states,
    num_tokens, num_heads, head_dim] bf16 or fp16 (an all-gather of each shard's out, any
    strides with head_dim contiguous), states_lse float32 [num_states, num_tokens, num_heads]
    (heads contiguous), out [num_tokens, num_heads, head_dim] of states_out's dtype, lse
    float32 [num_tokens, num_heads] or None, sinks float32 [num_heads] or None. `host`: host
    memory (FJ_DEVICE_CPU)."""
    arrays = [states_out, states_lse, out] + [a for a in (lse, sinks) if a is not None]
    _check_where(arrays, host)
    _attention_rows(states_out, ("num_states",),
                    "[num_states, num_tokens, num_heads, head_dim]")
    num_states, num_tokens, num_heads, head_dim = states_out.shape
    _lse_rows(states_lse, (num_states, num_tokens, num_heads),
              "[num_states, num_tokens, num_heads]")
    _attention_rows(out, (), "[num_tokens, num_heads, head_dim]")
    if out.shape != states_out.shape[1:] or out.dtype != states_out.dtype:
        raise ValueError(f"out: {out.dtype} {out.shape}, expected {states_out.dtype} "
                         f"{states_out.shape[1:]} (states_out's rows)")
    if lse is not None:
        _lse_rows(lse, (num_tokens, num_heads), "[num_tokens, num_heads]")
    return dict(
        dtype=int(Dtype[states_out.dtype.upper()]), num_states=num_states,
        states_out=states_out.ptr, states_lse=states_lse.ptr, out=out.ptr,
        lse=0 if lse is None else lse.ptr,
        num_tokens=num_tokens, num_heads=num_heads, head_dim=head_dim,
        out_stride_state=states_out.strides[0], out_stride_token=states_out.strides[1],
        out_stride_head=states_out.strides[2], lse_stride_state=states_lse.strides[0],
        lse_stride_token=states_lse.strides[1], merged_stride_token=out.strides[0],
        merged_stride_head=out.strides[1],
        merged_lse_stride_token=0 if lse is None else lse.strides[0],
        sinks=0 if sinks is None else sinks_pointer(sinks, num_heads))


def sinks_pointer(sinks, num_heads):
    """Checks attention sinks `sinks` (an Array; fj_paged_attention_args.sinks: one logit per
    query head that joins each row's softmax denominator) and returns its data pointer: float32
    [num_heads], contiguous, 4-byte aligned. Where it lives (device or host) the caller checks
    with the call's other arrays."""
    _rank(sinks, 1, "[num_heads]")
    _dtype(sinks, "fp32")
    if sinks.shape[0] != num_heads:
        raise ValueError(f"{sinks.name}: {sinks.shape[0]} entries, expected one per query head "
                         f"({num_heads})")
    _unit_last(sinks)
    if sinks.ptr % 4 != 0:
        raise ValueError(f"{sinks.name}: data pointer {sinks.ptr:#x} is not 4-byte aligned")
    return sinks.ptr


def _same_device(arrays):
    devices = {a.device_index for a in arrays if a.device_index is not None}
    if len(devices) > 1:
        raise ValueError("arrays are on different CUDA devices: " + ", ".join(
            f"{a.name} on cuda:{a.device_index}" for a in arrays if a.device_index is not None))


_INT32_MAX = 2**31 - 1


def array_param_fields(a, *, dtype, dims, num_reqs, num_heads, host=False):
    """Checks runtime array parameter `a` (an Array) against its declaration and returns the
    fields of its fj_array: (data, rows, cols, row_stride); data 0 for an empty array.

    dtype: "int32" or "fp32" (from the param's type); dims: the declared dimension names, as
    many as its rank ("b" must cover num_reqs entries, "h" num_heads). A 1-D array has cols 1
    and row_stride its stride; a 2-D one needs contiguous rows (row_stride = its first stride).
    `host`: for a CPU kernel, host memory (as paged_fields).
    """
    rank = len(dims)
    _check_where([a], host)
    if len(a.shape) != rank:
        raise ValueError(f"{a.name}: declared {dtype}[{', '.join(dims)}] ({rank}-D), got shape "
                         f"{a.shape}")
    _dtype(a, dtype)
    rows = a.shape[0]
    cols = a.shape[1] if rank == 2 else 1
    if rank == 2:
        _unit_last(a)
    # Only row 0 is read when there is one row: any stride >= cols will do.
    row_stride = a.strides[0] if rows > 1 else cols
    if not (row_stride >= cols or rows * cols == 0):
        raise ValueError(f"{a.name}: row stride {a.strides[0]} (elements) is smaller than the "
                         f"row length {cols}; broadcast or overlapping rows are not supported "
                         f"(use .contiguous())")
    for value, what in ((rows, "rows"), (cols, "columns"), (row_stride, "row stride")):
        if not (0 <= value <= _INT32_MAX):
            raise ValueError(f"{a.name}: {value} {what} do not fit in int32")
    for d, (name, extent) in enumerate(zip(dims, (rows, cols))):
        need = num_reqs if name == "b" else num_heads if name == "h" else 0
        if extent < need:
            raise ValueError(f"{a.name}: dimension {d} (`{name}`) has {extent} entries, the "
                             f"call needs {need} "
                             f"({'num_reqs' if name == 'b' else 'num_heads'})")
    if rows * cols == 0:  # no data, but its extents: a `b` dimension must still cover the call
        return 0, rows, cols, row_stride
    if a.ptr % 4 != 0:
        raise ValueError(f"{a.name}: data pointer {a.ptr:#x} is not 4-byte aligned")
    return a.ptr, rows, cols, row_stride
