"""The benchmark's workloads and the pure logic around them: mask predicates shared by every
implementation, exact visible-pair counts, block tables, FLOP and byte accounting, row
sampling, and the result tables. No torch here: tests/python runs it with plain python3.

Mask predicates take (b, h, q, kv, P): logical positions (docs/architecture.md#call-contract) and a
parameter namespace P whose accessors work on Python ints and on torch tensors alike
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
# The family's (tools/bench/family.mask), passed to flexjit as the workload holds them:
# global_token int[kv], random_block int[qb, kb], head_window int[h], t5_bias float[h, d].
# Its `bits` int[r, w] array is not held but built from `bits_seed` (random_word), on the GPU.
FAMILY_ARRAY_PARAMS = {"global_token": "int32", "random_block": "int32",
                       "head_window": "int32", "t5_bias": "float32"}


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

# --- the element-wise family (issue 28), as tools/bench/family.mask states it ----------------
# The consts of family.mask; fa4_peer.py bakes the same numbers into its mask_mods.

DILATED_WINDOW = 1024
STRIDE = 128
SUMMARY = 8
IMAGE_WIDTH = 128
IMAGE_RADIUS = 7
LONGFORMER_RADIUS = 256
BIGBIRD_BLOCK = 64
BIGBIRD_GLOBAL = 2
BITS_PER_WORD = 32
SINKS = 4
T5_DISTANCES = 256
FAMILY_FILE = "tools/bench/family.mask"


def dilated(b, h, q, kv, P):
    return (q >= kv) & (q - kv < DILATED_WINDOW) & ((q - kv) % 2 == 0)


def strided(b, h, q, kv, P):
    return (q >= kv) & ((q - kv < STRIDE) | ((q - kv) % STRIDE == 0))


def fixed(b, h, q, kv, P):
    return (q >= kv) & ((q // STRIDE == kv // STRIDE) | (kv % STRIDE >= STRIDE - SUMMARY))


def image2d(b, h, q, kv, P):
    return ((abs(q // IMAGE_WIDTH - kv // IMAGE_WIDTH) <= IMAGE_RADIUS)
            & (abs(q % IMAGE_WIDTH - kv % IMAGE_WIDTH) <= IMAGE_RADIUS))


def modular(b, h, q, kv, P):
    return (q >= kv) & ((kv - q) % 3 != 1)


def longformer(b, h, q, kv, P):
    return ((abs(q - kv) <= LONGFORMER_RADIUS) | (P.global_token(kv) != 0)
            | (P.global_token(q) != 0))


def bigbird(b, h, q, kv, P):
    qb, kb = q // BIGBIRD_BLOCK, kv // BIGBIRD_BLOCK
    return ((abs(qb - kb) <= 1) | (qb < BIGBIRD_GLOBAL) | (kb < BIGBIRD_GLOBAL)
            | (P.random_block(qb, kb) != 0))


def random_bits(b, h, q, kv, P):
    word = P.bits(q, kv // BITS_PER_WORD)
    return (q >= kv) & ((q == kv) | (((word >> (kv % BITS_PER_WORD)) & 1) == 1))


def streaming(b, h, q, kv, P):
    return (q >= kv) & ((kv < SINKS) | (q - kv < P.window))


def head_windows(b, h, q, kv, P):
    return (q >= kv) & (q - kv < P.head_window(h))


def t5(score, b, h, q, kv, P):
    return score + P.t5_bias(h, q - kv)  # the accessor clamps the distance to the table


FAMILY_MASKS = {"dilated": dilated, "strided": strided, "fixed": fixed, "image2d": image2d,
                "modular": modular, "longformer": longformer, "bigbird": bigbird,
                "random_bits": random_bits, "streaming": streaming,
                "head_windows": head_windows}
MASKS.update(FAMILY_MASKS)
SCORES["t5"] = t5
HEAD_DEPENDENT_MASKS = {"head_windows"}  # their block maps differ per query head

MASK_SOURCE.update({
    "dilated": f"q >= kv & q - kv < {DILATED_WINDOW} & (q - kv) % 2 == 0",
    "strided": f"q >= kv & (q - kv < {STRIDE} | (q - kv) % {STRIDE} == 0)",
    "fixed": f"q >= kv & (q // {STRIDE} == kv // {STRIDE} | kv % {STRIDE} >= "
             f"{STRIDE - SUMMARY})",
    "image2d": f"|q // {IMAGE_WIDTH} - kv // {IMAGE_WIDTH}| <= {IMAGE_RADIUS} & "
               f"|q % {IMAGE_WIDTH} - kv % {IMAGE_WIDTH}| <= {IMAGE_RADIUS}",
    "modular": "q >= kv & (kv - q) % 3 != 1",
    "longformer": f"|q - kv| <= {LONGFORMER_RADIUS} | global_token[kv] | global_token[q]",
    "bigbird": f"|q // {BIGBIRD_BLOCK} - kv // {BIGBIRD_BLOCK}| <= 1 | q // {BIGBIRD_BLOCK} "
               f"< {BIGBIRD_GLOBAL} | kv // {BIGBIRD_BLOCK} < {BIGBIRD_GLOBAL} | "
               f"random_block[q // {BIGBIRD_BLOCK}, kv // {BIGBIRD_BLOCK}]",
    "random_bits": f"q >= kv & (q == kv | ((bits[q, kv // {BITS_PER_WORD}] >> "
                   f"kv % {BITS_PER_WORD}) & 1) == 1)",
    "streaming": f"q >= kv & (kv < {SINKS} | q - kv < window)",
    "head_windows": "q >= kv & q - kv < head_window[h]",
    "t5": f"score + t5_bias[h, clamp(q - kv, 0, {T5_DISTANCES - 1})]",
})


def random_word(seed, q, j):
    """Word j of query row q of the random_bits mask: 32 pseudo-random bits from a hash of
    (seed, q, j) (a 32-bit integer mix, lowbias32) as an int32 (the high bit its sign), on
    Python ints and on int64 tensors alike, so the GPU builds the array and the tests recompute
    any word without storing it."""
    x = (q * 65536 + j + seed * 0x9E3779B1) & 0xFFFFFFFF
    x = ((x ^ (x >> 16)) * 0x7FEB352D) & 0xFFFFFFFF
    x = ((x ^ (x >> 15)) * 0x846CA68B) & 0xFFFFFFFF
    x = x ^ (x >> 16)
    return ((x + 0x80000000) & 0xFFFFFFFF) - 0x80000000


def t5_bucket(distance, num_buckets=32, max_distance=128):
    """T5's relative-position bucket of a causal distance >= 0 (Raffel et al., 2020:
    `_relative_position_bucket` with bidirectional=False): exact below num_buckets / 2, then
    logarithmic up to max_distance, then the last bucket."""
    exact = num_buckets // 2
    if distance < exact:
        return distance
    scaled = math.log(distance / exact) / math.log(max_distance / exact) * (num_buckets - exact)
    return min(num_buckets - 1, exact + int(scaled))


def t5_table(num_heads, seed=5):
    """t5_bias [num_heads, T5_DISTANCES]: a bias per head and bucket (uniform in [-2, 2], as
    a trained table's scale), expanded to one entry per distance."""
    rng = random.Random(seed)
    per_bucket = [[rng.uniform(-2.0, 2.0) for _ in range(32)] for _ in range(num_heads)]
    return [[per_bucket[h][t5_bucket(d)] for d in range(T5_DISTANCES)]
            for h in range(num_heads)]


def global_tokens(seq_len, count=16, seed=3):
    """Longformer's global_token flags: position 0 and count - 1 random others."""
    rng = random.Random(seed)
    chosen = {0} | set(rng.sample(range(1, seq_len), min(count - 1, seq_len - 1)))
    return [1 if pos in chosen else 0 for pos in range(seq_len)]


def random_blocks(seq_len, per_row=3, seed=4):
    """BigBird's random_block flags [query block, key block]: per_row random key blocks per
    query block."""
    rng = random.Random(seed)
    n = -(-seq_len // BIGBIRD_BLOCK)
    rows = []
    for _ in range(n):
        picked = set(rng.sample(range(n), min(per_row, n)))
        rows.append([1 if kb in picked else 0 for kb in range(n)])
    return rows


def head_window_sizes(num_heads):
    """head_window: 256, 512, ..., 8192 keys, cycling over the query heads."""
    return [256 << (h % 6) for h in range(num_heads)]


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
    mask_file: Optional[str] = None  # flexjit's mask file (repository path); None: --masks
    runs_scale: float = 1.0  # the share of the usual timed runs (the family takes fewer)
    sinks: bool = False  # attention sinks: sink_logits(num_heads), one per query head
    kv_dtype: str = "bf16"  # "fp8": flexjit reads an fp8 (e4m3) cache (fp8_workloads)

    @property
    def family(self):
        """One of the element-wise family's workloads (issue 28)."""
        return self.mask_file == FAMILY_FILE

    @property
    def uniform(self):
        """All requests alike: the peers get a batch [B, H, S, D]; else one packed sequence."""
        return len(set(self.requests)) == 1

    @property
    def sdpa(self):
        """How SDPA can run it: "causal" (is_causal=True, square), "full" (no mask: every key
        visible, e.g. decode), or None (a mask or score SDPA's fast backends cannot take)."""
        if self.score is not None or self.mask != "causal" or not self.uniform or self.sinks \
                or self.kv_dtype != "bf16":
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
             suffix="", quick=False, page_sizes=(16, 64)):
    label = {"sliding": f"sliding{WINDOW}"}.get(mask, mask) if score is None else \
        f"{mask}+{score}"
    return Workload(name=f"prefill_{label}_{seq_len // 1024}k{suffix}", kind="prefill",
                    flexjit_mask=flexjit_mask or mask, mask=mask, score=score,
                    requests=((seq_len, seq_len),), params=params or {}, head_dim=head_dim,
                    quick=quick, page_sizes=page_sizes)


def workloads():
    """Every workload of issue 7, in run order."""
    out = []
    for seq_len in (8192, 16384):
        short = seq_len == 8192
        docs = document_ids(document_lengths(seq_len, 512, 2048, seed=seq_len))
        out += [
            _prefill("causal", seq_len, quick=short, page_sizes=(16, 64, 128)),
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
    return out + family_workloads() + sinks_workloads() + fp8_workloads()


# The fp8 cache (issue 34): flexjit over an fp8 (e4m3) K/V cache beside flexjit over a bf16
# cache of the same values, and for decode beside the copy floor of either (tools/dev/page_read).
# No peer here takes an fp8 paged cache.
FP8_MAX = 448.0  # e4m3's largest finite value


def fp8_workloads():
    """fp8_decode_b64_16k_p16 / _p64 (decode_b64_16k's shape: 64 requests x 16k keys, head dim
    128, 32/8 heads) and fp8_prefill_causal_16k_p16 / _p64 (prefill_causal_16k's), one page size
    each, so that each fp8 figure has the bf16 one and the floor of its own page beside it."""
    out = []
    for page in (16, 64):
        out.append(Workload(name=f"fp8_decode_b64_16k_p{page}", kind="decode",
                            flexjit_mask="causal", mask="causal", score=None,
                            requests=((1, 16384),) * 64, page_sizes=(page,), kv_dtype="fp8"))
    for page in (16, 64):
        out.append(Workload(name=f"fp8_prefill_causal_16k_p{page}", kind="prefill",
                            flexjit_mask="causal", mask="causal", score=None,
                            requests=((16384, 16384),), page_sizes=(page,), kv_dtype="fp8"))
    return out


# gpt-oss's attention (issue 34): head dim 64, 64 query heads over 8 kv heads, sliding-window
# layers of 128 keys alternating with full causal ones, a learnable sink logit per head.
GPT_OSS_WINDOW = 128


def sink_logits(num_heads, seed=7):
    """The sinks workloads' logits: uniform in [-2, 8), around the LSE of a row over a few
    thousand keys, so that they move the result; the same on every side."""
    rng = random.Random(seed)
    return [rng.uniform(-2.0, 8.0) for _ in range(num_heads)]


def sinks_workloads():
    """gpt-oss-shaped 8k prefills with attention sinks, one per layer kind: sinks_8k_causal and
    sinks_8k_sliding128, flexjit at pages 16 and 64 beside FA4's learnable_sink."""
    shape = dict(kind="prefill", score=None, requests=((8192, 8192),), head_dim=64,
                 num_heads=64, num_kv_heads=8, page_sizes=(16, 64), sinks=True)
    return [
        Workload(name="sinks_8k_causal", flexjit_mask="causal", mask="causal", **shape),
        Workload(name=f"sinks_8k_sliding{GPT_OSS_WINDOW}", flexjit_mask="sliding", mask="sliding",
                 params={"window": GPT_OSS_WINDOW}, **shape),
    ]


def family_workloads():
    """The element-wise family (issue 28) at 8k and 16k: masks of tools/bench/family.mask, one
    request as the standard prefill workloads, flexjit at pages 16, 64 and 128. Named
    family_8k_* and family_16k_*, so that `--only family_8k` selects one length."""
    out = []
    for seq_len in (8192, 16384):
        params = {
            "streaming": {"window": WINDOW},
            "longformer": {"global_token": global_tokens(seq_len)},
            "bigbird": {"random_block": random_blocks(seq_len)},
            "random_bits": {"bits_seed": 1},
            "head_windows": {"head_window": head_window_sizes(Workload.num_heads)},
        }
        for mask in FAMILY_MASKS:
            out.append(Workload(
                name=f"family_{seq_len // 1024}k_{mask}", kind="prefill", flexjit_mask=mask,
                mask=mask, score=None, requests=((seq_len, seq_len),),
                params=params.get(mask, {}), page_sizes=(16, 64, 128), mask_file=FAMILY_FILE,
                runs_scale=0.5, quick=seq_len == 8192 and mask == "dilated"))
        out.append(Workload(
            name=f"family_{seq_len // 1024}k_causal+t5", kind="prefill",
            flexjit_mask="causal_t5", mask="causal", score="t5", requests=((seq_len, seq_len),),
            params={"t5_bias": t5_table(Workload.num_heads)}, page_sizes=(16, 64, 128),
            mask_file=FAMILY_FILE, runs_scale=0.5))
    return out


def select(all_workloads, quick=False, only=None):
    """The workloads to run: --quick keeps the quick ones; --only keeps names containing any of
    the comma-separated words (an exact name matches only itself)."""
    chosen = [w for w in all_workloads if w.quick or not quick]
    if only:
        words = [word for word in only.split(",") if word]
        if "standard" in words:  # every workload outside the family, as before issue 28
            words.remove("standard")
            chosen = [w for w in chosen if not w.family]
            if not words:
                return chosen
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
        if name == "bits_seed":  # the bits array: built on the GPU (bench.py), not held here
            continue
        if name in FAMILY_ARRAY_PARAMS:
            arrays[name] = (FAMILY_ARRAY_PARAMS[name], value)
            continue
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
        self._global = p.get("global_token", [])
        self._random_block = p.get("random_block", [])
        self._bits_seed = p.get("bits_seed", 0)
        self._head_window = p.get("head_window", [])
        self._t5 = p.get("t5_bias", [])
        self.cap = SOFTCAP
        self.tanh = math.tanh

    def prefix_len(self, b):
        return self._prefix[b]

    def doc(self, b, pos):
        return self._doc[b][pos]

    def slope(self, h):
        return self._slopes[h]

    def global_token(self, pos):
        return self._global[pos]

    def random_block(self, qb, kb):
        return self._random_block[qb][kb]

    def bits(self, q, j):
        return random_word(self._bits_seed, q, j)

    def head_window(self, h):
        return self._head_window[h]

    def t5_bias(self, h, distance):
        return self._t5[h][min(max(distance, 0), T5_DISTANCES - 1)]


def query_positions(query_len, seq_len):
    """Logical positions of a request's query rows (docs/architecture.md#call-contract)."""
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
    """Exact number of visible (query, key) pairs per head over the batch (the mean over the
    query heads for a mask that reads h). The family's masks are counted by brute force, for
    the tests' small shapes; bench.py counts them on the GPU (mask_census)."""
    if workload.mask in FAMILY_MASKS:
        return brute_force_pairs(workload)
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
    heads = range(workload.num_heads) if workload.mask in HEAD_DEPENDENT_MASKS else [0]
    total = sum(1 for h in heads for b, (query_len, seq_len) in enumerate(workload.requests)
                for q in query_positions(query_len, seq_len) for kv in range(seq_len)
                if predicate(b, h, q, kv, P))
    return total // len(heads) if total % len(heads) == 0 else total / len(heads)


def key_tile(head_dim, element_operations, wide_key_tiles, kv_fp8=False, narrow_hd64=False):
    """Keys per K/V tile of flexjit's Hopper prefill kernel: wgmma_block_n of
    templates/kernel_args.cuh, from what `flexjit emit` writes into the variant struct
    (kElementOperations, kWideKeyTiles, kNarrowKeyTilesHd64)."""
    if element_operations > 16:
        return 64
    if (head_dim == 64 and not narrow_hd64) or (head_dim == 128 and wide_key_tiles
                                                 and not kv_fp8):
        return 128
    return 64


def head_major(workload):
    """Whether flexjit's prefill kernel packs the workload's rows head-major: a mask that reads
    h (kUsesHead, docs/architecture.md) gets blocks of 128 positions of one query head, so that
    each head's tiles are its own; any other packs the kv head's GQA group into a block."""
    return workload.mask in HEAD_DEPENDENT_MASKS


def flexjit_tile(workload, tile_k):
    """(query positions, keys) of one tile of flexjit's prefill kernel (templates/
    kernel_args.cuh): 128 rows of the MMA hold 128 / group query positions of every head of
    the kv head's group (GQA packing), or 128 positions of one query head (head_major()), by
    tile_k keys (key_tile()). None where the group does not divide 128 or tile_k is None."""
    group = workload.num_heads // workload.num_kv_heads
    if tile_k is None:
        return None
    if head_major(workload):
        return 128, tile_k
    if 128 % group:
        return None
    return 128 // group, tile_k


def dense_equivalent_flops(workload, computed_tiles, tile_k):
    """4 * head_dim * 128 * tile_k per computed tile (full or partial): what the kernel's MMAs
    do over the tiles it does not skip, whatever the mask removes inside them.
    computed_tiles counts the (query positions x keys) tiles of flexjit_tile(), summed over
    the kv heads (each covers its group's query heads) and requests, or over the query heads
    where the rows are head-major."""
    tile_q, tile_k = flexjit_tile(workload, tile_k)
    heads = 1 if head_major(workload) else workload.num_heads // workload.num_kv_heads
    return 4 * workload.head_dim * tile_q * heads * tile_k * computed_tiles


def flops(workload, pairs):
    """4 * head_dim FLOPs per visible pair per query head (Q·K and P·V)."""
    return 4 * workload.head_dim * workload.num_heads * pairs


def kv_bytes(workload, element_bytes=None):
    """Bytes of K and V that must be read: every key of every request, once per kv head, of
    `element_bytes` each (default: the workload's cache, 1 for fp8, else 2)."""
    if element_bytes is None:
        element_bytes = 1 if workload.kv_dtype == "fp8" else 2
    keys = sum(seq_len for _, seq_len in workload.requests)
    return 2 * keys * workload.num_kv_heads * workload.head_dim * element_bytes


def set_value(values):
    """An array as `flexjit hints --set` takes it: runs of equal values as `V*N`, rows of a
    two-dimensional array separated by `;`."""
    if values and isinstance(values[0], (list, tuple)):
        return ";".join(set_value(row) for row in values)
    items, i = [], 0
    while i < len(values):
        j = i
        while j < len(values) and values[j] == values[i]:
            j += 1
        items.append(f"{values[i]}*{j - i}" if j - i > 1 else f"{values[i]}")
        i = j
    return ",".join(items)


# Arrays the masks read, as `--set` values (score-only arrays such as slopes and t5_bias do
# not change the map and are left out). `bits` has free dimensions: the analysis bounds its
# reads by nothing, so the map does not depend on its contents and one word stands for it.
def hints_sets(workload):
    p, sets = workload.params, []
    for name, value in p.items():
        if name in ("slopes", "t5_bias"):
            continue
        if name == "bits_seed":
            sets.append("bits=0")
        elif name == "prefix_len":
            sets.append(f"prefix_len={value[0]}")
        elif name == "doc":
            sets.append(f"doc={set_value(list(value[0]))}")
        elif isinstance(value, list):
            sets.append(f"{name}={set_value(value)}")
        else:
            sets.append(f"{name}={value}")
    return sets


def computed_tiles(workload, hints, tile_k):
    """Tiles flexjit's prefill kernel computes (full or partial, not skipped), in tiles of
    flexjit_tile(workload, tile_k), summed over the kv heads, for a one-request prefill
    workload; None where that does not apply. hints(extra_args) runs `flexjit hints ... --json`
    with the shape, tile, mask file and mask filled in and returns its JSON (the caller runs the
    CLI). A mask that reads h is mapped per query head, whose rows the kernel packs apart
    (head_major()), and summed over the query heads."""
    tile = flexjit_tile(workload, tile_k)
    if tile is None or workload.kind != "prefill" or len(workload.requests) != 1:
        return None
    sets = [arg for value in hints_sets(workload) for arg in ("--set", value)]
    if not head_major(workload):
        counts = hints(sets)["counts"]
        return (counts["full"] + counts["partial"]) * workload.num_kv_heads
    total = 0
    for h in range(workload.num_heads):
        counts = hints(sets + ["--h", str(h)])["counts"]
        total += counts["full"] + counts["partial"]
    return total


def hints_command(cli, mask_file, workload, tile_k):
    """The `flexjit hints` command line computed_tiles() extends."""
    query_len, seq_len = workload.requests[0]
    tile_q, tile_k = flexjit_tile(workload, tile_k)
    return [str(cli), "hints", str(mask_file), "--mask", workload.flexjit_mask, "--q-len",
            str(query_len), "--kv-len", str(seq_len), "--tile", f"{tile_q}x{tile_k}", "--json"]


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
    head = ("| workload | impl | layout | ms | TFLOP/s | dense TFLOP/s | GB/s | err vs fp32 | "
            "Δ vs flex | Δ vs flexjit | flexjit ÷ impl | note |")
    lines = [head, "|" + "---|" * 12]
    for r in rows:
        if r.get("ms") is None:
            cells = [r["workload"], r["impl"], r.get("layout", ""), "n/a", "", "", "", "", "",
                     "", "", r.get("note", "")]
        else:
            cells = [r["workload"], r["impl"], r.get("layout", ""), _number(r["ms"], 3),
                     _number(r.get("tflops"), 1), _number(r.get("dense_tflops"), 1),
                     _number(r.get("gbps"), 0), _error(r.get("err_ref")),
                     _error(r.get("diff_flex")), _error(r.get("diff_flexjit")),
                     _number(r.get("ratio"), 2), r.get("note", "")]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ")
                                       for c in cells) + " |")
    return "\n".join(lines)


def metadata_table(rows):
    """Per workload: flexjit's host time per launch beside create_block_mask's time."""
    lines = ["| workload | flexjit launch (host µs, prepared) | flexjit call (host µs, "
             "checks + launch) | plan update (host µs) | plan run (host µs) | graph replay (ms) "
             "| flexjit kernel (ms) | flex create_block_mask (ms) | FA4 block sparsity (ms) "
             "| FA4 first call (s) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['workload']} | {_number(r.get('launch_us'), 1)} | "
                     f"{_number(r.get('call_us'), 1)} | {_number(r.get('plan_us'), 1)} | "
                     f"{_number(r.get('run_us'), 1)} | {_number(r.get('graph_ms'), 3)} | "
                     f"{_number(r.get('kernel_ms'), 3)} | {_number(r.get('block_mask_ms'), 2)} "
                     f"| {_number(r.get('fa4_block_sparsity_ms'), 2)} "
                     f"| {_number(r.get('fa4_compile_s'), 1)} |")
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
        cache = ", fp8 cache" if w.kv_dtype == "fp8" else ""
        lines.append(f"| {w.name} | {shape}, hd {w.head_dim}, {w.num_heads}/{w.num_kv_heads} "
                     f"heads{cache} | {w.flexjit_mask} | {peer} | {params} |")
    return "\n".join(lines)


def _describe_param(name, value):
    if name == "doc":
        counts = [len(set(row)) for row in value]
        return f"doc: {sum(counts)} documents of 512–2048 tokens"
    if name == "slopes":
        return "slopes: ALiBi's, 2^(-8(h+1)/H)"
    if name == "global_token":
        return f"global_token: {sum(value)} global tokens"
    if name == "random_block":
        return f"random_block: {sum(value[0])} random key blocks per query block"
    if name == "bits_seed":
        return f"bits: {BITS_PER_WORD} per int32 word, random_word seed {value}"
    if name == "head_window":
        return f"head_window: {min(value)}–{max(value)} by head"
    if name == "t5_bias":
        return f"t5_bias: T5 buckets expanded to {len(value[0])} distances per head"
    return f"{name}={value[0] if isinstance(value, list) and len(value) == 1 else value}"


def report(meta, rows, metadata_rows, chosen):
    """The dated block printed last (and written by --report)."""
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
        "(ragged batches packed into one sequence for flex); FA4 also paged on the same block "
        "table (separate K and V caches). TFLOP/s count visible pairs only (4·D per pair per "
        "head); dense TFLOP/s count 4·D·128·K per tile flexjit's kernel computes (its tile map, "
        "partial tiles whole); GB/s count the K/V bytes that must be read. err vs fp32: "
        "max |out − ref| / max |ref| on sampled rows; Δ vs flex, Δ vs flexjit: the same over "
        "the whole output against flex_attention's and flexjit's. flexjit ÷ impl > 1: flexjit "
        "is faster. FA4's block sparsity and flex's create_block_mask are timed apart (table "
        "below), not in ms.",
        "",
        metadata_table(metadata_rows),
        "",
        workload_table(chosen),
        "",
    ])
