#!/usr/bin/env python3
"""Reads the per-phase clock64 stamps that a library built with 2026-11-29-phase-stamps.patch writes
into two sample CTAs' output rows (marked 0x5354414d5...), for the named workloads (page 16):
    FLEXJIT_LIBRARY=stamps.so python3 bench/history/2026-11-29-phase-stamps.py prefill_causal_16k"""
import sys, pathlib, statistics
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools" / "bench"))
import bench, workloads as W, torch, flexjit

import os
lib = os.path.basename(os.environ.get("FLEXJIT_LIBRARY", "?"))
ctx = flexjit.Context()
known = {w.name: w for w in W.workloads()}
for name in sys.argv[1:]:
    w = known[name]
    program = ctx.program_from_file(str(bench.REPO / (w.mask_file or "dsl/lib/standard.mask")))
    inputs = bench.Inputs(w)
    fn, _, _, extra = bench.make_flexjit(ctx, program, inputs, 16, 1, w.kv_dtype)
    for _ in range(3):
        fn(0)
    rows = []
    for launch in range(5):
        out = fn(0)
        torch.cuda.synchronize()
        v = out.contiguous().view(-1).view(torch.int64)
        hits = ((v >> 8) == (0x5354414d50000000 >> 8)).nonzero().flatten().tolist()
        for h in hits:
            st = v[h - 11:h + 1].tolist()
            rows.append((launch, h, st))
    cols = "row0 tiles list full s soft pv rest lastpv epi total".split()
    print(f"== {name}: {extra['kernel']}")
    for launch, h, st in rows:
        c = st[11] & 0xff
        per = st[1] if st[1] else 1
        print(f"{lib} launch {launch} c{c} row0 {st[0]} tiles {st[1]} | list {st[2]} | per tile: full {st[3]/per:.0f} "
              f"s {st[4]/per:.0f} soft {st[5]/per:.0f} pv {st[6]/per:.0f} rest {st[7]/per:.0f} | lastpv {st[8]} "
              f"epi {st[9]} | total {st[10]} ({st[10]/per:.0f}/tile)")
    del inputs, fn
    torch.cuda.empty_cache()
