"""Decode context parallelism over torch.distributed with flexjit's torch operators
(docs/context_parallel.md).

    torchrun --nproc-per-node 4 examples/context_parallel_torch.py [--device cpu|cuda]
        [--backend auto|gloo|nccl] [--interleave 16] [--window 256] [--dtype bf16|fp16]
    python3 examples/context_parallel_torch.py --spawn 4 [the same options]

vLLM's decode context parallelism (DCP) splits every request's KV cache across the ranks of a
group: the request's token at position p lives on rank (p // I) % world_size, in runs of
I = cp_kv_cache_interleave_size tokens. Every rank, for every layer and step:

  1. runs attention for every query over the keys it holds, with the log-sum-exp (lse) of each
     row: torch.ops.flexjit.paged_attention with a flexjit.KvShard, which tells the kernel where
     those keys sit in the whole request, so masks and scores see true positions;
  2. all-gathers out and lse across the group (torch.distributed.all_gather);
  3. merges the partial results by their lse (torch.ops.flexjit.merge_states_n), which gives
     the attention over every key, the same on every rank.

Here every rank builds the same seeded batch (GQA, decodes and a few multi-token queries, one
request of `interleave` keys that lies wholly on rank 0), keeps its shard of the paged cache,
runs steps 1 to 3 for a causal, a sliding-window and an ALiBi-scored mask, and compares the
merged result with the unsharded call over the whole cache (rank 0 runs it and broadcasts it).
Rank 0 prints a report; the exit status is nonzero on a mismatch.

--device cpu runs flexjit's CPU kernels (arch "cpu") on CPU tensors; --device cuda runs on
GPUs, rank r on GPU r when there are as many GPUs as ranks, else every rank on GPU 0. The
backend "auto" is nccl for CUDA tensors with a GPU per rank, else gloo (gloo all-gathers CUDA
tensors itself, staging them through host memory; nccl needs a GPU of its own per rank). Needs
torch and flexjit (from a checkout: the library in build*/lib, or FLEXJIT_LIBRARY).
"""

import argparse
import os
import pathlib
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

try:
    import flexjit
except ImportError:  # running from a checkout: the module is in tools/python
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tools" / "python"))
    import flexjit

MASKS = pathlib.Path(__file__).resolve().parents[1] / "dsl" / "lib" / "standard.mask"
HEADS, KV_HEADS, HEAD_DIM, PAGE = 8, 2, 128, 16  # GQA: 4 query heads per kv head
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# The merged result against the unsharded call: each rank's output is rounded once to the
# dtype before the merge and the merge's once after, so they agree within 2 ulps of the larger
# of 1 and the value, |merged - unsharded| <= TOLERANCE * (1 + |unsharded|) (a dropped or
# doubled key moves its rows' lse by about 1 / (the keys they see), far above LSE_TOLERANCE).
TOLERANCE = {"bf16": 2.0**-7, "fp16": 2.0**-9}
LSE_TOLERANCE = 1e-4


def batch_requests(interleave):
    """(keys over every rank, query rows) of each request: decodes (1 row) and a few short
    multi-token queries (speculative tokens). The second holds `interleave` keys, one run: all
    on rank 0, so every other rank holds none of it and its rows there see no key."""
    return [(1500, 1), (interleave, 1), (3001, 1), (700, 4), (97, 2)]


def paged_cache(keys, values, positions):
    """(k_cache, v_cache, block_table, seq_lens) holding, for each request r, its keys and
    values at positions[r], in that order (the cache's key j of request r is the request's key
    positions[r][j]); each request's pages follow the previous one's."""
    blocks = [-(-len(held) // PAGE) for held in positions]
    k_cache = torch.zeros(sum(blocks) + 1, PAGE, KV_HEADS, HEAD_DIM, dtype=keys[0].dtype)
    v_cache = torch.zeros_like(k_cache)
    block_table = torch.zeros(len(positions), max(blocks + [1]), dtype=torch.int32)
    first = 0
    for r, held in enumerate(positions):
        block_table[r, :blocks[r]] = torch.arange(first, first + blocks[r], dtype=torch.int32)
        index = torch.tensor(held, dtype=torch.long)
        k_cache.view(-1, KV_HEADS, HEAD_DIM)[first * PAGE:][:len(held)] = keys[r][index]
        v_cache.view(-1, KV_HEADS, HEAD_DIM)[first * PAGE:][:len(held)] = values[r][index]
        first += blocks[r]
    seq_lens = torch.tensor([len(held) for held in positions], dtype=torch.int32)
    return k_cache, v_cache, block_table, seq_lens


def choose_backend(requested, device, local_ranks):
    """The process-group backend for `local_ranks` ranks on this host: nccl for CUDA tensors
    with a GPU per rank (nccl refuses two ranks on one GPU), else gloo. ValueError for a
    combination that cannot run."""
    gpus = torch.cuda.device_count() if device == "cuda" else 0
    if device == "cuda" and gpus == 0:
        raise ValueError("--device cuda: torch sees no CUDA device")
    if requested == "auto":
        return "nccl" if device == "cuda" and gpus >= local_ranks and \
            dist.is_nccl_available() else "gloo"
    if requested == "nccl" and device != "cuda":
        raise ValueError("--backend nccl gathers CUDA tensors only: use --device cuda or gloo")
    if requested == "nccl" and gpus < local_ranks:
        raise ValueError(f"--backend nccl needs a GPU per rank ({gpus} GPUs for {local_ranks} "
                         f"ranks): use --backend gloo, whose ranks share GPU 0")
    return requested


def run(rank, world_size, args):
    """One rank's steps 1 to 3 and the check; returns the exit status (the same on every
    rank)."""
    # This host's ranks (torchrun sets both; spawned ranks are all here).
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    backend = choose_backend(args.backend, args.device, local_ranks)
    shared_gpu = args.device == "cuda" and torch.cuda.device_count() < local_ranks
    if args.device == "cuda":
        device = torch.device("cuda", 0 if shared_gpu else local_rank)
        torch.cuda.set_device(device)
        # Its CUDA context current now: flexjit compiles for, and launches in, the current one.
        torch.zeros(1, device=device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, rank=rank, world_size=world_size,
                            **({"device_id": device} if backend == "nccl" else {}))
    interleave, dtype = args.interleave, DTYPES[args.dtype]

    # The same batch on every rank.
    requests = batch_requests(interleave)
    gen = torch.Generator().manual_seed(args.seed)
    global_seq_lens = [length for length, _ in requests]
    rows = [count for _, count in requests]
    num_tokens = sum(rows)
    q = torch.randn(num_tokens, HEADS, HEAD_DIM, generator=gen).to(dtype)
    keys, values = ([torch.randn(length, KV_HEADS, HEAD_DIM, generator=gen).to(dtype)
                     for length in global_seq_lens] for _ in range(2))
    query_start_loc = torch.tensor([sum(rows[:r]) for r in range(len(rows) + 1)],
                                   dtype=torch.int32, device=device)
    q = q.to(device)
    slopes = torch.tensor([2.0**-(h + 1) for h in range(HEADS)], device=device)
    masks = [("causal", {}, {}), ("sliding", {"window": args.window}, {}),
             ("causal_alibi", {}, {"slopes": slopes})]

    ctx = flexjit.Context()
    program = ctx.program_from_file(MASKS)
    ops = flexjit.torch_ops
    for name, _, _ in masks:
        ops.register(f"cp.{name}", ctx.kernel(program, name, head_dim=HEAD_DIM,
                                              dtype=args.dtype, page_size=PAGE,
                                              arch="cpu" if args.device == "cpu" else None))

    # This rank's shard of every request: the tokens dealt to it, in order.
    positions = [flexjit.shard_positions(length, rank, world_size, interleave)
                 for length in global_seq_lens]
    mine = [t.to(device) for t in paged_cache(keys, values, positions)]
    shard = flexjit.KvShard(rank=rank, count=world_size, interleave=interleave,
                            global_seq_lens=torch.tensor(global_seq_lens, dtype=torch.int32,
                                                         device=device))
    whole = [t.to(device) for t in paged_cache(keys, values,
                                                [range(n) for n in global_seq_lens])] \
        if rank == 0 else None

    results = []
    for name, params, arrays in masks:
        options = dict(query_start_loc=query_start_loc, max_query_len=max(rows), params=params,
                       arrays=arrays)
        # 1. Attention over this rank's keys, with the lse of each row.
        lse = torch.empty(num_tokens, HEADS, device=device)
        out = ops.paged_attention(f"cp.{name}", q, *mine[:3], seq_lens=mine[3], lse=lse,
                                  kv_shard=shard, **options)
        # 2. All-gather: rank r's out and lse become state r of [world_size, tokens, ...].
        states_out = out.new_empty((world_size,) + tuple(out.shape))
        states_lse = lse.new_empty((world_size,) + tuple(lse.shape))
        dist.all_gather(list(states_out.unbind(0)), out)
        dist.all_gather(list(states_lse.unbind(0)), lse)
        # 3. Merge by lse, in rank order (the same result on every rank).
        merged_lse = torch.empty_like(lse)
        merged = ops.merge_states_n(states_out, states_lse, lse=merged_lse)

        # The check: the unsharded call over the whole cache, on rank 0, sent to every rank.
        want_lse = torch.empty_like(lse)
        if rank == 0:
            want = ops.paged_attention(f"cp.{name}", q, *whole[:3], seq_lens=whole[3],
                                       lse=want_lse, **options)
        else:
            want = torch.empty_like(out)
        dist.broadcast(want, src=0)
        dist.broadcast(want_lse, src=0)
        difference = (merged.float() - want.float()).abs()
        excess = difference - TOLERANCE[args.dtype] * (1 + want.float().abs())
        errors = torch.tensor([difference.max().item(), excess.max().item(),
                               (merged_lse - want_lse).abs().max().item(),
                               torch.isneginf(states_lse).sum().item()],
                              dtype=torch.float64, device=device)
        dist.all_reduce(errors, op=dist.ReduceOp.MAX)  # the worst rank's
        out_error, out_excess, lse_error, empty_rows = errors.tolist()
        ok = out_excess <= 0 and \
            lse_error <= LSE_TOLERANCE * max(1.0, want_lse.abs().max().item())
        results.append((name, params, out_error, lse_error, int(empty_rows), ok))

    all_ok = all(result[-1] for result in results)
    if rank == 0:
        where = "CPU" if device.type == "cpu" else \
            f"GPU {device.index}" + (" (shared by every rank)" if shared_gpu else "")
        version = flexjit.runtime_version()
        print(f"flexjit {version // 10000}.{version // 100 % 100}.{version % 100}, torch "
              f"{torch.__version__}: {world_size} ranks over {backend} on {where}; interleave "
              f"{interleave}, {args.dtype}, {HEADS} heads over {KV_HEADS} kv heads of "
              f"{HEAD_DIM}, page {PAGE}")
        for r, (length, count) in enumerate(requests):
            held = [flexjit.shard_seq_lens(length, other, world_size, interleave)
                    for other in range(world_size)]
            print(f"  request {r}: {length} keys, {count} query rows; keys per rank {held}")
        for name, params, out_error, lse_error, empty_rows, ok in results:
            label = name + "".join(f" {key} {value}" for key, value in params.items())
            print(f"  {label}: max |merged - unsharded| out {out_error:.2e} (tolerance "
                  f"{TOLERANCE[args.dtype]:.2e} x (1 + |unsharded|)), lse {lse_error:.2e}; "
                  f"{empty_rows} gathered rows saw no key (lse -inf, merged away): "
                  f"{'OK' if ok else 'MISMATCH'}")
        print("OK" if all_ok else "MISMATCH", flush=True)
    # Every rank leaves after rank 0 has printed: a launcher that stops the group at the first
    # nonzero exit cannot cut the report short.
    dist.barrier()
    dist.destroy_process_group()
    return 0 if all_ok else 1


def spawned(rank, world_size, args):
    status = run(rank, world_size, args)
    if status:
        sys.exit(status)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spawn", type=int, metavar="N",
                        help="start N ranks here (torch.multiprocessing) instead of under torchrun")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto")
    parser.add_argument("--interleave", type=int, default=16,
                        help="cp_kv_cache_interleave_size: tokens per run dealt to one rank")
    parser.add_argument("--window", type=int, default=256, help="the sliding mask's window")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--seed", type=int, default=36)
    args = parser.parse_args()
    if args.interleave < 1:
        parser.error("--interleave must be at least 1")

    if args.spawn is None:  # under torchrun (or any launcher that sets the env:// variables)
        return run(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
    if args.spawn < 1:
        parser.error("--spawn must be at least 1")
    try:
        choose_backend(args.backend, args.device, args.spawn)
    except ValueError as error:
        parser.error(str(error))
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    try:
        mp.spawn(spawned, args=(args.spawn, args), nprocs=args.spawn)
    except mp.ProcessExitedException as error:
        return error.exit_code or 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
