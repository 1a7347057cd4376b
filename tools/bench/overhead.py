#!/usr/bin/env python3
"""Host time of one flexjit call from Python, beside the dispatch floor of torch custom ops
(issue 32, item 3). Needs a GPU and torch.

    PYTHONPATH=tools/python python3 tools/bench/overhead.py [--json PATH] [--bursts N]

Measures, in microseconds of host time per call (perf_counter_ns around bursts of calls; the
GPU is synchronised between bursts, outside the timing, so the launch queue never fills and no
call waits for the GPU):

  overhead_full_call         Kernel.__call__: every argument check, the C struct, the launch
                             (prepare()'s checks run once per geometry, Kernel.paged_args)
  overhead_full_call_new_geometry   the same with its geometry cache emptied before each call
  overhead_prepared_launch   Launch.launch() of a prepared call: fj_paged_attention only
  overhead_plan_run          Plan.run() of a prepared call: fj_plan_run only
  overhead_torch_op          torch.ops.flexjit.paged_attention in eager mode, and (impl
                             "floor") an empty op of the same schema: what the dispatcher and
                             the Python kernel's call cost before flexjit does anything
  overhead_torch_op_wrapper  flexjit.torch_ops.paged_attention (the Python entry point)
  overhead_empty_op          (floor) an empty op of one tensor argument

The workload is a decode step of 4 requests (1 query token, 64 keys, 8 heads, 2 kv heads,
head dim 128, bf16, page 16): a few microseconds of GPU time, so host cost is what shows.
Prints a table with the targets and writes {"meta": ..., "rows": [...]} with --json.
"""

import argparse
import json
import pathlib
import statistics
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tools" / "python"))
sys.path.insert(0, str(HERE))

import torch  # noqa: E402

from bench import run_meta  # noqa: E402

import flexjit  # noqa: E402

HEADS, KV_HEADS, HEAD_DIM, PAGE = 8, 2, 128, 16
NUM_REQS, SEQ_LEN = 4, 64

# Targets of issue 32 (µs): a measure's value is compared with its target; the torch op's is
# relative to the floor measured in the same run.
TARGETS = {"overhead_full_call": 20.0, "overhead_prepared_launch": 5.0}
TORCH_OP_MARGIN = 10.0


def host_us(fns, *, burst, bursts, sync):
    """[(median, min)] over `bursts` rounds of the host µs per call of each fn(), timed in bursts
    of `burst` calls; a round times one burst of each in turn, so that the host's drift (its
    clock, other tenants) falls on every measure alike, and sync() runs between bursts, untimed."""
    for fn in fns:
        for _ in range(burst):
            fn()
    sync()
    per_call = [[] for _ in fns]
    for _ in range(bursts):
        for fn, times in zip(fns, per_call):
            start = time.perf_counter_ns()
            for _ in range(burst):
                fn()
            times.append((time.perf_counter_ns() - start) / burst / 1e3)
            sync()
    return [(statistics.median(times), min(times)) for times in per_call]


def decode_batch():
    gen = torch.Generator().manual_seed(0)
    blocks = SEQ_LEN // PAGE
    joint = torch.randn(NUM_REQS * blocks, 2, PAGE, KV_HEADS, HEAD_DIM, generator=gen)
    joint = joint.to(torch.bfloat16).cuda()
    table = torch.randperm(NUM_REQS * blocks, generator=gen).view(NUM_REQS, blocks)
    q = torch.randn(NUM_REQS, HEADS, HEAD_DIM, generator=gen).to(torch.bfloat16).cuda()
    return dict(q=q, k_cache=joint[:, 0], v_cache=joint[:, 1],
                block_table=table.to(torch.int32).cuda(),
                query_start_loc=torch.arange(NUM_REQS + 1, dtype=torch.int32).cuda(),
                seq_lens=torch.full((NUM_REQS,), SEQ_LEN, dtype=torch.int32).cuda())


def floor_ops():
    """Empty CUDA ops: one of paged_attention's schema, one of a single tensor."""
    from flexjit._torch_ops import SCHEMAS
    library = torch.library.Library("flexjit_overhead", "DEF")
    library.define("paged_attention" + SCHEMAS["paged_attention"])
    library.impl("paged_attention", lambda *args: None, "CUDA")
    library.define("empty(Tensor x) -> ()")
    library.impl("empty", lambda x: None, "CUDA")
    return library


def measure(bursts, burst):
    ops = flexjit.torch_ops
    ctx = flexjit.Context()
    program = ctx.program_from_file(str(REPO / "dsl" / "lib" / "standard.mask"))
    kernel = ctx.kernel(program, "causal", head_dim=HEAD_DIM, dtype="bf16", page_size=PAGE)
    ops.register("overhead.causal", kernel)
    batch = decode_batch()
    out = torch.empty_like(batch["q"])
    launch = kernel.prepare(**batch, out=out, max_query_len=1)
    plan = kernel.plan(max_num_reqs=NUM_REQS, max_num_tokens=NUM_REQS, max_query_len=1,
                       num_heads=HEADS, num_kv_heads=KV_HEADS)
    plan.update(list(range(NUM_REQS + 1)), [SEQ_LEN] * NUM_REQS, SEQ_LEN // PAGE)
    library = floor_ops()
    args = ("overhead.causal", batch["q"], batch["k_cache"], batch["v_cache"],
            batch["block_table"], batch["query_start_loc"], batch["seq_lens"], out, None, 1, 0.0,
            "NHD", [], [], [], [], None)
    paged_op = torch.ops.flexjit.paged_attention.default
    floor_op = torch.ops.flexjit_overhead.paged_attention.default
    empty_op = torch.ops.flexjit_overhead.empty.default
    q = batch["q"]

    def first_call():  # a geometry not seen before: prepare()'s checks run in full
        kernel._templates.clear()
        kernel(**batch, out=out, max_query_len=1)

    cases = [
        ("overhead_full_call", "flexjit", "Kernel.__call__ with checks",
         lambda: kernel(**batch, out=out, max_query_len=1)),
        ("overhead_full_call_new_geometry", "flexjit", "Kernel.__call__, checks run in full",
         first_call),
        ("overhead_prepared_launch", "flexjit", "Launch.launch()", launch.launch),
        ("overhead_plan_run", "flexjit", "Plan.run(prepared launch)", lambda: plan.run(launch)),
        ("overhead_torch_op", "flexjit", "torch.ops.flexjit.paged_attention, eager",
         lambda: paged_op(*args)),
        ("overhead_torch_op", "floor", "empty op, same schema", lambda: floor_op(*args)),
        ("overhead_torch_op_wrapper", "flexjit", "flexjit.torch_ops.paged_attention, eager",
         lambda: ops.paged_attention("overhead.causal", **batch, out=out, max_query_len=1)),
        ("overhead_empty_op", "floor", "empty op (Tensor x) -> ()", lambda: empty_op(q)),
    ]
    # Interleaved, except the call that empties the geometry cache each time (the others would
    # pay for refilling it).
    apart = [case for case in cases if case[3] is first_call]
    together = [case for case in cases if case[3] is not first_call]
    timed = dict(zip((case[2] for case in together),
                     host_us([case[3] for case in together], burst=burst, bursts=bursts,
                             sync=torch.cuda.synchronize)))
    for case in apart:
        timed[case[2]] = host_us([case[3]], burst=burst, bursts=bursts,
                                 sync=torch.cuda.synchronize)[0]
    rows = []
    for workload, impl, what, _ in cases:
        median, least = timed[what]
        rows.append({"workload": workload, "impl": impl, "measure": what,
                     "value": round(median, 2), "unit": "us", "min": round(least, 2)})
    # The flexjit op and its floor must have produced identical work: check the op wrote out.
    out.fill_(float("nan"))
    paged_op(*args)
    want = kernel(**batch, max_query_len=1)
    torch.cuda.synchronize()
    if not torch.equal(out, want):
        raise SystemExit("overhead.py: the torch op's output differs from Kernel.__call__'s")
    del library
    return rows


def verdicts(rows):
    """{(workload, impl): "ok"/"OVER target" text} for the rows with a target."""
    floor = next((r["value"] for r in rows
                  if r["workload"] == "overhead_torch_op" and r["impl"] == "floor"), None)
    result = {}
    for r in rows:
        if r["impl"] != "flexjit":
            continue
        target = TARGETS.get(r["workload"])
        if r["workload"] == "overhead_torch_op" and floor is not None:
            target = floor + TORCH_OP_MARGIN
        if target is not None:
            state = "ok" if r["value"] <= target else "OVER"
            result[(r["workload"], r["impl"])] = f"{state} (target {target:.1f})"
    return result


def table(rows):
    marks = verdicts(rows)
    lines = [f"{'workload':<32} {'impl':<8} {'median us':>10} {'min us':>8}  measure",
             "-" * 100]
    for r in rows:
        mark = marks.get((r["workload"], r["impl"]), "")
        lines.append(f"{r['workload']:<32} {r['impl']:<8} {r['value']:>10.2f} {r['min']:>8.2f}"
                     f"  {r['measure']}{'  ' + mark if mark else ''}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", metavar="PATH", help="write the rows as JSON")
    parser.add_argument("--bursts", type=int, default=200, help="timed bursts per measure")
    parser.add_argument("--burst", type=int, default=100, help="calls per burst")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("overhead.py needs a CUDA device")
    meta = run_meta(argv)
    rows = measure(args.bursts, args.burst)
    print(f"{meta['device']}, torch {meta['torch']}, CUDA {meta['cuda']}, commit {meta['commit']}")
    print(table(rows))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1)
                                           + "\n")
    over = [key for key, text in verdicts(rows).items() if text.startswith("OVER")]
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
