"""The tracer's bitwise operators (docs/python.md#tracing): `& | ^ ~ << >>` on ints become the
language's bitwise operators (docs/language.md §5.1), on booleans `& | ^ ~` stay and, or, xor,
not. The texts are checked as written, and the masks run on the CPU backend against the Python
function evaluated on plain ints; with torch, torch.bitwise_* trace to the same text."""

import unittest

from support import library_available

from flexjit import flex, trace
from flexjit.trace import TraceError
from flex_reference import HostArray

try:
    import torch
except ImportError:
    torch = None

B, HQ, HKV, S, D = 1, 2, 1, 40, 64

# Two words of bits per query row (32 bits each), the high bit set in some: `>>` is arithmetic,
# so bit 31 reads back through a negative word.
BITS = HostArray((S, 2), "<i4", [((q * 2654435761 + j * 40503) % 2**32) - 2**31
                                 for q in range(S) for j in range(2)])


def body(source):
    """The mask's body in the traced source."""
    line = next(line for line in source.splitlines() if line.startswith("mask "))
    return line.split(" = ", 1)[1]


def even_keys(b, h, q_idx, kv_idx):
    return (kv_idx & 1) == 0


def bits_mask(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & ((q_idx == kv_idx) | ((BITS[q_idx, kv_idx // 32] >> (kv_idx % 32))
                                                     & 1 == 1))


def mixed(b, h, q_idx, kv_idx):
    return ((q_idx ^ kv_idx) | (~q_idx & 7)) << 1 >> 2 != (q_idx + 3 & kv_idx)


def bool_and_int(b, h, q_idx, kv_idx):
    return ((q_idx > kv_idx) & kv_idx) == 1


def shifted_constants(b, h, q_idx, kv_idx):
    return (1 << (kv_idx % 8)) & (q_idx | 64) != 0


class TraceTextTest(unittest.TestCase):
    def test_integer_operands_become_bitwise_operators(self):
        self.assertEqual(body(trace.to_source(even_keys)), "kv & 1 == 0")
        self.assertEqual(body(trace.to_source(mixed)),
                         "(q ^ kv | ~q & 7) << 1 >> 2 != q + 3 & kv")
        self.assertEqual(body(trace.to_source(shifted_constants)),
                         "1 << kv % 8 & (q | 64) != 0")
        self.assertEqual(body(trace.to_source(bits_mask)),
                         "q >= kv && (q == kv || BITS[q, kv / 32] >> kv % 32 & 1 == 1)")

    def test_booleans_stay_logic(self):
        def logic(b, h, q_idx, kv_idx):
            return ((q_idx >= kv_idx) ^ (kv_idx < 3)) | ~(q_idx == 0)
        self.assertEqual(body(trace.to_source(logic)), "q >= kv != kv < 3 || !(q == 0)")

    def test_a_boolean_meets_an_int_as_0_or_1(self):
        self.assertEqual(body(trace.to_source(bool_and_int)), "int(q > kv) & kv == 1")

    def test_floats_are_refused(self):
        def on_float(b, h, q_idx, kv_idx):
            return (q_idx.float() & 1) == 0
        with self.assertRaises(TraceError) as caught:
            trace.to_source(on_float)
        self.assertIn("bitwise & on a float value", str(caught.exception))

        def inverted(score, b, h, q_idx, kv_idx):
            return score + ~score
        with self.assertRaises(TraceError) as caught:
            trace.to_source(None, inverted)
        self.assertIn("bitwise ~ on a float value", str(caught.exception))


def plain_mask(mask_mod, q_len, kv_len):
    """mask[i][j] of the function on plain Python ints (the arrays read as ints too)."""
    return [[bool(mask_mod(0, 0, i, j)) for j in range(kv_len)] for i in range(q_len)]


@unittest.skipUnless(library_available(), "libflexjit_runtime.so not found (set FLEXJIT_LIBRARY)")
class TraceRunTest(unittest.TestCase):
    def visible(self, mask_mod):
        """mask[i][j] as the CPU backend computes it: one-hot values read back through the
        output (head 0; every head sees the same mask here)."""
        kernel = flex.compile_flex(mask_mod, None, head_dim=D, dtype="fp16", arch="cpu")
        q = HostArray((B, HQ, S, D), "<f2")
        k = HostArray((B, HKV, S, D), "<f2")
        v = HostArray((B, HKV, S, D), "<f2", [1.0 if d == j else 0.0 for j in range(S)
                                              for d in range(D)])
        out = HostArray((B, HQ, S, D), "<f2")
        kernel.run(q, k, v, out, mask_mod=mask_mod)
        values = out.values()
        return [[values[i * D + j] > 0 for j in range(S)] for i in range(S)]

    def test_masks_compute_what_python_computes(self):
        for mask_mod in (even_keys, bits_mask, mixed, bool_and_int, shifted_constants):
            with self.subTest(mask=mask_mod.__name__):
                self.assertEqual(self.visible(mask_mod), plain_mask(mask_mod, S, S),
                                 trace.to_source(mask_mod))


@unittest.skipUnless(torch is not None, "torch is not installed")
class TorchBitwiseTest(unittest.TestCase):
    def test_torch_functions_trace_to_the_operators(self):
        def functions(b, h, q_idx, kv_idx):
            word = torch.bitwise_xor(torch.bitwise_or(q_idx, kv_idx), torch.bitwise_not(kv_idx))
            shifted = torch.bitwise_right_shift(torch.bitwise_left_shift(word, 2), kv_idx % 4)
            return torch.bitwise_and(shifted, 1) == 0

        def operators(b, h, q_idx, kv_idx):
            return (((q_idx | kv_idx) ^ ~kv_idx) << 2 >> (kv_idx % 4) & 1) == 0
        self.assertEqual(body(trace.to_source(functions)), body(trace.to_source(operators)))

    def test_tensor_methods_and_operators(self):
        bits = torch.tensor([[5, -1], [3, 2**31 - 1]], dtype=torch.int32)

        def methods(b, h, q_idx, kv_idx):
            word = bits[q_idx % 2, kv_idx % 2]
            return word.bitwise_right_shift(kv_idx % 32).bitwise_and(1) == 1

        self.assertEqual(body(trace.to_source(methods)),
                         "bits[q % 2, kv % 2] >> kv % 32 & 1 == 1")

    def test_torch_semantics_match_the_language(self):
        # The shift counts the language defines past Python's: 32 and beyond, and negatives.
        values = torch.tensor([-7, -1, 0, 5, 2**31 - 1, -2**31], dtype=torch.int32)
        for count in (-1, 0, 1, 31, 32, 33):
            counts = torch.full_like(values, count)
            left = torch.bitwise_left_shift(values, counts).tolist()
            right = torch.bitwise_right_shift(values, counts).tolist()
            for value, got_left, got_right in zip(values.tolist(), left, right):
                in_range = 0 <= count <= 31
                want_left = ((value << count) + 2**31) % 2**32 - 2**31 if in_range else 0
                want_right = value >> count if in_range else (-1 if value < 0 else 0)
                self.assertEqual((got_left, got_right), (want_left, want_right),
                                 f"{value} and {count}")


if __name__ == "__main__":
    unittest.main()
