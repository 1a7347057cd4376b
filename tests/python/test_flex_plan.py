"""flexjit.flex_plan and flex_attention_paged(plan=): a traced mask_mod/score_mod through the
split-KV decode plan (docs/python.md#flex-plan).

Without a GPU: flex_plan's argument and trace checks (before any device work), its error on a
machine without a device, and, with torch, flex_attention_paged's checks of `plan`. On a GPU
(torch with CUDA): a decode batch (requests of 1 to 4000 keys, page 16, GQA 32/8, head dim 128,
bf16) of three FlexAttention-style pairs, one reading a captured tensor, against the unplanned
call, torch's own flex_attention and float64, and with attention sinks; a mixed batch (prefill
chunks beside decodes); a CUDA graph of the planned run replayed over new batches; and
docs/python.md's example.
Skipped with the reason where torch, the library or a GPU is missing. On the GPU machine
(library staged in .carry/lib):

    cd tests/python && FLEXJIT_LIBRARY=$PWD/../../.carry/lib/libflexjit_runtime.so \\
        python3 -m unittest -v test_flex_plan
"""

import re
import unittest

from support import REPO, library_available

import flexjit

try:
    import torch
except ImportError:
    torch = None

NO_LIBRARY = "libflexjit_runtime.so not found (set FLEXJIT_LIBRARY)"
NO_TORCH = "torch is not installed (flex_attention_paged takes torch tensors; CI has none)"
NO_CUDA = "no torch with CUDA (plans run on the GPU)"

HEADS, KV_HEADS, HEAD_DIM, PAGE = 32, 8, 128, 16
LENS = [3001, 17, 1024, 2049, 1, 4000, 130]
WIDTH = 256  # block-table columns: 4096 keys in pages of 16
SHAPE = dict(num_heads=HEADS, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM, max_num_reqs=8)
WINDOW = 256


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def sliding(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < WINDOW)


def softcap(score, b, h, q_idx, kv_idx):
    return 30.0 * torch.tanh(score / 30.0)


def documents(doc):
    def document(b, h, q_idx, kv_idx):
        return (doc[b, q_idx] == doc[b, kv_idx]) & (q_idx >= kv_idx)
    return document


def alibi_of(slopes):
    def alibi(score, b, h, q_idx, kv_idx):
        return score - slopes[h] * (q_idx - kv_idx)
    return alibi


def branchy(b, h, q_idx, kv_idx):
    if q_idx >= kv_idx:  # Python control flow on a traced value
        return True
    return False


@unittest.skipUnless(library_available(), NO_LIBRARY)
class FlexPlanArgumentsTest(unittest.TestCase):
    """What flex_plan refuses before any device work (so also without a GPU)."""

    def test_shape_values_are_checked(self):
        for change, error, message in (
                (dict(max_num_reqs=2.5), TypeError, "max_num_reqs: expected an int, got float"),
                (dict(max_num_reqs=True), TypeError, "max_num_reqs: expected an int, got bool"),
                (dict(max_query_len=-1), ValueError, "max_query_len: -1 is out of range"),
                (dict(max_num_tokens=2**31), ValueError, "max_num_tokens: 2147483648 is out"),
                (dict(num_heads=0), ValueError, "num_heads: 0 is out of range"),
                (dict(num_heads=30), ValueError, r"num_heads \(30\) is not a multiple of "
                                                 r"num_kv_heads \(8\)"),
                (dict(head_dim="128"), TypeError, "head_dim: expected an int, got str"),
                (dict(page_size=0), ValueError, "page_size: 0 is out of range"),
                (dict(max_num_reqs=2**20, max_query_len=2**12), ValueError,
                 "max_num_tokens: 4294967296 is out of range"),
                (dict(dtype="fp32"), ValueError, "dtype 'fp32' is not supported")):
            with self.subTest(**{k: repr(v) for k, v in change.items()}):
                with self.assertRaisesRegex(error, message):
                    flexjit.flex_plan(causal, **dict(SHAPE, **change))

    def test_trace_errors_come_first(self):
        with self.assertRaisesRegex(flexjit.TraceError, "branchy"):
            flexjit.flex_plan(branchy, **SHAPE)

    def test_without_a_device_the_error_is_the_librarys(self):
        try:
            plan = flexjit.flex_plan(sliding, **SHAPE)
        except flexjit.FlexjitError as error:
            self.assertEqual(error.status, flexjit.Status.CUDA, error)
            return
        plan.close()
        self.skipTest("a CUDA device is present: the plan was made (FlexPlanGpuTest runs it)")


@unittest.skipIf(torch is None, NO_TORCH)
@unittest.skipUnless(library_available(), NO_LIBRARY)
class FlexPlanCallTest(unittest.TestCase):
    """flex_attention_paged's checks of `plan`, which come before the plan is used: on CPU
    tensors, with a FlexPlan standing on a CPU kernel and no plan (only a GPU makes one)."""

    def setUp(self):
        kernel = flexjit.compile_flex(sliding, softcap, head_dim=HEAD_DIM, page_size=PAGE,
                                      arch="cpu")
        self.plan = flexjit.FlexPlan(kernel, None, None)
        self.args = (torch.zeros(2, HEADS, HEAD_DIM, dtype=torch.bfloat16),
                     torch.zeros(4, PAGE, KV_HEADS, HEAD_DIM, dtype=torch.bfloat16),
                     torch.zeros(4, PAGE, KV_HEADS, HEAD_DIM, dtype=torch.bfloat16),
                     torch.zeros(2, 2, dtype=torch.int32),
                     torch.tensor([0, 1, 2], dtype=torch.int32),
                     torch.tensor([20, 3], dtype=torch.int32))

    def call(self, plan, mask_mod=sliding, score_mod=softcap):
        return flexjit.flex_attention_paged(*self.args, mask_mod=mask_mod, score_mod=score_mod,
                                            plan=plan)

    def test_plan_must_be_a_flex_plan(self):
        with self.assertRaisesRegex(TypeError, "plan: expected a flexjit.FlexPlan "
                                    r"\(flexjit.flex_plan\), got object"):
            self.call(object())

    def test_functions_must_be_the_plans(self):
        with self.assertRaisesRegex(ValueError, r"made for other functions \(mask 'sliding', "
                                    r"score 'softcap'\) than this call's \(mask 'causal', "
                                    r"score None\)"):
            self.call(self.plan, causal, None)

    def test_a_changed_captured_number_is_another_kernel(self):
        global WINDOW
        saved, WINDOW = WINDOW, WINDOW + 1
        try:
            with self.assertRaisesRegex(ValueError, "captured numbers, which are compile-time "
                                        "constants"):
                self.call(self.plan)
        finally:
            WINDOW = saved

    def test_plans_run_on_cuda_tensors(self):
        with self.assertRaisesRegex(ValueError, "plans run on CUDA tensors, query is on cpu"):
            self.call(self.plan)


# ---- on a GPU ---------------------------------------------------------------------------------

if torch is not None:
    from test_flex_torch import reference
    from test_torch_ops import capture_graph, paged_batch, static_batch


def decode_batch(lens, seed):
    """A decode step (one query token per request) over a shuffled joint K/V cache."""
    return paged_batch([1] * len(lens), lens, device="cuda", seed=seed, width=WIDTH,
                       heads=HEADS, kv_heads=KV_HEADS)


def positional(batch):
    return (batch["q"], batch["k_cache"], batch["v_cache"], batch["block_table"],
            batch["query_start_loc"], batch["seq_lens"])


def document_ids(num_reqs, seed):
    """int64 [num_reqs, 4096] on the GPU: documents of 100 to 1100 keys, as a torch user
    writes them (not int32: the call converts)."""
    gen = torch.Generator().manual_seed(seed)
    sizes = torch.randint(100, 1100, (num_reqs, 64), generator=gen)
    return torch.stack([torch.repeat_interleave(torch.arange(64), s)[:4096]
                        for s in sizes]).cuda()


def cases(num_reqs, seed=0):
    """(name, mask_mod, score_mod): a window with a score, a captured int64 tensor read along
    q and kv, and a captured float tensor read by head."""
    slopes = torch.exp2(-8 * torch.arange(1, HEADS + 1) / HEADS).cuda()
    return [("sliding_softcap", sliding, softcap),
            ("document", documents(document_ids(num_reqs, seed)), None),
            ("causal_alibi", causal, alibi_of(slopes))]


def request(batch, r):
    """Request r's query [1, Hq, 1, D] and keys and values [1, Hkv, L, D], gathered from the
    cache through its block table."""
    length = int(batch["seq_lens"][r])
    blocks = batch["block_table"][r, :(length + PAGE - 1) // PAGE].long()

    def gather(cache):
        return cache[blocks].reshape(-1, KV_HEADS, HEAD_DIM)[:length].transpose(0, 1)[None]
    start = int(batch["query_start_loc"][r])
    return (batch["q"][start:start + 1].transpose(0, 1)[None], gather(batch["k_cache"]),
            gather(batch["v_cache"]))


def shifted(mask_mod, score_mod, r, offset):
    """The pair as request r of a paged call sees it, for a [1, H, S, L] call: b is r, q_idx
    counts from the request's history (offset)."""
    def mask(b, h, q_idx, kv_idx):
        return mask_mod(b + r, h, q_idx + offset, kv_idx)

    def score(s, b, h, q_idx, kv_idx):
        return score_mod(s, b + r, h, q_idx + offset, kv_idx)
    return mask if mask_mod else None, score if score_mod else None


@unittest.skipUnless(torch is not None and torch.cuda.is_available(), NO_CUDA)
@unittest.skipUnless(library_available(), NO_LIBRARY)
class FlexPlanGpuTest(unittest.TestCase):
    def assert_close(self, got, want, what, atol=2e-2, rtol=2e-2):
        torch.testing.assert_close(got.double(), want.double(), atol=atol, rtol=rtol,
                                   msg=lambda m: f"{what}: {m}")

    def check_decode(self, batch, mask_mod, score_mod, sinks=None):
        """A decode batch through a plan of the pair, against the unplanned call and float64
        (with sinks: one more key per row, of zero value). Returns, per request, (q, k, v as
        [1, H, L, D], the pair as that call sees it, the planned out [1, Hq, 1, D])."""
        n = len(LENS)
        with flexjit.flex_plan(mask_mod, score_mod, **SHAPE) as plan:
            plan.update(list(range(n + 1)), LENS, WIDTH)
            lse = torch.full((n, HEADS), float("nan"), device="cuda")
            out = flexjit.flex_attention_paged(*positional(batch), mask_mod=mask_mod,
                                               score_mod=score_mod, plan=plan, lse=lse,
                                               sinks=sinks)
            want_lse = torch.zeros(n, HEADS, device="cuda")
            want = flexjit.flex_attention_paged(*positional(batch), mask_mod=mask_mod,
                                                score_mod=score_mod, max_query_len=1,
                                                lse=want_lse, sinks=sinks)
            torch.cuda.synchronize()
        self.assertTrue(torch.isfinite(out).all() and torch.isfinite(lse).all())
        self.assert_close(out, want, "planned vs unplanned")
        self.assert_close(lse, want_lse, "planned vs unplanned lse", atol=1e-3, rtol=1e-4)
        requests = []
        for r, length in enumerate(LENS):
            q, k, v = request(batch, r)
            mask, score = shifted(mask_mod, score_mod, r, length - 1)
            f64, f64_lse = reference(q, k, v, mask, score, None, True, sinks)
            got = out[r].view(1, HEADS, 1, HEAD_DIM)
            self.assert_close(got, f64, f"request {r} ({length} keys) vs float64")
            self.assert_close(lse[r].view(1, HEADS, 1), f64_lse, f"request {r} lse vs float64",
                              rtol=1e-3)
            requests.append((q, k, v, mask, score, got))
        return requests

    def test_decode_batch_against_unplanned_torch_and_float64(self):
        from torch.nn.attention.flex_attention import create_block_mask
        from torch.nn.attention.flex_attention import flex_attention as torch_flex
        batch = decode_batch(LENS, seed=1)
        group = HEADS // KV_HEADS
        for name, mask_mod, score_mod in cases(len(LENS)):
            with self.subTest(name):
                requests = self.check_decode(batch, mask_mod, score_mod)
                for r, (q, k, v, mask, score, got) in enumerate(requests):
                    block_mask = create_block_mask(mask, None, None, 1, LENS[r],
                                                   device="cuda") if mask else None
                    theirs = torch_flex(q, k.repeat_interleave(group, dim=1),
                                        v.repeat_interleave(group, dim=1), score_mod=score,
                                        block_mask=block_mask)
                    self.assert_close(got, theirs,
                                      f"request {r} ({LENS[r]} keys) vs torch's flex_attention")

    def test_decode_batch_with_sinks(self):
        # A split request merges its partials without the sinks and adds each once.
        batch = decode_batch(LENS, seed=6)
        sinks = torch.linspace(-3.0, 9.0, HEADS, device="cuda")
        sinks[0] = float("-inf")  # no sink
        for name, mask_mod, score_mod in cases(len(LENS))[:2]:
            with self.subTest(name):
                self.check_decode(batch, mask_mod, score_mod, sinks)

    def test_mixed_batch_matches_unplanned(self):
        # A plan for queries of up to 64 tokens: prefill chunks after their history beside
        # decodes, in one run.
        query_lens, lens = [1, 40, 1, 5, 64], [3001, 200, 17, 1000, 64]
        batch = paged_batch(query_lens, lens, device="cuda", seed=5, width=WIDTH, heads=HEADS,
                            kv_heads=KV_HEADS)
        qsl = batch["query_start_loc"].tolist()
        with flexjit.flex_plan(sliding, softcap, **dict(SHAPE, max_query_len=64,
                                                       max_num_tokens=128)) as plan:
            plan.update(qsl, lens, WIDTH)
            out = flexjit.flex_attention_paged(*positional(batch), mask_mod=sliding,
                                               score_mod=softcap, plan=plan)
            want = flexjit.flex_attention_paged(*positional(batch), mask_mod=sliding,
                                                score_mod=softcap, max_query_len=64)
            torch.cuda.synchronize()
        self.assertTrue(torch.isfinite(out).all())
        self.assert_close(out, want, "mixed batch, planned vs unplanned")

    def test_plans_share_kernels_and_check_batches(self):
        doc = document_ids(8, seed=2)
        plan = flexjit.flex_plan(documents(doc), **SHAPE)
        other = flexjit.flex_plan(documents(document_ids(8, seed=3)), **SHAPE)
        self.assertIs(other.kernel.kernel, plan.kernel.kernel)  # same code, new tensor values
        self.assertIsNot(other.plan, plan.plan)
        with self.assertRaisesRegex(ValueError, "host copies"):
            plan.update(torch.arange(3, dtype=torch.int32, device="cuda"), [5, 5], WIDTH)
        with self.assertRaises(flexjit.FlexjitError) as caught:
            plan.update(list(range(10)), [5] * 9, WIDTH)  # 9 requests, the shape holds 8
        self.assertEqual(caught.exception.status, flexjit.Status.INVALID_ARGUMENT)
        with self.assertRaises(flexjit.FlexjitError) as caught:
            plan.update([0, 1], [WIDTH * PAGE + 1], WIDTH)  # longer than the table's pages
        self.assertEqual(caught.exception.status, flexjit.Status.INVALID_ARGUMENT)
        batch = decode_batch(LENS, seed=4)
        with self.assertRaisesRegex(ValueError, "made for other functions"):
            flexjit.flex_attention_paged(*positional(batch), mask_mod=causal, plan=plan)
        key = plan.op_key
        self.assertIs(flexjit.torch_ops.lookup(key), plan.plan)
        plan.close()
        with self.assertRaises(KeyError):
            flexjit.torch_ops.lookup(key)
        other.close()

    def test_captured_planned_run_replays_new_batches(self):
        # Static buffers for up to 8 requests; each step plans its batch, writes it (and its
        # document ids) into them and replays the graph of one planned run.
        steps = [LENS, [5, 4096, 300, 77, 2500, 1200, 9, 640], [4096, 1], [1, 2, 3, 3000]]
        batches = [decode_batch(lens, seed=10 + i) for i, lens in enumerate(steps)]
        docs = [document_ids(8, seed=20 + i).int() for i in range(len(steps))]
        static, write = static_batch(batches, num_reqs=8, num_tokens=8, width=WIDTH,
                                     heads=HEADS, kv_heads=KV_HEADS)
        doc = torch.zeros(8, 4096, dtype=torch.int32, device="cuda")  # read in place
        slopes = torch.exp2(-8 * torch.arange(1, HEADS + 1) / HEADS).cuda()
        mask_mod, score_mod = documents(doc), alibi_of(slopes)
        out = torch.zeros_like(static["q"])
        lse = torch.zeros(8, HEADS, device="cuda")
        plan = flexjit.flex_plan(mask_mod, score_mod, **SHAPE)

        def load(i):
            n = len(steps[i])
            plan.update(list(range(n + 1)), steps[i], WIDTH)
            doc.copy_(docs[i])
            return write(batches[i])

        def run():
            flexjit.flex_attention_paged(*positional(static), mask_mod=mask_mod,
                                         score_mod=score_mod, plan=plan, out=out, lse=lse)

        load(0)
        graph = capture_graph(run)  # after a run outside it: sizes the plan's workspace
        for i in range(len(steps)):
            with self.subTest(step=i, lens=steps[i]):
                n = load(i)
                out.fill_(float("nan"))
                lse.fill_(float("nan"))
                graph.replay()
                torch.cuda.synchronize()
                replayed, replayed_lse = out[:n].clone(), lse[:n].clone()
                self.assertTrue(torch.isfinite(replayed).all(), "the replay left rows unset")
                run()  # eager, the same update: the same bits
                torch.cuda.synchronize()
                self.assertTrue(torch.equal(replayed, out[:n]), "replay vs eager planned run")
                self.assertTrue(torch.equal(replayed_lse, lse[:n]), "replay vs eager lse")
                want = flexjit.flex_attention_paged(
                    *positional(batches[i]), mask_mod=documents(docs[i]), score_mod=score_mod,
                    max_query_len=1)
                torch.cuda.synchronize()
                self.assert_close(replayed, want, f"step {i}: replay vs unplanned")
        plan.close()

    def test_docs_example(self):
        text = (REPO / "docs" / "python.md").read_text()
        blocks = re.findall(r"```python\n(# runs in tests/python/test_flex_plan.py.*?)```",
                            text, re.S)
        self.assertEqual(len(blocks), 1)
        names = {}
        exec(compile(blocks[0], "docs/python.md", "exec"), names)
        torch.cuda.synchronize()
        want = flexjit.flex_attention_paged(
            names["q"], names["k_cache"], names["v_cache"], names["block_table"],
            names["query_start_loc"], names["seq_lens"], mask_mod=names["document"],
            max_query_len=1)
        self.assert_close(names["out"], want, "the example's replay vs unplanned")
        names["plan"].close()


if __name__ == "__main__":
    unittest.main()
