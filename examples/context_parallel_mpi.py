"""Decode context parallelism over MPI ranks with flexjit's CPU kernels (docs/context_parallel.md).

    mpirun -n 4 python3 examples/context_parallel_mpi.py [--interleave 16] [--window 256]

vLLM's decode context parallelism (DCP) splits every request's KV cache across the ranks of a
DCP group: the request's token at position p lives on dcp rank (p // I) % world_size, in runs
of I = cp_kv_cache_interleave_size tokens. Each rank then, for every layer and step:

  1. runs attention for every query over the keys it holds, with the log-sum-exp (lse) of each
     row: flexjit.KvShard tells the kernel where those keys sit in the whole request, so the
     mask (and any score) sees true positions;
  2. all-gathers out and lse across the group;
  3. merges the partial results by their lse (Context.merge_states_n), which gives exactly the
     attention over every key.

Here every rank builds the same seeded batch, keeps its shard of the KV cache, runs steps 1 to
3, and checks the merged result against the attention over the whole cache computed locally.
Rank 0 prints a report; the exit status is nonzero on a mismatch. Needs mpi4py and flexjit
(from a checkout: the library in build*/lib, or FLEXJIT_LIBRARY); no numpy or torch: host
memory is reached through __cuda_array_interface__ objects naming no device, which flexjit's
CPU kernels read (torch CPU tensors work too, in bfloat16 as well).
"""

import argparse
import ctypes
import math
import pathlib
import random
import struct
import sys

from mpi4py import MPI

try:
    import flexjit
except ImportError:  # running from a checkout: the module is in tools/python
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tools" / "python"))
    import flexjit

MASKS = pathlib.Path(__file__).resolve().parents[1] / "dsl" / "lib" / "standard.mask"
HEADS, KV_HEADS, HEAD_DIM, PAGE = 8, 2, 64, 16  # GQA: 4 query heads per kv head
TOLERANCE = 2.0**-9  # 2 fp16 ulps at 1: the partial outputs are rounded once before the merge


class HostArray:
    """A contiguous host array flexjit's CPU kernels can read (16-byte aligned, zeroed)."""

    TYPES = {"fp16": ("<f2", "e", 2), "fp32": ("<f4", "f", 4), "int32": ("<i4", "i", 4)}

    def __init__(self, shape, dtype, values=None):
        self.shape = tuple(shape)
        self.typestr, self.code, self.itemsize = self.TYPES[dtype]
        self.count = math.prod(self.shape)
        self.nbytes = self.count * self.itemsize
        self._memory = ctypes.create_string_buffer(self.nbytes + 16)
        self.ptr = (ctypes.addressof(self._memory) + 15) // 16 * 16
        if values is not None:
            self.write(values)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.typestr, "data": (self.ptr, False),
                "version": 3}

    def write(self, values, offset=0):
        data = struct.pack(f"<{len(values)}{self.code}", *values)
        ctypes.memmove(self.ptr + offset * self.itemsize, data, len(data))

    def read(self):
        return struct.unpack(f"<{self.count}{self.code}", ctypes.string_at(self.ptr, self.nbytes))

    def buffer(self):
        """The bytes, for MPI."""
        return (ctypes.c_uint8 * self.nbytes).from_address(self.ptr)


def make_batch(seed, num_requests):
    """The same requests on every rank: a few thousand keys each, 1 to 4 new query rows (a
    decode, or a few speculative tokens), random fp16 queries, keys and values."""
    rng = random.Random(seed)
    requests = [(rng.randint(1000, 4000), rng.randint(1, 4)) for _ in range(num_requests)]
    row = KV_HEADS * HEAD_DIM

    def token():
        return struct.pack(f"<{row}e", *(rng.uniform(-1, 1) for _ in range(row)))

    keys = [[token() for _ in range(seq_len)] for seq_len, _ in requests]
    values = [[token() for _ in range(seq_len)] for seq_len, _ in requests]
    num_tokens = sum(rows for _, rows in requests)
    q = HostArray((num_tokens, HEADS, HEAD_DIM), "fp16",
                  [rng.uniform(-2, 2) for _ in range(num_tokens * HEADS * HEAD_DIM)])
    return requests, keys, values, q


def paged_cache(keys, values, positions):
    """A paged K/V cache holding, for each request r, its keys and values at positions[r] (the
    cache's key j of request r is the request's key positions[r][j]), with its block table."""
    blocks = [-(-len(held) // PAGE) for held in positions]
    k_cache = HostArray((sum(blocks) + 1, PAGE, KV_HEADS, HEAD_DIM), "fp16")
    v_cache = HostArray(k_cache.shape, "fp16")
    block_table = HostArray((len(positions), max(blocks + [1])), "int32")
    row_bytes = KV_HEADS * HEAD_DIM * 2
    first_block = 0
    for r, held in enumerate(positions):
        block_table.write(list(range(first_block, first_block + blocks[r])),
                          r * block_table.shape[1])
        for j, p in enumerate(held):
            slot = (first_block + j // PAGE) * PAGE + j % PAGE
            ctypes.memmove(k_cache.ptr + slot * row_bytes, keys[r][p], row_bytes)
            ctypes.memmove(v_cache.ptr + slot * row_bytes, values[r][p], row_bytes)
        first_block += blocks[r]
    seq_lens = HostArray((len(positions),), "int32", [len(held) for held in positions])
    return k_cache, v_cache, block_table, seq_lens


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interleave", type=int, default=16,
                        help="cp_kv_cache_interleave_size: tokens per run dealt to one rank")
    parser.add_argument("--window", type=int, default=0,
                        help="sliding-window mask of this many keys (0: causal)")
    parser.add_argument("--requests", type=int, default=3)
    parser.add_argument("--seed", type=int, default=36)
    args = parser.parse_args()

    comm = MPI.COMM_WORLD  # the DCP group
    dcp_rank, dcp_world_size = comm.Get_rank(), comm.Get_size()
    interleave = args.interleave

    requests, keys, values, q = make_batch(args.seed, args.requests)
    num_tokens = q.shape[0]
    global_seq_lens = [seq_len for seq_len, _ in requests]
    query_start_loc = HostArray((len(requests) + 1,), "int32",
                                [sum(rows for _, rows in requests[:r])
                                 for r in range(len(requests) + 1)])
    max_query_len = max(rows for _, rows in requests)

    ctx = flexjit.Context()
    program = ctx.program_from_file(MASKS)
    kernel = ctx.kernel(program, "sliding" if args.window else "causal", head_dim=HEAD_DIM,
                        dtype="fp16", page_size=PAGE, arch="cpu")
    params = {"window": args.window} if args.window else None

    # 1. This rank's shard of every request: the tokens dealt to it, in order.
    positions = [flexjit.shard_positions(seq_len, dcp_rank, dcp_world_size, interleave)
                 for seq_len in global_seq_lens]
    k_cache, v_cache, block_table, seq_lens = paged_cache(keys, values, positions)
    shard = flexjit.KvShard(rank=dcp_rank, count=dcp_world_size, interleave=interleave,
                            global_seq_lens=global_seq_lens)
    out = HostArray((num_tokens, HEADS, HEAD_DIM), "fp16")
    lse = HostArray((num_tokens, HEADS), "fp32")
    kernel(q, k_cache, v_cache, block_table, query_start_loc, seq_lens, out=out, lse=lse,
           max_query_len=max_query_len, params=params, kv_shard=shard)

    # 2. All-gather: rank r's out and lse become state r of [world_size, tokens, heads, ...].
    states_out = HostArray((dcp_world_size,) + out.shape, "fp16")
    states_lse = HostArray((dcp_world_size,) + lse.shape, "fp32")
    comm.Allgather([out.buffer(), MPI.BYTE], [states_out.buffer(), MPI.BYTE])
    comm.Allgather([lse.buffer(), MPI.BYTE], [states_lse.buffer(), MPI.BYTE])

    # 3. Merge by lse, in rank order (the same result on every rank).
    merged = HostArray(out.shape, "fp16")
    merged_lse = HostArray(lse.shape, "fp32")
    ctx.merge_states_n(states_out, states_lse, out=merged, lse=merged_lse, device="cpu")

    # The check: attention over the whole cache, on this rank alone.
    whole = paged_cache(keys, values, [range(seq_len) for seq_len in global_seq_lens])
    want = HostArray(out.shape, "fp16")
    want_lse = HostArray(lse.shape, "fp32")
    kernel(q, *whole[:3], query_start_loc, whole[3], out=want, lse=want_lse,
           max_query_len=max_query_len, params=params)
    out_error = max(abs(a - b) for a, b in zip(merged.read(), want.read()))
    lse_error = max(abs(a - b) for a, b in zip(merged_lse.read(), want_lse.read()))
    ok = out_error <= TOLERANCE and lse_error <= 1e-4 * max(1.0, *map(abs, want_lse.read()))
    all_ok = comm.allreduce(ok, op=MPI.LAND)
    errors = comm.gather((out_error, lse_error), root=0)

    if dcp_rank == 0:
        print(f"flexjit {flexjit.runtime_version()} {kernel.name}: dcp world size "
              f"{dcp_world_size}, cp_kv_cache_interleave_size {interleave}")
        for r, (seq_len, rows) in enumerate(requests):
            held = [flexjit.shard_seq_lens(seq_len, rank, dcp_world_size, interleave)
                    for rank in range(dcp_world_size)]
            print(f"  request {r}: {seq_len} keys, {rows} query rows; keys per rank {held}")
        worst_out = max(e[0] for e in errors)
        worst_lse = max(e[1] for e in errors)
        print(f"  merged vs unsharded, worst over ranks: out {worst_out:.2e} (tolerance "
              f"{TOLERANCE:.2e}), lse {worst_lse:.2e}: {'OK' if all_ok else 'MISMATCH'}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
