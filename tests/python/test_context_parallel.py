"""Context parallelism in the Python module (C API 0.9, issue 36; docs/context_parallel.md).

On the CPU backend, without torch or numpy (host memory behind stand-in arrays): a batch of
requests (decodes and short prefills, GQA) split into N shards, interleaved as vLLM's decode
context parallelism deals them (runs of I keys per rank) and in contiguous uneven runs, each
shard run with its LSE and the shards merged with Context.merge_states_n, against the call
over every key, for causal, sliding-window, chunked and document masks and a position-dependent
score; the merge itself against its closed form (order, empty rows, NaN in an empty state,
sinks); KvShard's checks and the library's. With torch (skipped without it): the same over CPU
tensors through kernel(...), whose kept calls must not carry one call's shard into the next.
"""

import ctypes
import math
import random
import struct
import unittest

from support import REPO, CudaArray, FakeTensor, library_available
from test_bad_input import HostArray

import flexjit
from flexjit import KvShard, Status, shard_positions, shard_seq_lens

try:
    import torch
except ImportError:
    torch = None

MASKS = str(REPO / "dsl" / "lib" / "standard.mask")
NO_LIBRARY = "libflexjit_runtime.so not found (set FLEXJIT_LIBRARY)"
NO_TORCH = "torch is not installed (CI has none)"

HEADS, KV_HEADS, HEAD_DIM, PAGE = 8, 2, 64, 16
# (keys over every shard, query rows) of each request: decodes and short prefills. The second
# is shorter than two runs of 16 keys: with 4 ranks and interleave 16, ranks 2 and 3 hold none
# of it.
REQUESTS = [(203, 1), (20, 3), (517, 1), (96, 4)]
# The merged result against the call over every key: fp16 partial outputs, each rounded once
# before the merge, stay within 2 fp16 ulps at 1 (a dropped or doubled key of a request moves
# its rows' lse by about 1 / (the keys it sees), far more than LSE_TOLERANCE); bf16 ones within
# 2 bf16 ulps.
OUT_TOLERANCE = 2.0**-9
BF16_TOLERANCE = 2.0**-7
LSE_TOLERANCE = 1e-4


class Host(HostArray):
    """test_bad_input's HostArray (zeroed host memory of its own, 64-byte aligned) with element
    reads and writes: what a CPU kernel reads through the module's array interface."""

    ITEMSIZE = {"<f2": 2, "<f4": 4, "<i4": 4}

    def __init__(self, shape, typestr):
        super().__init__(shape, typestr)
        self.count = len(self.values)

    def part(self, index):
        """Row `index` of the first dimension, a view (as t[index])."""
        size = self.ITEMSIZE[self.typestr]
        return CudaArray(self.shape[1:], self.typestr, self.strides[1:],
                         self.ptr + index * self.strides[0] * size)

    def write(self, values, offset=0):
        """Writes `values` (numbers) from element `offset` on."""
        code = {"<f2": "e", "<f4": "f", "<i4": "i"}[self.typestr]
        data = struct.pack(f"<{len(values)}{code}", *values)
        ctypes.memmove(self.ptr + offset * self.ITEMSIZE[self.typestr], data, len(data))
        return self

    def read(self):
        """Every element, as Python numbers."""
        code = {"<f2": "e", "<f4": "f", "<i4": "i"}[self.typestr]
        data = ctypes.string_at(self.ptr, self.count * self.ITEMSIZE[self.typestr])
        return list(struct.unpack(f"<{self.count}{code}", data))


def int32s(values):
    return Host((len(values),), "<i4").write(values)


class Batch:
    """Requests of REQUESTS with random fp16 queries, keys and values (seeded), and the calls
    over any subset of each request's keys: a shard's cache holds its keys in shard order."""

    def __init__(self, seed=36, requests=REQUESTS):
        rng = random.Random(seed)
        self.requests = requests
        self.num_tokens = sum(rows for _, rows in requests)
        row = KV_HEADS * HEAD_DIM
        # keys[r][p]: the fp16 bytes of request r's key at position p, all kv heads.
        self.keys, self.values = (
            [[struct.pack(f"<{row}e", *(rng.uniform(-1, 1) for _ in range(row)))
              for _ in range(length)] for length, _ in requests] for _ in range(2))
        self.q = Host((self.num_tokens, HEADS, HEAD_DIM), "<f2").write(
            [rng.uniform(-2, 2) for _ in range(self.num_tokens * HEADS * HEAD_DIM)])
        starts = [0]
        for _, rows in requests:
            starts.append(starts[-1] + rows)
        self.query_start_loc = int32s(starts)
        self.global_seq_lens = [length for length, _ in requests]

    def arrays(self, positions):
        """Kernel.prepare's caches, block table and seq_lens for a call holding request r's keys
        at positions[r], in that order (block ids handed out backwards, as a cache reuses
        them)."""
        blocks = [-(-len(held) // PAGE) for held in positions]
        total = sum(blocks) + 1
        k_cache, v_cache = (Host((total, PAGE, KV_HEADS, HEAD_DIM), "<f2") for _ in range(2))
        table = Host((len(positions), max(max(blocks), 1)), "<i4")
        row_bytes = KV_HEADS * HEAD_DIM * 2
        next_block = total - 1
        for r, held in enumerate(positions):
            ids = list(range(next_block, next_block - blocks[r], -1))
            next_block -= blocks[r]
            table.write(ids, r * table.shape[1])
            for j, p in enumerate(held):
                slot = ids[j // PAGE] * PAGE + j % PAGE
                ctypes.memmove(k_cache.ptr + slot * row_bytes, self.keys[r][p], row_bytes)
                ctypes.memmove(v_cache.ptr + slot * row_bytes, self.values[r][p], row_bytes)
        return dict(q=self.q, k_cache=k_cache, v_cache=v_cache, block_table=table,
                    query_start_loc=self.query_start_loc,
                    seq_lens=int32s([len(held) for held in positions]))

    def run(self, kernel, positions, out, lse, kv_shard=None, **options):
        launch = kernel.prepare(**self.arrays(positions), out=out, lse=lse,
                                max_query_len=max(rows for _, rows in self.requests),
                                kv_shard=kv_shard, **options)
        launch.launch()
        return launch

    def whole(self, kernel, **options):
        """(out, lse) of the call over every key."""
        out = Host((self.num_tokens, HEADS, HEAD_DIM), "<f2")
        lse = Host((self.num_tokens, HEADS), "<f4")
        self.run(kernel, [range(length) for length in self.global_seq_lens], out, lse,
                 **options)
        return out, lse

    def sharded(self, kernel, ctx, shards, sinks=None, **options):
        """(out, lse) of the calls over `shards`, [(KvShard, positions per request)], each into
        its row of an all-gathered [N, tokens, heads, head_dim] and [N, tokens, heads], merged
        with merge_states_n."""
        count = len(shards)
        states = Host((count, self.num_tokens, HEADS, HEAD_DIM), "<f2")
        states_lse = Host((count, self.num_tokens, HEADS), "<f4")
        for s, (shard, positions) in enumerate(shards):
            self.run(kernel, positions, states.part(s), states_lse.part(s), kv_shard=shard,
                     **options)
        out = Host((self.num_tokens, HEADS, HEAD_DIM), "<f2")
        lse = Host((self.num_tokens, HEADS), "<f4")
        ctx.merge_states_n(states, states_lse, out=out, lse=lse, sinks=sinks, device="cpu")
        return out, lse


def interleaved(batch, count, interleave):
    """vLLM's layout: rank R of `count` holds the runs of `interleave` keys dealt to it."""
    shards = []
    for rank in range(count):
        positions = [shard_positions(length, rank, count, interleave)
                     for length in batch.global_seq_lens]
        shard = KvShard(rank, count, interleave, global_seq_lens=batch.global_seq_lens)
        shards.append((shard, positions))
    return shards


def contiguous(batch, count, seed):
    """Uneven contiguous runs: shard s holds [cut_s, cut_s+1) of each request, the cuts drawn
    at random; shard 0 holds no key of the first request."""
    rng = random.Random(seed)
    cuts = []
    for r, length in enumerate(batch.global_seq_lens):
        inner = sorted(rng.randint(0, length) for _ in range(count - 1))
        if r == 0:
            inner[0] = 0
        cuts.append([0] + inner + [length])
    return [(KvShard(offsets=[c[s] for c in cuts], global_seq_lens=batch.global_seq_lens),
             [range(c[s], c[s + 1]) for c in cuts]) for s in range(count)]


def max_difference(a, b):
    worst = 0.0
    for x, y in zip(a, b):
        if x != y:  # equal infinities (an lse of -inf) differ by nothing
            worst = max(worst, abs(x - y))
    return worst


@unittest.skipUnless(library_available(), NO_LIBRARY)
class ShardedAttentionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ctx = flexjit.Context()
        cls.program = cls.ctx.program_from_file(MASKS)
        cls.batch = Batch()
        longest = max(cls.batch.global_seq_lens)
        # Documents of 50 keys, read at the keys' positions in the whole request.
        cls.doc = Host((len(REQUESTS), longest), "<i4").write(
            [p // 50 for _ in REQUESTS for p in range(longest)])
        cls.slopes = Host((HEADS,), "<f4").write([2.0**-(h + 1) for h in range(HEADS)])

    def kernel(self, mask, **options):
        return self.ctx.kernel(self.program, mask, head_dim=HEAD_DIM, dtype="fp16",
                               page_size=PAGE, arch="cpu", **options)

    def masks(self):
        """(name, kernel, launch options) of the masks and scores the shards must see at the
        positions the keys have in the whole request."""
        return [("causal", self.kernel("causal"), {}),
                ("sliding", self.kernel("sliding"), dict(params={"window": 37})),
                ("chunked", self.kernel("chunked", defines={"chunk": 48}), {}),
                ("document", self.kernel("document"), dict(arrays={"doc": self.doc})),
                ("causal_alibi", self.kernel("causal_alibi"),
                 dict(arrays={"slopes": self.slopes}))]

    def assert_close(self, got, want, what):
        out, lse = got
        want_out, want_lse = want
        self.assertLessEqual(max_difference(out.read(), want_out.read()), OUT_TOLERANCE, what)
        want_lse = want_lse.read()
        self.assertTrue(all(math.isfinite(x) for x in want_lse), what)
        self.assertLessEqual(max_difference(lse.read(), want_lse),
                             LSE_TOLERANCE * (1 + max(abs(x) for x in want_lse)), what)

    def test_shard_helpers_match_the_layout(self):
        for length in (0, 1, 15, 16, 17, 20, 63, 64, 65, 203, 517):
            for count in (1, 2, 3, 4):
                for interleave in (1, 3, 16):
                    held = [shard_seq_lens(length, rank, count, interleave)
                            for rank in range(count)]
                    positions = [shard_positions(length, rank, count, interleave)
                                 for rank in range(count)]
                    self.assertEqual(held, [len(p) for p in positions])
                    self.assertEqual(sorted(sum(positions, [])), list(range(length)))
                    for rank, mine in enumerate(positions):  # the header's formula
                        self.assertEqual(mine, [(j // interleave) * count * interleave +
                                                rank * interleave + j % interleave
                                                for j in range(held[rank])])
        self.assertEqual(shard_seq_lens([20, 203], 2, 4, 16), [0, 48])
        with self.assertRaisesRegex(ValueError, "rank 4 is not below count 4"):
            shard_seq_lens(20, 4, 4, 16)

    def test_interleaved_shards_merge_to_the_whole_call(self):
        for name, kernel, options in self.masks():
            want = self.batch.whole(kernel, **options)
            for count in (2, 3, 4):
                for interleave in (1, 16):
                    with self.subTest(mask=name, count=count, interleave=interleave):
                        shards = interleaved(self.batch, count, interleave)
                        got = self.batch.sharded(kernel, self.ctx, shards, **options)
                        self.assert_close(got, want, f"{name} N={count} I={interleave}")

    def test_contiguous_uneven_shards_merge_to_the_whole_call(self):
        for name, kernel, options in self.masks():
            want = self.batch.whole(kernel, **options)
            for count in (2, 3, 4):
                with self.subTest(mask=name, count=count):
                    shards = contiguous(self.batch, count, seed=count)
                    self.assertEqual(shards[0][1][0], range(0, 0))  # a shard of no key
                    got = self.batch.sharded(kernel, self.ctx, shards, **options)
                    self.assert_close(got, want, f"{name} contiguous N={count}")

    def test_random_small_batches(self):
        # Short requests make the edges common: shards ending inside a run or a page, ranks
        # holding one key or none, queries at the first positions of a shard.
        rng = random.Random(9)
        kernels = {"causal": self.kernel("causal"), "sliding": self.kernel("sliding")}
        for case in range(40):
            requests = []
            for _ in range(rng.randint(1, 4)):
                length = rng.randint(1, 70)
                requests.append((length, rng.randint(1, min(4, length))))
            batch = Batch(seed=case, requests=requests)
            count = rng.randint(2, 4)
            interleave = rng.choice((1, 2, 3, 16))
            mask = rng.choice(sorted(kernels))
            options = dict(params={"window": rng.randint(1, 40)}) if mask == "sliding" else {}
            want = batch.whole(kernels[mask], **options)
            for layout, shards in (("interleaved", interleaved(batch, count, interleave)),
                                   ("contiguous", contiguous(batch, count, seed=case))):
                with self.subTest(case=case, layout=layout):
                    got = batch.sharded(kernels[mask], self.ctx, shards, **options)
                    self.assert_close(got, want, f"{mask} {options} {requests} {layout} "
                                      f"N={count} I={interleave}")

    def test_a_shard_of_no_key_gives_empty_rows(self):
        # Ranks 2 and 3 of 4 (runs of 16) hold none of request 1's 20 keys: its rows (tokens 1
        # to 3) get out 0 and lse -inf there, and a shard's rows that see none of its keys
        # likewise; the merge drops them.
        kernel = self.kernel("causal")
        out = Host((self.batch.num_tokens, HEADS, HEAD_DIM), "<f2")
        lse = Host((self.batch.num_tokens, HEADS), "<f4")
        shard, positions = interleaved(self.batch, 4, 16)[2]
        self.assertEqual(len(positions[1]), 0)
        self.batch.run(kernel, positions, out, lse, kv_shard=shard)
        rows = range(1 * HEADS, 4 * HEADS)
        self.assertEqual([lse.read()[i] for i in rows], [-math.inf] * len(rows))
        self.assertEqual(out.read()[HEADS * HEAD_DIM:4 * HEADS * HEAD_DIM],
                         [0.0] * (3 * HEADS * HEAD_DIM))

    def test_sinks_join_the_merge_once(self):
        kernel = self.kernel("sliding")
        sinks = Host((HEADS,), "<f4").write([-1.0 + 0.5 * h for h in range(HEADS)])
        options = dict(params={"window": 37})
        want = self.batch.whole(kernel, sinks=sinks, **options)
        got = self.batch.sharded(kernel, self.ctx, interleaved(self.batch, 3, 16), sinks=sinks,
                                 **options)
        self.assert_close(got, want, "sinks")
        unsunk = self.batch.whole(kernel, **options)  # the sinks change the result
        self.assertGreater(max_difference(unsunk[0].read(), want[0].read()), 0.01)

    def test_shard_arrays_are_checked_here(self):
        kernel = self.kernel("causal")
        arrays = self.batch.arrays([range(length) for length in self.batch.global_seq_lens])
        out = Host((self.batch.num_tokens, HEADS, HEAD_DIM), "<f2")
        cases = [
            (KvShard(1, 2, global_seq_lens=[20, 30]), ValueError,
             "kv_shard.global_seq_lens: 2 entries, expected one per request (num_reqs = 4)"),
            (KvShard(offsets=Host((4,), "<f4"), global_seq_lens=self.batch.global_seq_lens),
             ValueError, "kv_shard.offsets: dtype fp32, expected int32"),
            (KvShard(offsets=Host((2, 2), "<i4"), global_seq_lens=self.batch.global_seq_lens),
             ValueError, "kv_shard.offsets: expected 1 dimensions"),
            ((0, 2, 16), TypeError, "kv_shard: expected a flexjit.KvShard, got tuple"),
        ]
        for shard, error, message in cases:
            with self.subTest(message):
                with self.assertRaises(error) as caught:
                    kernel.prepare(**arrays, out=out, max_query_len=4, kv_shard=shard)
                self.assertIn(message, str(caught.exception))
        # A GPU kernel takes device arrays: a list KvShard copied to the host is refused.
        gpu, stand_ins = self.gpu_call()
        with self.assertRaisesRegex(ValueError, "kv_shard.global_seq_lens: not a CUDA device "
                                    "array"):
            gpu.prepare(**stand_ins, max_query_len=4,
                        kv_shard=KvShard(0, 2, global_seq_lens=[40, 40]))

    def gpu_call(self):
        """An sm_90a kernel (compiled by NVRTC, no GPU needed) and stand-in device arrays of a
        two-request call, never launched on a device."""
        gpu = self.ctx.kernel(self.program, "causal", head_dim=HEAD_DIM, dtype="fp16",
                              page_size=PAGE, arch="sm_90a")
        stand_ins = dict(q=CudaArray((6, HEADS, HEAD_DIM)), out=CudaArray((6, HEADS, HEAD_DIM)),
                         k_cache=CudaArray((4, PAGE, KV_HEADS, HEAD_DIM)),
                         v_cache=CudaArray((4, PAGE, KV_HEADS, HEAD_DIM)),
                         block_table=CudaArray((2, 2), "<i4"),
                         query_start_loc=CudaArray((3,), "<i4"), seq_lens=CudaArray((2,), "<i4"))
        return gpu, stand_ins

    def test_the_library_checks_the_shard(self):
        # What KvShard cannot see: the struct's fields reach the library's own checks.
        kernel = self.kernel("causal")
        shard, positions = interleaved(self.batch, 2, 16)[1]
        out = Host((self.batch.num_tokens, HEADS, HEAD_DIM), "<f2")
        lse = Host((self.batch.num_tokens, HEADS), "<f4")
        launch = self.batch.run(kernel, positions, out, lse, kv_shard=shard)
        self.assertEqual((launch.args.kv_shard_rank, launch.args.kv_shard_count,
                          launch.args.kv_shard_interleave), (1, 2, 16))
        self.assertIsNone(launch.args.kv_shard_offsets)
        cases = [(dict(global_seq_lens=None), "global_seq_lens"),
                 (dict(kv_shard_rank=2), "kv_shard_rank"),
                 (dict(kv_shard_rank=-1), "kv_shard_rank"),
                 (dict(kv_shard_count=-1), "kv_shard_count"),
                 (dict(kv_shard_interleave=-1), "kv_shard_interleave")]
        for changes, words in cases:
            with self.subTest(changes=changes):
                launch = kernel.prepare(**self.batch.arrays(positions), out=out, lse=lse,
                                        max_query_len=4, kv_shard=shard)
                for name, value in changes.items():
                    setattr(launch.args, name, value)
                with self.assertRaises(flexjit.FlexjitError) as caught:
                    launch.launch()
                self.assertEqual(caught.exception.status, Status.INVALID_ARGUMENT)
                self.assertIn(words, caught.exception.message)
        # Keys past the request's global length: rank 1 of 2 holds keys up to position 203 of
        # request 0, so a global length of 100 leaves some outside.
        short = KvShard(1, 2, 16, global_seq_lens=[100] + self.batch.global_seq_lens[1:])
        with self.assertRaises(flexjit.FlexjitError) as caught:
            self.batch.run(kernel, positions, out, lse, kv_shard=short)
        self.assertEqual(caught.exception.status, Status.INVALID_ARGUMENT)

    def test_gpu_kernels_take_device_shards(self):
        # A GPU kernel's prepared call carries the device array (never launched here: the
        # stand-ins' pointers are not memory; the [gpu] tests and test_context_parallel_torch
        # run sharded CUDA calls).
        gpu, stand_ins = self.gpu_call()
        shard = KvShard(0, 2, global_seq_lens=CudaArray((2,), "<i4", ptr=0x7F0000900000))
        launch = gpu.prepare(**stand_ins, max_query_len=4, kv_shard=shard)
        self.assertEqual(launch.args.global_seq_lens, 0x7F0000900000)
        self.assertEqual((launch.args.kv_shard_rank, launch.args.kv_shard_count), (0, 2))


class KvShardTest(unittest.TestCase):
    def test_checks(self):
        cases = [(dict(rank=2, count=2, global_seq_lens=[1]), ValueError,
                  "kv_shard: rank 2 is not below count 2"),
                 (dict(rank=-1, count=2, global_seq_lens=[1]), ValueError,
                  "kv_shard: rank must be in [0, 2**31), got -1"),
                 (dict(count=0), ValueError, "kv_shard: count must be in [1, 2**31), got 0"),
                 (dict(interleave=0), ValueError, "kv_shard: interleave must be in [1, 2**31)"),
                 (dict(rank=True, count=2), TypeError, "kv_shard: rank must be an int, got bool"),
                 (dict(count=2.0), TypeError, "kv_shard: count must be an int, got float"),
                 (dict(rank=1, count=2), ValueError,
                  "kv_shard: global_seq_lens is required with count > 1 or offsets"),
                 (dict(offsets=[0, 5]), ValueError, "global_seq_lens is required"),
                 (dict(count=2, global_seq_lens=[2**31]), ValueError,
                  "kv_shard: global_seq_lens holds 2147483648, which does not fit in int32"),
                 (dict(count=2, global_seq_lens=5), TypeError,
                  "kv_shard: global_seq_lens must be a torch tensor, a device array or a "
                  "sequence of ints, got int")]
        for options, error, message in cases:
            with self.subTest(options=options):
                with self.assertRaises(error) as caught:
                    KvShard(**options)
                self.assertIn(message, str(caught.exception))

    def test_sequences_become_host_int32(self):
        shard = KvShard(1, 3, 16, offsets=(0, 7), global_seq_lens=[40, 9])
        self.assertEqual((shard.rank, shard.count, shard.interleave), (1, 3, 16))
        self.assertEqual(list(shard.global_seq_lens), [40, 9])
        self.assertEqual(shard.offsets._type_, ctypes.c_int32)
        self.assertEqual(repr(shard), "KvShard(rank=1, count=3, interleave=16, "
                         "offsets=<c_int_Array_2>, global_seq_lens=<c_int_Array_2>)")
        held = CudaArray((2,), "<i4")
        self.assertIs(KvShard(0, 2, global_seq_lens=held).global_seq_lens, held)
        with self.assertRaises(AttributeError):
            shard.rank = 0

    @unittest.skipUnless(library_available(), NO_LIBRARY)
    def test_kept_calls_take_each_calls_shard(self):
        # paged_args keeps prepare()'s struct per geometry and writes only the pointers of
        # later calls: the shard's layout is part of the geometry, its arrays' pointers are
        # written per call, and a call without a shard is not one with. (Stand-in CPU tensors:
        # nothing is launched.)
        ctx = flexjit.Context()
        kernel = ctx.kernel(ctx.program_from_file(MASKS), "causal", head_dim=128,
                            dtype="bf16", page_size=64, arch="cpu")

        def tensor(shape, ptr, dtype="torch.bfloat16"):
            return FakeTensor(shape, dtype, ptr=ptr, device=None)

        arrays = dict(q=tensor((3, 32, 128), 0x7F0000100000),
                      out=tensor((3, 32, 128), 0x7F0000200000),
                      k_cache=tensor((10, 64, 8, 128), 0x7F0000300000),
                      v_cache=tensor((10, 64, 8, 128), 0x7F0000400000),
                      block_table=tensor((1, 10), 0x7F0000500000, "torch.int32"),
                      query_start_loc=tensor((2,), 0x7F0000600000, "torch.int32"),
                      seq_lens=tensor((1,), 0x7F0000700000, "torch.int32"))
        device = arrays["q"].device

        def lengths(ptr):
            made = tensor((1,), ptr, "torch.int32")
            made.device = device  # one device object, as torch's compare equal
            return made

        for a in arrays.values():
            a.device = device
        seen = []
        for rank, count, interleave, ptr in ((0, 2, 1, 0x7F0000800000), (1, 2, 1, 0x7F0000900000),
                                             (1, 2, 1, 0x7F0000A00000), (0, 4, 16, 0x7F0000B00000),
                                             (1, 2, 1, 0x7F0000C00000)):
            shard = KvShard(rank, count, interleave, global_seq_lens=lengths(ptr))
            args, _ = kernel.paged_args(**arrays, max_query_len=3, kv_shard=shard)
            seen.append((args.kv_shard_rank, args.kv_shard_count, args.kv_shard_interleave,
                         args.global_seq_lens, args.kv_shard_offsets))
        self.assertEqual(seen, [(0, 2, 1, 0x7F0000800000, None), (1, 2, 1, 0x7F0000900000, None),
                                (1, 2, 1, 0x7F0000A00000, None), (0, 4, 16, 0x7F0000B00000, None),
                                (1, 2, 1, 0x7F0000C00000, None)])
        self.assertEqual(len(kernel._templates), 3)
        args, _ = kernel.paged_args(**arrays, max_query_len=3)
        self.assertEqual((args.kv_shard_count, args.global_seq_lens, len(kernel._templates)),
                         (0, None, 4))
        with self.assertRaisesRegex(ValueError, "kv_shard.global_seq_lens: dtype fp32"):
            bad = tensor((1,), 0x7F0000D00000, "torch.float32")
            bad.device = device
            kernel.paged_args(**arrays, max_query_len=3,
                              kv_shard=KvShard(1, 2, global_seq_lens=bad))


def half_bits_round(value):
    """`value` rounded to fp16, as a float."""
    return struct.unpack("<e", struct.pack("<e", value))[0]


@unittest.skipUnless(library_available(), NO_LIBRARY)
class MergeStatesNTest(unittest.TestCase):
    TOKENS, STATES = 3, 4

    @classmethod
    def setUpClass(cls):
        cls.ctx = flexjit.Context()

    def states(self, seed=5):
        rng = random.Random(seed)
        states = Host((self.STATES, self.TOKENS, HEADS, HEAD_DIM), "<f2").write(
            [rng.uniform(-1, 1) for _ in range(self.STATES * self.TOKENS * HEADS * HEAD_DIM)])
        states_lse = Host((self.STATES, self.TOKENS, HEADS), "<f4").write(
            [rng.uniform(-3, 6) for _ in range(self.STATES * self.TOKENS * HEADS)])
        return states, states_lse

    def merge(self, states, states_lse, sinks=None):
        out = Host((self.TOKENS, HEADS, HEAD_DIM), "<f2")
        lse = Host((self.TOKENS, HEADS), "<f4")
        self.assertIs(self.ctx.merge_states_n(states, states_lse, out=out, lse=lse, sinks=sinks,
                                              device="cpu"), out)
        return out.read(), lse.read()

    def closed_form(self, states, states_lse, sinks=None):
        """The merge in float64, out rounded to fp16."""
        values, lses = states.read(), states_lse.read()
        rows = self.TOKENS * HEADS
        out, lse = [], []
        for row in range(rows):
            logits = [lses[s * rows + row] for s in range(self.STATES)]
            if sinks is not None:
                logits.append(sinks[row % HEADS])
            top = max(logits)
            if top == -math.inf:
                out += [0.0] * HEAD_DIM
                lse.append(-math.inf)
                continue
            weights = [math.exp(x - top) for x in logits]
            total = sum(weights)
            held = [s for s in range(self.STATES) if weights[s]]  # an empty state's out unread
            for d in range(HEAD_DIM):
                mixed = sum(weights[s] * values[(s * rows + row) * HEAD_DIM + d] for s in held)
                out.append(half_bits_round(mixed / total))
            lse.append(top + math.log(total))
        return out, lse

    def assert_merged(self, got, want):
        self.assertLessEqual(max_difference(got[0], want[0]), 2.0**-10)
        self.assertLessEqual(max_difference(got[1], want[1]), 1e-5)
        self.assertEqual([x == -math.inf for x in got[1]], [x == -math.inf for x in want[1]])

    def test_against_the_closed_form(self):
        states, states_lse = self.states()
        first = self.merge(states, states_lse)
        self.assert_merged(first, self.closed_form(states, states_lse))
        self.assertEqual(self.merge(states, states_lse), first)  # bit for bit, every time

    def test_order_of_the_states(self):
        # The states in the other order: the sum runs the other way, the same merge within
        # rounding, and deterministic in that order too.
        states, states_lse = self.states()
        backwards = Host(states.shape, "<f2")
        backwards_lse = Host(states_lse.shape, "<f4")
        for copy, original, size in ((backwards, states, 2), (backwards_lse, states_lse, 4)):
            step = original.strides[0] * size
            for s in range(self.STATES):
                ctypes.memmove(copy.ptr + (self.STATES - 1 - s) * step, original.ptr + s * step,
                               step)
        reversed_merge = self.merge(backwards, backwards_lse)
        self.assert_merged(reversed_merge, self.closed_form(states, states_lse))
        self.assertEqual(self.merge(backwards, backwards_lse), reversed_merge)

    def test_empty_rows_and_states(self):
        # Token 0: every state empty (lse -inf), its out 0 and lse -inf even with NaN outputs.
        # Token 1: states 1 and 3 empty, with NaN outputs that must not be read.
        states, states_lse = self.states()
        rows = self.TOKENS * HEADS
        nan_row = [math.nan] * HEAD_DIM
        for s in range(self.STATES):
            for h in range(HEADS):
                empty_row = s * rows + h
                states_lse.write([-math.inf], empty_row)
                states.write(nan_row, empty_row * HEAD_DIM)
        for s in (1, 3):
            for h in range(HEADS):
                row = s * rows + HEADS + h
                states_lse.write([-math.inf], row)
                states.write(nan_row, row * HEAD_DIM)
        out, lse = self.merge(states, states_lse)
        self.assertEqual(out[:HEADS * HEAD_DIM], [0.0] * (HEADS * HEAD_DIM))
        self.assertEqual(lse[:HEADS], [-math.inf] * HEADS)
        self.assertFalse(any(math.isnan(x) for x in out))
        self.assert_merged((out, lse), self.closed_form(states, states_lse))

    def test_sinks_are_counted_once(self):
        states, states_lse = self.states()
        for h in range(HEADS):  # token 0 empty everywhere: out 0, lse = the sink
            for s in range(self.STATES):
                states_lse.write([-math.inf], s * self.TOKENS * HEADS + h)
        sink_values = [0.5 * h - 1.0 for h in range(HEADS)]
        sinks = Host((HEADS,), "<f4").write(sink_values)
        out, lse = self.merge(states, states_lse, sinks)
        self.assert_merged((out, lse), self.closed_form(states, states_lse, sink_values))
        self.assertEqual(lse[:HEADS], [struct.unpack("<f", struct.pack("<f", x))[0]
                                       for x in sink_values])
        self.assertEqual(out[:HEADS * HEAD_DIM], [0.0] * (HEADS * HEAD_DIM))

    def test_one_state_is_a_copy(self):
        states, states_lse = self.states()
        one, one_lse = states.part(0), states_lse.part(0)
        one = CudaArray((1,) + one.shape, "<f2", (0,) + one.strides, one.ptr)
        one_lse = CudaArray((1,) + one_lse.shape, "<f4", (0,) + one_lse.strides, one_lse.ptr)
        out, lse = self.merge(one, one_lse)
        rows = self.TOKENS * HEADS
        self.assertEqual(out, states.read()[:rows * HEAD_DIM])
        self.assertEqual(lse, states_lse.read()[:rows])

    def test_two_way_merge_agrees(self):
        # fj_merge_states and fj_merge_states_n of two states sum alike.
        states, states_lse = self.states()
        two = CudaArray((2,) + states.shape[1:], "<f2", states.strides, states.ptr)
        two_lse = CudaArray((2,) + states_lse.shape[1:], "<f4", states_lse.strides,
                            states_lse.ptr)
        out = Host((self.TOKENS, HEADS, HEAD_DIM), "<f2")
        lse = Host((self.TOKENS, HEADS), "<f4")
        self.ctx.merge_states(states.part(0), states_lse.part(0), states.part(1),
                              states_lse.part(1), out=out, lse=lse, device="cpu")
        self.assertEqual((out.read(), lse.read()), self.merge(two, two_lse))  # bit for bit

    def test_bad_arrays(self):
        states, states_lse = self.states()
        out = Host((self.TOKENS, HEADS, HEAD_DIM), "<f2")
        cases = [
            (dict(out=Host((self.TOKENS, HEADS, HEAD_DIM), "<f4")), ValueError,
             "out: dtype fp32, expected bf16 or fp16"),
            (dict(out=Host((self.TOKENS, HEADS - 1, HEAD_DIM), "<f2")), ValueError,
             "out: fp16 (3, 7, 64), expected fp16 (3, 8, 64)"),
            (dict(states_lse=states_lse.part(0)), ValueError,
             "states_lse: expected 3 dimensions [num_states, num_tokens, num_heads]"),
            (dict(states_lse=Host((self.STATES, self.TOKENS, HEADS + 1), "<f4")), ValueError,
             "states_lse: shape (4, 3, 9), expected (4, 3, 8)"),
            (dict(lse=Host((self.TOKENS, HEADS), "<i4")), ValueError,
             "lse: dtype int32, expected fp32"),
            (dict(sinks=Host((HEADS + 1,), "<f4")), ValueError, "sinks: 9 entries"),
            (dict(out=None), ValueError, "out is required when states_out is not a torch"),
            (dict(device="gpu"), ValueError, "device must be 'cpu' or 'cuda', got 'gpu'"),
        ]
        for changes, error, message in cases:
            with self.subTest(message):
                arguments = dict(states_out=states, states_lse=states_lse, out=out,
                                 device="cpu")
                arguments.update(changes)
                with self.assertRaises(error) as caught:
                    self.ctx.merge_states_n(**arguments)
                self.assertIn(message, str(caught.exception))
        # What the library checks: no state, and an lse that overlaps the states' LSEs.
        for arguments in (dict(states_out=CudaArray((0,) + states.shape[1:], "<f2",
                                                    ptr=states.ptr),
                               states_lse=CudaArray((0,) + states_lse.shape[1:], "<f4",
                                                    ptr=states_lse.ptr)),
                          dict(states_out=states, states_lse=states_lse,
                               lse=states_lse.part(1))):
            with self.subTest(arguments=sorted(arguments)):
                with self.assertRaises(flexjit.FlexjitError) as caught:
                    self.ctx.merge_states_n(out=out, device="cpu", **arguments)
                self.assertEqual(caught.exception.status, Status.INVALID_ARGUMENT)

    def test_the_gpu_merge_takes_head_dims_up_to_256(self):
        # Checked before any device work (stand-in arrays, never read); a GPU merges head
        # dim 256 (the [gpu] tests).
        with self.assertRaises(flexjit.FlexjitError) as caught:
            self.ctx.merge_states_n(CudaArray((2, 3, HEADS, 264)), CudaArray((2, 3, HEADS), "<f4"),
                                    out=CudaArray((3, HEADS, 264)), device="cuda")
        self.assertEqual(caught.exception.status, Status.UNSUPPORTED, caught.exception)
        self.assertIn("above 256", caught.exception.message)


@unittest.skipUnless(library_available(), NO_LIBRARY)
@unittest.skipIf(torch is None, NO_TORCH)
class TorchTest(unittest.TestCase):
    def test_kept_calls_over_cpu_tensors(self):
        # kernel(...) keeps a call's struct per geometry: every rank's shard has one geometry
        # here (caches of one size), so each later rank's call takes the first one's struct,
        # which must then carry its own rank.
        ctx = flexjit.Context()
        kernel = ctx.kernel(ctx.program_from_file(MASKS), "sliding", head_dim=HEAD_DIM,
                            dtype="bf16", page_size=PAGE, arch="cpu")
        gen = torch.Generator().manual_seed(36)
        lengths = [length for length, _ in REQUESTS]
        rows = [count for _, count in REQUESTS]
        qsl = torch.tensor([0] + list(torch.tensor(rows).cumsum(0)), dtype=torch.int32)
        q = torch.randn(sum(rows), HEADS, HEAD_DIM, generator=gen).bfloat16()
        keys = [torch.randn(length, KV_HEADS, HEAD_DIM, generator=gen).bfloat16()
                for length in lengths]
        values = [torch.randn(length, KV_HEADS, HEAD_DIM, generator=gen).bfloat16()
                  for length in lengths]
        blocks = -(-max(lengths) // PAGE)

        def call(positions, kv_shard=None):
            k_cache = torch.zeros(len(REQUESTS) * blocks, PAGE, KV_HEADS, HEAD_DIM,
                                  dtype=torch.bfloat16)
            v_cache = torch.zeros_like(k_cache)
            for r, held in enumerate(positions):
                index = torch.tensor(held, dtype=torch.long)
                k_cache.view(-1, KV_HEADS, HEAD_DIM)[r * blocks * PAGE:][:len(held)] = \
                    keys[r][index]
                v_cache.view(-1, KV_HEADS, HEAD_DIM)[r * blocks * PAGE:][:len(held)] = \
                    values[r][index]
            table = torch.arange(len(REQUESTS) * blocks, dtype=torch.int32).view(-1, blocks)
            seq_lens = torch.tensor([len(held) for held in positions], dtype=torch.int32)
            lse = torch.empty(sum(rows), HEADS)
            out = kernel(q, k_cache, v_cache, table, qsl, seq_lens, lse=lse, max_query_len=4,
                         params={"window": 37}, kv_shard=kv_shard)
            return out, lse

        want, want_lse = call([list(range(length)) for length in lengths])
        global_seq_lens = torch.tensor(lengths, dtype=torch.int32)
        for count, interleave in ((2, 1), (4, 16)):
            with self.subTest(count=count, interleave=interleave):
                kept = len(kernel._templates)
                parts = [call([shard_positions(length, rank, count, interleave)
                               for length in lengths],
                              KvShard(rank, count, interleave, global_seq_lens=global_seq_lens))
                         for rank in range(count)]
                self.assertEqual(len(kernel._templates), kept + count)  # one per rank
                out = ctx.merge_states_n(torch.stack([o for o, _ in parts]),
                                         torch.stack([lse for _, lse in parts]))
                self.assertEqual((out.dtype, out.shape), (torch.bfloat16, want.shape))
                self.assertLessEqual((out.float() - want.float()).abs().max().item(),
                                     BF16_TOLERANCE)


if __name__ == "__main__":
    unittest.main()
