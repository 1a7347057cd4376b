"""Stride derivation and argument checks of flexjit._arrays on stand-in arrays."""

import unittest

from support import CudaArray, FakeTensor

from flexjit._arrays import array_param_fields, describe, paged_fields, varlen_fields


def call(**changes):
    arrays = dict(q=CudaArray((5, 4, 64)), out=CudaArray((5, 4, 64)),
                  k_cache=CudaArray((6, 16, 2, 64)), v_cache=CudaArray((6, 16, 2, 64)),
                  block_table=CudaArray((2, 3), "<i4"), query_start_loc=CudaArray((3,), "<i4"),
                  seq_lens=CudaArray((2,), "<i4"))
    arrays.update(changes)
    options = {k: arrays.pop(k) for k in ("kv_layout", "lse", "sinks") if k in arrays}
    return paged_fields(head_dim=64, page_size=16, dtype="fp16",
                        **{k: describe(v, k) for k, v in arrays.items()},
                        **{k: (v if k == "kv_layout" else describe(v, k))
                           for k, v in options.items()})


class StridesTest(unittest.TestCase):
    def test_contiguous_nhd(self):
        f = call()
        self.assertEqual((f["num_tokens"], f["num_heads"], f["num_kv_heads"], f["num_reqs"],
                          f["max_blocks_per_req"]), (5, 4, 2, 2, 3))
        self.assertEqual((f["q_stride_token"], f["q_stride_head"]), (256, 64))
        self.assertEqual((f["k_stride_block"], f["k_stride_slot"], f["k_stride_head"]),
                         (16 * 2 * 64, 2 * 64, 64))
        self.assertEqual((f["lse"], f["block_table_stride"]), (0, 3))

    def test_hnd_and_joint_views(self):
        joint = CudaArray((6, 2, 2, 16, 64))  # [blocks, 2, H_kv, page, D]
        f = call(k_cache=joint.view(0), v_cache=joint.view(1), kv_layout="HND")
        self.assertEqual((f["k_stride_block"], f["k_stride_slot"], f["k_stride_head"]),
                         (2 * 2 * 16 * 64, 64, 16 * 64))
        self.assertEqual(f["v_cache"] - f["k_cache"], 2 * 16 * 64 * 2)  # bytes
        self.assertEqual(f["num_kv_heads"], 2)

    def test_vllm_leading_two(self):
        joint = CudaArray((2, 6, 16, 2, 64))  # [2, blocks, page, H_kv, D]
        f = call(k_cache=joint.view(0, dim=0), v_cache=joint.view(1, dim=0))
        self.assertEqual(f["k_stride_block"], 16 * 2 * 64)
        self.assertEqual(f["v_cache"] - f["k_cache"], 6 * 16 * 2 * 64 * 2)

    def test_padded_rows_and_lse(self):
        q = CudaArray((5, 4, 64), strides=(4 * 72, 72, 1))
        f = call(q=q, lse=CudaArray((5, 4), "<f4", strides=(8, 1)))
        self.assertEqual((f["q_stride_token"], f["q_stride_head"], f["lse_stride_token"]),
                         (288, 72, 8))

    def test_rejections(self):
        cases = [
            (dict(q=CudaArray((5, 4, 64), strides=(1, 5, 20))), "last dimension must be "
             "contiguous"),
            (dict(q=CudaArray((5, 4, 64), "<f4")), "q: dtype fp32, expected fp16"),
            (dict(q=CudaArray((5, 4, 128)), out=CudaArray((5, 4, 128))), "head_dim 128"),
            (dict(k_cache=CudaArray((6, 32, 2, 64)), v_cache=CudaArray((6, 32, 2, 64))),
             "page size 32"),
            (dict(v_cache=CudaArray((7, 16, 2, 64))), "differs from k_cache"),
            (dict(out=CudaArray((5, 4, 64, 1))), "expected 3 dimensions"),
            (dict(seq_lens=CudaArray((2,), "<f4")), "seq_lens: dtype fp32, expected int32"),
            (dict(query_start_loc=CudaArray((2,), "<i4")), "expected num_reqs + 1 = 3"),
            (dict(block_table=CudaArray((3, 3), "<i4")), "expected num_reqs = 2"),
            (dict(lse=CudaArray((5, 3), "<f4")), "lse: shape (5, 3)"),
            (dict(kv_layout="NDH"), "kv_layout"),
        ]
        for changes, message in cases:
            with self.subTest(message=message):
                with self.assertRaises(ValueError) as caught:
                    call(**changes)
                self.assertIn(message, str(caught.exception))

    def test_devices(self):
        meta = dict(block_table=FakeTensor((2, 3), "torch.int32"),
                    query_start_loc=FakeTensor((3,), "torch.int32"),
                    seq_lens=FakeTensor((2,), "torch.int32"))
        tensors = dict(q=FakeTensor((5, 4, 64), "torch.float16"),
                       out=FakeTensor((5, 4, 64), "torch.float16"),
                       k_cache=FakeTensor((6, 16, 2, 64), "torch.float16", device=1),
                       v_cache=FakeTensor((6, 16, 2, 64), "torch.float16"), **meta)
        with self.assertRaisesRegex(ValueError, "different CUDA devices"):
            paged_fields(head_dim=64, page_size=16, dtype="fp16",
                         **{k: describe(v, k) for k, v in tensors.items()})
        tensors["k_cache"] = FakeTensor((6, 16, 2, 64), "torch.float16", device=None)
        with self.assertRaisesRegex(ValueError, "k_cache: not a CUDA device array"):
            paged_fields(head_dim=64, page_size=16, dtype="fp16",
                         **{k: describe(v, k) for k, v in tensors.items()})

    def test_describe(self):
        with self.assertRaisesRegex(TypeError, "__cuda_array_interface__"):
            describe([1, 2], "q")
        a = describe(CudaArray((3, 4), "<f2", strides=(8, 1)), "x")
        self.assertEqual((a.shape, a.strides, a.dtype, a.device_index), ((3, 4), (8, 1), "fp16",
                                                                         None))
        interface = {"shape": (2, 3), "typestr": "<f2", "data": (16, False), "strides": None,
                     "version": 3}
        holder = type("Holder", (), {"__cuda_array_interface__": interface})()
        self.assertEqual(describe(holder, "y").strides, (3, 1))
        t = describe(FakeTensor((2, 3), "torch.bfloat16", device=2), "t")
        self.assertEqual((t.dtype, t.device_index, t.strides), ("bf16", 2, (3, 1)))


def param(obj, dims, dtype="int32", num_reqs=2, num_heads=4):
    return array_param_fields(describe(obj, "p"), dtype=dtype, dims=dims, num_reqs=num_reqs,
                              num_heads=num_heads)


class ArrayParamTest(unittest.TestCase):
    def test_one_and_two_dimensions(self):
        a = CudaArray((3,), "<i4", ptr=0x1000)
        self.assertEqual(param(a, ("b",)), (0x1000, 3, 1, 1))
        self.assertEqual(param(CudaArray((6,), "<i4", strides=(2,), ptr=0x1000), ("b",)),
                         (0x1000, 6, 1, 2))
        self.assertEqual(param(CudaArray((2, 100), "<i4", ptr=0x2000), ("b", "kv")),
                         (0x2000, 2, 100, 100))
        padded = CudaArray((2, 100), "<i4", strides=(128, 1), ptr=0x2000)  # rows of a wider one
        self.assertEqual(param(padded, ("b", "kv")), (0x2000, 2, 100, 128))
        self.assertEqual(param(CudaArray((4,), "<f4", ptr=0x3000), ("h",), dtype="fp32"),
                         (0x3000, 4, 1, 1))
        # One row: its stride is never used; a free dimension needs no extent.
        self.assertEqual(param(CudaArray((1, 5), "<i4", strides=(0, 1)), ("b", "N"),
                               num_reqs=1)[1:], (1, 5, 5))
        self.assertEqual(param(FakeTensor((2, 8), "torch.int32", ptr=0x4000), ("b", "r")),
                         (0x4000, 2, 8, 8))

    def test_empty(self):
        # No data, and its extents as they are: the library checks a `b` dimension of an empty
        # array too (ranges of no range for each of 4 requests: [4, 0]).
        self.assertEqual(param(CudaArray((0, 7), "<i4"), ("N", "M")), (0, 0, 7, 7))
        self.assertEqual(param(CudaArray((4, 0), "<i4"), ("b", "r"), num_reqs=4)[:3], (0, 4, 0))

    def test_rejections(self):
        cases = [
            (CudaArray((2,), "<f4"), ("b",), "int32", "p: dtype fp32, expected int32"),
            (CudaArray((4,), "<i4"), ("h",), "fp32", "p: dtype int32, expected fp32"),
            (CudaArray((2, 3), "<i4"), ("b",), "int32", "declared int32[b] (1-D), got shape "
             "(2, 3)"),
            (CudaArray((2,), "<i4"), ("b", "kv"), "int32", "(2-D), got shape (2,)"),
            (CudaArray((2, 3), "<i4", strides=(1, 2)), ("b", "kv"), "int32", "contiguous"),
            (CudaArray((2, 3), "<i4", strides=(0, 1)), ("b", "kv"), "int32",
             "row stride 0 (elements) is smaller than the row length 3"),
            (CudaArray((3,), "<i4", strides=(0,)), ("b",), "int32", "broadcast"),
            (CudaArray((1,), "<i4"), ("b",), "int32", "dimension 0 (`b`) has 1 entries, the "
             "call needs 2 (num_reqs)"),
            (CudaArray((3,), "<f4"), ("h",), "fp32", "has 3 entries, the call needs 4 "
             "(num_heads)"),
            (CudaArray((2, 2), "<i4"), ("N", "h"), "int32", "dimension 1 (`h`)"),
            (CudaArray((2,), "<i4", ptr=0x1002), ("b",), "int32", "not 4-byte aligned"),
            (FakeTensor((2,), "torch.int32", device=None), ("b",), "int32", "not a CUDA"),
        ]
        for obj, dims, dtype, message in cases:
            with self.subTest(message=message):
                with self.assertRaises(ValueError) as caught:
                    param(obj, dims, dtype)
                self.assertIn(message, str(caught.exception))


def varlen(**changes):
    arrays = dict(q=CudaArray((9, 4, 64)), k=CudaArray((9, 2, 64)), v=CudaArray((9, 2, 64)),
                  out=CudaArray((9, 4, 64)), cu_seqlens=CudaArray((3,), "<i4"))
    arrays.update(changes)
    return varlen_fields(head_dim=64, dtype="fp16",
                         **{k: describe(v, k) for k, v in arrays.items()})


# What the paged and the varlen calls both refuse in `sinks` (4 query heads): wrong dtype,
# rank, length, strides, alignment.
SINKS_REJECTED = [
    (CudaArray((4,), "<f2"), "sinks: dtype fp16, expected fp32"),
    (CudaArray((4,), "<i4"), "sinks: dtype int32, expected fp32"),
    (CudaArray((4, 1), "<f4"), "sinks: expected 1 dimensions [num_heads], got shape (4, 1)"),
    (CudaArray((2,), "<f4"), "sinks: 2 entries, expected one per query head (4)"),
    (CudaArray((8,), "<f4"), "sinks: 8 entries"),
    (CudaArray((4,), "<f4", strides=(2,)), "sinks: last dimension must be contiguous"),
    (CudaArray((4,), "<f4", ptr=0x1002), "sinks: data pointer 0x1002 is not 4-byte aligned"),
    (FakeTensor((4,), "torch.float32", device=None), "sinks: not a CUDA device array"),
]


class SinksTest(unittest.TestCase):
    def test_pointer_or_null(self):
        self.assertEqual(call()["sinks"], 0)
        self.assertEqual(call(sinks=CudaArray((4,), "<f4", ptr=0x1000))["sinks"], 0x1000)
        self.assertEqual(varlen()["sinks"], 0)
        self.assertEqual(varlen(sinks=CudaArray((4,), "<f4", ptr=0x2000))["sinks"], 0x2000)
        # One head: its stride is never used.
        one = dict(q=CudaArray((9, 1, 64)), out=CudaArray((9, 1, 64)),
                   k=CudaArray((9, 1, 64)), v=CudaArray((9, 1, 64)))
        self.assertEqual(varlen(**one, sinks=CudaArray((1,), "<f4", strides=(0,),
                                                       ptr=0x3000))["sinks"], 0x3000)

    def test_rejections(self):
        for sinks, message in SINKS_REJECTED:
            for name, fields in (("paged", call), ("varlen", varlen)):
                with self.subTest(name, message=message):
                    with self.assertRaises(ValueError) as caught:
                        fields(sinks=sinks)
                    self.assertIn(message, str(caught.exception))

    def test_same_device_as_the_other_arrays(self):
        tensors = dict(q=FakeTensor((9, 4, 64), "torch.float16"),
                       k=FakeTensor((9, 2, 64), "torch.float16"),
                       v=FakeTensor((9, 2, 64), "torch.float16"),
                       out=FakeTensor((9, 4, 64), "torch.float16"),
                       cu_seqlens=FakeTensor((3,), "torch.int32"),
                       sinks=FakeTensor((4,), "torch.float32", device=1))
        with self.assertRaisesRegex(ValueError, "different CUDA devices: .*sinks on cuda:1"):
            varlen_fields(head_dim=64, dtype="fp16",
                          **{k: describe(v, k) for k, v in tensors.items()})
        tensors["sinks"] = FakeTensor((4,), "torch.float32", ptr=0x7F0000000100)
        fields = varlen_fields(head_dim=64, dtype="fp16",
                               **{k: describe(v, k) for k, v in tensors.items()})
        self.assertEqual(fields["sinks"], 0x7F0000000100)


class VarlenTest(unittest.TestCase):
    def test_fields(self):
        # k and v: head slices of a fused [tokens, 12, 64] QKV projection.
        f = varlen(k=CudaArray((9, 2, 64), strides=(12 * 64, 64, 1)),
                   lse=CudaArray((9, 4), "<f4", strides=(8, 1)))
        self.assertEqual((f["num_tokens"], f["num_seqs"], f["num_heads"], f["num_kv_heads"]),
                         (9, 2, 4, 2))
        self.assertEqual((f["k_stride_token"], f["k_stride_head"], f["v_stride_token"]),
                         (768, 64, 128))
        self.assertEqual(f["lse_stride_token"], 8)

    def test_rejections(self):
        cases = [
            (dict(k=CudaArray((8, 2, 64)), v=CudaArray((8, 2, 64))), "k: 8 tokens, q has 9"),
            (dict(v=CudaArray((9, 1, 64))), "differs from k's"),
            (dict(cu_seqlens=CudaArray((3,), "<f4")), "cu_seqlens: dtype fp32"),
            (dict(q=CudaArray((9, 4, 128)), out=CudaArray((9, 4, 128))), "head_dim 128"),
            (dict(lse=CudaArray((9, 2), "<f4")), "lse: shape (9, 2)"),
        ]
        for changes, message in cases:
            with self.subTest(message=message):
                with self.assertRaises(ValueError) as caught:
                    varlen(**changes)
                self.assertIn(message, str(caught.exception))


if __name__ == "__main__":
    unittest.main()
