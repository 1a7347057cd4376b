"""Context parallelism (C API 0.9, on CUDA since 0.10; docs/context_parallel.md): a paged call over one shard of
each request's keys, the shard's place in the whole request, and the layout helpers.

    shard = flexjit.KvShard(rank=dcp_rank, count=dcp_world_size, interleave=16,
                            global_seq_lens=seq_lens_of_the_whole_requests)
    kern(q, k_cache, v_cache, block_table, qsl, seq_lens_in_the_shard, lse=lse, kv_shard=shard,
         ...)

Each rank's (out, lse) are then gathered and merged (Context.merge_states_n).
"""

import ctypes
import numbers

from ._arrays import is_torch_tensor

_INT32_MAX = 2**31 - 1


def _layout_int(name, value, low):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"kv_shard: {name} must be an int, got {type(value).__name__}")
    value = int(value)
    if not low <= value <= _INT32_MAX:
        raise ValueError(f"kv_shard: {name} must be in [{low}, 2**31), got {value}")
    return value


def _check_layout(rank, count, interleave):
    """(rank, count, interleave) as ints, checked: count >= 1, interleave >= 1, 0 <= rank <
    count."""
    count = _layout_int("count", count, 1)
    interleave = _layout_int("interleave", interleave, 1)
    rank = _layout_int("rank", rank, 0)
    if rank >= count:
        raise ValueError(f"kv_shard: rank {rank} is not below count {count} (ranks are 0 .. "
                         f"count - 1)")
    return rank, count, interleave


def _shard_array(values, name):
    """A shard array as the call reads it: a torch tensor or an object with
    __cuda_array_interface__ as it is (the call checks where it lives), a ctypes int32 array as
    it is, anything else (a list, a tuple) copied into a ctypes int32 array: host memory, for
    CPU kernels."""
    if values is None or is_torch_tensor(values) or \
            hasattr(values, "__cuda_array_interface__"):
        return values
    if isinstance(values, ctypes.Array) and values._type_ is ctypes.c_int32:
        return values
    try:
        items = [int(v) for v in values]
    except TypeError:
        raise TypeError(f"kv_shard: {name} must be a torch tensor, a device array or a sequence "
                        f"of ints, got {type(values).__name__}") from None
    for item in items:
        if not -2**31 <= item <= _INT32_MAX:
            raise ValueError(f"kv_shard: {name} holds {item}, which does not fit in int32")
    return (ctypes.c_int32 * len(items))(*items)


class KvShard:
    """Which keys of each request a paged call holds (fj_paged_attention_args' kv_shard_*
    fields, since 0.9): key j of request r in the shard (0 <= j < seq_lens[r], its cache and
    block table describing the shard's keys only) has position

        offsets[r] + (j // interleave) * count * interleave + rank * interleave + j % interleave

    in the whole request, which masks and scores see. vLLM's decode context parallelism deals
    tokens to `count` ranks (its world size) in runs of `interleave` (cp_kv_cache_interleave_size)
    with no offsets; a contiguous shard is count 1 with each request's first key position in
    `offsets`. `global_seq_lens[r]` is request r's key count over every shard, which places its
    queries; required with count > 1 or offsets. Both arrays are int32 [num_reqs] in the
    kernel's memory (a torch tensor, a device array; for a CPU kernel also a list or tuple,
    copied here into a ctypes int32 array). KvShard() is the whole request, as kv_shard=None.
    The C API checks the rest (positions past the global length, queries that do not fit)."""

    __slots__ = ("rank", "count", "interleave", "offsets", "global_seq_lens")

    def __init__(self, rank=0, count=1, interleave=1, *, offsets=None, global_seq_lens=None):
        rank, count, interleave = _check_layout(rank, count, interleave)
        if global_seq_lens is None and (count > 1 or offsets is not None):
            given = "given" if offsets is not None else "none"
            raise ValueError(f"kv_shard: global_seq_lens is required with count > 1 or offsets "
                             f"(count {count}, offsets {given}): it places each request's "
                             f"queries")
        for name, value in (("rank", rank), ("count", count), ("interleave", interleave),
                            ("offsets", _shard_array(offsets, "offsets")),
                            ("global_seq_lens", _shard_array(global_seq_lens,
                                                             "global_seq_lens"))):
            object.__setattr__(self, name, value)

    def __setattr__(self, name, value):
        raise AttributeError("KvShard is immutable: make a new one")

    def __repr__(self):
        arrays = "".join(f", {name}=<{type(value).__name__}>" for name, value in
                         (("offsets", self.offsets), ("global_seq_lens", self.global_seq_lens))
                         if value is not None)
        return (f"KvShard(rank={self.rank}, count={self.count}, "
                f"interleave={self.interleave}{arrays})")


def shard_seq_lens(global_seq_lens, rank, count, interleave=1):
    """How many keys rank `rank` of `count` holds of a request of `global_seq_lens` keys dealt
    in runs of `interleave` (KvShard's layout, no offsets), with L, R, N, I for them:
    (L // (N*I)) * I + clamp(L % (N*I) - R*I, 0, I). An int gives an int, a sequence a list."""
    rank, count, interleave = _check_layout(rank, count, interleave)
    cycle = count * interleave

    def held(length):
        return (length // cycle) * interleave + min(max(length % cycle - rank * interleave, 0),
                                                    interleave)

    if isinstance(global_seq_lens, numbers.Integral):
        return held(int(global_seq_lens))
    return [held(int(length)) for length in global_seq_lens]


def shard_positions(global_seq_len, rank, count, interleave=1):
    """The positions, in order, of the keys rank `rank` of `count` holds of a request of
    `global_seq_len` keys dealt in runs of `interleave`: the shard's key j is the request's key
    shard_positions(...)[j], what a rank copies into its cache."""
    rank, count, interleave = _check_layout(rank, count, interleave)
    return [p for p in range(int(global_seq_len)) if (p // interleave) % count == rank]
