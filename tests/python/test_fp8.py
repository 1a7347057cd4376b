"""The fp8 (e4m3) K/V cache of C API 0.8 in the Python module.

Without a GPU: the argument checks on stand-in arrays (scales, cache dtypes, byte strides), the
struct fields reaching the library's own checks, the kept-call path, and on the CPU backend the
attention over an fp8 cache (a closed form without torch; with torch, a float64 reference over
the dequantized K/V within bf16 tolerances), the cache write's quantization (against torch's
float8_e4m3fn conversion of x / scale, saturated), the torch operator on CPU tensors and
flex_attention_paged. With a GPU (skipped without CUDA): the same through the CUDA kernels, the
operators, a plan, and the cache write on the device. On the GPU machine:

    cd tests/python && FLEXJIT_LIBRARY=$PWD/../../.carry/lib/libflexjit_runtime.so \\
        python3 -m unittest -v test_fp8
"""

import ctypes
import math
import struct
import unittest

from support import REPO, CudaArray, FakeTensor, library_available
from test_bad_input import HostArray

import flexjit
from flexjit import Dtype, Status
from flexjit._arrays import cache_write_fields, describe, paged_fields

try:
    import torch
except ImportError:
    torch = None

MASKS = str(REPO / "dsl" / "lib" / "standard.mask")
NO_TORCH = "torch is not installed (CI has none)"
NO_LIBRARY = "libflexjit_runtime.so not found (set FLEXJIT_LIBRARY)"
NO_CUDA = "no CUDA device (torch.cuda.is_available() is False)"


def cuda_available():
    return torch is not None and torch.cuda.is_available()


# --- the argument checks, on stand-ins ----------------------------------------------------------

def fp8_paged(kv_dtype="fp8", **changes):
    """paged_fields of a call over a joint fp8 cache [6 blocks, 2, page 16, 2 kv heads, 64]
    (stand-ins, bytes), fp16 q, per-tensor scales; `changes` replace arrays (None drops one)."""
    joint = CudaArray((6, 2, 16, 2, 64), "|u1", ptr=0x7F0000100000)
    arrays = dict(q=CudaArray((5, 4, 64)), out=CudaArray((5, 4, 64)),
                  k_cache=joint.view(0), v_cache=joint.view(1),
                  block_table=CudaArray((2, 3), "<i4"), query_start_loc=CudaArray((3,), "<i4"),
                  seq_lens=CudaArray((2,), "<i4"), k_scale=CudaArray((1,), "<f4", ptr=0x1000),
                  v_scale=CudaArray((), "<f4", ptr=0x2000))
    arrays.update(changes)
    layout = arrays.pop("kv_layout", "NHD")
    return paged_fields(head_dim=64, page_size=16, dtype="fp16", kv_dtype=kv_dtype,
                        kv_layout=layout, **{k: describe(v, k) for k, v in arrays.items()
                                             if v is not None})


def cache_write(**changes):
    """cache_write_fields of 3 tokens of fp16 keys into the fp8 cache of fp8_paged."""
    joint = CudaArray((6, 2, 16, 2, 64), "|u1", ptr=0x7F0000100000)
    arrays = dict(key=CudaArray((3, 2, 64)), value=CudaArray((3, 2, 64)),
                  k_cache=joint.view(0), v_cache=joint.view(1),
                  slot_mapping=CudaArray((3,), "<i8"), k_scale=CudaArray((2,), "<f4", ptr=0x1000),
                  v_scale=CudaArray((2,), "<f4", ptr=0x2000))
    arrays.update(changes)
    layout = arrays.pop("kv_layout", "NHD")
    return cache_write_fields(kv_layout=layout, **{k: describe(v, k) for k, v in arrays.items()
                                                   if v is not None})


class ArgumentsTest(unittest.TestCase):
    def test_scales_per_tensor_and_per_kv_head(self):
        f = fp8_paged()
        self.assertEqual((f["k_scale"], f["v_scale"], f["kv_scale_stride"]), (0x1000, 0x2000, 0))
        f = fp8_paged(k_scale=CudaArray((2,), "<f4", ptr=0x3000),
                      v_scale=CudaArray((2,), "<f4", ptr=0x4000))
        self.assertEqual((f["k_scale"], f["v_scale"], f["kv_scale_stride"]), (0x3000, 0x4000, 1))

    def test_cache_strides_are_bytes(self):
        f = fp8_paged()
        self.assertEqual((f["k_stride_block"], f["k_stride_slot"], f["k_stride_head"]),
                         (2 * 16 * 2 * 64, 2 * 64, 64))
        self.assertEqual(f["v_cache"] - f["k_cache"], 16 * 2 * 64)
        joint = CudaArray((6, 2, 2, 16, 64), "|u1")  # [blocks, 2, H_kv, page, D]
        f = fp8_paged(k_cache=joint.view(0), v_cache=joint.view(1), kv_layout="HND")
        self.assertEqual((f["k_stride_block"], f["k_stride_slot"], f["k_stride_head"]),
                         (2 * 2 * 16 * 64, 64, 16 * 64))

    def test_torch_fp8_and_uint8_caches(self):
        for dtype in ("torch.float8_e4m3fn", "torch.uint8"):
            with self.subTest(dtype):
                joint = FakeTensor((10, 64, 8, 256), dtype)
                tensors = dict(q=FakeTensor((3, 32, 128)), out=FakeTensor((3, 32, 128)),
                               k_cache=FakeTensor((10, 64, 8, 128), dtype,
                                                  strides=joint.stride()),
                               v_cache=FakeTensor((10, 64, 8, 128), dtype,
                                                  strides=joint.stride(), ptr=joint._ptr + 128),
                               block_table=FakeTensor((1, 10), "torch.int32"),
                               query_start_loc=FakeTensor((2,), "torch.int32"),
                               seq_lens=FakeTensor((1,), "torch.int32"),
                               k_scale=FakeTensor((8,), "torch.float32"),
                               v_scale=FakeTensor((8,), "torch.float32"))
                f = paged_fields(head_dim=128, page_size=64, dtype="bf16", kv_dtype="fp8",
                                 **{k: describe(v, k) for k, v in tensors.items()})
                self.assertEqual((f["k_stride_slot"], f["kv_scale_stride"]), (8 * 256, 1))

    def test_rejections(self):
        wide = CudaArray((6, 16, 2, 64), "<f2")
        cases = [
            (dict(k_scale=None), "k_scale: required with an fp8 K/V cache"),
            (dict(k_scale=None, v_scale=None), "k_scale and v_scale: required"),
            (dict(v_scale=CudaArray((3,), "<f4")), "v_scale: 3 elements, expected 1 (one scale "
             "for the cache) or num_kv_heads = 2"),
            (dict(k_scale=CudaArray((1,), "<f2")), "k_scale: dtype fp16, expected fp32"),
            (dict(k_scale=CudaArray((1, 2), "<f4")), "k_scale: shape (1, 2)"),
            (dict(k_scale=CudaArray((2,), "<f4", strides=(2,))), "one scale per kv head must be "
             "contiguous"),
            (dict(k_scale=CudaArray((2,), "<f4")), "k_scale has 2 element(s), v_scale 1"),
            (dict(k_scale=CudaArray((1,), "<f4", ptr=0x1002)), "not 4-byte aligned"),
            (dict(k_cache=wide, v_cache=wide), "k_cache: dtype fp16, expected an fp8 cache"),
            (dict(k_scale=FakeTensor((1,), "torch.float32", device=None)),
             "k_scale: not a CUDA device array"),
        ]
        for changes, message in cases:
            with self.subTest(message):
                with self.assertRaises(ValueError) as caught:
                    fp8_paged(**changes)
                self.assertIn(message, str(caught.exception))

    def test_a_16_bit_cache_takes_no_scales_and_no_fp8(self):
        wide = CudaArray((6, 16, 2, 64), "<f2")
        f = fp8_paged(kv_dtype=None, k_cache=wide, v_cache=wide, k_scale=None, v_scale=None)
        self.assertEqual((f["k_scale"], f["v_scale"], f["kv_scale_stride"]), (0, 0, 0))
        with self.assertRaisesRegex(ValueError, "k_scale: given for a fp16 K/V cache"):
            fp8_paged(kv_dtype=None, k_cache=wide, v_cache=wide, v_scale=None)
        with self.assertRaisesRegex(ValueError, "k_cache: dtype uint8 is an fp8 cache, but the "
                                    "K/V cache is fp16 here"):
            fp8_paged(kv_dtype=None, k_scale=None, v_scale=None)

    def test_scales_on_another_device(self):
        tensors = dict(q=FakeTensor((3, 32, 128)), out=FakeTensor((3, 32, 128)),
                       k_cache=FakeTensor((10, 64, 8, 128), "torch.uint8"),
                       v_cache=FakeTensor((10, 64, 8, 128), "torch.uint8"),
                       block_table=FakeTensor((1, 10), "torch.int32"),
                       query_start_loc=FakeTensor((2,), "torch.int32"),
                       seq_lens=FakeTensor((1,), "torch.int32"),
                       k_scale=FakeTensor((1,), "torch.float32", device=1),
                       v_scale=FakeTensor((1,), "torch.float32"))
        with self.assertRaisesRegex(ValueError, "different CUDA devices: .*k_scale on cuda:1"):
            paged_fields(head_dim=128, page_size=64, dtype="bf16", kv_dtype="fp8",
                         **{k: describe(v, k) for k, v in tensors.items()})

    def test_cache_write_fields(self):
        f = cache_write()
        self.assertEqual((f["dtype"], f["cache_dtype"], f["kv_scale_stride"]),
                         (int(Dtype.FP16), int(Dtype.FP8_E4M3), 1))
        self.assertEqual((f["num_tokens"], f["num_kv_heads"], f["head_dim"], f["page_size"],
                          f["num_blocks"]), (3, 2, 64, 16, 6))
        self.assertEqual((f["k_stride_block"], f["k_stride_slot"], f["k_stride_head"]),
                         (2 * 16 * 2 * 64, 2 * 64, 64))
        wide = CudaArray((6, 16, 2, 64), "<f2")
        f = cache_write(k_cache=wide, v_cache=wide, k_scale=None, v_scale=None)
        self.assertEqual((f["cache_dtype"], f["k_scale"], f["k_stride_slot"]), (0, 0, 128))
        cases = [
            (dict(k_scale=None), "k_scale: required with an fp8 K/V cache"),
            (dict(k_cache=wide, v_cache=wide), "k_scale: given for a fp16 K/V cache"),
            (dict(key=CudaArray((3, 2, 64), "<f4"), value=CudaArray((3, 2, 64), "<f4")),
             "key: dtype fp32, expected bf16 or fp16"),
            (dict(slot_mapping=CudaArray((3,), "<i4")), "slot_mapping: dtype int32, expected "
             "int64"),
            (dict(slot_mapping=CudaArray((4,), "<i8")), "slot_mapping: 4 entries, key has 3"),
            (dict(value=CudaArray((3, 1, 64))), "value: fp16 (3, 1, 64) differs"),
            (dict(key=CudaArray((3, 4, 64)), value=CudaArray((3, 4, 64))),
             "does not hold 4 kv heads of 64"),
        ]
        for changes, message in cases:
            with self.subTest(message):
                with self.assertRaises(ValueError) as caught:
                    cache_write(**changes)
                self.assertIn(message, str(caught.exception))


# --- through the library, without a GPU ---------------------------------------------------------

def stand_in_batch(slot_stride=2 * 64, scales=1):
    """Stand-ins of one paged call of fp16 q (5 tokens, 4 heads of 64) over a joint fp8 cache
    [6, 2, 16, 2, 64] whose slots are `slot_stride` bytes apart, with `scales` scale elements."""
    joint = CudaArray((6, 2, 16, 2, 64), "|u1",
                      strides=(2 * 16 * slot_stride, 16 * slot_stride, slot_stride, 64, 1),
                      ptr=0x7F0000100000)
    return dict(q=CudaArray((5, 4, 64), ptr=0x7F0000200000),
                out=CudaArray((5, 4, 64), ptr=0x7F0000300000),
                k_cache=joint.view(0), v_cache=joint.view(1),
                block_table=CudaArray((2, 3), "<i4", ptr=0x7F0000400000),
                query_start_loc=CudaArray((3,), "<i4", ptr=0x7F0000500000),
                seq_lens=CudaArray((2,), "<i4", ptr=0x7F0000600000),
                k_scale=CudaArray((scales,), "<f4", ptr=0x7F0000700000),
                v_scale=CudaArray((scales,), "<f4", ptr=0x7F0000800000))


@unittest.skipUnless(library_available(), NO_LIBRARY)
class LibraryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ctx = flexjit.Context()
        cls.program = cls.ctx.program_from_file(MASKS)

    def kernel(self, **options):
        options = dict(dict(head_dim=64, dtype="fp16", page_size=16, arch="sm_90a",
                            kv_dtype="fp8"), **options)
        return self.ctx.kernel(self.program, "causal", **options)

    def test_kernel_names_and_kv_dtype_spellings(self):
        self.assertEqual(self.kernel(head_dim=128, dtype="bf16").name,
                         "prefill_causal_hd128_bf16_kvfp8_page16_sm90a")
        for spelling in ("fp8_e4m3", "float8_e4m3fn", Dtype.FP8_E4M3):
            with self.subTest(spelling=spelling):
                kernel = self.kernel(kv_dtype=spelling)
                self.assertEqual((kernel.kv_dtype, kernel.name),
                                 ("fp8", "prefill_causal_hd64_fp16_kvfp8_page16_sm90a"))
        for same in (None, "fp16", "half"):
            with self.subTest(same=same):
                kernel = self.kernel(kv_dtype=same)
                self.assertEqual((kernel.kv_dtype, kernel.name),
                                 ("fp16", "prefill_causal_hd64_fp16_page16_sm90a"))
        self.assertIn("kvfp8", self.kernel(arch="cpu").name)
        for bad in ("bf16", "int8", "fp8_e5m2"):
            with self.subTest(bad=bad):
                with self.assertRaisesRegex(ValueError, f"kv_dtype '{bad}' is not supported"):
                    self.kernel(kv_dtype=bad)
        with self.assertRaises(flexjit.FlexjitError) as caught:
            self.kernel(page_size=0)
        self.assertEqual(caught.exception.status, Status.UNSUPPORTED)
        self.assertIn("needs a paged kernel", caught.exception.message)

    def assert_fails(self, launch, status, words):
        with self.assertRaises(flexjit.FlexjitError) as caught:
            launch.launch()
        self.assertEqual(caught.exception.status, status, caught.exception)
        self.assertIn(words, caught.exception.message)

    def test_the_library_checks_see_the_fields_we_set(self):
        kernel = self.kernel()
        for scales in (1, 2):
            with self.subTest(scales=scales):
                launch = kernel.prepare(**stand_in_batch(scales=scales), max_query_len=4)
                self.assertEqual((launch.args.k_scale, launch.args.v_scale,
                                  launch.args.kv_scale_stride),
                                 (0x7F0000700000, 0x7F0000800000, scales - 1))
                # Every check passed: the launch stops at the (missing) driver. Where a device
                # is usable the launch would be enqueued over the stand-in pointers: not tried.
                if not cuda_available():
                    self.assert_fails(launch, Status.CUDA, "")
        launch.args.v_scale = None
        self.assert_fails(launch, Status.INVALID_ARGUMENT, "v_scale")
        # A 0.7 caller's struct ends before the scales: they read as null.
        launch = kernel.prepare(**stand_in_batch(), max_query_len=4)
        launch.args.struct_size = flexjit._capi.PagedAttentionArgs.k_scale.offset
        self.assert_fails(launch, Status.INVALID_ARGUMENT, "k_scale")
        # The cache strides go in bytes: a slot 72 bytes long breaks the 16-byte rows.
        launch = kernel.prepare(**stand_in_batch(slot_stride=72), max_query_len=4)
        self.assertEqual(launch.args.k_stride_slot, 72)
        self.assert_fails(launch, Status.INVALID_ARGUMENT, "k_stride_slot (72)")
        # Scales reaching a 16-bit kernel are refused by the library too.
        wide = self.kernel(kv_dtype=None)
        arrays = stand_in_batch()
        joint = CudaArray((6, 2, 16, 2, 64), "<f2", ptr=0x7F0000100000)
        arrays.update(k_cache=joint.view(0), v_cache=joint.view(1))
        scales = {name: arrays.pop(name) for name in ("k_scale", "v_scale")}
        launch = wide.prepare(**arrays, max_query_len=4)
        self.assertEqual((launch.args.k_scale, launch.args.kv_scale_stride), (None, 0))
        launch.args.k_scale = scales["k_scale"].ptr
        launch.args.v_scale = scales["v_scale"].ptr
        self.assert_fails(launch, Status.INVALID_ARGUMENT, "16-bit K/V cache")

    @unittest.skipIf(torch is not None and not torch.cuda.is_available(),
                     "stand-in CUDA tensors meet torch's current-device call, which fails "
                     "without a GPU (as test_module's do)")
    def test_kept_calls_write_each_calls_scales(self):
        kernel = self.kernel(head_dim=128, dtype="bf16", page_size=64)
        joint = FakeTensor((10, 64, 8, 256), "torch.float8_e4m3fn", ptr=0x7F0000000000)
        arrays = dict(q=FakeTensor((3, 32, 128), ptr=0x7F0000100000),
                      out=FakeTensor((3, 32, 128), ptr=0x7F0000200000),
                      k_cache=FakeTensor((10, 64, 8, 128), "torch.float8_e4m3fn",
                                         strides=joint.stride(), ptr=0x7F0000000000),
                      v_cache=FakeTensor((10, 64, 8, 128), "torch.float8_e4m3fn",
                                         strides=joint.stride(), ptr=0x7F0000000080),
                      block_table=FakeTensor((1, 10), "torch.int32", ptr=0x7F0000300000),
                      query_start_loc=FakeTensor((2,), "torch.int32", ptr=0x7F0000400000),
                      seq_lens=FakeTensor((1,), "torch.int32", ptr=0x7F0000500000))
        device = arrays["q"].device
        for t in arrays.values():  # one device object, as torch's compare equal
            t.device = device

        def scale(ptr, shape=(1,)):
            made = FakeTensor(shape, "torch.float32", ptr=ptr)
            made.device = device
            return made

        for base in (0x7F0000600000, 0x7F0000700000):
            args, _ = kernel.paged_args(**arrays, max_query_len=3, k_scale=scale(base),
                                        v_scale=scale(base + 0x100))
            self.assertEqual((args.k_scale, args.v_scale, args.kv_scale_stride),
                             (base, base + 0x100, 0))
            self.assertEqual(args.k_stride_slot, 8 * 256)
        self.assertEqual(len(kernel._templates), 1)
        args, _ = kernel.paged_args(**arrays, max_query_len=3, k_scale=scale(0x7F0000800000, (8,)),
                                    v_scale=scale(0x7F0000900000, (8,)))
        self.assertEqual((args.k_scale, args.kv_scale_stride, len(kernel._templates)),
                         (0x7F0000800000, 1, 2))
        for bad, message in (({}, "k_scale and v_scale: required"),
                             (dict(k_scale=scale(0x7F0000800000, (3,)),
                                   v_scale=scale(0x7F0000800000, (3,))), "k_scale: 3 elements"),
                             (dict(k_scale="2", v_scale=scale(0x7F0000800000)),
                              "k_scale: expected a torch tensor")):
            with self.subTest(message):
                with self.assertRaisesRegex((ValueError, TypeError), message):
                    kernel.paged_args(**arrays, max_query_len=3, **bad)
                with self.assertRaisesRegex((ValueError, TypeError), message):
                    kernel(**arrays, max_query_len=3, **bad)


# --- the CPU backend ----------------------------------------------------------------------------

def _float32(array, count):
    return (ctypes.c_float * count).from_address(array.ptr)


def _half(bits):
    return struct.unpack("<e", struct.pack("<H", bits))[0]


@unittest.skipUnless(library_available(), NO_LIBRARY)
class CpuClosedFormTest(unittest.TestCase):
    """The CPU backend over host stand-ins, no torch: every key and value of a kv head is one
    e4m3 byte times its scale, so every row's output is the value of its kv head, and its LSE
    log(keys) + the (equal) score."""

    def test_attention_dequantizes_per_kv_head(self):
        ctx = flexjit.Context()
        program = ctx.program("mask causal = q >= kv\n", name="c.mask")
        kernel = ctx.kernel(program, "causal", head_dim=64, dtype="fp16", page_size=16,
                            arch="cpu", kv_dtype="fp8")
        # One request of 4 new tokens after 12 cached ones; 4 query heads over 2 kv heads.
        qsl, seq_lens = HostArray((2,), "<i4"), HostArray((1,), "<i4", fill=16)
        qsl.values[1] = 4
        table = HostArray((1, 1), "<i4")
        table.values[0] = 1
        q = HostArray((4, 4, 64), "<f2", fill=0x3C00)  # 1.0
        out, lse = HostArray((4, 4, 64), "<f2"), HostArray((4, 4), "<f4")
        k_cache = HostArray((2, 16, 2, 64), "|u1", fill=0x30)  # e4m3 0.5
        v_cache = HostArray((2, 16, 2, 64), "|u1", fill=0x38)  # e4m3 1.0
        for per_head in (False, True):
            with self.subTest(per_head=per_head):
                k_scale, v_scale = HostArray((2,), "<f4"), HostArray((2,), "<f4")
                _float32(k_scale, 2)[:] = [2.0, 4.0]  # keys 1.0 and 2.0
                _float32(v_scale, 2)[:] = [0.5, 3.0]
                scales = dict(k_scale=k_scale, v_scale=v_scale) if per_head else \
                    dict(k_scale=2.0, v_scale=0.5)
                kernel.prepare(q=q, out=out, lse=lse, k_cache=k_cache, v_cache=v_cache,
                               block_table=table, query_start_loc=qsl, seq_lens=seq_lens,
                               max_query_len=4, **scales).launch()
                for token in range(4):
                    for head in range(4):
                        kv_head = head // 2 if per_head else 0
                        value, key = (0.5, 1.0) if kv_head == 0 else (3.0, 2.0)
                        row = (token * 4 + head) * 64
                        where = f"token {token} head {head}"
                        self.assertEqual(_half(out.values[row]), value, where)
                        self.assertEqual(_half(out.values[row + 63]), value, where)
                        want = math.log(13 + token) + 64 * key / 8
                        self.assertAlmostEqual(_float32(lse, 16)[token * 4 + head], want,
                                               delta=1e-4, msg=where)

    def test_cache_write_quantizes(self):
        ctx = flexjit.Context()
        # fp16 keys 3.0, 1000.0, -0.75 and 0.0 in the four tokens, into slots 5, 17, -1, 2 of a
        # cache of 2 blocks of 16; scales 2 (keys) and 0.25 (values, which are the keys).
        values = [0x4200, 0x63D0, 0xBA00, 0x0000]
        key = HostArray((4, 1, 16), "<f2")
        for t, bits in enumerate(values):
            for d in range(16):
                key.values[t * 16 + d] = bits
        slots = HostArray((4,), "<i8")
        for t, slot in enumerate((5, 17, -1, 2)):
            slots.values[t] = slot
        k_cache = HostArray((2, 16, 1, 16), "|u1", fill=0xAA)
        v_cache = HostArray((2, 16, 1, 16), "|u1", fill=0xAA)
        ctx.kv_cache_write(key, key, k_cache, v_cache, slots, k_scale=2.0, v_scale=0.25,
                           device="cpu")
        # 3/2 = 1.5 (0x3C), 1000/2 saturates to 448 (0x7E), 0 stays 0; 3/0.25 = 12 (0x54),
        # 1000/0.25 saturates; the token of slot -1 writes nothing.
        want_k = {5: 0x3C, 17: 0x7E, 2: 0x00}
        want_v = {5: 0x54, 17: 0x7E, 2: 0x00}
        for cache, want in ((k_cache, want_k), (v_cache, want_v)):
            for slot in range(32):
                row = [cache.values[slot * 16 + d] for d in range(16)]
                self.assertEqual(row, [want.get(slot, 0xAA)] * 16, f"slot {slot}")


def quantize(x, scale):
    """torch's e4m3 of x / scale (scale broadcast over x's kv-head dim), saturated to +-448:
    the cache write's contract."""
    return (x.float() / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)


def random_fp8_batch(query_lens, seq_lens, *, device, heads=4, kv_heads=2, head_dim=64, page=16,
                     layout="NHD", per_head=True, seed=0):
    """One paged call over an fp8 cache: bf16 q, a joint fp8 cache [blocks, 2, page, Hkv, D]
    (or HND) with shuffled blocks, quantized with per-kv-head scales set from each head's
    largest value (or one scale), and the dequantized K/V the kernel must read."""
    gen = torch.Generator().manual_seed(seed)
    blocks = [-(-s // page) for s in seq_lens]
    total = sum(blocks) + 2
    order = torch.randperm(total, generator=gen).tolist()
    table = torch.zeros(len(seq_lens), max(blocks), dtype=torch.int32)
    for r, n in enumerate(blocks):
        table[r, :n] = torch.tensor([order.pop() for _ in range(n)], dtype=torch.int32)
    # K and V of different magnitudes per kv head, so that per-head scales matter.
    spread = torch.tensor([0.5 * 4 ** h for h in range(kv_heads)]).view(1, 1, 1, kv_heads, 1)
    kv = torch.randn(total, 2, page, kv_heads, head_dim, generator=gen) * spread
    amax = kv.abs().amax(dim=(0, 2, 4))  # [2, Hkv]
    if not per_head:
        amax = amax.amax(dim=1, keepdim=True)
    scales = (amax / 448.0).float()  # [2, Hkv] or [2, 1]
    joint = quantize(kv, scales.view(1, 2, 1, -1, 1))
    dequantized = joint.float() * scales.view(1, 2, 1, -1, 1)
    if layout == "HND":
        joint = joint.transpose(2, 3).contiguous().transpose(2, 3)  # stored [block, 2, H, page]
    qsl = [0]
    for n in query_lens:
        qsl.append(qsl[-1] + n)
    q = torch.randn(qsl[-1], heads, head_dim, generator=gen).to(torch.bfloat16)
    cache = joint if layout == "NHD" else joint.transpose(2, 3)
    batch = dict(q=q, k_cache=cache[:, 0], v_cache=cache[:, 1], block_table=table,
                 query_start_loc=torch.tensor(qsl, dtype=torch.int32),
                 seq_lens=torch.tensor(seq_lens, dtype=torch.int32))
    batch = {name: t.to(device) for name, t in batch.items()}
    return batch, scales[0].to(device), scales[1].to(device), dequantized


def paged_reference(batch, dequantized, mask, page=16):
    """float64 attention [tokens, H, D] of `batch` over the dequantized joint cache
    [blocks, 2, page, Hkv, D]; mask(q_pos, kv_pos) -> bool tensor (positions as the call
    contract has them)."""
    q = batch["q"].double().cpu()
    table, qsl = batch["block_table"].cpu(), batch["query_start_loc"].cpu().tolist()
    heads, head_dim = q.shape[1], q.shape[2]
    kv_heads = dequantized.shape[3]
    out = torch.zeros_like(q)
    for r, seq_len in enumerate(batch["seq_lens"].cpu().tolist()):
        pages = table[r, :-(-seq_len // page)].long()
        keys = dequantized[pages, 0].reshape(-1, kv_heads, head_dim)[:seq_len].double()
        values = dequantized[pages, 1].reshape(-1, kv_heads, head_dim)[:seq_len].double()
        group = heads // kv_heads
        keys, values = keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1)
        rows = q[qsl[r]:qsl[r + 1]]
        q_pos = torch.arange(seq_len - rows.shape[0], seq_len).view(-1, 1)
        visible = mask(q_pos, torch.arange(seq_len).view(1, -1))  # [rows, keys]
        scores = torch.einsum("thd,khd->htk", rows, keys) / math.sqrt(head_dim)
        scores = scores.masked_fill(~visible, -math.inf)
        probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        out[qsl[r]:qsl[r + 1]] = torch.einsum("htk,khd->thd", probs, values)
    return out


def assert_close_to(test, got, want, where):
    """bf16 tolerances: max |got - want| <= 1e-2 max |want| (docs/architecture.md#targets)."""
    scale = want.abs().max().item()
    error = (got.double().cpu() - want).abs().max().item()
    test.assertLessEqual(error, 1e-2 * scale, f"{where}: max error {error:.3g} of {scale:.3g}")


MASK_FUNCTIONS = {"causal": lambda q, kv: kv <= q,
                  "sliding": lambda q, kv: (kv <= q) & (q - kv < 8)}
QUERY_LENS, SEQ_LENS = [5, 1, 16], [40, 17, 16]


@unittest.skipIf(torch is None, NO_TORCH)
@unittest.skipUnless(library_available(), NO_LIBRARY)
class CpuTorchTest(unittest.TestCase):
    """The CPU backend over torch CPU tensors."""

    device = "cpu"
    arch = "cpu"

    @classmethod
    def setUpClass(cls):
        cls.ctx = flexjit.Context()
        cls.program = cls.ctx.program_from_file(MASKS)
        cls.kernels = {mask: cls.ctx.kernel(cls.program, mask, head_dim=64, dtype="bf16",
                                            page_size=16, arch=cls.arch, kv_dtype="fp8")
                       for mask in MASK_FUNCTIONS}

    def test_attention_against_float64(self):
        for mask, layout, per_head, uint8 in (("causal", "NHD", True, False),
                                              ("sliding", "NHD", False, False),
                                              ("causal", "HND", True, True),
                                              ("sliding", "HND", False, True)):
            where = f"{mask} {layout} {'per head' if per_head else 'per tensor'}" + \
                (" uint8" if uint8 else "")
            with self.subTest(where):
                batch, k_scale, v_scale, dequantized = random_fp8_batch(
                    QUERY_LENS, SEQ_LENS, device=self.device, layout=layout, per_head=per_head)
                if uint8:
                    batch.update(k_cache=batch["k_cache"].view(torch.uint8),
                                 v_cache=batch["v_cache"].view(torch.uint8))
                if not per_head:  # numbers, as a caller with one scale per tensor passes them
                    k_scale, v_scale = k_scale.item(), v_scale.item()
                out = self.kernels[mask](**batch, max_query_len=16, kv_layout=layout,
                                         params={"window": 8}, k_scale=k_scale,
                                         v_scale=v_scale)
                assert_close_to(self, out, paged_reference(batch, dequantized,
                                                           MASK_FUNCTIONS[mask]), where)

    def test_kept_calls_match_prepared_ones(self):
        kernel = self.kernels["causal"]
        batch, k_scale, v_scale, _ = random_fp8_batch(QUERY_LENS, SEQ_LENS, device=self.device)
        want = kernel.prepare(**batch, max_query_len=16, k_scale=k_scale, v_scale=v_scale)
        want.launch()
        for _ in range(2):  # the second call takes the kept struct
            got = kernel(**batch, max_query_len=16, k_scale=k_scale, v_scale=v_scale)
            self.assertTrue(torch.equal(got, want.out))
        # Other scales, same geometry: the kept struct takes their pointer.
        doubled = kernel(**batch, max_query_len=16, k_scale=k_scale, v_scale=v_scale * 2)
        assert_close_to(self, doubled, 2 * want.out.double().cpu(), "v_scale doubled")
        # Numbers are kept by value, with memory of their own: a new value is a new template.
        before = len(kernel._templates)
        for v in (0.5, 0.5, 0.25):
            got = kernel(**batch, max_query_len=16, k_scale=0.125, v_scale=v)
            want = kernel.prepare(**batch, max_query_len=16, k_scale=0.125, v_scale=v)
            want.launch()
            self.assertTrue(torch.equal(got, want.out), f"v_scale {v}")
        self.assertEqual(len(kernel._templates), before + 2)

    def test_bad_arguments_name_themselves(self):
        kernel = self.kernels["causal"]
        batch, k_scale, v_scale, _ = random_fp8_batch(QUERY_LENS, SEQ_LENS, device=self.device)
        cases = [
            (dict(), ValueError, "k_scale and v_scale: required with an fp8 K/V cache"),
            (dict(k_scale=k_scale), ValueError, "v_scale: required"),
            (dict(k_scale=k_scale.double(), v_scale=v_scale), ValueError,
             "k_scale: dtype torch.float64, expected fp32"),
            (dict(k_scale=torch.ones(3, device=self.device), v_scale=v_scale), ValueError,
             "k_scale: 3 elements"),
            (dict(k_scale=k_scale, v_scale=float("nan")), ValueError,
             "v_scale: nan is not a finite number"),
            (dict(k_scale=k_scale, v_scale=True), TypeError, "v_scale: expected a torch tensor"),
        ]
        for scales, error, message in cases:
            with self.subTest(message):
                with self.assertRaisesRegex(error, message):
                    kernel(**batch, max_query_len=16, **scales)
        wide = self.ctx.kernel(self.program, "causal", head_dim=64, dtype="bf16", page_size=16,
                               arch=self.arch)
        with self.assertRaisesRegex(ValueError, "k_cache: dtype fp8 is an fp8 cache"):
            wide(**batch, max_query_len=16)
        bf16 = dict(batch, k_cache=batch["k_cache"].to(torch.bfloat16),
                    v_cache=batch["v_cache"].to(torch.bfloat16))
        with self.assertRaisesRegex(ValueError, "k_scale: given for a bf16 K/V cache"):
            wide(**bf16, max_query_len=16, k_scale=k_scale, v_scale=v_scale)
        with self.assertRaisesRegex(ValueError, "k_cache: dtype bf16, expected an fp8 cache"):
            kernel(**bf16, max_query_len=16, k_scale=k_scale, v_scale=v_scale)

    def test_cache_write_against_torch(self):
        gen = torch.Generator().manual_seed(3)
        tokens, kv_heads, head_dim, page, blocks = 37, 2, 64, 16, 5
        for dtype in (torch.bfloat16, torch.float16):
            for per_head in (True, False):
                with self.subTest(dtype=dtype, per_head=per_head):
                    key = (torch.randn(tokens, kv_heads, head_dim, generator=gen) * 30).to(dtype)
                    value = (torch.randn(tokens, kv_heads, head_dim, generator=gen)).to(dtype)
                    key[0, 0, :4] = torch.tensor([1e4, -1e4, 0.0, -0.0])  # saturate; signed 0
                    slots = torch.randperm(blocks * page, generator=gen)[:tokens]
                    slots[3] = -1  # vLLM's padding: skipped
                    k_scale = torch.tensor([0.05, 0.2] if per_head else [0.1])
                    v_scale = torch.tensor([0.01, 0.002] if per_head else [0.004])
                    cache = torch.full((blocks, 2, page, kv_heads, head_dim), 0x55,
                                       dtype=torch.uint8)
                    device_cache = cache.to(self.device)
                    # The K cache as float8_e4m3fn, the V cache as uint8: both are fp8 caches.
                    self.ctx.kv_cache_write(key.to(self.device), value.to(self.device),
                                            device_cache[:, 0].view(torch.float8_e4m3fn),
                                            device_cache[:, 1], slots.to(self.device),
                                            k_scale=k_scale.to(self.device),
                                            v_scale=v_scale.to(self.device))
                    want = cache.clone()
                    keep = slots >= 0
                    scale_shape = (1, -1, 1)
                    for which, x, scale in ((0, key, k_scale), (1, value, v_scale)):
                        flat = want[:, which].reshape(-1, kv_heads, head_dim)
                        flat[slots[keep]] = quantize(x[keep], scale.view(scale_shape)) \
                            .view(torch.uint8)
                        want[:, which] = flat.view(blocks, page, kv_heads, head_dim)
                    got = device_cache.cpu()
                    mismatched = (got != want).nonzero()
                    self.assertEqual(len(mismatched), 0, f"{len(mismatched)} bytes differ, first "
                                     f"at {mismatched[:4].tolist()}")

    def test_sixteen_bit_cache_write_is_a_copy(self):
        key = torch.randn(9, 2, 64).to(torch.bfloat16).to(self.device)
        value = torch.randn(9, 2, 64).to(torch.bfloat16).to(self.device)
        cache = torch.zeros(2, 2, 2, 16, 64, dtype=torch.bfloat16, device=self.device)  # HND
        slots = torch.arange(9, dtype=torch.int64, device=self.device) * 3
        self.ctx.kv_cache_write(key, value, cache[:, 0], cache[:, 1], slots, kv_layout="HND")
        for which, written in ((0, key), (1, value)):
            by_slot = cache[:, which].transpose(1, 2).reshape(-1, 2, 64)  # [blocks * page, ...]
            self.assertTrue(torch.equal(by_slot[slots], written))
        with self.assertRaisesRegex(ValueError, "k_scale: given for a bf16 K/V cache"):
            self.ctx.kv_cache_write(key, value, cache[:, 0], cache[:, 1], slots,
                                    kv_layout="HND", k_scale=1.0, v_scale=1.0)

    def test_torch_op_matches_the_direct_call(self):
        ops = flexjit.torch_ops
        key = ops.register(f"test.fp8.{self.device}", self.kernels["sliding"])
        batch, k_scale, v_scale, _ = random_fp8_batch(QUERY_LENS, SEQ_LENS, device=self.device)
        want = self.kernels["sliding"](**batch, max_query_len=16, params={"window": 8},
                                       k_scale=k_scale, v_scale=v_scale)
        # The second call takes the kept struct, with the new scales' pointers.
        for scales in ((k_scale, v_scale), (k_scale.clone(), v_scale.clone())):
            out = ops.paged_attention(key, **batch, max_query_len=16, params={"window": 8},
                                      k_scale=scales[0], v_scale=scales[1])
            self.assertTrue(torch.equal(out, want))
        # A number goes in as a one-element tensor: one scale for every kv head.
        one = ops.paged_attention(key, **batch, max_query_len=16, params={"window": 8},
                                  k_scale=0.5, v_scale=0.25)
        direct = self.kernels["sliding"](**batch, max_query_len=16, params={"window": 8},
                                         k_scale=torch.tensor([0.5], device=self.device),
                                         v_scale=torch.tensor([0.25], device=self.device))
        self.assertTrue(torch.equal(one, direct))
        with self.assertRaisesRegex(TypeError, "k_scale: expected a number or a float32 tensor"):
            ops.paged_attention(key, **batch, max_query_len=16, k_scale="1", v_scale=v_scale)
        ops.unregister(key)

    def test_flex_attention_paged(self):
        def causal(b, h, q_idx, kv_idx):
            return q_idx >= kv_idx

        batch, k_scale, v_scale, dequantized = random_fp8_batch(QUERY_LENS, SEQ_LENS,
                                                                device=self.device, seed=5)
        args = [batch[name] for name in ("q", "k_cache", "v_cache", "block_table",
                                         "query_start_loc", "seq_lens")]
        out = flexjit.flex_attention_paged(*args, mask_mod=causal, max_query_len=16,
                                           k_scale=k_scale, v_scale=v_scale)
        assert_close_to(self, out, paged_reference(batch, dequantized, MASK_FUNCTIONS["causal"]),
                        "flex_attention_paged")
        with self.assertRaisesRegex(ValueError, "k_scale and v_scale: required"):
            flexjit.flex_attention_paged(*args, mask_mod=causal, max_query_len=16)


@unittest.skipIf(torch is None, NO_TORCH)
@unittest.skipUnless(library_available(), NO_LIBRARY)
class FakeTensorTest(unittest.TestCase):
    def test_fakes_check_the_scales(self):
        from torch._subclasses.fake_tensor import FakeTensorMode
        ops = flexjit.torch_ops
        mode = FakeTensorMode()
        batch, k_scale, v_scale, _ = random_fp8_batch(QUERY_LENS, SEQ_LENS, device="cpu")
        batch = {name: mode.from_tensor(t) for name, t in batch.items()}
        wide = mode.from_tensor(k_scale.double())
        with mode:
            scales = dict(k_scale=mode.from_tensor(k_scale), v_scale=mode.from_tensor(v_scale))
            out = ops.paged_attention("fakes resolve no key", **batch, max_query_len=16,
                                      **scales)
            self.assertEqual(tuple(out.shape), tuple(batch["q"].shape))
            ops.plan_run("nor here", **batch, **scales)
            with self.assertRaisesRegex(Exception, "k_scale is torch.float64"):
                ops.paged_attention("x", **batch, max_query_len=16, k_scale=wide,
                                    v_scale=scales["v_scale"])


@unittest.skipIf(torch is None, NO_TORCH)
@unittest.skipUnless(library_available(), NO_LIBRARY)
class DocsExampleTest(unittest.TestCase):
    def test_docs_python_md_fp8_example(self):
        # docs/python.md, "FP8 (e4m3) K/V cache" (with the mask file's path from here).
        ctx = flexjit.Context()
        prog = ctx.program_from_file(MASKS)
        kern = ctx.kernel(prog, "causal", head_dim=64, dtype="bf16", page_size=16, arch="cpu",
                          kv_dtype="fp8")
        k_cache = torch.zeros(8, 16, 2, 64, dtype=torch.float8_e4m3fn)  # [blocks, page, Hkv, D]
        v_cache = torch.zeros_like(k_cache)
        key = torch.randn(40, 2, 64, dtype=torch.bfloat16)               # 40 tokens' keys, values
        value = torch.randn(40, 2, 64, dtype=torch.bfloat16)
        slots = torch.arange(40) + 16                                    # blocks 1, 2 and 3
        ctx.kv_cache_write(key, value, k_cache, v_cache, slots, k_scale=0.02, v_scale=0.01)

        q = torch.randn(40, 4, 64, dtype=torch.bfloat16)                 # a prefill of the 40
        out = kern(q, k_cache, v_cache, torch.tensor([[1, 2, 3]], dtype=torch.int32),
                   torch.tensor([0, 40], dtype=torch.int32), torch.tensor([40], dtype=torch.int32),
                   max_query_len=40, k_scale=0.02, v_scale=0.01)

        # The cache holds e4m3(key / 0.02): attention over those values times the scales.
        k = (k_cache[1:4].float() * 0.02).reshape(48, 2, 64)[:40].repeat_interleave(2, 1)
        v = (v_cache[1:4].float() * 0.01).reshape(48, 2, 64)[:40].repeat_interleave(2, 1)
        scores = torch.einsum("thd,khd->htk", q.float(), k) / 8
        scores = scores.masked_fill(torch.ones(40, 40, dtype=torch.bool).triu(1), float("-inf"))
        want = torch.einsum("htk,khd->thd", scores.softmax(-1), v)
        assert (out.float() - want).abs().max() <= 1e-2 * want.abs().max()


@unittest.skipUnless(cuda_available(), NO_CUDA)
@unittest.skipUnless(library_available(), NO_LIBRARY)
class CudaTest(CpuTorchTest):
    """The CPU tests on a GPU (kernels for the current device), and what only CUDA has: plans,
    and the device's cache write against the host's."""

    device = "cuda"
    arch = None

    def test_plan_run_matches_the_direct_call(self):
        kernel = self.kernels["causal"]
        lens = [1000, 17, 300, 4097]
        batch, k_scale, v_scale, dequantized = random_fp8_batch([1] * 4, lens, device="cuda",
                                                                heads=8, seed=9)
        plan = kernel.plan(max_num_reqs=4, max_num_tokens=4, max_query_len=1, num_heads=8,
                           num_kv_heads=2)
        plan.update(list(range(5)), lens, batch["block_table"].shape[1])
        ops = flexjit.torch_ops
        key = ops.register("test.fp8.plan", plan)
        out = ops.plan_run(key, **batch, k_scale=k_scale, v_scale=v_scale)
        assert_close_to(self, out, paged_reference(batch, dequantized, MASK_FUNCTIONS["causal"]),
                        "plan_run")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            ops.plan_run(key, **batch, out=out, k_scale=k_scale, v_scale=v_scale)
        before = out.clone()
        out.zero_()
        graph.replay()
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(out, before))
        ops.unregister(key)

    def test_device_cache_write_matches_the_host(self):
        key = (torch.randn(50, 2, 128) * 40).to(torch.bfloat16)
        value = torch.randn(50, 2, 128).to(torch.bfloat16)
        slots = torch.randperm(64)[:50]
        scales = dict(k_scale=torch.tensor([0.07, 0.3]), v_scale=torch.tensor([0.01, 0.02]))
        caches = []
        for device in ("cpu", "cuda"):
            cache = torch.zeros(4, 2, 16, 2, 128, dtype=torch.uint8, device=device)
            self.ctx.kv_cache_write(key.to(device), value.to(device), cache[:, 0], cache[:, 1],
                                    slots.to(device),
                                    **{k: v.to(device) for k, v in scales.items()})
            caches.append(cache.cpu())
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(caches[0], caches[1]))


if __name__ == "__main__":
    unittest.main()
