"""The benchmark's workloads and the pure logic around them: mask predicates shared by every
implementation, exact visible-pair counts, block tables, FLOP and byte accounting, row
sampling, and the result tables. No torch here: tests/python runs it with plain python3.

Mask predicates take (b, h, q, kv, P): logical positions (DESIGN.md §3) and a parameter
namespace P whose accessors work on Python ints and on torch tensors alike
(P.prefix_len(b), P.doc(b, pos), P.slope(h), P.tanh), so one definition serves PyTorch
FlexAttention's mask_mod/score_mod, the fp32 reference and the brute-force tests.
"""

import dataclasses
import itertools
import math
import random
from typing import Dict, Optional, Tuple

WINDOW = 1024
SOFTCAP = 50.0  # the soft cap both sides use
STANDARD_CAP = 50.0  # `const cap` of dsl/lib/standard.mask: flexjit needs no define for it

# flexjit's array parameters (dsl/lib/standard.mask) the workloads use, with their element
# types: prefix_len int[b], doc int[b, kv], slopes float[h]. Every other param is a scalar.
ARRAY_PARAMS = {"prefix_len": "int32", "doc": "int32", "slopes": "float32"}


# --- masks and scores, as flexjit's dsl/lib/standard.mask states them ---------------------------

def causal(b, h, q, kv, P):
    return q >= kv


def sliding(b, h, q, kv, P):
    return (q >= kv) & (q - kv < P.window)


def prefix_lm(b, h, q, kv, P):
    return (q >= kv) | (kv < P.prefix_len(b))


def rswa(b, h, q, kv, P):
    return (q >= kv) & ((kv < P.prefix_len(b)) | (q - kv < P.window))


def document(b, h, q, kv, P):
    return (q >= kv) & (P.doc(b, q) == P.doc(b, kv))


def softcap(score, b, h, q, kv, P):
    return P.cap * P.tanh(score / P.cap)


def alibi(score, b, h, q, kv, P):
    return score - P.slope(h) * (q - kv)


MASKS = {"causal": causal, "sliding": sliding, "prefix_lm": prefix_lm, "rswa": rswa,
         "document": document}
SCORES = {"softcap": softcap, "alibi": alibi}

# The peers' definitions, printed under the table.
MASK_SOURCE = {
    "causal": "q >= kv",
    "sliding": "q >= kv & q - kv < window",
    "prefix_lm": "q >= kv | kv < prefix_len[b]",
    "rswa": "q >= kv & (kv < prefix_len[b] | q - kv < window)",
    "document": "q >= kv & doc[b, q] == doc[b, kv]",
    "softcap": "cap * tanh(score / cap)",
    "alibi": "score - slopes[h] * (q - kv)",
}


@dataclasses.dataclass(frozen=True)
class Workload:
    """One benchmark case. `requests` are (query_len, seq_len) pairs. `flexjit_mask` is the
    name flexjit is asked for (a mask or a variant of dsl/lib/standard.mask); `mask`/`score`
    name the peers' predicate and score modifier. `params` are the runtime parameters by name:
    ints (window), per-request lists (prefix_len), per-request rows of document ids (doc) and
    per-head lists (slopes); flexjit_arguments() turns them into flexjit's scalars and
    arrays."""

    name: str
    kind: str  # "prefill", "decode" or "mixed"
    flexjit_mask: str
    mask: str
    score: Optional[str]
    requests: Tuple[Tuple[int, int], ...]
    params: Dict[str, object] = dataclasses.field(default_factory=dict)
    head_dim: int = 128
    num_heads: int = 32
    num_kv_heads: int = 8
    page_sizes: Tuple[int, ...] = (16, 64)
    quick: bool = False

    @property
    def uniform(self):
        """All requests alike: the peers get a batch [B, H, S, D]; else one packed sequence."""
        return len(set(self.requests)) == 1

    @property
    def sdpa(self):
        """How SDPA can run it: "causal" (is_causal=True, square), "full" (no mask: every key
        visible, e.g. decode), or None (a mask or score SDPA's fast backends cannot take)."""
        if self.score is not None or self.mask != "causal" or not self.uniform:
            return None
        query_len, seq_len = self.requests[0]
        if query_len == 1:
            return "full"
        return "causal" if query_len == seq_len else None


def document_lengths(total, low, high, seed):
    """Random document lengths in [low, high] that sum to `total` (the last one may be
    shorter)."""
    rng = random.Random(seed)
    lengths = []
    while sum(lengths) < total:
        lengths.append(min(rng.randint(low, high), total - sum(lengths)))
    return lengths


def document_ids(lengths):
    return [i for i, n in enumerate(lengths) for _ in range(n)]


def alibi_slopes(num_heads):
    """ALiBi's slopes (Press et al., 2022, as BLOOM and MPT compute them): for a power of two
    H, the geometric sequence 2^(-8 (h + 1) / H); otherwise those of the largest power of two
    n < H, followed by every other slope of 2n."""
    def geometric(n):
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]
    if num_heads <= 0:
        return []
    n = 1 << (num_heads.bit_length() - 1)
    if n == num_heads:
        return geometric(n)
    return geometric(n) + geometric(2 * n)[0::2][:num_heads - n]


def _prefill(mask, seq_len, score=None, flexjit_mask=None, params=None, head_dim=128,
             suffix="", quick=False):
    label = {"sliding": f"sliding{WINDOW}"}.get(mask, mask) if score is None else \
        f"{mask}+{score}"
    return Workload(name=f"prefill_{label}_{seq_len // 1024}k{suffix}", kind="prefill",
                    flexjit_mask=flexjit_mask or mask, mask=mask, score=score,
                    requests=((seq_len, seq_len),), params=params or {}, head_dim=head_dim,
                    quick=quick)


def workloads():
    """Every workload of issue 7, in run order."""
    out = []
    for seq_len in (8192, 16384):
        short = seq_len == 8192
        docs = document_ids(document_lengths(seq_len, 512, 2048, seed=seq_len))
        out += [
            _prefill("causal", seq_len, quick=short),
            _prefill("sliding", seq_len, params={"window": WINDOW}, quick=short),
            _prefill("prefix_lm", seq_len, params={"prefix_len": [seq_len // 4]}),
            _prefill("rswa", seq_len, params={"prefix_len": [seq_len // 4], "window": WINDOW}),
            _prefill("document", seq_len, params={"doc": [docs]}, quick=short),
            _prefill("causal", seq_len, score="softcap", flexjit_mask="causal_softcap"),
            _prefill("causal", seq_len, score="alibi", flexjit_mask="causal_alibi",
                     params={"slopes": alibi_slopes(Workload.num_heads)}),
        ]
    for keys in (4096, 16384):
        out.append(Workload(name=f"decode_b64_{keys // 1024}k", kind="decode",
                            flexjit_mask="causal", mask="causal", score=None,
                            requests=((1, keys),) * 64, page_sizes=(16,), quick=keys == 4096))
        out.append(Workload(name=f"decode_b64_{keys // 1024}k_pages", kind="decode",
                            flexjit_mask="causal", mask="causal", score=None,
                            requests=((1, keys),) * 64, page_sizes=(64, 256)))
    # Few long requests: split-KV keeps every SM busy.
    for reqs in (1, 4):
        out.append(Workload(name=f"decode_b{reqs}_128k", kind="decode", flexjit_mask="causal",
                            mask="causal", score=None, requests=((1, 131072),) * reqs,
                            page_sizes=(16,), quick=reqs == 1))
    # GQA ratios 1 and 8 and MQA beside the 32/8 above: packed into the MMA's rows.
    for heads, kv_heads, label in ((32, 32, "mha"), (64, 8, "gqa8"), (32, 1, "mqa")):
        out.append(Workload(name=f"decode_b64_4k_{label}", kind="decode", flexjit_mask="causal",
                            mask="causal", score=None, requests=((1, 4096),) * 64,
                            num_heads=heads, num_kv_heads=kv_heads, page_sizes=(16,)))
    # A sliding window reads only its pages: time should follow the window, not the context.
    out.append(Workload(name=f"decode_b64_16k_sliding{WINDOW}", kind="decode",
                        flexjit_mask="sliding", mask="sliding", score=None,
                        requests=((1, 16384),) * 64, params={"window": WINDOW},
                        page_sizes=(16,)))
    out.append(Workload(name="mixed_4x2k_chunks+60_decodes", kind="mixed", flexjit_mask="causal",
                        mask="causal", score=None,
                        requests=((2048, 4096),) * 4 + ((1, 4096),) * 60, quick=True))
    # The mixed batch's two parts alone, each its best case.
    out.append(Workload(name="mixed_part_4x2k_chunks", kind="mixed", flexjit_mask="causal",
                        mask="causal", score=None, requests=((2048, 4096),) * 4))
    out.append(Workload(name="mixed_part_60_decodes", kind="decode", flexjit_mask="causal",
                        mask="causal", score=None, requests=((1, 4096),) * 60))
    for head_dim in (64, 256):
        out.append(_prefill("causal", 8192, head_dim=head_dim, suffix=f"_hd{head_dim}",
                            quick=head_dim == 64))
    return out


def select(all_workloads, quick=False, only=None):
    """The workloads to run: --quick keeps the quick ones; --only keeps names containing any of
    the comma-separated words (an exact name matches only itself)."""
    chosen = [w for w in all_workloads if w.quick or not quick]
    if only:
        words = [word for word in only.split(",") if word]
        exact = [w for w in chosen if w.name in words]
        chosen = exact if exact else [w for w in chosen if any(word in w.name for word in words)]
    return chosen


# --- flexjit's arguments -------------------------------------------------------------------------

def flexjit_defines(workload):
    """Overrides of standard.mask's consts that the workload needs: the soft cap, where it
    differs from the file's."""
    if workload.score == "softcap" and SOFTCAP != STANDARD_CAP:
        return {"cap": SOFTCAP}
    return {}


def flexjit_arguments(workload):
    """(scalars, arrays) for flexjit: scalars {name: int}; arrays {name: (dtype, rows)} with
    dtype "int32" or "float32" and rows the array's contents as Python lists, ready for
    torch.tensor: prefix_len [num_reqs], slopes [num_heads], doc [num_reqs, max seq_len] (rows
    shorter than the longest request padded with -1, a position the kernel never reads)."""
    scalars, arrays = {}, {}
    num_reqs = len(workload.requests)
    for name, value in workload.params.items():
        if name not in ARRAY_PARAMS:
            scalars[name] = value
            continue
        if name == "doc":
            width = max((s for _, s in workload.requests), default=0)
            if len(value) != num_reqs or any(len(row) < s for row, (_, s) in
                                             zip(value, workload.requests)):
                raise ValueError(f"{workload.name}: doc needs one row of seq_len ids per request")
            value = [list(row) + [-1] * (width - len(row)) for row in value]
        else:
            want = workload.num_heads if name == "slopes" else num_reqs
            if len(value) != want:
                raise ValueError(f"{workload.name}: {name} has {len(value)} entries, expected "
                                 f"{want}")
            value = list(value)
        arrays[name] = (ARRAY_PARAMS[name], value)
    return scalars, arrays


# --- parameters for the pure-Python side ---------------------------------------------------------

class PyParams:
    """P for Python ints (the brute-force counts and tests)."""

    def __init__(self, workload):
        p = workload.params
        self.window = p.get("window", 0)
        self._prefix = p.get("prefix_len", [0] * len(workload.requests))
        self._doc = p.get("doc", [])
        self._slopes = p.get("slopes", [])
        self.cap = SOFTCAP
        self.tanh = math.tanh

    def prefix_len(self, b):
        return self._prefix[b]

    def doc(self, b, pos):
        return self._doc[b][pos]

    def slope(self, h):
        return self._slopes[h]


def query_positions(query_len, seq_len):
    """Logical positions of a request's query rows (DESIGN.md §3)."""
    return range(seq_len - query_len, seq_len)


def _row_count(workload, b, q, seq_len, P):
    """Visible keys of query position q (closed forms; brute force checks them in tests)."""
    causal_keys = min(q + 1, seq_len)
    if workload.mask == "causal":
        return causal_keys
    if workload.mask == "sliding":
        return min(causal_keys, P.window)
    if workload.mask == "prefix_lm":
        return max(causal_keys, min(P.prefix_len(b), seq_len))
    if workload.mask == "rswa":
        prefix = min(P.prefix_len(b), causal_keys)
        window_start = max(0, q - P.window + 1)
        return prefix + causal_keys - window_start - max(0, prefix - window_start)
    if workload.mask == "document":
        start = q
        while start > 0 and P.doc(b, start - 1) == P.doc(b, q):
            start -= 1
        return q - start + 1
    raise ValueError(f"no count for mask {workload.mask!r}")


def visible_pairs(workload):
    """Exact number of visible (query, key) pairs per head over the batch."""
    P = PyParams(workload)
    total = 0
    for b, (query_len, seq_len) in enumerate(workload.requests):
        if workload.mask == "document":
            # One pass per request: the run length of each document so far.
            run, previous = 0, None
            for pos in range(seq_len):
                run = run + 1 if P.doc(b, pos) == previous else 1
                previous = P.doc(b, pos)
                if pos >= seq_len - query_len:
                    total += run
        else:
            total += sum(_row_count(workload, b, q, seq_len, P)
                         for q in query_positions(query_len, seq_len))
    return total


def brute_force_pairs(workload):
    """visible_pairs by evaluating the predicate on every pair (small shapes only)."""
    P, predicate = PyParams(workload), MASKS[workload.mask]
    return sum(1 for b, (query_len, seq_len) in enumerate(workload.requests)
               for q in query_positions(query_len, seq_len) for kv in range(seq_len)
               if predicate(b, 0, q, kv, P))


def flops(workload, pairs):
    """4 * head_dim FLOPs per visible pair per query head (Q·K and P·V)."""
    return 4 * workload.head_dim * workload.num_heads * pairs


def kv_bytes(workload, element_bytes=2):
    """Bytes of K and V that must be read: every key of every request, once per kv head."""
    keys = sum(seq_len for _, seq_len in workload.requests)
    return 2 * keys * workload.num_kv_heads * workload.head_dim * element_bytes


def query_start_loc(workload):
    starts = [0]
    for query_len, _ in workload.requests:
        starts.append(starts[-1] + query_len)
    return starts


def block_table(seq_lens, page_size, seed, run=1, ascending=False):
    """A paged cache layout: each request's logical blocks get distinct physical blocks, placed in
    a shuffled order in runs of `run` consecutive blocks (1: every block on its own, as an
    engine's free list leaves them after a while; a run as long as the requests: sequential).
    With `ascending`, each request's blocks are then put in ascending physical order, as an
    allocator that hands out blocks in order gives requests that grow together.
    Returns (rows padded with 0 to the longest, number of physical blocks)."""
    counts = [-(-s // page_size) for s in seq_lens]
    runs = [(r, j, min(run, n - j)) for r, n in enumerate(counts) for j in range(0, n, run)]
    place = list(range(len(runs)))  # run k goes to place[k] in physical order
    random.Random(seed).shuffle(place)
    length_at = [0] * len(runs)
    for k, (_, _, length) in enumerate(runs):
        length_at[place[k]] = length
    first = list(itertools.accumulate(length_at, initial=0))  # each place's first block
    width = max(counts, default=0)
    rows = [[0] * width for _ in counts]
    for k, (r, j, length) in enumerate(runs):
        for i in range(length):
            rows[r][j + i] = first[place[k]] + i
    if ascending:
        for r, n in enumerate(counts):
            rows[r][:n] = sorted(rows[r][:n])
    return rows, sum(counts)


def sample_rows(workload, max_rows, seed=0):
    """(request, row) pairs where outputs are checked against the fp32 reference: the last row
    of each request, then rows spread over the batch, at most max_rows (sorted)."""
    rows = set()
    for b, (query_len, _) in enumerate(workload.requests):
        if len(rows) < max_rows:
            rows.add((b, query_len - 1))
    starts = query_start_loc(workload)
    total = starts[-1]
    rng = random.Random(seed)
    picks = list(range(0, total, max(1, total // max_rows))) + [rng.randrange(total)
                                                                 for _ in range(8)]
    b = 0
    for token in sorted(picks):
        if len(rows) >= max_rows:
            break
        while starts[b + 1] <= token:
            b += 1
        rows.add((b, token - starts[b]))
    return sorted(rows)


def rotation_copies(bytes_per_copy, l2_bytes, cap=8):
    """Copies of the inputs to cycle through so that successive runs do not find their inputs
    in L2: enough to span three L2 sizes."""
    if bytes_per_copy <= 0:
        return 1
    return max(1, min(cap, -(-3 * l2_bytes // bytes_per_copy)))


# --- the result table ----------------------------------------------------------------------------

FLEXJIT = "flexjit"


def _number(value, digits):
    if value is None:
        return "—"
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return str(value)
    return f"{value:.{digits}f}"


def _error(value):
    return "—" if value is None else f"{value:.1e}"


def add_ratios(rows):
    """Sets each peer row's `ratio`: the best flexjit time of the workload over the peer's
    time inverted, i.e. flexjit's throughput / the peer's (> 1: flexjit is faster)."""
    best = {}
    for row in rows:
        if row["impl"].startswith(FLEXJIT) and row.get("ms"):
            best[row["workload"]] = min(best.get(row["workload"], math.inf), row["ms"])
    for row in rows:
        if not row["impl"].startswith(FLEXJIT) and row.get("ms") and row["workload"] in best:
            row["ratio"] = row["ms"] / best[row["workload"]]
    return rows


def results_table(rows):
    """Markdown table, one line per (workload, implementation)."""
    head = ("| workload | impl | layout | ms | TFLOP/s | GB/s | err vs fp32 | Δ vs flex | "
            "flexjit ÷ impl | note |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        if r.get("ms") is None:
            cells = [r["workload"], r["impl"], r.get("layout", ""), "n/a", "", "", "", "", "",
                     r.get("note", "")]
        else:
            cells = [r["workload"], r["impl"], r.get("layout", ""), _number(r["ms"], 3),
                     _number(r.get("tflops"), 1), _number(r.get("gbps"), 0),
                     _error(r.get("err_ref")), _error(r.get("diff_flex")),
                     _number(r.get("ratio"), 2), r.get("note", "")]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ")
                                       for c in cells) + " |")
    return "\n".join(lines)


def metadata_table(rows):
    """Per workload: flexjit's host time per launch beside create_block_mask's time."""
    lines = ["| workload | flexjit launch (host µs, prepared) | flexjit call (host µs, "
             "checks + launch) | plan update (host µs) | plan run (host µs) | graph replay (ms) "
             "| flexjit kernel (ms) | flex create_block_mask (ms) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['workload']} | {_number(r.get('launch_us'), 1)} | "
                     f"{_number(r.get('call_us'), 1)} | {_number(r.get('plan_us'), 1)} | "
                     f"{_number(r.get('run_us'), 1)} | {_number(r.get('graph_ms'), 3)} | "
                     f"{_number(r.get('kernel_ms'), 3)} | {_number(r.get('block_mask_ms'), 2)} |")
    return "\n".join(lines)


def workload_table(chosen):
    """The definitions every implementation runs, one line per workload."""
    lines = ["| workload | requests (query len × keys) | flexjit mask | peer mask_mod / score_mod"
             " | params |", "|---|---|---|---|---|"]
    for w in chosen:
        groups = {}
        for request in w.requests:
            groups[request] = groups.get(request, 0) + 1
        shape = " + ".join(f"{n}×({q}×{s})" for (q, s), n in groups.items())
        peer = MASK_SOURCE[w.mask] + (f"; score: {MASK_SOURCE[w.score]}" if w.score else "")
        params = ", ".join(_describe_param(k, v) for k, v in w.params.items())
        if w.score == "softcap":
            cap = f"cap={SOFTCAP:g}" + (" (define)" if flexjit_defines(w) else "")
            params = ", ".join(p for p in (params, cap) if p)
        peer = peer.replace("|", "\\|")  # the `|` of a mask is not a cell boundary
        lines.append(f"| {w.name} | {shape}, hd {w.head_dim}, {w.num_heads}/{w.num_kv_heads} "
                     f"heads | {w.flexjit_mask} | {peer} | {params} |")
    return "\n".join(lines)


def _describe_param(name, value):
    if name == "doc":
        counts = [len(set(row)) for row in value]
        return f"doc: {sum(counts)} documents of 512–2048 tokens"
    if name == "slopes":
        return "slopes: ALiBi's, 2^(-8(h+1)/H)"
    return f"{name}={value[0] if isinstance(value, list) and len(value) == 1 else value}"


def report(meta, rows, metadata_rows, chosen):
    """The dated block appended to bench/RESULTS.md and printed last."""
    return "\n".join([
        f"## {meta['date']} · {meta['device']}",
        "",
        f"commit `{meta['commit']}` · torch {meta['torch']} · CUDA {meta['cuda']} · "
        f"command: `{meta['command']}`",
        "",
        f"Device ceilings (same run): bf16 matmul {_number(meta.get('matmul_tflops'), 0)} "
        f"TFLOP/s, device copy {_number(meta.get('copy_gbps'), 0)} GB/s (read + written).",
        "",
        results_table(rows),
        "",
        "flexjit runs paged (joint K/V cache [blocks, 2, page, H_kv, D], shuffled block table, "
        "q [tokens, H, D]); the peers run on contiguous [B, H, S, D] tensors, their best case "
        "(ragged batches packed into one sequence for flex). TFLOP/s count visible pairs only "
        "(4·D per pair per head); GB/s count the K/V bytes that must be read. err vs fp32: "
        "max |out − ref| / max |ref| on sampled rows; Δ vs flex: the same over the whole "
        "output against flex_attention's. flexjit ÷ impl > 1: flexjit is faster.",
        "",
        metadata_table(metadata_rows),
        "",
        workload_table(chosen),
        "",
    ])
