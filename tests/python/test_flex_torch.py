"""flexjit.flex_attention with torch: torch.* functions traced, the CPU backend on CPU tensors
against a float64 torch reference, and on a GPU against torch's own flex_attention. Skipped with
the reason without torch (CI has none), and the GPU part without a CUDA device."""

import re
import unittest

from support import REPO, library_available

import flexjit

try:
    import torch
except ImportError:
    torch = None


def functions(device="cpu"):
    """(name, mask_mod, score_mod) written with torch.*, capturing tensors on `device`."""
    B, H, S = 2, 4, 96
    gen = torch.Generator().manual_seed(3)
    doc = torch.randint(0, 3, (B, S), generator=gen).sort(dim=1).values
    slopes = torch.exp2(-8 * torch.arange(1, H + 1) / H)
    bias = torch.randn(H, 2 * S, generator=gen)
    blocked = torch.rand(B, S, S, generator=gen) < 0.8
    prefix = torch.tensor([7, 40])
    windows = torch.tensor([4, 8, 16, 96])
    scale0 = torch.tensor(0.5)
    doc, slopes, bias, blocked, prefix, windows, scale0 = (
        t.to(device) for t in (doc, slopes, bias, blocked, prefix, windows, scale0))

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    def sliding(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < 24)

    def document(b, h, q_idx, kv_idx):
        return (doc[b, q_idx] == doc[b, kv_idx]) & (q_idx >= kv_idx)

    def prefix_lm(b, h, q_idx, kv_idx):
        return (kv_idx < prefix[b]) | (q_idx >= kv_idx)

    def head_window(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < windows[h])

    def blocked_3d(b, h, q_idx, kv_idx):
        return blocked[b, q_idx, kv_idx]

    def neighbourhood(b, h, q_idx, kv_idx):
        return (torch.abs(q_idx // 8 - kv_idx // 8) <= 1) & (torch.abs(q_idx % 8 - kv_idx % 8) <= 1)

    def alibi(score, b, h, q_idx, kv_idx):
        return score - slopes[h] * (q_idx - kv_idx)

    def softcap(score, b, h, q_idx, kv_idx):
        return 20.0 * torch.tanh(score / 20.0)

    def relative(score, b, h, q_idx, kv_idx):
        return score + bias[h, q_idx - kv_idx + S]

    def mixed(score, b, h, q_idx, kv_idx):
        d = (q_idx - kv_idx).to(torch.float32)
        return torch.where(q_idx >= kv_idx, score, score * scale0) + \
            0.1 * torch.log2(1 + torch.abs(d)) - torch.clamp(d, -1.0, 1.0) * torch.sigmoid(score)

    return [("causal", causal, None), ("sliding", sliding, softcap),
            ("document", document, alibi), ("prefix_lm", prefix_lm, None),
            ("head_window", head_window, relative), ("blocked_3d", blocked_3d, None),
            ("neighbourhood", neighbourhood, mixed),
            ("composed", flexjit.and_masks(causal, flexjit.or_masks(sliding, prefix_lm)), None)]


def reference(q, k, v, mask_mod, score_mod, scale, gqa, sinks=None):
    """float64 attention with the functions evaluated by torch on broadcast index tensors (on
    q's device, where the functions' captured tensors must be). `sinks` [H]: each head's logit
    is appended to every row's scores as one more key with a zero value, and dropped after the
    softmax (gpt-oss's eager attention)."""
    B, H, S, D = q.shape
    L = k.shape[2]
    if gqa:
        k = k.repeat_interleave(H // k.shape[1], dim=1)
        v = v.repeat_interleave(H // v.shape[1], dim=1)
    b = torch.arange(B, device=q.device).view(B, 1, 1, 1)
    h = torch.arange(H, device=q.device).view(1, H, 1, 1)
    qi = torch.arange(S, device=q.device).view(1, 1, S, 1)
    ki = torch.arange(L, device=q.device).view(1, 1, 1, L)
    s = (q.double() @ k.double().transpose(-1, -2)) * (scale or D ** -0.5)
    if score_mod is not None:
        s = score_mod(s, b, h, qi, ki).double()
    if mask_mod is not None:
        s = s.masked_fill(~mask_mod(b, h, qi, ki).expand(B, H, S, L), float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks.to(s).view(1, H, 1, 1).expand(B, H, S, 1)], dim=-1)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)[..., :L]
    return p @ v.double(), lse


def sink_logits(heads, device="cpu"):
    """float32 [heads]: no sink (-inf) on head 0, then sinks from below to above a row's
    scores."""
    values = torch.linspace(-2.0, 4.0, heads - 1)
    return torch.cat([torch.tensor([float("-inf")]), values]).to(device)


def check_against_float64(test, cases, *, device, head_dim, sinks=None):
    """flex_attention of each (name, mask_mod, score_mod) on random bf16 [2, 4, S, D] tensors
    of `device`, against reference(): 96 queries over 96 keys, then 64 over 96 with GQA 4/2."""
    torch.manual_seed(0)
    for name, mask_mod, score_mod in cases:
        for q_len, gqa in ((96, False), (64, True)):
            with test.subTest(name, q_len=q_len, gqa=gqa):
                q = torch.randn(2, 4, q_len, head_dim, dtype=torch.bfloat16, device=device)
                k = torch.randn(2, 2 if gqa else 4, 96, head_dim, dtype=torch.bfloat16,
                                device=device)
                v = torch.randn_like(k)
                out, lse = flexjit.flex_attention(q, k, v, score_mod=score_mod,
                                                  mask_mod=mask_mod, enable_gqa=gqa,
                                                  return_lse=True, sinks=sinks)
                want, want_lse = reference(q, k, v, mask_mod, score_mod, None, gqa, sinks)
                torch.testing.assert_close(out.double(), want, atol=2e-2, rtol=2e-2)
                torch.testing.assert_close(lse.double(), want_lse, atol=2e-2, rtol=1e-3)


def first_request_only(b, h, q_idx, kv_idx):
    """Causal for request 0; request 1 sees nothing (its rows: out 0, lse the sink)."""
    return (q_idx >= kv_idx) & (b == 0)


@unittest.skipUnless(torch is not None, "torch is not installed")
@unittest.skipUnless(library_available(), "libflexjit_runtime.so not found (set FLEXJIT_LIBRARY)")
class TorchCpuTest(unittest.TestCase):
    def test_torch_functions_on_cpu_tensors(self):
        check_against_float64(self, functions(), device="cpu", head_dim=64)

    def test_sinks_on_cpu_tensors(self):
        cases = [(name, m, s) for name, m, s in functions() if name in ("causal", "document")]
        check_against_float64(self, cases + [("first_request_only", first_request_only, None)],
                              device="cpu", head_dim=64, sinks=sink_logits(4))

    def test_sinks_are_checked(self):
        q = torch.randn(1, 4, 16, 64, dtype=torch.bfloat16)
        k = torch.randn(1, 2, 16, 64, dtype=torch.bfloat16)
        for sinks, message in (
                (torch.zeros(4, dtype=torch.bfloat16), "sinks: dtype bf16, expected fp32"),
                (torch.zeros(3), r"sinks: 3 entries, expected one per query head \(4\)"),
                (torch.zeros(4, 1), "sinks: expected 1 dimensions"),
                (torch.zeros(8)[::2], "sinks: last dimension must be contiguous"),
                (torch.zeros(4, dtype=torch.float64), "sinks: dtype torch.float64")):
            with self.subTest(message):
                with self.assertRaisesRegex(ValueError, message):
                    flexjit.flex_attention(q, k, k, mask_mod=_causal, enable_gqa=True,
                                           sinks=sinks)
        learnable = torch.zeros(4, requires_grad=True)
        with self.assertRaisesRegex(RuntimeError, "forward only"):
            flexjit.flex_attention(q, k, k, enable_gqa=True, sinks=learnable)
        with torch.no_grad():
            flexjit.flex_attention(q, k, k, enable_gqa=True, sinks=learnable)

    def test_docs_sinks_example(self):
        text = (REPO / "docs" / "python.md").read_text()
        blocks = re.findall(r"```python\n(# runs in tests/python/test_flex_torch.py.*?)```",
                            text, re.S)
        self.assertEqual(len(blocks), 1)
        exec(compile(blocks[0], "docs/python.md", "exec"), {})  # its asserts compare

    def test_requires_grad_raises(self):
        q = torch.randn(1, 2, 16, 64, dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(1, 2, 16, 64, dtype=torch.bfloat16)
        with self.assertRaises(RuntimeError):
            flexjit.flex_attention(q, k, k)
        with torch.no_grad():
            flexjit.flex_attention(q, k, k)

    def test_gqa_needs_enable_gqa(self):
        q = torch.randn(1, 4, 16, 64, dtype=torch.bfloat16)
        k = torch.randn(1, 2, 16, 64, dtype=torch.bfloat16)
        with self.assertRaises(ValueError):
            flexjit.flex_attention(q, k, k)

    def test_new_tensor_values_reuse_the_trace(self):
        def make(doc):
            def same_doc(b, h, q_idx, kv_idx):
                return doc[b, q_idx] == doc[b, kv_idx]
            return same_doc
        first = flexjit.flex.traced_program(make(torch.zeros(2, 8, dtype=torch.int64)))
        self.assertIs(flexjit.flex.traced_program(make(torch.ones(2, 8, dtype=torch.int64))),
                      first)
        self.assertIsNot(flexjit.flex.traced_program(make(torch.ones(2, 8, 8))), first)


@unittest.skipUnless(torch is not None and torch.cuda.is_available(), "no torch with CUDA")
@unittest.skipUnless(library_available(), "libflexjit_runtime.so not found (set FLEXJIT_LIBRARY)")
class TorchGpuTest(unittest.TestCase):
    """Against torch.nn.attention.flex_attention (compiled), the block mask built from the same
    mask_mod. The captured tensors move to the GPU with the functions' closures."""

    def test_against_torch_flex_attention(self):
        from torch.nn.attention.flex_attention import create_block_mask
        from torch.nn.attention.flex_attention import flex_attention as torch_flex
        compiled = torch.compile(torch_flex)
        torch.manual_seed(0)
        for name, mask_mod, score_mod in functions("cuda"):
            for q_len, kv_len, dtype in ((96, 96, torch.bfloat16), (64, 96, torch.float16)):
                with self.subTest(name, q_len=q_len, dtype=dtype):
                    q = torch.randn(2, 4, q_len, 128, dtype=dtype, device="cuda")
                    k = torch.randn(2, 4, kv_len, 128, dtype=dtype, device="cuda")
                    v = torch.randn_like(k)
                    out, lse = flexjit.flex_attention(q, k, v, score_mod=score_mod,
                                                      mask_mod=mask_mod, return_lse=True)
                    block_mask = create_block_mask(mask_mod, 2, 4, q_len, kv_len,
                                                   device="cuda") if mask_mod else None
                    want, want_lse = compiled(q, k, v, score_mod=score_mod, block_mask=block_mask,
                                              return_lse=True)
                    torch.testing.assert_close(out, want, atol=2e-2, rtol=2e-2)
                    visible = want_lse.isfinite()
                    torch.testing.assert_close(lse[visible], want_lse[visible], atol=2e-2,
                                               rtol=1e-3)

    def test_sinks_against_float64(self):
        sinks = sink_logits(4, "cuda")
        cases = [(name, m, s) for name, m, s in functions("cuda")
                 if name in ("causal", "sliding", "document")]
        check_against_float64(self, cases + [("first_request_only", first_request_only, None)],
                              device="cuda", head_dim=128, sinks=sinks)
        q = torch.randn(1, 4, 16, 128, dtype=torch.bfloat16, device="cuda")
        with self.assertRaisesRegex(ValueError, "sinks: on the host, the kernel runs on a CUDA "
                                    "device"):
            flexjit.flex_attention(q, q, q, sinks=sinks.cpu())

    def test_repeated_geometry_takes_each_calls_pointers(self):
        # The second call of a geometry launches the first's struct with its own pointers
        # (FlexKernel._templates): new q, k, v, out, lse, sinks and captured doc every call,
        # another geometry in between.
        torch.manual_seed(1)
        for step, (q_len, kv_len) in enumerate(((64, 96), (64, 96), (32, 48), (64, 96))):
            with self.subTest(step=step):
                doc = torch.randint(0, 3, (2, kv_len), device="cuda").sort(dim=1).values

                def same_doc(b, h, q_idx, kv_idx):
                    return doc[b, q_idx + kv_len - q_len] == doc[b, kv_idx]
                q = torch.randn(2, 4, q_len, 128, dtype=torch.bfloat16, device="cuda")
                k = torch.randn(2, 2, kv_len, 128, dtype=torch.bfloat16, device="cuda")
                v = torch.randn_like(k)
                sinks = sink_logits(4, "cuda") + step
                out, lse = flexjit.flex_attention(q, k, v, mask_mod=same_doc, enable_gqa=True,
                                                  return_lse=True, sinks=sinks)
                want, want_lse = reference(q, k, v, same_doc, None, None, True, sinks)
                torch.testing.assert_close(out.double(), want, atol=2e-2, rtol=2e-2)
                torch.testing.assert_close(lse.double(), want_lse, atol=2e-2, rtol=1e-3)

    def test_paged_matches_contiguous(self):
        torch.manual_seed(1)
        page, heads, dim = 16, 4, 128
        lens = [40, 75]
        q_lens = [40, 5]
        blocks = sum((n + page - 1) // page for n in lens)
        k_cache = torch.randn(blocks + 2, page, heads, dim, dtype=torch.bfloat16, device="cuda")
        v_cache = torch.randn_like(k_cache)
        table = torch.zeros(2, 8, dtype=torch.int32, device="cuda")
        perm = torch.randperm(blocks + 2)[:blocks].tolist()
        used = 0
        for r, n in enumerate(lens):
            for j in range((n + page - 1) // page):
                table[r, j] = perm[used]
                used += 1
        q = torch.randn(sum(q_lens), heads, dim, dtype=torch.bfloat16, device="cuda")
        qsl = torch.tensor([0, q_lens[0], sum(q_lens)], dtype=torch.int32, device="cuda")
        seq_lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
        cases = [(name, m, s, None) for name, m, s in functions()
                 if name not in ("document", "blocked_3d")]  # their captures are [B, 96]-shaped
        cases += [(name + " with sinks", m, s, sink_logits(heads, "cuda"))
                  for name, m, s, _ in cases[:2]]
        for name, mask_mod, score_mod, sinks in cases:
            with self.subTest(name):
                out = flexjit.flex_attention_paged(q, k_cache, v_cache, table, qsl, seq_lens,
                                                   mask_mod=mask_mod, score_mod=score_mod,
                                                   max_query_len=max(q_lens), sinks=sinks)
                for r in range(2):
                    rows = [table[r, j].item() for j in range((lens[r] + page - 1) // page)]
                    k = k_cache[rows].reshape(-1, heads, dim)[:lens[r]].transpose(0, 1)[None]
                    v = v_cache[rows].reshape(-1, heads, dim)[:lens[r]].transpose(0, 1)[None]
                    qr = q[qsl[r]:qsl[r + 1]].transpose(0, 1)[None]
                    offset = lens[r] - q_lens[r]

                    def shifted_mask(b, h, q_idx, kv_idx, r=r, offset=offset):
                        return mask_mod(b + r, h, q_idx + offset, kv_idx)

                    def shifted_score(score, b, h, q_idx, kv_idx, r=r, offset=offset):
                        return score_mod(score, b + r, h, q_idx + offset, kv_idx)
                    want, _ = reference(qr.cpu(), k.cpu(), v.cpu(), shifted_mask,
                                        shifted_score if score_mod else None, None, False,
                                        sinks.cpu() if sinks is not None else None)
                    got = out[qsl[r]:qsl[r + 1]].transpose(0, 1)[None].cpu().double()
                    torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)


def _causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def _softcap(score, b, h, q_idx, kv_idx):
    return 30.0 * torch.tanh(score / 30.0)


def _same_document(doc):
    def document(b, h, q_idx, kv_idx):
        return (doc[b, q_idx] == doc[b, kv_idx]) & (q_idx >= kv_idx)
    return document


@unittest.skipUnless(torch is not None and torch.cuda.is_available(), "no torch with CUDA")
@unittest.skipUnless(library_available(), "libflexjit_runtime.so not found (set FLEXJIT_LIBRARY)")
class TorchCompileTest(unittest.TestCase):
    """flexjit.flex_attention inside torch.compile(fullgraph=True): one graph around
    torch.ops.flexjit.flex_attention, and the same numbers as eager (the same kernel)."""

    def inputs(self, seed, q_len=256, kv_len=256):
        gen = torch.Generator(device="cuda").manual_seed(seed)
        q = torch.randn(2, 8, q_len, 128, dtype=torch.bfloat16, device="cuda", generator=gen)
        k = torch.randn(2, 2, kv_len, 128, dtype=torch.bfloat16, device="cuda", generator=gen)
        return q, k, torch.randn(k.shape, dtype=k.dtype, device="cuda", generator=gen)

    def test_schema_declares_the_writes(self):
        schema = flexjit.torch_ops._flex_attention._schema
        written = [a.name for a in schema.arguments
                   if a.alias_info is not None and a.alias_info.is_write]
        self.assertEqual(written, ["out", "lse"])
        self.assertEqual(len(schema.returns), 0)

    def test_compiled_matches_eager_without_graph_break(self):
        def step(q, k, v):
            out, lse = flexjit.flex_attention(q, k, v, mask_mod=_causal, score_mod=_softcap,
                                              enable_gqa=True, return_lse=True)
            return out * 2, lse

        q, k, v = self.inputs(0)
        torch._dynamo.reset()
        explained = torch._dynamo.explain(step)(q, k, v)
        self.assertEqual((explained.graph_count, explained.graph_break_count), (1, 0),
                         explained.break_reasons)
        torch._dynamo.reset()
        compiled = torch.compile(step, fullgraph=True)
        for seed, q_len in ((1, 256), (2, 128)):
            with self.subTest(q_len=q_len):
                q, k, v = self.inputs(seed, q_len=q_len)
                got, want = compiled(q, k, v), step(q, k, v)
                for g, w in zip(got, want):
                    torch.testing.assert_close(g, w, atol=0, rtol=0)

    def test_compiled_with_sinks_matches_eager(self):
        def step(q, k, v, sinks):
            return flexjit.flex_attention(q, k, v, mask_mod=_causal, enable_gqa=True,
                                          sinks=sinks)

        q, k, v = self.inputs(4)
        sinks = sink_logits(8, "cuda")
        torch._dynamo.reset()
        explained = torch._dynamo.explain(step)(q, k, v, sinks)
        self.assertEqual((explained.graph_count, explained.graph_break_count), (1, 0),
                         explained.break_reasons)
        torch._dynamo.reset()
        compiled = torch.compile(step, fullgraph=True)
        for shift in (0.0, -3.0):  # new sink values, the same graph
            with self.subTest(shift=shift):
                torch.testing.assert_close(compiled(q, k, v, sinks + shift),
                                           step(q, k, v, sinks + shift), atol=0, rtol=0)
        self.assertFalse(torch.equal(step(q, k, v, sinks), step(q, k, v, None)))

    def test_compiled_reads_captured_tensors_at_each_call(self):
        def step(q, k, v, mask_mod):
            return flexjit.flex_attention(q, k, v, mask_mod=mask_mod, enable_gqa=True)

        q, k, v = self.inputs(3)
        docs = [torch.randint(0, 4, (2, 256), device="cuda").sort(dim=1).values
                for _ in range(3)]
        torch._dynamo.reset()
        explained = torch._dynamo.explain(step)(q, k, v, _same_document(docs[0]))
        self.assertEqual((explained.graph_count, explained.graph_break_count), (1, 0),
                         explained.break_reasons)
        torch._dynamo.reset()
        compiled = torch.compile(step, fullgraph=True)
        for i, doc in enumerate(docs):
            with self.subTest(doc=i):
                mask_mod = _same_document(doc)
                torch.testing.assert_close(compiled(q, k, v, mask_mod), step(q, k, v, mask_mod),
                                           atol=0, rtol=0)


if __name__ == "__main__":
    unittest.main()
