"""FlexAttention-style mask_mod / score_mod functions traced into flexjit's language, compiled and
run on the CPU backend through fj_varlen_attention's [B, H, S, D] form (batch strides, key
lengths of their own), each against the user's own function evaluated on concrete integers: a
dense mask (read back exactly through one-hot values) and a float64 softmax."""

import math
import os
import random
import re
import shutil
import subprocess
import unittest

from support import REPO, library_available

import flexjit
from flexjit import flex, trace
from flexjit.trace import TraceError, and_masks, or_masks, where
from flex_reference import HostArray, Scalar, attention, dense_mask



B, HQ, HKV, SQ, SKV, D = 2, 4, 2, 24, 40, 64

# Captured tensors (int32 / float32 host arrays, indexable like torch tensors).
rng = random.Random(7)
PREFIX = HostArray((B,), "<i4", [5, 13])
Q_LENS = HostArray((B,), "<i4", [17, 24])
KV_LENS = HostArray((B,), "<i4", [29, 40])
DOC = HostArray((B, SKV), "<i4", [j // 9 for j in range(SKV)] + [j // 14 for j in range(SKV)])
SLOPES = HostArray((HQ,), "<f4", [2.0 ** (-8 * (i + 1) / HQ) for i in range(HQ)])
WINDOWS = HostArray((HQ,), "<i4", [2, 5, 9, 40])
REL_BIAS = HostArray((HQ, 2 * SKV), "<f4", [rng.uniform(-1, 1) for _ in range(HQ * 2 * SKV)])
BLOCKED = HostArray((B, SQ, SKV), "<i4", [rng.random() < 0.7 for _ in range(B * SQ * SKV)])
BIAS4 = HostArray((B, HQ, SQ, SKV), "<f4", [rng.uniform(-2, 2) for _ in range(B * HQ * SQ * SKV)])
SCALE0 = HostArray((), "<f4", [0.75])
WINDOW = 6
CAP = 5.0
TEMPERATURE = 1.5
GLOBAL_SINKS = 3


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def sliding(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < WINDOW)


def prefix_lm(b, h, q_idx, kv_idx):
    return (kv_idx < PREFIX[b]) | (q_idx >= kv_idx)


def document(b, h, q_idx, kv_idx):
    return (DOC[b, q_idx] == DOC[b, kv_idx]) & (q_idx >= kv_idx)


def jagged(b, h, q_idx, kv_idx):
    return (q_idx < Q_LENS[b]) & (kv_idx < KV_LENS[b])


def head_window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < WINDOWS[h])


def dilated(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & ((q_idx - kv_idx) % 3 == 0)


def neighbourhood_2d(b, h, q_idx, kv_idx):
    side = 6  # a 6-wide image, row-major
    return (abs(q_idx // side - kv_idx // side) <= 1) & (abs(q_idx % side - kv_idx % side) <= 1)


def sinks_and_window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & ((kv_idx < GLOBAL_SINKS) | (q_idx - kv_idx < WINDOW))


def chunked(b, h, q_idx, kv_idx):
    return q_idx // 8 == kv_idx // 8


def blocked_3d(b, h, q_idx, kv_idx):
    return BLOCKED[b, q_idx, kv_idx] != 0


def not_future(b, h, q_idx, kv_idx):
    return ~(kv_idx > q_idx)


def alibi(score, b, h, q_idx, kv_idx):
    return score - SLOPES[h] * (q_idx - kv_idx)


def softcap(score, b, h, q_idx, kv_idx):
    return CAP * flexjit.tanh(score / CAP)


def tanh_distance(score, b, h, q_idx, kv_idx):
    return score + 0.5 * flexjit.tanh((q_idx - kv_idx) / 4)


def relative_bias(score, b, h, q_idx, kv_idx):
    return score + REL_BIAS[h, q_idx - kv_idx + SKV]


def bias_4d(score, b, h, q_idx, kv_idx):
    return score + BIAS4[b, h, q_idx, kv_idx]


def temperature(score, b, h, q_idx, kv_idx):
    return score / TEMPERATURE * SCALE0


def functions_of_score(score, b, h, q_idx, kv_idx):
    distance = abs(q_idx - kv_idx).float()
    return where(q_idx >= kv_idx, score, score - 1.0) + 0.1 * flexjit.log2(1 + distance) \
        - 0.05 * flexjit.sqrt(distance) + 0.01 * flexjit.exp(-distance) \
        + flexjit.sigmoid(score) * flexjit.clamp(distance, 0.0, 2.0) * 0.1


def int_score(score, b, h, q_idx, kv_idx):
    return score * ((q_idx + kv_idx) % 3 + 1)


def make_window(window):
    def window_mask(b, h, q_idx, kv_idx):
        return (q_idx - kv_idx < window) & (kv_idx - q_idx < window)
    return window_mask


# (name, mask_mod, score_mod, (q_len, kv_len)): at least 20 functions the FlexAttention way.
CASES = [
    ("causal", causal, None, (SQ, SKV)),
    ("causal_square", causal, None, (SKV, SKV)),
    ("causal_longer_queries", causal, None, (SKV, SQ)),
    ("sliding", sliding, None, (SQ, SKV)),
    ("prefix_lm", prefix_lm, None, (SQ, SKV)),
    ("document", document, None, (SQ, SKV)),
    ("jagged", jagged, None, (SQ, SKV)),
    ("head_window", head_window, None, (SQ, SKV)),
    ("dilated", dilated, None, (SQ, SKV)),
    ("neighbourhood_2d", neighbourhood_2d, None, (SQ, SKV)),
    ("sinks_and_window", sinks_and_window, None, (SQ, SKV)),
    ("chunked", chunked, None, (SQ, SKV)),
    ("blocked_3d", blocked_3d, None, (SQ, SKV)),
    ("not_future", not_future, None, (SQ, SKV)),
    ("and_masks", and_masks(causal, make_window(4), jagged), None, (SQ, SKV)),
    ("or_masks", or_masks(sliding, prefix_lm), None, (SQ, SKV)),
    ("closure_window", make_window(3), None, (SQ, SKV)),
    ("alibi", causal, alibi, (SQ, SKV)),
    ("softcap", None, softcap, (SQ, SKV)),
    ("tanh_distance", sliding, tanh_distance, (SQ, SKV)),
    ("relative_bias", None, relative_bias, (SQ, SKV)),
    ("bias_4d", document, bias_4d, (SQ, SKV)),
    ("temperature_0d", None, temperature, (SQ, SKV)),
    ("functions_of_score", prefix_lm, functions_of_score, (SQ, SKV)),
    ("int_score", dilated, int_score, (SQ, SKV)),
]


def fp16_values(n, scale=1.0):
    # Values that fp16 holds exactly, so the reference sees what the kernel reads.
    return [round(rng.uniform(-1, 1) * scale * 256) / 256 for _ in range(n)]


def run(mask_mod, score_mod, q_len, kv_len, q, k, v, scale=None, with_lse=True, sinks=None):
    kernel = flex.compile_flex(mask_mod, score_mod, head_dim=D, dtype="fp16", arch="cpu")
    out = HostArray((B, HQ, q_len, D), "<f2")
    lse = HostArray((B, q_len, HQ), "<f4") if with_lse else None
    kernel.run(q, k, v, out, mask_mod=mask_mod, score_mod=score_mod, lse=lse, scale=scale,
               sinks=HostArray((HQ,), "<f4", sinks) if sinks is not None else None)
    return out.values(), (lse.values() if lse is not None else None)


@unittest.skipUnless(library_available(), "libflexjit_runtime.so not found (set FLEXJIT_LIBRARY)")
class FlexFunctionsTest(unittest.TestCase):
    def check_mask(self, mask_mod, q_len, kv_len):
        """One-hot values and zero queries: out[b, h, i, j] is 1/n where key j is visible."""
        zeros = HostArray((B, HQ, q_len, D), "<f2")
        keys = HostArray((B, HKV, kv_len, D), "<f2")
        one_hot = [1.0 if d == j else 0.0 for _ in range(B * HKV) for j in range(kv_len)
                   for d in range(D)]
        values = HostArray((B, HKV, kv_len, D), "<f2", one_hot)
        out, _ = run(mask_mod, None, q_len, kv_len, zeros, keys, values, with_lse=False)
        want = dense_mask(mask_mod, B, HQ, q_len, kv_len)
        for b in range(B):
            for h in range(HQ):
                for i in range(q_len):
                    row = ((b * HQ + h) * q_len + i) * D
                    got = [out[row + j] > 0 for j in range(kv_len)]
                    self.assertEqual(got, want[b][h][i], f"b={b} h={h} q_idx={i}")

    def check_attention(self, mask_mod, score_mod, q_len, kv_len, scale=None, sinks=None):
        shape = (B, HQ, HKV, q_len, kv_len, D)
        qv = fp16_values(B * HQ * q_len * D, 2.0)
        kv = fp16_values(B * HKV * kv_len * D, 2.0)
        vv = fp16_values(B * HKV * kv_len * D)
        q = HostArray((B, HQ, q_len, D), "<f2", qv)
        k = HostArray((B, HKV, kv_len, D), "<f2", kv)
        v = HostArray((B, HKV, kv_len, D), "<f2", vv)
        out, lse = run(mask_mod, score_mod, q_len, kv_len, q, k, v, scale=scale, sinks=sinks)
        mask = dense_mask(mask_mod, B, HQ, q_len, kv_len)
        want_out, want_lse = attention(qv, kv, vv, shape, mask, score_mod, scale, sinks)
        worst = max(abs(a - b) for a, b in zip(out, want_out))
        self.assertLess(worst, 4e-3)
        for b in range(B):
            for h in range(HQ):
                for i in range(q_len):
                    got = lse[(b * q_len + i) * HQ + h]
                    want = want_lse[b][h][i]
                    if math.isinf(want):
                        self.assertEqual(got, want, f"lse b={b} h={h} q_idx={i}")
                    else:
                        self.assertAlmostEqual(got, want, delta=2e-3,
                                               msg=f"lse b={b} h={h} q_idx={i}")

    def test_at_least_twenty_functions(self):
        functions = {id(f) for _, m, s, _ in CASES for f in (m, s) if f is not None}
        self.assertGreaterEqual(len(functions), 20)

    def test_masks_against_the_users_function(self):
        for name, mask_mod, _, (q_len, kv_len) in CASES:
            if mask_mod is None:
                continue
            with self.subTest(name):
                self.check_mask(mask_mod, q_len, kv_len)

    def test_attention_against_float64(self):
        for name, mask_mod, score_mod, (q_len, kv_len) in CASES:
            with self.subTest(name):
                self.check_attention(mask_mod, score_mod, q_len, kv_len)

    def test_explicit_scale(self):
        self.check_attention(causal, softcap, SQ, SKV, scale=0.3)

    def test_sinks_against_float64(self):
        # A sink per head (-inf: none; 3.0 outweighs most rows' keys), on masks whose rows see
        # one key, many, or none (jagged: their out stays 0, their lse becomes the sink).
        for name, mask_mod, score_mod in (("causal", causal, None), ("jagged", jagged, alibi),
                                          ("sliding", sliding, softcap)):
            with self.subTest(name):
                self.check_attention(mask_mod, score_mod, SQ, SKV,
                                     sinks=[-math.inf, -2.5, 0.0, 3.0])

    def test_sinks_are_checked(self):
        kernel = flex.compile_flex(causal, head_dim=D, dtype="fp16", arch="cpu")
        q = HostArray((B, HQ, SQ, D), "<f2")
        kv = HostArray((B, HKV, SKV, D), "<f2")
        for sinks, error, message in (
                (HostArray((HQ,), "<f2"), ValueError, "sinks: dtype fp16, expected fp32"),
                (HostArray((HQ - 1,), "<f4"), ValueError,
                 rf"sinks: {HQ - 1} entries, expected one per query head \({HQ}\)"),
                (HostArray((1, HQ), "<f4"), ValueError, "sinks: expected 1 dimensions"),
                ([0.0] * HQ, TypeError, "sinks: expected a torch tensor or an object with "
                 "__array_interface__, got list")):
            with self.subTest(message):
                with self.assertRaisesRegex(error, message):
                    kernel.run(q, kv, kv, HostArray((B, HQ, SQ, D), "<f2"), mask_mod=causal,
                               sinks=sinks)


@unittest.skipUnless(library_available(), "libflexjit_runtime.so not found (set FLEXJIT_LIBRARY)")
class TracingTest(unittest.TestCase):
    def test_source_is_the_language(self):
        source = trace.to_source(sliding, softcap)
        self.assertIn("const WINDOW: int = 6", source)
        self.assertIn("mask sliding = q >= kv && q - kv < WINDOW", source)
        self.assertIn("score softcap = CAP * tanh(score / CAP)", source)
        source = trace.to_source(document)
        self.assertIn("param DOC: int[b, kv]", source)
        self.assertIn("DOC[b, q] == DOC[b, kv]", source)
        self.assertIn("param BLOCKED_n1: int", trace.to_source(blocked_3d))
        self.assertIn("param SCALE0: float[n0]", trace.to_source(None, temperature))

    def test_cli_checks_the_source(self):
        cli = REPO / "build" / "bin" / "flexjit"
        library = os.environ.get("FLEXJIT_LIBRARY")
        if library:
            cli = (os.path.dirname(os.path.dirname(library)) + "/bin/flexjit")
        if not os.path.exists(str(cli)):
            self.skipTest("the flexjit CLI is not built")
        source = trace.to_source(and_masks(document, head_window), alibi)
        import tempfile
        with tempfile.NamedTemporaryFile("w", suffix=".mask", delete=False) as f:
            f.write(source)
        try:
            result = subprocess.run([str(cli), "check", f.name], capture_output=True, text=True)
            self.assertEqual(result.returncode, 0, result.stderr)
            result = subprocess.run([str(cli), "hints", f.name, "--mask", "and_mask",
                                     "--q-len", "64", "--kv-len", "64", "--tile", "16x16",
                                     "--set", "DOC=0*64", "--set", "WINDOWS=4,4,4,4"],
                                    capture_output=True, text=True)
            self.assertEqual(result.returncode, 0, result.stderr)
        finally:
            os.unlink(f.name)

    def errors(self, mask_mod=None, score_mod=None):
        with self.assertRaises(TraceError) as caught:
            trace.trace(mask_mod, score_mod)
        return str(caught.exception)

    def test_python_if_names_function_line_and_construct(self):
        def branchy(b, h, q_idx, kv_idx):
            if q_idx > kv_idx:
                return True
            return False
        message = self.errors(branchy)
        self.assertIn("branchy", message)
        self.assertIn("test_flex.py:", message)
        self.assertIn("if q_idx > kv_idx:", message)
        self.assertIn("Python `if`", message)

    def test_loop_over_traced_value(self):
        def loop(b, h, q_idx, kv_idx):
            return any(kv_idx == i for i in range(q_idx))
        message = self.errors(loop)
        self.assertIn("range(q_idx)", message)
        self.assertIn("used as a Python int", message)

    def test_python_and_is_refused(self):
        def python_and(b, h, q_idx, kv_idx):
            return q_idx >= kv_idx and q_idx - kv_idx < 4
        self.assertIn("q_idx >= kv_idx and", self.errors(python_and))

    def test_non_boolean_mask(self):
        def distance(b, h, q_idx, kv_idx):
            return q_idx - kv_idx
        message = self.errors(distance)
        self.assertIn("must return a boolean, returned int", message)
        self.assertIn("distance", message)
        self.assertIn("must return a number", self.errors(None, causal_as_score))

    def test_bitwise_on_floats(self):
        # On ints the bitwise operators trace (test_trace_bitwise.py); floats have none.
        def even(b, h, q_idx, kv_idx):
            return (kv_idx.float() & 1) == 0
        message = self.errors(even)
        self.assertIn("bitwise & on a float value", message)
        self.assertIn("(kv_idx.float() & 1) == 0", message)

    def test_unsupported_operation(self):
        import math as m

        def math_module(score, b, h, q_idx, kv_idx):
            return m.tanh(score)
        self.assertIn("math function", self.errors(None, math_module))

        def method(b, h, q_idx, kv_idx):
            return q_idx.argmax() > 0
        self.assertIn(".argmax", self.errors(method))

    def test_constant_negative_index(self):
        def last(b, h, q_idx, kv_idx):
            return DOC[b, -1] == DOC[b, kv_idx]
        self.assertIn("negative index -1", self.errors(last))

    def test_index_semantics(self):
        """Out-of-range reads are 0 in flexjit (torch would wrap a negative index or raise):
        a traced read of DOC[b, q_idx - 30] is DOC's value for q_idx >= 30 and 0 below."""
        def shifted(b, h, q_idx, kv_idx):
            return DOC[b, q_idx - 30] == DOC[b, kv_idx]

        def flexjit_semantics(b, h, q_idx, kv_idx):
            i = int(q_idx) - 30
            read = DOC[b, i] if 0 <= i < SKV else 0
            return read == DOC[b, kv_idx]
        zeros = HostArray((B, HQ, SKV, D), "<f2")
        keys = HostArray((B, HKV, SKV, D), "<f2")
        values = HostArray((B, HKV, SKV, D), "<f2", [1.0 if d == j else 0.0 for _ in range(B * HKV)
                                                     for j in range(SKV) for d in range(D)])
        out, _ = run(shifted, None, SKV, SKV, zeros, keys, values, with_lse=False)
        want = dense_mask(flexjit_semantics, B, HQ, SKV, SKV)
        torch_like = dense_mask(shifted, B, HQ, SKV, SKV)  # HostArray wraps like torch
        self.assertNotEqual(want, torch_like)
        for b in range(B):
            for i in range(SKV):
                row = ((b * HQ) * SKV + i) * D
                self.assertEqual([out[row + j] > 0 for j in range(SKV)], want[b][0][i])

    def test_cache_reuses_the_trace_for_new_tensor_values(self):
        def make(doc):
            def same_doc(b, h, q_idx, kv_idx):
                return doc[b, q_idx] == doc[b, kv_idx]
            return same_doc
        first = HostArray((B, SKV), "<i4", [0] * (B * SKV))
        second = HostArray((B, SKV), "<i4", [j // 5 for j in range(SKV)] * B)
        traced = flex.traced_program(make(first))
        self.assertIs(flex.traced_program(make(second)), traced)
        zeros = HostArray((B, HQ, SKV, D), "<f2")
        keys = HostArray((B, HKV, SKV, D), "<f2")
        values = HostArray((B, HKV, SKV, D), "<f2", [1.0 if d == j else 0.0 for _ in range(B * HKV)
                                                     for j in range(SKV) for d in range(D)])
        out, _ = run(make(second), None, SKV, SKV, zeros, keys, values, with_lse=False)
        row = 7 * D  # b 0, h 0, q_idx 7: keys 5..9
        self.assertEqual([j for j in range(SKV) if out[row + j] > 0], [5, 6, 7, 8, 9])
        # A captured number is compiled in: another value is another program.
        self.assertIsNot(flex.traced_program(make_window(3)), flex.traced_program(make_window(4)))
        self.assertIs(flex.traced_program(make_window(3)), flex.traced_program(make_window(3)))

    def test_runtime_number_is_a_parameter(self):
        window = flexjit.runtime(2)

        def runtime_window(b, h, q_idx, kv_idx):
            return (q_idx >= kv_idx) & (q_idx - kv_idx < window)
        self.assertIn("param window: int", trace.to_source(runtime_window))
        zeros = HostArray((B, HQ, SQ, D), "<f2")
        keys = HostArray((B, HKV, SQ, D), "<f2")
        values = HostArray((B, HKV, SQ, D), "<f2", [1.0 if d == j else 0.0 for _ in range(B * HKV)
                                                    for j in range(SQ) for d in range(D)])
        for w in (2, 5):
            window.value = w
            out, _ = run(runtime_window, None, SQ, SQ, zeros, keys, values, with_lse=False)
            row = 10 * D
            self.assertEqual([j for j in range(SQ) if out[row + j] > 0], list(range(11 - w, 11)))

    def test_forms_of_the_same_mask_trace_alike(self):
        def with_where(b, h, q_idx, kv_idx):
            return where(q_idx >= kv_idx, q_idx - kv_idx < WINDOW, False)
        self.assertIn("where(q >= kv, q - kv < WINDOW, false)", trace.to_source(with_where))


def causal_as_score(score, b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


# ---- property test: random expressions printed as Python, traced back -------------------------

def random_int_expr(r, depth):
    if depth == 0 or r.random() < 0.25:
        return r.choice(["b", "h", "q_idx", "kv_idx", str(r.randint(0, 12))])
    kind = r.randrange(6)
    a, b = random_int_expr(r, depth - 1), random_int_expr(r, depth - 1)
    if kind == 0:
        return f"({a} {r.choice('+-')} {b})"
    if kind == 1:
        return f"({a} * {r.randint(-3, 3)})"
    if kind == 2:
        return f"({a} {r.choice(['//', '%'])} {r.randint(1, 7)})"
    if kind == 3:
        return f"abs({a})"
    if kind == 4:
        return f"flexjit.{r.choice(['minimum', 'maximum'])}({a}, {b})"
    return f"where({random_bool_expr(r, depth - 1)}, {a}, {b})"


def random_bool_expr(r, depth):
    if depth == 0 or r.random() < 0.3:
        # A variable on the left: a comparison of two Python numbers is a Python bool, whose ~
        # is an int in Python (and would be a bool tensor in torch).
        op = r.choice(["<", "<=", ">", ">=", "==", "!="])
        variable = r.choice(["b", "h", "q_idx", "kv_idx"])
        return f"({variable} + {random_int_expr(r, 2)} {op} {random_int_expr(r, 2)})"
    kind = r.randrange(3)
    if kind == 0:
        return f"({random_bool_expr(r, depth - 1)} {r.choice('&|^')} {random_bool_expr(r, depth - 1)})"
    if kind == 1:
        return f"~{random_bool_expr(r, depth - 1)}"
    return f"where({random_bool_expr(r, depth - 1)}, {random_bool_expr(r, depth - 1)}, " \
           f"{random_bool_expr(r, depth - 1)})"


def _scalar(x):
    tracing = getattr(trace._state, "tracer", None) is not None
    return x if tracing or isinstance(x, trace.Value) else Scalar(x)


class _TensorLike:
    """flexjit's functions with results that stay 0-d tensors (Scalar) when evaluated on
    concrete values, as torch's do: Python's max(Scalar(1), 3) is the int 3."""

    where = staticmethod(lambda c, x, y: _scalar(flexjit.where(c, x, y)))
    minimum = staticmethod(lambda x, y: _scalar(flexjit.minimum(x, y)))
    maximum = staticmethod(lambda x, y: _scalar(flexjit.maximum(x, y)))


@unittest.skipUnless(library_available(), "libflexjit_runtime.so not found (set FLEXJIT_LIBRARY)")
class RandomExpressionTest(unittest.TestCase):
    def test_random_masks_trace_back_to_the_same_function(self):
        r = random.Random(2024)
        q_len = kv_len = 20
        zeros = HostArray((B, HQ, q_len, D), "<f2")
        keys = HostArray((B, HKV, kv_len, D), "<f2")
        values = HostArray((B, HKV, kv_len, D), "<f2", [1.0 if d == j else 0.0
                                                        for _ in range(B * HKV)
                                                        for j in range(kv_len) for d in range(D)])
        for n in range(30):
            text = random_bool_expr(r, 3)
            namespace = {"flexjit": _TensorLike, "where": _TensorLike.where}
            exec(f"def random_mask(b, h, q_idx, kv_idx):\n    return {text}\n", namespace)
            mask_mod = namespace["random_mask"]
            with self.subTest(n=n, expression=text):
                out, _ = run(mask_mod, None, q_len, kv_len, zeros, keys, values, with_lse=False)
                want = dense_mask(mask_mod, B, HQ, q_len, kv_len)
                got = [[[[out[((b * HQ + h) * q_len + i) * D + j] > 0 for j in range(kv_len)]
                         for i in range(q_len)] for h in range(HQ)] for b in range(B)]
                self.assertEqual(got, want, trace.to_source(mask_mod))


# ---- docs/python.md: its tracing examples run here ---------------------------------------------

@unittest.skipUnless(library_available(), "libflexjit_runtime.so not found (set FLEXJIT_LIBRARY)")
class DocsExamplesTest(unittest.TestCase):
    def test_examples_run(self):
        text = (REPO / "docs" / "python.md").read_text()
        blocks = re.findall(r"```python\n(# runs in tests/python/test_flex.py\n.*?)```", text,
                            re.S)
        self.assertGreater(len(blocks), 0)
        for block in blocks:
            with self.subTest(block=block.splitlines()[1]):
                exec(compile(block, "docs/python.md", "exec"), {"HostArray": HostArray})


if __name__ == "__main__":
    unittest.main()
