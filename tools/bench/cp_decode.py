#!/usr/bin/env python3
"""Decode throughput of context parallelism against one GPU (issue 36).

    PYTHONPATH=tools/python python3 tools/bench/cp_decode.py [--requests 1,2,4,8]
        [--keys 128k,256k,512k,1M] [--ranks N[,N]] [--interleave 16] [--json PATH] [--quick]

Per shape (requests x keys of each; GQA 32/8 heads of 128, bf16, page 16, the causal mask, one
query token per request: a decode step), with the same seeded keys, values and queries for every
implementation:

- "one GPU" (a peer of the results page): flexjit's unsharded decode over the whole cache on GPU
  0, a plan (split-KV decode) updated once and run, timed as bench.py times decode
  (bench.gpu_time_ms: the median of per-run CUDA events, the host's launches hidden).
- "flexjit N ranks", for each N of --ranks (default: every GPU; N >= 2 GPUs): N processes
  (torch.multiprocessing spawn), rank r on GPU r, each holding its shard of every request as
  vLLM's decode context parallelism deals it (runs of --interleave keys per rank). A step on
  every rank: its sharded decode (a plan run with a flexjit.KvShard), one NCCL
  all_gather_into_tensor of its out and lse (packed into one buffer: one collective, whose
  latency is not small beside a short decode), and torch.ops.flexjit.merge_states_n. Every rank
  runs the same warm-up and timed steps, each timed by CUDA events as gpu_time_ms times its
  runs; the row has the slowest rank's median (ms) and its sharded decode alone (attn_ms).
- With one GPU there are no N-rank rows (they read n/a) and, when --sequential S is not 0
  (default 2), "S shards one after the other on one GPU": each shard's decode then the merge,
  on GPU 0, timed alike: what sharding costs, not a speedup.

Rows (--json; `results_page.py ingest` files them as the family context_parallel): workload
cp_decode_b<requests>_<keys>, impl, ms (per step), tokens_s (requests / ms: one query token
each), gbps (bytes of the whole K/V cache / ms, over all ranks), speedup (the one-GPU ms / this
row's), attn_ms, ranks, diff_one_gpu (max |out - the one-GPU out| / max |one-GPU out|; above
results_page.WRONG_OUTPUT the row is a mismatch), on the one-GPU row diff_flexjit (the same
against the first N-rank row's output, as the page's delta), and note. A shape that does not
fit a GPU's free memory (times 0.9, less 1 GiB) is skipped on that path with a note ("n/a: ");
a path that fails gets a note "error: " and the other shapes and paths still run. Exit status:
1 after a mismatch or an error, 2 without a GPU (nothing to time), else 0.

--device cpu runs the same steps on flexjit's CPU kernels over gloo (launches, no plan; host
clock), at small shapes by default: a check of this harness without a GPU, not a benchmark.
"""

import argparse
import json
import os
import pathlib
import socket
import statistics
import sys
import tempfile
import time
import traceback

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "tools" / "python"))

import bench  # noqa: E402  (imports torch and flexjit; timing and run metadata)
import results_page  # noqa: E402
import workloads as W  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import flexjit  # noqa: E402

HEADS, KV_HEADS, HEAD_DIM, PAGE = 32, 8, 128, 16
DTYPE = torch.bfloat16
MASK = "causal"
# Keys are drawn per request in chunks of this many positions, each from a generator seeded by
# (seed, request, chunk): every rank draws the chunks and keeps the positions it holds, so the
# shards together hold exactly the one-GPU cache.
CHUNK = 1 << 16
GIB = 1 << 30
DEFAULTS = {"cuda": ("1,2,4,8", "128k,256k,512k,1M"), "cpu": ("1,3", "2k,5000")}


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def count_list(text, name):
    """[int] of a comma-separated list; k and M suffixes are 2**10 and 2**20."""
    values = []
    for item in text.split(","):
        item = item.strip()
        scale = {"k": 1 << 10, "M": 1 << 20}.get(item[-1:], 1)
        try:
            value = int(item[:-1] if scale > 1 else item) * scale
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}: {item!r} is not a count") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{name}: {item!r} is below 1")
        values.append(value)
    return values


def keys_label(keys):
    if keys % (1 << 20) == 0:
        return f"{keys >> 20}M"
    return f"{keys >> 10}k" if keys % (1 << 10) == 0 else str(keys)


def workload_name(num_requests, keys):
    return f"cp_decode_b{num_requests}_{keys_label(keys)}"


def cache_bytes(num_requests, keys):
    """Bytes of the K/V cache of every key (a rank's share is about this / ranks)."""
    return 2 * num_requests * keys * KV_HEADS * HEAD_DIM * DTYPE.itemsize


def fits(device, needed):
    """Whether `needed` bytes (and the chunks the keys are drawn in) fit the device's free
    memory, with room for the rest."""
    if device.type != "cuda":
        return True
    free, _ = torch.cuda.mem_get_info(device)
    return needed + 4 * CHUNK * KV_HEADS * HEAD_DIM * DTYPE.itemsize <= 0.9 * free - GIB


class Shard:
    """One rank's decode batch: the queries of every request, and the paged cache, block table
    and lengths of the keys rank `rank` of `count` holds (interleaved in runs of `interleave`;
    count 1: every key), drawn as CHUNK says."""

    def __init__(self, num_requests, keys, rank, count, interleave, seed, device):
        self.num_requests, self.keys = num_requests, keys
        held = flexjit.shard_seq_lens([keys] * num_requests, rank, count, interleave)
        rows, num_blocks = W.block_table(held, PAGE, seed=seed + rank)
        # At least one column: a rank holding no key of any request still passes a table.
        self.block_table = torch.tensor([r or [0] for r in rows], dtype=torch.int32,
                                        device=device)
        # vLLM's joint [block, 2, slot, kv head, D] cache. Zeroed: the slots after a request's
        # last key are never weighted, but garbage there could hold NaN.
        self.cache = torch.zeros(max(num_blocks, 1), 2, PAGE, KV_HEADS, HEAD_DIM, dtype=DTYPE,
                                 device=device)
        positions = torch.arange(keys, device=device)
        mine = positions[(positions // interleave) % count == rank]
        gen = torch.Generator(device=device)
        for r in range(num_requests):
            table = self.block_table[r].long()
            for first in range(0, keys, CHUNK):
                size = min(CHUNK, keys - first)
                gen.manual_seed((seed * 1_000_003 + r) * 65_537 + first // CHUNK)
                drawn = [torch.randn((size, KV_HEADS, HEAD_DIM), generator=gen, dtype=DTYPE,
                                     device=device) for _ in range(2)]
                start, end = torch.searchsorted(
                    mine, torch.tensor([first, first + size], device=device)).tolist()
                j = torch.arange(start, end, device=device)  # the shard's keys of the chunk
                for which in range(2):
                    self.cache[table[j // PAGE], which, j % PAGE] = drawn[which][mine[j] - first]
        gen.manual_seed(seed)
        self.q = torch.randn((num_requests, HEADS, HEAD_DIM), generator=gen, dtype=DTYPE,
                             device=device)
        self.held = held
        self.seq_lens = torch.tensor(held, dtype=torch.int32, device=device)
        self.query_start_loc = torch.arange(num_requests + 1, dtype=torch.int32, device=device)
        self.kv_shard = None if count == 1 else flexjit.KvShard(
            rank, count, interleave,
            global_seq_lens=torch.tensor([keys] * num_requests, dtype=torch.int32,
                                         device=device))

    def decode(self, kernel, out, lse=None):
        """fn() running this shard's decode into out (and lse): on a GPU a plan's run, which
        takes the split-KV decode path (the plan is updated here, once: host work per batch);
        on the CPU the prepared launch. The plan stays alive with fn."""
        launch = kernel.prepare(self.q, self.cache[:, 0], self.cache[:, 1], self.block_table,
                                self.query_start_loc, self.seq_lens, out=out, lse=lse,
                                max_query_len=1, kv_shard=self.kv_shard)
        if self.q.device.type != "cuda":
            return launch.launch
        plan = kernel.plan(max_num_reqs=self.num_requests, max_num_tokens=self.num_requests,
                           max_query_len=1, num_heads=HEADS, num_kv_heads=KV_HEADS)
        plan.update(list(range(self.num_requests + 1)), self.held, self.block_table.shape[1])

        def run():
            plan.run(launch)
        return run


def make_kernel(device):
    """The causal kernel for `device`: on a GPU, compiled for and loaded in its CUDA context,
    which torch makes current here."""
    if device.type == "cuda":
        torch.zeros(1, device=device)
    ctx = flexjit.Context()
    program = ctx.program_from_file(bench.REPO / "dsl" / "lib" / "standard.mask")
    return ctx.kernel(program, MASK, head_dim=HEAD_DIM, dtype="bf16", page_size=PAGE,
                      arch="cpu" if device.type == "cpu" else None)


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def step_time_ms(fn, device, quick, group=False):
    """(median ms of fn(), runs). On a GPU alone: bench.gpu_time_ms. With the group's
    collectives in fn, as gpu_time_ms (its warm-up and run counts, each run timed by its own
    CUDA events behind a GPU sleep while the host enqueues them) but with counts every rank
    agrees on, from the slowest rank's estimate: ranks that ran different counts would wait
    forever in each other's collectives. On the CPU, the host clock around each run."""
    if device.type == "cuda" and not group:
        return bench.gpu_time_ms(lambda i: fn(), 1, quick)
    fn()
    synchronize(device)
    started = time.perf_counter()
    for _ in range(3):
        fn()
    synchronize(device)
    estimate = max((time.perf_counter() - started) * 1e3 / 3, 1e-3)
    if group:
        agreed = torch.tensor([estimate], dtype=torch.float64, device=device)
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
        estimate = agreed.item()
    warmup, runs = bench.run_counts(estimate, quick)
    for _ in range(warmup):
        fn()
    synchronize(device)
    if group:
        dist.barrier()
    if device.type != "cuda":
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            fn()
            times.append((time.perf_counter() - started) * 1e3)
        return statistics.median(times), runs
    return bench.event_times_ms(lambda i: fn(), runs, estimate, device), runs


def error_note(error):
    """A row's note for a failure: its message's last line (a spawned rank's traceback ends
    with its exception)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"error: {type(error).__name__}: {lines[-1][:200] if lines else ''}"


def relative_difference(out, reference):
    scale = reference.float().abs().max().item()
    difference = (out.float() - reference.float()).abs().max().item()
    return difference / scale if scale else difference


def row(num_requests, keys, impl, ranks, layout, ms=None, **fields):
    entry = {"workload": workload_name(num_requests, keys), "impl": impl, "layout": layout,
             "ms": ms, "ranks": ranks, "note": ""}
    if ms:
        entry.update(tokens_s=num_requests / ms * 1e3,
                     gbps=cache_bytes(num_requests, keys) / ms / 1e6)
    entry.update(fields)
    return entry


# --- one GPU (this process) -----------------------------------------------------------------

def one_gpu_rows(shapes, args, device, kernel, sequential):
    """The one-GPU rows of every shape, the rows of `sequential` shards one after the other (0:
    none), and {workload: the one-GPU output on the host} (None where it did not fit)."""
    rows, outputs = [], {}
    unit = "GPU" if device.type == "cuda" else "rank"
    for num_requests, keys in shapes:
        name = workload_name(num_requests, keys)
        layout = f"paged {PAGE}, joint KV, shuffled blocks, unsharded" + \
            (", a plan (split-KV decode)" if device.type == "cuda" else "")
        if not fits(device, cache_bytes(num_requests, keys)):
            rows.append(row(num_requests, keys, f"one {unit}", 1, layout,
                            note=f"n/a: the cache ({cache_bytes(num_requests, keys) / GIB:.1f} "
                                 f"GiB) does not fit one {unit}"))
            outputs[name] = None
            log(f"{name}: one {unit}: does not fit")
            continue
        ms, runs, outputs[name] = one_gpu_decode(num_requests, keys, args, device, kernel)
        rows.append(row(num_requests, keys, f"one {unit}", 1, layout, ms, runs=runs))
        log(f"{name}: one {unit}: {ms:.3f} ms")
        if device.type == "cuda":
            torch.cuda.empty_cache()
        if sequential:
            try:
                rows.append(sequential_row(num_requests, keys, sequential, args, device,
                                           kernel, outputs[name]))
            except Exception as error:  # keep going: the other shapes' rows still count
                traceback.print_exc()
                rows.append(row(num_requests, keys, f"{sequential} shards one after the other "
                                f"on one {unit}", 1, "", note=error_note(error)))
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return rows, outputs


def one_gpu_decode(num_requests, keys, args, device, kernel):
    """(median ms, runs, the output on the host) of the unsharded decode of the shape."""
    whole = Shard(num_requests, keys, 0, 1, args.interleave, args.seed, device)
    out = torch.empty_like(whole.q)
    ms, runs = step_time_ms(whole.decode(kernel, out), device, args.quick)
    return ms, runs, out.cpu()


def sequential_row(num_requests, keys, count, args, device, kernel, reference):
    """`count` shards of the shape decoded one after the other on this device, then merged (no
    gather: each writes its row of the states)."""
    unit = "GPU" if device.type == "cuda" else "rank"
    impl = f"{count} shards one after the other on one {unit}"
    layout = (f"interleave {args.interleave}, the shards' decodes in turn, merge_states_n, no "
              f"gather: the cost of sharding, not a speedup")
    shards = [Shard(num_requests, keys, rank, count, args.interleave, args.seed, device)
              for rank in range(count)]
    states_out = torch.empty((count,) + tuple(shards[0].q.shape), dtype=DTYPE, device=device)
    states_lse = torch.empty(states_out.shape[:3], dtype=torch.float32, device=device)
    decodes = [shard.decode(kernel, states_out[s], states_lse[s])
               for s, shard in enumerate(shards)]
    merged = torch.empty_like(shards[0].q)

    def step():
        for decode in decodes:
            decode()
        flexjit.torch_ops.merge_states_n(states_out, states_lse, out=merged)

    ms, runs = step_time_ms(step, device, args.quick)
    step()
    synchronize(device)
    diff = relative_difference(merged.cpu(), reference)
    log(f"{workload_name(num_requests, keys)}: {impl}: {ms:.3f} ms (diff {diff:.1e})")
    return row(num_requests, keys, impl, 1, layout, ms, runs=runs, diff_one_gpu=diff)


# --- N ranks (spawned processes) ------------------------------------------------------------

def rank_main(rank, count, shapes, args, references, rows_path):
    """Rank `rank` of `count`: every shape's sharded step, timed; rank 0 writes the rows to
    rows_path (JSON) after each shape, so that a failure keeps the shapes before it."""
    if args.device == "cuda":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", rank=rank, world_size=count, device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", rank=rank, world_size=count)
    kernel = make_kernel(device)
    rows = []
    for num_requests, keys in shapes:
        rows.append(sharded_row(num_requests, keys, rank, count, args, device, kernel,
                                references.get(workload_name(num_requests, keys))))
        if device.type == "cuda":
            torch.cuda.empty_cache()
        if rank == 0:
            pathlib.Path(rows_path).write_text(json.dumps(rows))
    dist.barrier()
    dist.destroy_process_group()


def sharded_row(num_requests, keys, rank, count, args, device, kernel, reference):
    """The row of one shape's sharded step over the group (the same on every rank but for the
    output's difference from `reference`, the one-GPU output, which rank 0's row has)."""
    unit = "GPU" if device.type == "cuda" else "rank"
    impl = f"flexjit {count} ranks"
    layout = (f"interleave {args.interleave}, {'NCCL' if device.type == 'cuda' else 'gloo'} "
              f"all_gather of out+lse, merge_states_n")
    share = -(-cache_bytes(num_requests, keys) // count)
    fit = torch.tensor([int(fits(device, share))], device=device)
    dist.all_reduce(fit, op=dist.ReduceOp.MIN)
    if not fit.item():
        return row(num_requests, keys, impl, count, layout,
                   note=f"n/a: a shard ({share / GIB:.1f} GiB) does not fit a {unit}")
    shard = Shard(num_requests, keys, rank, count, args.interleave, args.seed, device)
    # out and lse in one buffer, so that one collective gathers both; the states are strided
    # views of the gathered buffer (a state's out 16-byte aligned, as the merge wants: out_bytes
    # and a state's bytes are multiples of 16).
    out_bytes = shard.q.numel() * DTYPE.itemsize
    lse_bytes = num_requests * HEADS * 4
    packed = torch.empty(out_bytes + lse_bytes, dtype=torch.uint8, device=device)
    out = packed[:out_bytes].view(DTYPE).view(shard.q.shape)
    lse = packed[out_bytes:].view(torch.float32).view(num_requests, HEADS)
    gathered = torch.empty(count, packed.numel(), dtype=torch.uint8, device=device)
    states_out = gathered[:, :out_bytes].view(DTYPE).view((count,) + tuple(shard.q.shape))
    states_lse = gathered[:, out_bytes:].view(torch.float32).view(count, num_requests, HEADS)
    merged = torch.empty_like(shard.q)
    decode = shard.decode(kernel, out, lse)

    def step():
        decode()
        dist.all_gather_into_tensor(gathered.view(-1), packed)
        flexjit.torch_ops.merge_states_n(states_out, states_lse, out=merged)

    ms, runs = step_time_ms(step, device, args.quick, group=True)
    attn_ms, _ = step_time_ms(decode, device, args.quick, group=True)
    slowest = torch.tensor([ms, attn_ms], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    ms, attn_ms = slowest.tolist()
    step()
    synchronize(device)
    fields = dict(runs=runs, attn_ms=attn_ms)
    if rank == 0 and reference is not None:
        fields.update(diff_one_gpu=relative_difference(merged.cpu(), reference),
                      diff_of_one_gpu=relative_difference(reference, merged.cpu()))
    if rank == 0:
        log(f"{workload_name(num_requests, keys)}: {impl}: {ms:.3f} ms (sharded decode "
            f"{attn_ms:.3f} ms)")
    return row(num_requests, keys, impl, count, layout, ms, **fields)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def ranks_rows(count, shapes, args, references):
    """The rows of `count` spawned ranks: when a rank fails (spawn stops the others), the
    shapes they did not finish get a row saying why."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    failure = "error: rank 0 wrote no row of it"
    with tempfile.TemporaryDirectory() as tmp:
        rows_path = pathlib.Path(tmp) / "rows.json"
        try:
            mp.spawn(rank_main, args=(count, shapes, args, references, str(rows_path)),
                     nprocs=count)
        except (mp.ProcessRaisedException, mp.ProcessExitedException) as error:
            print(error, file=sys.stderr)  # the failed rank's traceback
            failure = error_note(error)
            log(f"{count} ranks: {failure}")
        rows = json.loads(rows_path.read_text()) if rows_path.exists() else []
    done = {r["workload"] for r in rows}
    return rows + [row(n, k, f"flexjit {count} ranks", count, "", note=failure)
                   for n, k in shapes if workload_name(n, k) not in done]


# --- main ---------------------------------------------------------------------------------------

def run_meta(argv, device, **extra):
    """bench.run_meta's object; on the CPU, the host's name for the device."""
    if device.type == "cuda":
        return bench.run_meta(argv, **extra)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "device": f"{results_page.cpu_name()} (flexjit's CPU kernels)",
            "commit": results_page.git_commit(), "torch": torch.__version__, "cuda": None,
            "command": " ".join([pathlib.Path(sys.argv[0]).name] +
                                list(argv if argv is not None else sys.argv[1:])),
            "flexjit_library": flexjit.library_path()}
    meta.update(extra)
    return meta


def add_comparisons(rows):
    """speedup on every timed row (the one-GPU ms / the row's), and on the one-GPU row
    diff_flexjit (its output against the first N-rank row's, the page's delta)."""
    for name in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == name]
        one = next((r for r in mine if r["impl"].startswith("one ")), None)
        if one is None or not one["ms"]:
            continue
        for r in mine:
            if r["ms"]:
                r["speedup"] = one["ms"] / r["ms"]
        first = next((r for r in mine if r["ranks"] > 1 and "diff_of_one_gpu" in r), None)
        if first is not None:
            one["diff_flexjit"] = first["diff_of_one_gpu"]
        for r in mine:
            r.pop("diff_of_one_gpu", None)


def report(rows):
    """The rows as a table (blank where a row has no figure)."""
    columns = [("ms", "ms", 9, ".3f"), ("attn_ms", "attn ms", 9, ".3f"),
               ("tokens_s", "tokens/s", 10, ".0f"), ("speedup", "speedup", 8, ".2f"),
               ("diff_one_gpu", "diff", 8, ".1e")]
    lines = [f"{'workload':<22} {'impl':<40} " +
             " ".join(f"{title:>{width}}" for _, title, width, _ in columns)]
    for r in rows:
        cells = [f"{r[key]:{width}{digits}}" if r.get(key) is not None else " " * width
                 for key, _, width, digits in columns]
        lines.append(f"{r['workload']:<22} {r['impl']:<40} {' '.join(cells)}" +
                     (f"  {r['note']}" if r.get("note") else ""))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cpu: flexjit's CPU kernels over gloo, a check of the harness")
    parser.add_argument("--requests", help="comma-separated request counts (default: "
                        f"{DEFAULTS['cuda'][0]}; on the CPU {DEFAULTS['cpu'][0]})")
    parser.add_argument("--keys", help="comma-separated keys per request, k = 1024, M = 2**20 "
                        f"(default: {DEFAULTS['cuda'][1]}; on the CPU {DEFAULTS['cpu'][1]})")
    parser.add_argument("--ranks", help="comma-separated rank counts (default: every GPU, "
                        "when there are 2 or more; on the CPU 2); 1 (alone): the one-GPU "
                        "paths only, as with one GPU")
    parser.add_argument("--interleave", type=int, default=16,
                        help="cp_kv_cache_interleave_size: keys per run dealt to one rank")
    parser.add_argument("--sequential", type=int, default=2, metavar="S",
                        help="with one GPU, also time S shards one after the other on it "
                             "(0: not)")
    parser.add_argument("--seed", type=int, default=36)
    parser.add_argument("--quick", action="store_true", help="fewer timed runs")
    parser.add_argument("--json", metavar="PATH", help="write the rows as JSON")
    args = parser.parse_args(argv)
    device = torch.device(args.device, 0) if args.device == "cuda" else torch.device("cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        print("cp_decode.py needs a CUDA GPU (or --device cpu, a check of the harness)",
              file=sys.stderr)
        return 2
    try:
        requests = count_list(args.requests or DEFAULTS[device.type][0], "--requests")
        keys = count_list(args.keys or DEFAULTS[device.type][1], "--keys")
        gpus = torch.cuda.device_count() if device.type == "cuda" else None
        if args.ranks:
            ranks = count_list(args.ranks, "--ranks")
        else:
            ranks = [2] if gpus is None else ([gpus] if gpus >= 2 else [])
    except argparse.ArgumentTypeError as error:
        parser.error(str(error))
    ranks = [n for n in ranks if n > 1]  # one rank is always timed
    if gpus is not None and any(n > gpus for n in ranks):
        parser.error(f"--ranks {args.ranks}: {gpus} GPU(s) here, one per rank")
    if args.interleave < 1 or args.sequential < 0 or args.sequential == 1:
        parser.error("--interleave must be at least 1, --sequential 0 or at least 2")
    shapes = [(n, k) for n in requests for k in keys]

    meta = run_meta(argv, device, heads=HEADS, kv_heads=KV_HEADS,
                    head_dim=HEAD_DIM, page_size=PAGE, dtype="bf16", mask=MASK,
                    interleave=args.interleave, ranks=ranks, gpus=gpus)
    log(f"{meta['device']}, torch {torch.__version__}, flexjit {flexjit.runtime_version()} from "
        f"{flexjit.library_path()}")
    if not ranks:
        log("one GPU: context parallelism needs 2 GPUs or more; timing the one-GPU decode" +
            (f" and {args.sequential} shards one after the other on it (labelled so: not a "
             f"speedup)" if args.sequential else ""))
    kernel = make_kernel(device)
    rows, references = one_gpu_rows(shapes, args, device, kernel,
                                    0 if ranks else args.sequential)
    del kernel
    if device.type == "cuda":
        torch.cuda.empty_cache()  # the ranks' GPU 0 is this one
    for count in ranks:
        rows += ranks_rows(count, shapes, args, references)
    if not ranks:
        rows += [row(n, k, "flexjit 2 ranks", 2, "", note="n/a: one GPU (a rank per GPU)")
                 for n, k in shapes]
    add_comparisons(rows)
    order = {name: i for i, name in enumerate(workload_name(n, k) for n, k in shapes)}
    rows.sort(key=lambda r: order[r["workload"]])  # stable: one GPU first within a shape
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows,
                                                       "metadata": []}, indent=1, default=str))
    print()
    print(report(rows))
    wrong = [r for r in rows if (r.get("diff_one_gpu") or 0) > results_page.WRONG_OUTPUT]
    for r in wrong:
        print(f"MISMATCH: {r['workload']} {r['impl']}: output differs from one GPU's by "
              f"{r['diff_one_gpu']:.2e} (relative)", file=sys.stderr)
    failed = any(r["note"].startswith("error") for r in rows)
    return 1 if wrong or failed else 0


if __name__ == "__main__":
    sys.exit(main())
