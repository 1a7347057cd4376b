#!/usr/bin/env python3
"""Writes bench/RESULTS.md, the results page, from the harness's JSON in bench/results/.

    python3 tools/bench/results_page.py render              # bench/results/*.json -> RESULTS.md
    python3 tools/bench/results_page.py ingest BENCH_JSON   # split bench.py --json by family,
                                                            # write bench/results/, render
    python3 tools/bench/results_page.py ingest --add BENCH_JSON  # the same, but the run's
                                                            # workloads join (or replace theirs
                                                            # in) the families' results
    python3 tools/bench/results_page.py compile [--bench build/bin/flexjit_bench_compile]
                                                            # run the compile benchmark, write
                                                            # bench/results/compile.json, render

Every file in bench/results/ is one family of workloads from one run: {"meta", "rows",
"metadata"} as tools/bench/bench.py writes them, plus "family"; a family whose workloads do not
fit one device call takes the rest from later runs (`ingest --add`), each listed with its
workloads in "added": [{"meta", "workloads"}] and on the page under the family's provenance. A row is one implementation on
one workload: bench.py's rows ({workload, impl, ms, tflops, gbps, note, ...}; impls named
"flexjit page N" are flexjit, every other impl is a peer of the same run) or measure rows
({workload, impl, measure, value, min, unit}, as the compile benchmark writes them). A family
needs no entry in FAMILIES to appear on the page; the entry gives its title, its metric and
where its last measurement before the generator lives. Targets are in TARGETS. No torch here:
tests/python/test_results_page.py runs it with plain python3.
"""

import argparse
import datetime
import fnmatch
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[2]
RESULTS_DIR = REPO / "bench" / "results"
PAGE = REPO / "bench" / "RESULTS.md"
FLEXJIT = "flexjit"

# Per family: the page's title, the metric compared (a row field: "tflops", "gbps", "ms";
# "value" for measure rows, whose unit is in each row), the workload-name prefixes that belong
# to it (bench.py's rows carry no family: `ingest` sorts them by these, else by the name's text
# before its first "_"), and where the last measurement before this page lives (a file of
# bench/history/, the title of its section, the machine).
FAMILIES = {
    "prefill": {
        "title": "Prefill", "metric": "tflops", "prefixes": ("prefill_",),
        "history": ("2026-11-24.md", "Full prefill run of 7ddd2d4", "H100"),
    },
    "decode": {
        "title": "Decode", "metric": "gbps", "prefixes": ("decode_",),
        "history": ("2026-11-24.md", "Decode: a shorter split merge, and the full decode run "
                    "of 4218693", "H100"),
    },
    "mixed": {
        "title": "Mixed batches (prefill chunks + decodes in one plan)", "metric": "ms",
        "prefixes": ("mixed_",),
        "history": ("2026-11-24.md", "Decode: a shorter split merge, and the full decode run "
                    "of 4218693", "H100"),
    },
    "family_8k": {
        "title": "Element-wise masks outside standard.mask, 8k", "metric": "tflops",
        "extra": "dense_tflops", "prefixes": ("family_8k_",),
    },
    "family_16k": {
        "title": "Element-wise masks outside standard.mask, 16k", "metric": "tflops",
        "extra": "dense_tflops", "prefixes": ("family_16k_",),
    },
    "sinks": {
        "title": "Attention sinks, gpt-oss-shaped (head dim 64, 64/8 heads, 8k prefill)",
        "metric": "tflops", "prefixes": ("sinks_",),
    },
    "fp8": {
        "title": "FP8 (e4m3) K/V cache beside bf16 (issue 34)", "metric": "tokens_s",
        "extra": "gbps", "prefixes": ("fp8_",),
        "flexjit": "flexjit over an fp8 cache, at the workload's page size (_p16, _p64). No peer "
                   "here takes an fp8 paged cache, so the comparisons are flexjit over a bf16 "
                   "cache of the same values (\"bf16 cache\": (flexjit N×) is fp8's speed ÷ "
                   "bf16's) and, for decode, the copy floor of each cache (\"copy floor\": "
                   "tools/dev/page_read reading every K/V byte with the decode kernel's copies "
                   "and computing nothing; (flexjit N×) is fp8's speed ÷ the floor's); GB/s "
                   "count each cache's own bytes (fp8: one per element)",
    },
    "overhead": {
        "title": "Host time of a call (Python and the torch op)", "metric": "value",
        "prefixes": ("overhead_",),
    },
    "python_frontend": {
        "title": "flexjit.flex_attention against torch's flex_attention, the same Python "
                 "mask_mod/score_mod (tools/bench/flex_compare.py)",
        "metric": "ms", "extra": "tflops", "prefixes": ("pyflex_",),
        "flexjit": "flexjit.flex_attention on the peer's contiguous [B, H, S, D] tensors",
    },
    "transformers": {
        "title": "transformers generate(), Llama-3-8B-shaped, random weights "
                 "(tools/bench/hf_generate.py)",
        "metric": "tok_s", "prefixes": ("hf_",),
        "flexjit": "attn_implementation=\"flexjit\" (flexjit.transformers); workloads "
                   "b<batch>_p<prompt tokens>, 128 new tokens",
    },
    "context_parallel": {
        "title": "Context parallelism: decode over N GPUs against one (tools/bench/cp_decode.py)",
        "metric": "tokens_s", "extra": "gbps", "prefixes": ("cp_decode_",),
        "flexjit": "flexjit with each request's K/V cache dealt over N GPUs (\"N ranks\") as "
                   "vLLM's decode context parallelism deals it, in runs of 16 keys; a step is "
                   "each rank's sharded decode, an NCCL all-gather of out and lse, and "
                   "merge_states_n (the slowest rank's median step; one query token per "
                   "request, so tokens/s = requests ÷ step). The peer \"one GPU\" is flexjit's "
                   "unsharded decode of the same batch, so (flexjit N×) is the speedup of N GPUs; "
                   "GB/s: the whole cache's bytes ÷ the step; cp_decode_b<requests>_<keys per "
                   "request>: 32/8 heads of 128, bf16, page 16, causal",
    },
    "compile": {
        "title": "Compile path", "metric": "value", "prefixes": (),
        "history": ("2026-11-22.md", "Compile path", "the CPU machine and the H100 host"),
    },
}

# A bench.py row field: (what the page says it is, its unit, digits shown).
METRICS = {
    "tflops": ("effective TFLOP/s (visible pairs only)", "TFLOP/s", 0),
    "gbps": ("GB/s of K/V read", "GB/s", 0),
    "ms": ("kernel time in ms (median)", "ms", 3),
    "tok_s": ("generated tokens per second (batch × new tokens ÷ the median generate() time, "
              "prefill included)", "tok/s", 0),
    "tokens_s": ("query tokens per second of the kernel (the batch's query tokens ÷ median "
                 "kernel time)", "tok/s", 0),
    "dense_tflops": ("dense-equivalent TFLOP/s over the tiles flexjit computes (4·D·tq·tk per "
                     "non-empty tile)", "TFLOP/s", 0),
}

# A peer whose output differs from flexjit's by more than this (bench.py's diff_flexjit: max
# |peer - flexjit| / max |flexjit| over the whole output) computed something else: its time is
# not a comparison. bf16 runs of the same attention differ by about 1e-3.
WRONG_OUTPUT = 0.02

# What good looks like. A "peer" target holds when the best flexjit time of the workload over
# the peer's time (flexjit's speed ÷ the peer's) is at least `min`; a "metric" target when
# every flexjit page size meets the bound on the row field `metric` (or on `value`, in `unit`).
# `workloads` is a shell pattern over workload names.
TARGETS = [
    {"family": "prefill", "workloads": "prefill_*", "peer": "flex_attention", "min": 1.3,
     "source": "issue 30, target 3"},
    {"family": "prefill", "workloads": "prefill_causal_*k", "peer": "sdpa cudnn", "min": 1.0,
     "source": "issue 30, target 3"},
    {"family": "prefill", "workloads": "prefill_causal_*k_hd*", "peer": "sdpa cudnn",
     "min": 0.9, "source": "issue 30, target 3"},
    {"family": "prefill", "workloads": "prefill_*", "metric": "call_us", "unit": "µs",
     "max": 20.0, "source": "docs/architecture.md#targets, Python call host time"},
    {"family": "prefill", "workloads": "prefill_*", "metric": "launch_us", "unit": "µs",
     "max": 5.0, "source": "docs/architecture.md#targets, prepared launch"},
    {"family": "decode", "workloads": "decode_b64_*k", "metric": "gbps", "min": 3000,
     "source": "issue 8"},
    {"family": "decode", "workloads": "decode_b64_*k_pages", "metric": "gbps", "min": 3000,
     "source": "issue 8"},
    {"family": "decode", "workloads": "decode_b64_*k", "peer": "flex_attention", "min": 1.0,
     "source": "issue 8"},
    {"family": "decode", "workloads": "decode_b*_128k", "metric": "gbps", "min": 2800,
     "source": "issue 8"},
    # GB/s of the fp8 cache's bytes (half of bf16's per key); then the fp8 cache against its
    # copy floor and against the bf16 cache of the same values.
    {"family": "fp8", "workloads": "fp8_decode_*", "metric": "gbps", "min": 2900,
     "source": "docs/architecture.md#targets"},
    {"family": "fp8", "workloads": "fp8_decode_*_p16", "peer": "copy floor fp8", "min": 0.97,
     "source": "issue 34, target 2"},
    {"family": "fp8", "workloads": "fp8_decode_*_p64", "peer": "copy floor fp8", "min": 0.97,
     "source": "issue 34, target 2"},
    {"family": "fp8", "workloads": "fp8_decode_*_p16", "peer": "bf16 cache (flexjit page 16)",
     "min": 1.8, "source": "issue 34, target 2"},
    {"family": "fp8", "workloads": "fp8_decode_*_p64", "peer": "bf16 cache (flexjit page 64)",
     "min": 1.8, "source": "issue 34, target 2"},
    {"family": "fp8", "workloads": "fp8_prefill_*_p16", "peer": "bf16 cache (flexjit page 16)",
     "min": 1.0, "source": "issue 34, target 2"},
    {"family": "fp8", "workloads": "fp8_prefill_*_p64", "peer": "bf16 cache (flexjit page 64)",
     "min": 1.0, "source": "issue 34, target 2"},
    {"family": "family_8k", "workloads": "family_8k_*", "peer": "flex_attention", "min": 1.3,
     "source": "issue 30, target 1"},
    {"family": "family_8k", "workloads": "family_8k_*", "peer": "fa4 mask_mod", "min": 0.8,
     "source": "issue 30, target 1"},
    {"family": "family_16k", "workloads": "family_16k_*", "peer": "flex_attention", "min": 1.3,
     "source": "issue 30, target 1"},
    {"family": "family_16k", "workloads": "family_16k_*", "peer": "fa4 mask_mod", "min": 0.8,
     "source": "issue 30, target 1"},
    # The family's score: its FA4 peer is the causal kernel with the same score_mod.
    {"family": "family_8k", "workloads": "family_8k_causal+t5", "peer": "fa4 causal + t5 score_mod",
     "min": 0.8, "source": "issue 30, target 1"},
    {"family": "family_16k", "workloads": "family_16k_causal+t5",
     "peer": "fa4 causal + t5 score_mod", "min": 0.8, "source": "issue 30, target 1"},
    {"family": "overhead", "workloads": "overhead_full_call", "metric": "value", "unit": "us",
     "max": 20.0, "source": "issue 32, target 3"},
    {"family": "overhead", "workloads": "overhead_prepared_launch", "metric": "value",
     "unit": "us", "max": 5.0, "source": "issue 32, target 3"},
    # The torch op in eager mode against an empty op of the same schema, measured in the same
    # run: at most 10 µs above that floor.
    {"family": "overhead", "workloads": "overhead_torch_op", "metric": "value", "unit": "us",
     "above": "floor", "max": 10.0, "source": "issue 32, target 3"},
    {"family": "compile", "workloads": "cold_compile", "metric": "value", "unit": "s",
     "max": 3.0, "source": "issue 7"},
    {"family": "compile", "workloads": "disk_hit_*process", "metric": "value", "unit": "ms",
     "max": 10.0, "source": "issue 7"},
    {"family": "compile", "workloads": "memory_hit_capi", "metric": "value", "unit": "us",
     "max": 1.0, "source": "issue 7"},
    {"family": "compile", "workloads": "memory_hit_memo", "metric": "value", "unit": "us",
     "max": 1.0, "source": "issue 7"},
]

MET, MISSED, NA = "met ✓", "missed ✗", "n/a"


# --- reading -------------------------------------------------------------------------------------

def family_of(row):
    """The family of a bench.py row: its own "family" field, else the FAMILIES entry whose
    prefix its workload name has, else the name's text before the first "_"."""
    if row.get("family"):
        return row["family"]
    name = row["workload"]
    for family, entry in FAMILIES.items():
        if any(name.startswith(prefix) for prefix in entry["prefixes"]):
            return family
    return name.split("_", 1)[0]


def split_by_family(run):
    """{family: {"family", "meta", "rows", "metadata"}} of one bench.py JSON object."""
    out = {}
    for row in run["rows"]:
        family = family_of(row)
        part = out.setdefault(family, {"family": family, "meta": run["meta"], "rows": [],
                                       "metadata": []})
        part["rows"].append(row)
    for entry in run.get("metadata", []):
        rows = [row for row in run["rows"] if row["workload"] == entry.get("workload")]
        if rows:
            out[family_of(rows[0])]["metadata"].append(entry)
    return out


def added_to(old, part):
    """The family file `old` with the run `part`'s workloads added: their rows and metadata
    replace old's for the same workloads, and part's meta joins old's "added" (earlier added
    runs keep the workloads this run did not measure again)."""
    workloads = list(dict.fromkeys(row["workload"] for row in part["rows"]))
    new = set(workloads)
    added = []
    for entry in old.get("added", []):
        kept = [w for w in entry["workloads"] if w not in new]
        if kept:
            added.append({"meta": entry["meta"], "workloads": kept})
    added.append({"meta": part["meta"], "workloads": workloads})
    return dict(old,
                rows=[r for r in old["rows"] if r["workload"] not in new] + part["rows"],
                metadata=[m for m in old.get("metadata", []) if m.get("workload") not in new]
                + part["metadata"],
                added=added)


def dropped_workloads(path, part):
    """The workloads of the family file at `path` (if any) that `part`, the rows replacing it,
    does not have: what an ingest of a partial run takes off the page, in the file's order."""
    if not path.exists():
        return []
    kept = {row["workload"] for row in part["rows"]}
    old = json.loads(path.read_text(encoding="utf-8")).get("rows", [])
    return list(dict.fromkeys(row["workload"] for row in old if row["workload"] not in kept))


def load_results(directory):
    """{family: result} from every *.json of directory (the family is the file's stem unless
    the file names one)."""
    results = {}
    for path in sorted(pathlib.Path(directory).glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        results[data.get("family") or path.stem] = data
    return results


# --- figures -------------------------------------------------------------------------------------

def is_flexjit(row):
    return row["impl"].startswith(FLEXJIT)


def workload_names(rows):
    return list(dict.fromkeys(row["workload"] for row in rows))


# bench.py's row for a workload that failed as a whole (inputs, reference): no implementation.
WHOLE_WORKLOAD = "all"


def peer_names(rows):
    return list(dict.fromkeys(row["impl"] for row in rows
                              if not is_flexjit(row) and row["impl"] != WHOLE_WORKLOAD))


def best_flexjit_ms(rows, workload):
    times = [row["ms"] for row in rows
             if row["workload"] == workload and is_flexjit(row) and row.get("ms")]
    return min(times) if times else None


def wrong_output(row):
    """The row's output differs from flexjit's (its spot check failed)."""
    return (row.get("diff_flexjit") or 0) > WRONG_OUTPUT


def ratio(rows, workload, peer):
    """flexjit's speed ÷ the peer's on workload (> 1: flexjit faster), or None (also when the
    peer's output is not flexjit's)."""
    flexjit_ms = best_flexjit_ms(rows, workload)
    peer_row = next((row for row in rows
                     if row["workload"] == workload and row["impl"] == peer), None)
    if flexjit_ms is None or peer_row is None or not peer_row.get("ms") or \
            wrong_output(peer_row):
        return None
    return peer_row["ms"] / flexjit_ms


def check_target(target, rows, workload):
    """(text, mark) of one target on one workload: the measured figure and MET, MISSED or NA."""
    if "peer" in target:
        value = ratio(rows, workload, target["peer"])
        want = f"≥ {target['min']:g}× {target['peer']}"
        if value is None:
            return f"{want}: n/a", NA
        return f"{want}: {value:.2f}×", MET if value >= target["min"] else MISSED
    field = target["metric"]
    flexjit_rows = [row for row in rows if row["workload"] == workload and is_flexjit(row)]
    unit = target.get("unit", "")
    bound = (f"≥ {target['min']:g}" if "min" in target else f"≤ {target['max']:g}") + \
        f" {unit or METRICS[field][1]}"
    values = [row.get(field) for row in flexjit_rows]
    if not values or any(v is None for v in values) or \
            any(row.get("unit", unit) != unit for row in flexjit_rows):
        return f"{bound}: n/a", NA
    worst = min(values) if "min" in target else max(values)
    held = worst >= target["min"] if "min" in target else worst <= target["max"]
    return f"{bound}: {_format(worst, field)}", MET if held else MISSED


def targets_for(family, workload):
    return [t for t in TARGETS
            if t["family"] == family and fnmatch.fnmatchcase(workload, t["workloads"])]


def _format(value, field):
    if value is None:
        return NA
    digits = METRICS[field][2] if field in METRICS else (3 if abs(value) < 10 else 1)
    return f"{value:.{digits}f}"


# --- the page ------------------------------------------------------------------------------------

def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def _row(cells):
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _provenance(meta):
    parts = [f"measured {meta.get('date', '?')}", f"on {meta.get('device', '?')}",
             f"commit `{meta.get('commit', '?')}`"]
    if meta.get("torch"):
        parts.append(f"torch {meta['torch']}, CUDA {meta.get('cuda', '?')}")
    text = " · ".join(parts)
    if meta.get("command"):
        text += f" · command: `{meta['command']}`"
    return text


def comparison_table(family, result, metric, extra=None):
    """flexjit (every page size) beside each peer of the run, with ratios, the spot check of
    each peer's output against flexjit's, and targets; `extra`, a second flexjit row field."""
    rows = result["rows"]
    # A peer with no figure on any workload of the run (FA4 left out, a backend that refuses
    # every shape) gets no column: one note says why.
    absent = {}
    for peer in peer_names(rows):
        if not any(row["impl"] == peer and row.get("ms") for row in rows):
            for note in dict.fromkeys(row.get("note") or "no figure" for row in rows
                                      if row["impl"] == peer):
                absent.setdefault(note, []).append(peer)
    peers = [peer for peer in peer_names(rows)
             if not any(peer in names for names in absent.values())]
    lines = [_row(["workload", "flexjit"] + peers + ["targets"]),
             "|" + "---|" * (3 + len(peers))]
    notes = {}
    tally = [0, 0]
    for workload in workload_names(rows):
        mine = [row for row in rows if row["workload"] == workload and is_flexjit(row)]
        figures = [_format(row.get(metric), metric) if row.get("ms") else NA for row in mine]
        pages = [row["impl"][len(FLEXJIT):].strip() for row in mine]
        flexjit_cell = " / ".join(figures) + (f" ({' / '.join(pages)})" if any(pages) else "")
        if extra and any(row.get(extra) is not None for row in mine):
            flexjit_cell += "; " + METRICS[extra][0].split(" over")[0].split(" (")[0] + " " + \
                " / ".join(_format(row.get(extra), extra) for row in mine)
        cells = [workload, flexjit_cell if mine else NA]
        for peer in peers:
            peer_row = next((row for row in rows
                             if row["workload"] == workload and row["impl"] == peer), None)
            if peer_row is None or not peer_row.get("ms"):
                cells.append(NA)
                if peer_row is not None and peer_row.get("note"):
                    notes.setdefault(peer_row["note"], []).append(f"{peer} on {workload}")
                continue
            diff = peer_row.get("diff_flexjit")
            if wrong_output(peer_row):
                cells.append(f"wrong output (Δ {diff:.2g} vs flexjit)")
                if peer_row.get("note"):
                    notes.setdefault(peer_row["note"], []).append(f"{peer} on {workload}")
                continue
            if peer_row.get("note"):
                notes.setdefault(peer_row["note"], []).append(f"{peer} on {workload}")
            value = ratio(rows, workload, peer)
            aside = ([f"flexjit {value:.2f}×"] if value is not None else []) + \
                ([f"Δ {diff:.1g}"] if diff is not None else [])
            cells.append(_format(peer_row.get(metric), metric) +
                         (f" ({', '.join(aside)})" if aside else ""))
        checks = []
        for target in targets_for(family, workload):
            text, mark = check_target(target, rows, workload)
            checks.append(f"{text} {mark}")
            tally[0] += mark == MET
            tally[1] += mark == MISSED
        cells.append("; ".join(checks) if checks else "—")
        lines.append(_row(cells))
        for failed in (row for row in rows
                       if row["workload"] == workload and row["impl"] == WHOLE_WORKLOAD):
            notes.setdefault(failed.get("note", "failed"), []).append(workload)
    for note, where in notes.items():
        lines.append("")
        lines.append(f"- {', '.join(where)}: {note}")
    for note, names in absent.items():
        lines.append("")
        lines.append(f"- {', '.join(names)}: no figure in this run ({note})")
    return lines, tally


def measure_table(family, result):
    """Measure rows (value, min, unit), each with its targets."""
    lines = [_row(["measure", "median", "min", "targets"]), "|---|---|---|---|"]
    tally = [0, 0]
    for row in result["rows"]:
        unit = row.get("unit", "")
        checks = []
        for target in targets_for(family, row["workload"]) if is_flexjit(row) else []:
            if "above" in target:
                floor = next((other for other in result["rows"]
                              if other["workload"] == row["workload"]
                              and other["impl"] == target["above"]), None)
                if floor is None or floor.get("value") is None:
                    continue
                target = dict(target, max=floor["value"] + target["max"])
            text, mark = check_target(target, [row], row["workload"])
            checks.append(f"{text} {mark}")
            tally[0] += mark == MET
            tally[1] += mark == MISSED
        minimum = row.get("min")
        lines.append(_row([row.get("measure", row["workload"]) +
                           ("" if is_flexjit(row) else f" ({row['impl']})"),
                           f"{_format(row.get('value'), 'value')} {unit}",
                           f"{_format(minimum, 'value')} {unit}" if minimum is not None else "—",
                           "; ".join(checks) if checks else "—"]))
    return lines, tally


# Per-batch work a peer needs beside its kernel, from bench.py's metadata rows: shown under a
# family's table when the run measured it. (field, column title, digits)
SETUP_COLUMNS = [
    ("kernel_ms", "flexjit kernel (ms)", 3),
    ("block_mask_ms", "flex create_block_mask (ms)", 2),
    ("fa4_block_sparsity_ms", "FA4 block sparsity (ms)", 2),
    ("fa4_compile_s", "FA4 first call (s)", 1),
]


def setup_table(result):
    """The per-batch block-mask builds and FA4's first-call compile beside flexjit's kernel, or
    no lines when the run measured none of them."""
    entries = [e for e in result.get("metadata", [])
               if any(e.get(field) is not None for field, _, _ in SETUP_COLUMNS[1:])]
    if not entries:
        return []
    # flexjit's kernel always; the others where the run measured them (FA4 left out: none).
    columns = [column for i, column in enumerate(SETUP_COLUMNS)
               if i == 0 or any(e.get(column[0]) is not None for e in entries)]
    lines = ["", "Built per batch and timed apart from the kernels above"
             + (" (FA4's first call includes its compile):"
                if any(field == "fa4_compile_s" for field, _, _ in columns) else ":"), "",
             _row(["workload"] + [title for _, title, _ in columns]),
             "|" + "---|" * (1 + len(columns))]
    for entry in entries:
        lines.append(_row([entry["workload"]] + [
            f"{entry[field]:.{digits}f}" if entry.get(field) is not None else NA
            for field, _, digits in columns]))
    return lines


def family_section(family, result):
    entry = FAMILIES.get(family, {})
    title = entry.get("title", family)
    lines = [f'<a id="{family}"></a>', f"## {title}", ""]
    if result is None:
        if "history" in entry:
            name, section, machine = entry["history"]
            where = f"[bench/history/{name}](history/{name}), “{section}” ({machine})"
        else:
            where = "[bench/history/](history/)"
        lines.append(f"Not yet measured at HEAD. Last measurement: {where}.")
        return lines + [""], None
    meta = result.get("meta", {})
    lines += [_provenance(meta), ""]
    for entry in result.get("added", []):
        names = ", ".join(entry["workloads"])
        lines += [f"{names}: {_provenance(entry['meta'])}", ""]
    if any("value" in row for row in result["rows"]):
        if meta.get("kernel"):
            lines += [f"Kernel `{meta['kernel']}` ({meta.get('source_bytes', '?')} bytes of "
                      f"source), {meta.get('repeats', '?')} repeats.", ""]
        table, tally = measure_table(family, result)
    else:
        metric = entry.get("metric", "tflops")
        label = METRICS[metric][0]
        extra = entry.get("extra")
        flexjit = entry.get("flexjit", "flexjit paged (one figure per page size)")
        lines += [f"{label}; {flexjit}, the peers of the same run "
                  "beside it; (flexjit N×): flexjit's speed ÷ the peer's, best page size; Δ: the "
                  "peer's whole output against flexjit's (max |difference| ÷ max |flexjit|)." +
                  (f" Also {METRICS[extra][0]}." if extra else ""), ""]
        table, tally = comparison_table(family, result, metric, extra)
        table += setup_table(result)
    return lines + table + [""], tally


def render(results):
    """The page's text from {family: result}: FAMILIES' order first, then any other family."""
    families = list(FAMILIES) + sorted(f for f in results if f not in FAMILIES)
    sections, summary = [], []
    for family in families:
        lines, tally = family_section(family, results.get(family))
        sections += lines
        title = FAMILIES.get(family, {}).get("title", family)
        if tally is None:
            summary.append(f"- [{title}](#{family}): not yet measured at HEAD")
        else:
            device = results[family].get("meta", {}).get("device", "?")
            counts = f"targets {tally[0]} met, {tally[1]} missed" if sum(tally) else \
                "no targets set"
            summary.append(f"- [{title}](#{family}): {counts} ({device})")
    head = [
        "# Benchmark results",
        "",
        "Generated by `tools/bench/results_page.py` from `bench/results/*.json`; do not edit by "
        "hand. Regenerate: on the GPU machine `tools/bench/run_gpu.sh` (it runs the harness, "
        "writes `bench/results/` and this page), then commit both; the compile path with "
        "`ninja -C build flexjit flexjit_bench_compile && python3 tools/bench/results_page.py "
        "compile`; the page alone with "
        "`python3 tools/bench/results_page.py render`. Targets: `TARGETS` in the generator. "
        "Dated notes and past runs: `bench/history/`.",
        "",
    ] + summary + [""]
    return "\n".join(head + sections).rstrip("\n") + "\n"


# --- commands ------------------------------------------------------------------------------------

def git_commit():
    """The commit a run measured: $FLEXJIT_COMMIT when set (a copy of the tree whose .git is not
    the tree's, as on the GPU machine), else HEAD, with "+dirty" for uncommitted changes."""
    if os.environ.get("FLEXJIT_COMMIT"):
        return os.environ["FLEXJIT_COMMIT"]
    try:
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain",
                                "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return commit + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def cpu_name():
    try:
        lines = pathlib.Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or "unknown CPU"
    cores = sum(1 for line in lines if line.startswith("processor"))
    for line in lines:
        if line.startswith("model name"):
            return f"{line.split(':', 1)[1].strip()} ({cores} cores)"
    return platform.processor() or "unknown CPU"


def write_json(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=str(RESULTS_DIR), help="the family JSON folder")
    parser.add_argument("--page", default=str(PAGE), help="the page written")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("render", help="write the page from the family JSON files")
    ingest = commands.add_parser("ingest", help="split a bench.py --json file into families")
    ingest.add_argument("bench_json")
    ingest.add_argument("--add", action="store_true",
                        help="add the run's workloads to the families' results instead of "
                             "replacing them (a family measured over several device calls)")
    compile_cmd = commands.add_parser("compile", help="run the compile benchmark")
    compile_cmd.add_argument("--bench", default=str(REPO / "build" / "bin" /
                                                    "flexjit_bench_compile"))
    compile_cmd.add_argument("bench_args", nargs="*",
                             help="passed to the benchmark (after --)")
    args = parser.parse_args(argv)
    results_dir = pathlib.Path(args.results)

    if args.command == "ingest":
        run = json.loads(pathlib.Path(args.bench_json).read_text(encoding="utf-8"))
        for family, part in split_by_family(run).items():
            path = results_dir / f"{family}.json"
            if args.add and path.exists():
                part = added_to(json.loads(path.read_text(encoding="utf-8")), part)
                write_json(path, part)
                print(f"added to {path} ({len(part['rows'])} rows)")
                continue
            dropped = dropped_workloads(path, part)
            if dropped:
                print(f"warning: {family}: this run replaces the family's results, and the page "
                      f"loses {len(dropped)} workload(s) it did not run: {', '.join(dropped)} "
                      f"(run the whole family to keep them)", file=sys.stderr)
            write_json(path, part)
            print(f"wrote {path} ({len(part['rows'])} rows)")
    elif args.command == "compile":
        with tempfile.TemporaryDirectory() as tmp:
            raw = pathlib.Path(tmp) / "compile.json"
            command = [args.bench, "--mask-file", "dsl/lib/standard.mask",
                       "--json", str(raw)] + args.bench_args
            if subprocess.run(command, cwd=REPO).returncode != 0:
                print("the compile benchmark failed", file=sys.stderr)
                return 1
            data = json.loads(raw.read_text(encoding="utf-8"))
        data["family"] = "compile"
        data["meta"].update({
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "device": f"{cpu_name()} (NVRTC runs on the host CPU)",
            "commit": git_commit(),
            "command": "python3 tools/bench/results_page.py compile" +
                       "".join(f" {a}" for a in args.bench_args),
        })
        write_json(results_dir / "compile.json", data)
    page = pathlib.Path(args.page)
    page.write_text(render(load_results(results_dir)), encoding="utf-8")
    print(f"wrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
