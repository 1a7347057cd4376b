"""torch.ops.flexjit (tools/python/flexjit/_torch_ops.py): registration, fake tensors and
torch.compile without a GPU, and on CPU tensors with a CPU kernel context parallelism's sharded
calls merged by merge_states_n, eager and compiled; on a GPU, the operators against the ctypes
calls (bit for bit), torch.compile(fullgraph=True), and CUDA-graph capture and replay of the
planned run.

Skipped with the reason when torch, the library or (for the GPU half) CUDA is missing. On the GPU
machine (library staged in .carry/lib):

    cd tests/python && FLEXJIT_LIBRARY=$PWD/../../.carry/lib/libflexjit_runtime.so \\
        python3 -m unittest -v test_torch_ops
"""

import math
import os
import subprocess
import sys
import unittest
from unittest import mock

from support import REPO, library_available

import flexjit

try:
    import torch
except ImportError:
    torch = None

MASKS = str(REPO / "dsl" / "lib" / "standard.mask")


def has_tensor_guards():
    """Whether this torch has the C++ tensor check kept calls use (flexjit._tensor_guards)."""
    return getattr(getattr(getattr(torch._C, "_dynamo", None), "guards", None), "TensorGuards",
                   None) is not None


def cuda_available():
    return torch is not None and torch.cuda.is_available()


NO_TORCH = "torch is not installed (the operators need it; CI has none)"
NO_LIBRARY = "libflexjit_runtime.so not found (set FLEXJIT_LIBRARY)"
NO_CUDA = "no CUDA device (torch.cuda.is_available() is False)"

HEADS, KV_HEADS, HEAD_DIM, PAGE = 8, 2, 128, 16


def paged_batch(query_lens, seq_lens, *, device, seed=0, width=None, dtype=None, heads=HEADS,
                kv_heads=KV_HEADS):
    """Inputs of one paged call: a joint K/V cache [blocks, 2, page, kv heads, D] with shuffled
    blocks, q, and the int32 metadata. `width`: block-table columns (default: the longest)."""
    dtype = dtype or torch.bfloat16
    gen = torch.Generator().manual_seed(seed)
    blocks = [math.ceil(s / PAGE) for s in seq_lens]
    width = width or max(blocks)
    num_blocks = sum(blocks) + 3
    order = torch.randperm(num_blocks, generator=gen).tolist()
    table = torch.zeros(len(seq_lens), width, dtype=torch.int32)
    for r, n in enumerate(blocks):
        table[r, :n] = torch.tensor([order.pop() for _ in range(n)], dtype=torch.int32)
    joint = torch.randn(num_blocks, 2, PAGE, kv_heads, HEAD_DIM, generator=gen).to(dtype)
    joint = joint.to(device)
    qsl = [0]
    for n in query_lens:
        qsl.append(qsl[-1] + n)
    q = torch.randn(qsl[-1], heads, HEAD_DIM, generator=gen).to(dtype).to(device)
    return dict(q=q, k_cache=joint[:, 0], v_cache=joint[:, 1], block_table=table.to(device),
                query_start_loc=torch.tensor(qsl, dtype=torch.int32, device=device),
                seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device))


def document_ids(num_reqs, length, device):
    """int32 [num_reqs, length]: documents of 37 tokens (request r's shifted by r)."""
    positions = torch.arange(length, dtype=torch.int32)
    return torch.stack([(positions + 11 * r) // 37 for r in range(num_reqs)]).to(device)


def nan_like(q):
    return torch.full_like(q, float("nan"))


def static_batch(batches, *, num_reqs, num_tokens, width, heads=HEADS, kv_heads=KV_HEADS):
    """The buffers a captured graph reads (q for num_tokens tokens, a joint K/V cache as large as
    the largest of `batches`' caches, metadata for num_reqs requests), and a function that
    writes one paged_batch into them (requests past its own left empty) and returns its
    token count."""
    pool = max(b["k_cache"].shape[0] for b in batches)
    joint = torch.zeros(pool, 2, PAGE, kv_heads, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
    static = dict(q=torch.zeros(num_tokens, heads, HEAD_DIM, dtype=torch.bfloat16,
                                device="cuda"),
                  k_cache=joint[:, 0], v_cache=joint[:, 1],
                  block_table=torch.zeros(num_reqs, width, dtype=torch.int32, device="cuda"),
                  query_start_loc=torch.zeros(num_reqs + 1, dtype=torch.int32, device="cuda"),
                  seq_lens=torch.zeros(num_reqs, dtype=torch.int32, device="cuda"))

    def write(batch):
        tokens, n = batch["q"].shape[0], batch["seq_lens"].shape[0]
        static["q"][:tokens].copy_(batch["q"])
        blocks = batch["k_cache"].shape[0]
        joint[:blocks, 0].copy_(batch["k_cache"])
        joint[:blocks, 1].copy_(batch["v_cache"])
        static["block_table"][:n].copy_(batch["block_table"])
        static["query_start_loc"].fill_(tokens)
        static["query_start_loc"][:n + 1].copy_(batch["query_start_loc"])
        static["seq_lens"].zero_()
        static["seq_lens"][:n].copy_(batch["seq_lens"])
        return tokens

    return static, write


def capture_graph(run):
    """A CUDA graph of run(), after one run outside the capture (which compiles and loads the
    kernels and allocates what the run keeps) on a side stream, as torch asks."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    return graph


class ImportTest(unittest.TestCase):
    def run_python(self, code):
        env = dict(os.environ, PYTHONPATH=str(REPO / "tools" / "python"))
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True)

    def test_torch_ops_without_torch_is_an_import_error(self):
        result = self.run_python("import sys; sys.modules['torch'] = None\nimport flexjit\n"
                                 "try:\n  flexjit.torch_ops\nexcept ImportError as e:\n"
                                 "  print('ImportError', e)\n")
        self.assertIn("ImportError", result.stdout, result.stderr)

    @unittest.skipIf(torch is None, NO_TORCH)
    def test_flexjit_imports_torch_only_for_torch_ops(self):
        result = self.run_python("import sys, flexjit\nprint('torch' in sys.modules)\n"
                                 "flexjit.torch_ops\nprint('torch' in sys.modules)\n")
        self.assertEqual(result.stdout.split(), ["False", "True"], result.stderr)


@unittest.skipIf(torch is None, NO_TORCH)
@unittest.skipUnless(library_available(), NO_LIBRARY)
class TorchOpsTest(unittest.TestCase):
    """What needs no GPU: schemas, the registry, fake tensors, tracing on the meta device."""

    @classmethod
    def setUpClass(cls):
        cls.ops = flexjit.torch_ops
        cls.ctx = flexjit.Context()
        cls.program = cls.ctx.program_from_file(MASKS)
        cls.kernel = cls.ctx.kernel(cls.program, "sliding", head_dim=HEAD_DIM, dtype="bf16",
                                    page_size=PAGE, arch="sm_90a")
        cls.encoder = cls.ctx.kernel(cls.program, "causal", head_dim=HEAD_DIM, dtype="bf16",
                                     page_size=0, arch="sm_90a")
        cls.ops.register("test.sliding", cls.kernel)
        cls.ops.register("test.encoder", cls.encoder)

    def test_schemas_declare_the_writes(self):
        for name in ("paged_attention", "varlen_attention", "plan_run"):
            with self.subTest(op=name):
                schema = getattr(torch.ops.flexjit, name).default._schema
                written = [a.name for a in schema.arguments
                           if a.alias_info is not None and a.alias_info.is_write]
                self.assertEqual(written, ["out", "lse", "workspace"])
                self.assertEqual(len(schema.returns), 0)
                self.assertEqual(str(schema), "flexjit::" + name + self.ops.SCHEMAS[name])
                # Added after every older argument, with defaults: calls that name none still
                # match. 0.7's sinks everywhere, then, where a paged cache is read, 0.8's fp8
                # scales and 0.9's shard, whose defaults are the call over every key.
                added = [("sinks", None)]
                if name != "varlen_attention":
                    added += [("k_scale", None), ("v_scale", None), ("kv_shard_offsets", None),
                              ("global_seq_lens", None), ("kv_shard_rank", 0),
                              ("kv_shard_count", 1), ("kv_shard_interleave", 1)]
                tail = schema.arguments[-len(added):]
                self.assertEqual([(a.name, a.has_default_value(), a.default_value)
                                  for a in tail], [(a, True, d) for a, d in added])
        schema = torch.ops.flexjit.merge_states_n.default._schema
        self.assertEqual(str(schema), "flexjit::merge_states_n" + self.ops.SCHEMAS[
            "merge_states_n"])
        self.assertEqual([a.name for a in schema.arguments
                          if a.alias_info is not None and a.alias_info.is_write], ["out", "lse"])
        self.assertEqual(len(schema.returns), 0)

    def test_fakes_check_the_shard_and_the_merge(self):
        from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
        mode = FakeTensorMode()
        batch = {name: mode.from_tensor(t) for name, t in
                 paged_batch([3, 1], [40, 20], device="cpu").items()}
        with mode:
            lens = torch.empty(2, dtype=torch.int32)
            bad_arrays = [
                (torch.empty(2, dtype=torch.int64), r" is torch.int64 \(2,\) on cpu, expected "
                 r"int32 \[num_reqs\] on cpu"),
                (torch.empty(3, dtype=torch.int32), r" \(3,\), expected \(2,\) \(num_reqs\)"),
                (torch.empty(2, dtype=torch.int32, device="meta"),
                 r" is torch.int32 \(2,\) on meta, expected int32"),
            ]
            for op, args in (("paged_attention", dict(max_query_len=3)), ("plan_run", {})):
                with self.subTest(op=op):
                    shard = flexjit.KvShard(1, 2, 16, offsets=lens, global_seq_lens=lens)
                    out = getattr(self.ops, op)("test.sliding", **batch, **args, kv_shard=shard)
                    self.assertEqual(tuple(out.shape), (4, HEADS, HEAD_DIM))
                    for field, name in (("offsets", "kv_shard_offsets"),
                                        ("global_seq_lens", "global_seq_lens")):
                        for bad, message in bad_arrays:
                            with self.subTest(field=field, message=message):
                                arrays = dict(offsets=lens, global_seq_lens=lens)
                                arrays[field] = bad
                                with self.assertRaisesRegex(RuntimeError, name + message):
                                    getattr(self.ops, op)(
                                        "test.sliding", **batch, **args,
                                        kv_shard=flexjit.KvShard(1, 2, 16, **arrays))
                    with self.assertRaisesRegex(TypeError, "kv_shard: the operators take "
                                                "global_seq_lens as a torch tensor"):
                        getattr(self.ops, op)("test.sliding", **batch, **args,
                                              kv_shard=flexjit.KvShard(1, 2,
                                                                       global_seq_lens=[40, 20]))
                    with self.assertRaisesRegex(TypeError, "expected a flexjit.KvShard"):
                        getattr(self.ops, op)("test.sliding", **batch, **args, kv_shard=(1, 2))

            states = torch.empty(3, 4, HEADS, HEAD_DIM, dtype=torch.bfloat16)
            states_lse = torch.empty(3, 4, HEADS)
            merged = dict(states_out=states, states_lse=states_lse, lse=torch.empty(4, HEADS),
                          sinks=torch.empty(HEADS))
            out = self.ops.merge_states_n(**merged)
            self.assertEqual((tuple(out.shape), out.dtype),
                             ((4, HEADS, HEAD_DIM), torch.bfloat16))
            self.assertIsInstance(out, FakeTensor)
            bf16 = torch.bfloat16
            cases = [
                (dict(states_out=states[0]), r"states_out has shape \(4, 8, 128\)"),
                (dict(states_lse=states_lse.to(bf16)), "states_lse is torch.bfloat16"),
                (dict(states_lse=torch.empty(2, 4, HEADS)),
                 r"states_lse \(2, 4, 8\), expected \(3, 4, 8\)"),
                (dict(out=torch.empty(4, HEADS, HEAD_DIM)),
                 "out is torch.float32 .* states_out torch.bfloat16"),
                (dict(out=torch.empty(5, HEADS, HEAD_DIM, dtype=bf16)),
                 r"out \(5, 8, 128\), expected \(4, 8, 128\)"),
                (dict(lse=torch.empty(4, HEADS, dtype=bf16)), "^flexjit: lse is torch.bfloat16"),
                (dict(lse=torch.empty(4, 3)), r"lse \(4, 3\), expected \(4, 8\)"),
                (dict(sinks=torch.empty(3)), r"sinks \(3,\), expected \(8,\)"),
            ]
            for changes, message in cases:
                with self.subTest(message):
                    with self.assertRaisesRegex(RuntimeError, message):
                        self.ops.merge_states_n(**dict(merged, **changes))

    def test_registry(self):
        self.assertIs(self.ops.lookup("test.sliding"), self.kernel)
        with self.assertRaisesRegex(KeyError, "no kernel or plan registered under 'nope'.*"
                                    "test.sliding"):
            self.ops.lookup("nope")
        with self.assertRaisesRegex(TypeError, "names a Kernel, this operator takes a Plan"):
            self.ops.lookup("test.sliding", flexjit.Plan)
        with self.assertRaises(TypeError):
            self.ops.register("x", object())
        with self.assertRaises(TypeError):
            self.ops.register("", self.kernel)
        self.ops.register("test.other", self.kernel)
        self.ops.unregister("test.other")
        with self.assertRaises(KeyError):
            self.ops.lookup("test.other")

    def test_fake_tensors_propagate_shapes(self):
        from torch._subclasses.fake_tensor import FakeTensorMode
        mode = FakeTensorMode()
        batch = {name: mode.from_tensor(t) for name, t in
                 paged_batch([3, 1], [40, 20], device="cpu").items()}
        with mode:
            lse = torch.empty(4, HEADS, dtype=torch.float32)
            out = self.ops.paged_attention("test.sliding", **batch, max_query_len=3, lse=lse,
                                           params={"window": 8})
            self.assertEqual((tuple(out.shape), out.dtype), ((4, HEADS, HEAD_DIM),
                                                             torch.bfloat16))
            self.assertIsInstance(out, torch._subclasses.fake_tensor.FakeTensor)
            out = self.ops.plan_run("test.plan", **batch)  # fakes resolve no key
            self.assertEqual(tuple(out.shape), (4, HEADS, HEAD_DIM))
            q = torch.empty(9, HEADS, HEAD_DIM, dtype=torch.bfloat16)
            kv = torch.empty(9, KV_HEADS, HEAD_DIM, dtype=torch.bfloat16)
            out = self.ops.varlen_attention("test.encoder", q, kv, kv,
                                            torch.empty(3, dtype=torch.int32), max_seq_len=5)
            self.assertEqual(tuple(out.shape), (9, HEADS, HEAD_DIM))
            with self.assertRaisesRegex(RuntimeError, r"out \(4, 8, 64\) differs from q"):
                self.ops.paged_attention("test.sliding", **batch, max_query_len=3,
                                         out=torch.empty(4, HEADS, 64, dtype=torch.bfloat16))
            with self.assertRaisesRegex(RuntimeError, "lse is torch.bfloat16"):
                self.ops.paged_attention("test.sliding", **batch, max_query_len=3,
                                         lse=torch.empty(4, HEADS, dtype=torch.bfloat16))
            out = self.ops.paged_attention("test.sliding", **batch, max_query_len=3,
                                           sinks=torch.empty(HEADS))
            self.assertEqual(tuple(out.shape), (4, HEADS, HEAD_DIM))
            for op, args in (("paged_attention", dict(max_query_len=3)), ("plan_run", {})):
                with self.subTest(op=op):
                    with self.assertRaisesRegex(RuntimeError, "sinks is torch.bfloat16"):
                        getattr(self.ops, op)("test.sliding", **batch, **args,
                                              sinks=torch.empty(HEADS, dtype=torch.bfloat16))
                    with self.assertRaisesRegex(RuntimeError,
                                                r"sinks \(3,\), expected \(8,\)"):
                        getattr(self.ops, op)("test.sliding", **batch, **args,
                                              sinks=torch.empty(3))
            with self.assertRaisesRegex(RuntimeError, r"sinks is torch.float32 \(8, 1\)"):
                self.ops.varlen_attention("test.encoder", q, kv, kv,
                                          torch.empty(3, dtype=torch.int32), max_seq_len=5,
                                          sinks=torch.empty(HEADS, 1))

    @unittest.skipIf(cuda_available(), "with a GPU the stand-ins' pointers would be launched; "
                     "TorchOpsGpuTest runs the implementations there")
    def test_implementations_reach_the_driver(self):
        # The CUDA implementations, called as the dispatcher calls them (positionally, in
        # schema order) on stand-in tensors: every check passes and the launch fails only
        # where it needs the driver. Proves the arguments land where the schema says. The
        # stand-ins pose as torch tensors on cuda:0: the current device and stream are stood
        # in for too, both where prepare() asks torch and where the launch paths ask torch's C
        # functions (flexjit._torch_calls, by tensor type).
        from support import FakeTensor
        calls = {FakeTensor: flexjit._TorchCalls(lambda: 0, lambda index: None)}
        with mock.patch("torch.cuda.current_device", return_value=0), \
                mock.patch.object(flexjit, "_torch_stream", return_value=None), \
                mock.patch.dict(flexjit._torch_calls, calls):
            self.check_implementations(FakeTensor)

    def check_implementations(self, FakeTensor):
        impls = {name: impl for name, (impl, _) in self.ops._IMPLS.items()}
        joint = FakeTensor((10, 2, PAGE, KV_HEADS, HEAD_DIM))
        kv_strides = (2 * PAGE * KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, HEAD_DIM, 1)
        paged = [FakeTensor((4, HEADS, HEAD_DIM)),
                 FakeTensor((10, PAGE, KV_HEADS, HEAD_DIM), strides=kv_strides),
                 FakeTensor((10, PAGE, KV_HEADS, HEAD_DIM), strides=kv_strides,
                            ptr=joint.data_ptr() + PAGE * KV_HEADS * HEAD_DIM * 2),
                 FakeTensor((2, 5), "torch.int32"), FakeTensor((3,), "torch.int32"),
                 FakeTensor((2,), "torch.int32"), FakeTensor((4, HEADS, HEAD_DIM)),
                 FakeTensor((4, HEADS), "torch.float32")]
        calls = [("paged_attention", ["test.sliding", *paged, 3, 0.0, "NHD", ["window"], [8.0],
                                      [], [], None]),
                 ("varlen_attention", ["test.encoder", FakeTensor((9, HEADS, HEAD_DIM)),
                                       FakeTensor((9, KV_HEADS, HEAD_DIM)),
                                       FakeTensor((9, KV_HEADS, HEAD_DIM)),
                                       FakeTensor((3,), "torch.int32"),
                                       FakeTensor((9, HEADS, HEAD_DIM)), None, 5, 0.0, [], [],
                                       [], [], None])]
        for name, args in calls:
            with self.subTest(op=name):
                with self.assertRaises(flexjit.FlexjitError) as caught:
                    impls[name](*args)
                self.assertEqual(caught.exception.status, flexjit.Status.CUDA,
                                 caught.exception)
        sinks = FakeTensor((HEADS,), "torch.float32")
        for name, args in calls:
            with self.subTest(op=name, sinks="given"):
                with self.assertRaises(flexjit.FlexjitError) as caught:
                    impls[name](*args, sinks)
                self.assertEqual(caught.exception.status, flexjit.Status.CUDA,
                                 caught.exception)
                with self.assertRaisesRegex(ValueError, "sinks: 4 entries"):
                    impls[name](*args, FakeTensor((4,), "torch.float32"))
        args = calls[0][1]
        with self.assertRaisesRegex(ValueError, "lse: shape"):
            impls["paged_attention"](*args[:8], FakeTensor((3, HEADS), "torch.float32"),
                                     *args[9:])
        with self.assertRaisesRegex(TypeError, "expected an integral value"):
            impls["paged_attention"](*args[:13], [8.5], *args[14:])
        with self.assertRaisesRegex(TypeError, "names a Kernel, this operator takes a Plan"):
            impls["plan_run"]("test.sliding", *args[1:9], *args[10:])
        # A sharded call passes every check and needs the driver as the same call without a
        # shard did above (CUDA kernels run sharded calls since 0.10); so does the merge.
        lens = FakeTensor((2,), "torch.int32")
        for shard in ([None, lens, 1, 2, 16], [lens, lens, 0, 1, 1]):
            with self.subTest(shard=shard[2:]):
                with self.assertRaises(flexjit.FlexjitError) as caught:
                    impls["paged_attention"](*args, None, None, None, *shard)
                self.assertEqual(caught.exception.status, flexjit.Status.CUDA, caught.exception)
        with self.assertRaises(flexjit.FlexjitError) as caught:
            impls["merge_states_n"](FakeTensor((2, 4, HEADS, HEAD_DIM)),
                                    FakeTensor((2, 4, HEADS), "torch.float32"),
                                    FakeTensor((4, HEADS, HEAD_DIM)), None)
        self.assertEqual(caught.exception.status, flexjit.Status.CUDA, caught.exception)

    def test_compile_fullgraph_on_meta_tensors(self):
        # Traces through the Python entry point and the fake implementation: one graph, no
        # break, and a second token count still traces (on the meta device the operator's
        # meta kernel, its fake, runs the graph).
        def step(batch, doc, window):
            lse = batch["q"].new_empty(batch["q"].shape[:2], dtype=torch.float32)
            out = self.ops.paged_attention("test.sliding", **batch, max_query_len=3, lse=lse,
                                           params={"window": window}, arrays={"doc": doc})
            return out * 2, lse

        batch = paged_batch([3, 1], [40, 20], device="meta")
        doc = document_ids(2, 48, "meta")
        explained = torch._dynamo.explain(step)(batch, doc, 8)
        self.assertEqual((explained.graph_count, explained.graph_break_count), (1, 0))
        for backend in ("eager", "aot_eager"):
            with self.subTest(backend=backend):
                torch._dynamo.reset()
                compiled = torch.compile(step, fullgraph=True, backend=backend)
                out, lse = compiled(batch, doc, 8)
                self.assertEqual((tuple(out.shape), tuple(lse.shape)),
                                 ((4, HEADS, HEAD_DIM), (4, HEADS)))
                out, _ = compiled(paged_batch([5, 2], [40, 20], device="meta"), doc, 8)
                self.assertEqual(tuple(out.shape), (7, HEADS, HEAD_DIM))


# (keys over every shard, query rows) of the requests TorchOpsCpuTest shards: decodes and short
# prefills. The second is shorter than two runs of 16 keys: with 3 ranks and interleave 16, rank
# 2 holds none of it.
REQUESTS = [(203, 1), (20, 3), (517, 1), (96, 4)]
# Contiguous uneven cuts of each request over 3 shards: shard 0 holds no key of the first
# request, shard 1 one key of the third, shard 2 none of the fourth.
CUTS = [[0, 0, 150, 203], [0, 7, 12, 20], [0, 300, 301, 517], [0, 40, 96, 96]]
# Merged shards against the call over every key: bf16 partial outputs, each rounded once before
# the merge and once after, stay within 2 bf16 ulps of their magnitude or of 1, whichever is
# larger (a dropped or doubled key moves its rows' lse by about 1 / (the keys it sees), far more
# than LSE_TOLERANCE).
BF16_TOLERANCE = 2.0**-7
LSE_TOLERANCE = 1e-4


@unittest.skipIf(torch is None, NO_TORCH)
@unittest.skipUnless(library_available(), NO_LIBRARY)
class TorchOpsCpuTest(unittest.TestCase):
    """The operators over CPU tensors with a CPU kernel (arch "cpu"): context parallelism's
    sharded calls merged by merge_states_n against the call over every key, eager and
    compiled."""

    @classmethod
    def setUpClass(cls):
        cls.ops = flexjit.torch_ops
        ctx = flexjit.Context()
        cls.kernel = ctx.kernel(ctx.program_from_file(MASKS), "sliding", head_dim=HEAD_DIM,
                                dtype="bf16", page_size=PAGE, arch="cpu")
        cls.ops.register("cpu.sliding", cls.kernel)
        gen = torch.Generator().manual_seed(36)
        cls.lengths = [length for length, _ in REQUESTS]
        rows = [count for _, count in REQUESTS]
        cls.query_start_loc = torch.tensor([0] + torch.tensor(rows).cumsum(0).tolist(),
                                           dtype=torch.int32)
        cls.q = torch.randn(sum(rows), HEADS, HEAD_DIM, generator=gen).bfloat16()
        cls.keys, cls.values = (
            [torch.randn(length, KV_HEADS, HEAD_DIM, generator=gen).bfloat16()
             for length in cls.lengths] for _ in range(2))
        cls.global_seq_lens = torch.tensor(cls.lengths, dtype=torch.int32)
        cls.max_query_len = max(rows)

    def shard_inputs(self, positions):
        """The caches, block table and seq_lens of a call holding request r's keys at
        positions[r], in that order. Every call's cache is as large as the whole batch's, so
        that all shards have one geometry (each must still carry its own shard), and its slots
        no key fills hold NaN (read, they would spread)."""
        blocks = -(-max(self.lengths) // PAGE)
        shape = (len(REQUESTS) * blocks * PAGE, KV_HEADS, HEAD_DIM)
        k_cache, v_cache = (torch.full(shape, float("nan"), dtype=torch.bfloat16)
                            for _ in range(2))
        for r, held in enumerate(positions):
            index = torch.tensor(list(held), dtype=torch.long)
            k_cache[r * blocks * PAGE:][:len(index)] = self.keys[r][index]
            v_cache[r * blocks * PAGE:][:len(index)] = self.values[r][index]
        table = torch.arange(len(REQUESTS) * blocks, dtype=torch.int32).view(-1, blocks)
        return dict(k_cache=k_cache.view(-1, PAGE, KV_HEADS, HEAD_DIM),
                    v_cache=v_cache.view(-1, PAGE, KV_HEADS, HEAD_DIM), block_table=table,
                    seq_lens=torch.tensor([len(held) for held in positions], dtype=torch.int32))

    def layouts(self):
        """(name, [(KvShard, the call's inputs)]) of each split: interleaved over 2 and 3 ranks
        in runs of 1 and 16 keys, and contiguous uneven runs (CUTS) over 3."""
        layouts = []
        for count, interleave in ((2, 1), (2, 16), (3, 1), (3, 16)):
            layouts.append((f"{count} ranks, interleave {interleave}", [
                (flexjit.KvShard(rank, count, interleave, global_seq_lens=self.global_seq_lens),
                 self.shard_inputs([flexjit.shard_positions(length, rank, count, interleave)
                                    for length in self.lengths]))
                for rank in range(count)]))
        layouts.append(("3 contiguous", [
            (flexjit.KvShard(offsets=torch.tensor([c[s] for c in CUTS], dtype=torch.int32),
                             global_seq_lens=self.global_seq_lens),
             self.shard_inputs([range(c[s], c[s + 1]) for c in CUTS]))
            for s in range(3)]))
        return layouts

    def whole(self, sinks=None):
        """(out, lse) of the operator over every key, as calls written before 0.9 make it."""
        lse = torch.full((self.q.shape[0], HEADS), float("nan"))
        out = self.ops.paged_attention(
            "cpu.sliding", self.q, **self.shard_inputs([range(n) for n in self.lengths]),
            query_start_loc=self.query_start_loc, max_query_len=self.max_query_len, lse=lse,
            params={"window": 100}, sinks=sinks)
        return out, lse

    def assert_close(self, got, want, what):
        out, lse = got
        want_out, want_lse = want
        self.assertTrue(torch.isfinite(want_out).all(), f"{what}: the reference is not finite")
        torch.testing.assert_close(out.float(), want_out.float(), atol=BF16_TOLERANCE,
                                   rtol=BF16_TOLERANCE, msg=lambda m: f"{what}: out: {m}")
        self.assertLessEqual((lse - want_lse).abs().max().item(), LSE_TOLERANCE, f"{what}: lse")

    def test_sharded_calls_merge_into_the_whole_call(self):
        want = self.whole()
        with_empty_rows = []
        for name, shards in self.layouts():
            with self.subTest(layout=name):
                outs, lses = [], []
                for shard, inputs in shards:
                    outs.append(torch.full_like(self.q, float("nan")))
                    lses.append(torch.full((self.q.shape[0], HEADS), float("nan")))
                    torch.ops.flexjit.paged_attention(
                        "cpu.sliding", self.q, inputs["k_cache"], inputs["v_cache"],
                        inputs["block_table"], self.query_start_loc, inputs["seq_lens"],
                        outs[-1], lses[-1], self.max_query_len, 0.0, "NHD", ["window"],
                        [100.0], [], [], None, None, None, None, shard.offsets,
                        shard.global_seq_lens, shard.rank, shard.count, shard.interleave)
                if any(torch.isneginf(lse).any() for lse in lses):
                    with_empty_rows.append(name)
                out = torch.full_like(self.q, float("nan"))
                lse = torch.full((self.q.shape[0], HEADS), float("nan"))
                torch.ops.flexjit.merge_states_n(torch.stack(outs), torch.stack(lses), out, lse)
                self.assert_close((out, lse), want, name)
        # Rows a shard holds no visible key of (empty, lse -inf, dropped by the merge): where
        # a rank holds nothing of the second request, or a cut leaves a shard outside a
        # decode's window.
        self.assertEqual(with_empty_rows, ["3 ranks, interleave 16", "3 contiguous"])
        # A shard's call against the ctypes call with its KvShard, bit for bit.
        shard, inputs = self.layouts()[-1][1][1]
        lse = torch.empty(self.q.shape[0], HEADS)
        want_lse = torch.empty(self.q.shape[0], HEADS)
        options = dict(query_start_loc=self.query_start_loc, max_query_len=self.max_query_len,
                       params={"window": 100}, kv_shard=shard)
        out = self.ops.paged_attention("cpu.sliding", self.q, **inputs, lse=lse, **options)
        want_out = self.kernel(self.q, **inputs, lse=want_lse, **options)
        self.assertTrue(torch.equal(out, want_out) and torch.equal(lse, want_lse))

    def test_merge_counts_the_sinks_once(self):
        # The shards leave the sinks out and the merge adds them: the call over every key with
        # them.
        sinks = torch.linspace(-2.0, 6.0, HEADS)
        sinks[0] = float("-inf")  # no sink
        want = self.whole(sinks)
        self.assertFalse(torch.equal(want[0], self.whole()[0]), "the sinks changed nothing")
        name, shards = self.layouts()[3]
        outs, lses = [], []
        for shard, inputs in shards:
            lses.append(torch.empty(self.q.shape[0], HEADS))
            outs.append(self.ops.paged_attention(
                "cpu.sliding", self.q, **inputs, query_start_loc=self.query_start_loc,
                max_query_len=self.max_query_len, lse=lses[-1], params={"window": 100},
                kv_shard=shard))
        lse = torch.empty(self.q.shape[0], HEADS)
        out = self.ops.merge_states_n(torch.stack(outs), torch.stack(lses), lse=lse,
                                      sinks=sinks)
        self.assertEqual((out.dtype, tuple(out.shape)), (torch.bfloat16, tuple(self.q.shape)))
        self.assert_close((out, lse), want, f"{name} with sinks")

    def test_kept_calls_check_a_geometry_changed_in_place(self):
        # A call of the last geometry takes the fast path (torch's TensorGuards over its
        # tensors, where this torch has them): a tensor whose shape or dtype changed in place
        # since must still meet prepare()'s checks, through Kernel.__call__ and the operator.
        ctx = flexjit.Context()
        kernel = ctx.kernel(ctx.program_from_file(MASKS), "sliding", head_dim=HEAD_DIM,
                            dtype="bf16", page_size=PAGE, arch="cpu")
        self.ops.register("cpu.sliding.kept", kernel)
        self.addCleanup(self.ops.unregister, "cpu.sliding.kept")
        inputs = self.shard_inputs([range(n) for n in self.lengths])
        calls = {
            "Kernel.__call__": lambda q, out: kernel(
                q, query_start_loc=self.query_start_loc, out=out, **inputs,
                max_query_len=self.max_query_len, params={"window": 100}),
            "the operator": lambda q, out: self.ops.paged_attention(
                "cpu.sliding.kept", q, query_start_loc=self.query_start_loc, out=out, **inputs,
                max_query_len=self.max_query_len, params={"window": 100}),
        }
        want = self.whole()[0]
        for name, call in calls.items():
            with self.subTest(call=name):
                kernel._templates.clear()
                q, out = self.q.clone(), torch.empty_like(self.q)
                for _ in range(3):
                    out.fill_(float("nan"))
                    call(q, out)
                    self.assertTrue(torch.equal(out, want), name)
                if has_tensor_guards():
                    self.assertIsNotNone(kernel._templates.fast[1], "no fast path was kept")
                shrunk = q.clone()
                shrunk.resize_(q.shape[0], HEADS - KV_HEADS, HEAD_DIM)  # same object, 6 heads
                with self.assertRaisesRegex(ValueError, "out"):
                    call(shrunk, out)
                call(q, out)  # the kept geometry again
                q.data = q.data.half()  # same object, another dtype
                with self.assertRaisesRegex(ValueError, "dtype fp16, expected bf16"):
                    call(q, out)

    def test_kept_calls_with_array_parameters(self):
        # Array parameters are part of a kept call's geometry (name, shape, strides, dtype,
        # device): a call of the same geometry writes its own arrays' pointers into the kept
        # descriptors, so new contents take effect, and a geometry the checks refuse is still
        # refused. An empty array (a 0-wide ranges) goes as null.
        ctx = flexjit.Context()
        program = ctx.program_from_file(MASKS)
        inputs = self.shard_inputs([range(n) for n in self.lengths])
        reqs, longest = len(REQUESTS), max(self.lengths)
        gen = torch.Generator().manual_seed(7)
        cases = {
            "document": [{"doc": torch.randint(0, 3, (reqs, longest), generator=gen,
                                               dtype=torch.int32).cumsum(1).to(torch.int32)}
                         for _ in range(3)],
            "prefix_lm": [{"prefix_len": torch.randint(0, 300, (reqs,), generator=gen,
                                                       dtype=torch.int32)} for _ in range(3)],
            "prefix_ranges": [{"ranges": torch.zeros(reqs, 0, dtype=torch.int32)}],
        }
        for mask, arrays_of_calls in cases.items():
            kernel = ctx.kernel(program, mask, head_dim=HEAD_DIM, dtype="bf16", page_size=PAGE,
                                arch="cpu")
            key = f"cpu.{mask}.arrays"
            self.ops.register(key, kernel)
            self.addCleanup(self.ops.unregister, key)
            prepared = []
            prepare = kernel.prepare
            kernel.prepare = lambda *a, **k: prepared.append(1) or prepare(*a, **k)
            calls = {
                "Kernel.__call__": lambda arrays: kernel(
                    self.q, query_start_loc=self.query_start_loc, **inputs,
                    max_query_len=self.max_query_len, arrays=arrays),
                "the operator": lambda arrays: self.ops.paged_attention(
                    key, self.q, query_start_loc=self.query_start_loc, **inputs,
                    max_query_len=self.max_query_len, arrays=arrays),
            }
            for name, call in calls.items():
                with self.subTest(mask=mask, call=name):
                    kernel._templates.clear()
                    del prepared[:]
                    for arrays in arrays_of_calls * 2:
                        got = call(arrays)
                        kept = len(prepared)
                        kernel._templates.clear()  # the same call with every check
                        want = call(arrays)
                        self.assertEqual(len(prepared), kept + 1)
                        self.assertTrue(torch.equal(got, want), f"{mask}, {name}")
                        call(arrays)  # keeps the template for the next one
                    if has_tensor_guards():  # the last call took the guards' fast path
                        self.assertIsNotNone(kernel._templates.fast[1], "no fast path kept")
                    if len(arrays_of_calls) > 1:
                        first, second = (call(arrays) for arrays in arrays_of_calls[:2])
                        self.assertFalse(torch.equal(first, second), "the contents changed "
                                         "nothing: the kept call read the first arrays")
                    array_name, array = next(iter(arrays_of_calls[0].items()))
                    if array.numel():
                        with self.assertRaisesRegex(ValueError, array_name):
                            call({array_name: array[:1]})  # fewer rows than requests
                        with self.assertRaisesRegex(ValueError, array_name):
                            call({array_name: array.long()})

    def test_compile_fullgraph_matches_eager(self):
        def step(q, query_start_loc, shards, window):
            outs, lses = [], []
            for shard, inputs in shards:
                lse = q.new_empty(q.shape[:2], dtype=torch.float32)
                outs.append(self.ops.paged_attention(
                    "cpu.sliding", q, **inputs, query_start_loc=query_start_loc,
                    max_query_len=self.max_query_len, lse=lse, params={"window": window},
                    kv_shard=shard))
                lses.append(lse)
            lse = q.new_empty(q.shape[:2], dtype=torch.float32)
            out = self.ops.merge_states_n(torch.stack(outs), torch.stack(lses), lse=lse)
            return out, lse

        layouts = self.layouts()
        want = self.whole()
        explained = torch._dynamo.explain(step)(self.q, self.query_start_loc, layouts[1][1],
                                                100)
        self.assertEqual((explained.graph_count, explained.graph_break_count), (1, 0),
                         explained.break_reasons)
        for backend in ("aot_eager", "inductor"):
            with self.subTest(backend=backend):
                torch._dynamo.reset()
                compiled = torch.compile(step, fullgraph=True, backend=backend)
                for name, shards in (layouts[1], layouts[3], layouts[4]):
                    got = compiled(self.q, self.query_start_loc, shards, 100)
                    eager = step(self.q, self.query_start_loc, shards, 100)
                    self.assertTrue(torch.equal(got[0], eager[0]) and
                                    torch.equal(got[1], eager[1]), f"{backend}, {name}")
                    self.assert_close(got, want, f"{backend}, {name}")


@unittest.skipIf(torch is None, NO_TORCH)
@unittest.skipUnless(library_available(), NO_LIBRARY)
@unittest.skipUnless(cuda_available(), NO_CUDA)
class TorchOpsGpuTest(unittest.TestCase):
    """The operators on the GPU against the ctypes path, compiled, and in CUDA graphs."""

    @classmethod
    def setUpClass(cls):
        cls.ops = flexjit.torch_ops
        cls.ctx = flexjit.Context()
        cls.program = cls.ctx.program_from_file(MASKS)
        cls.kernels = {}
        for mask in ("causal", "sliding", "document"):
            cls.kernels[mask] = cls.ctx.kernel(cls.program, mask, head_dim=HEAD_DIM,
                                               dtype="bf16", page_size=PAGE)
            cls.ops.register("gpu." + mask, cls.kernels[mask])
        cls.encoder = cls.ctx.kernel(cls.program, "document", head_dim=HEAD_DIM, dtype="bf16",
                                     page_size=0)
        cls.ops.register("gpu.encoder", cls.encoder)

    # The three masks with their runtime arguments: none, a scalar, an array read along kv.
    def cases(self, batch):
        doc = document_ids(len(batch["seq_lens"]), 512, "cuda")
        return [("causal", {}, {}), ("sliding", {"window": 40}, {}),
                ("document", {}, {"doc": doc})]

    def assert_identical(self, got, want, what):
        self.assertTrue(torch.isfinite(want).all(), f"{what}: the reference is not finite")
        self.assertTrue(torch.equal(got, want),
                        f"{what}: differs, max |diff| {(got.float() - want.float()).abs().max()}")

    def test_paged_matches_the_ctypes_call(self):
        batch = paged_batch([1, 17, 64, 1], [300, 17, 200, 33], device="cuda", seed=1)
        tokens = batch["q"].shape[0]
        for mask, params, arrays in self.cases(batch):
            with self.subTest(mask=mask):
                want_lse = torch.zeros(tokens, HEADS, device="cuda")
                want = self.kernels[mask](**batch, out=torch.zeros_like(batch["q"]),
                                          lse=want_lse, max_query_len=64, params=params,
                                          arrays=arrays)
                lse = torch.full((tokens, HEADS), float("nan"), device="cuda")
                out = self.ops.paged_attention("gpu." + mask, **batch, out=nan_like(batch["q"]),
                                               lse=lse, max_query_len=64, params=params,
                                               arrays=arrays)
                torch.cuda.synchronize()
                self.assert_identical(out, want, f"{mask} out")
                self.assert_identical(lse, want_lse, f"{mask} lse")
        # A workspace of the caller's gives the same result.
        doc = self.cases(batch)[2][2]
        size = self.ops.workspace_size("gpu.document", doc, num_reqs=4, num_heads=HEADS)
        self.assertGreater(size, 0)
        workspace = torch.empty(size, dtype=torch.uint8, device="cuda")
        out = self.ops.paged_attention("gpu.document", **batch, max_query_len=64, arrays=doc,
                                       workspace=workspace)
        self.assert_identical(out, self.kernels["document"](**batch, max_query_len=64,
                                                            arrays=doc), "document, workspace")

    def test_sinks_match_the_ctypes_call_and_rescale_the_rows(self):
        # The operators pass the sinks through (bit for bit the ctypes call's result), and a
        # sink rescales each row of the call without it: out = out0 * e^lse0 / (e^lse0 +
        # e^sink) = out0 * sigmoid(lse0 - sink), lse = logaddexp(lse0, sink).
        batch = paged_batch([1, 17, 64, 1], [300, 17, 200, 33], device="cuda", seed=6)
        tokens = batch["q"].shape[0]
        sinks = torch.linspace(-2.0, 6.0, HEADS, device="cuda")
        sinks[0] = float("-inf")  # no sink
        for mask, params, arrays in self.cases(batch):
            with self.subTest(mask=mask):
                options = dict(max_query_len=64, params=params, arrays=arrays)
                lse0 = torch.zeros(tokens, HEADS, device="cuda")
                out0 = self.kernels[mask](**batch, lse=lse0, **options)
                want_lse = torch.zeros(tokens, HEADS, device="cuda")
                want = self.kernels[mask](**batch, lse=want_lse, sinks=sinks, **options)
                lse = torch.full((tokens, HEADS), float("nan"), device="cuda")
                out = self.ops.paged_attention("gpu." + mask, **batch, out=nan_like(batch["q"]),
                                               lse=lse, sinks=sinks, **options)
                torch.cuda.synchronize()
                self.assert_identical(out, want, f"{mask} out with sinks")
                self.assert_identical(lse, want_lse, f"{mask} lse with sinks")
                weight = torch.sigmoid(lse0 - sinks)
                torch.testing.assert_close(out.float(), out0.float() * weight[..., None],
                                           atol=2e-2, rtol=2e-2)
                torch.testing.assert_close(lse, torch.logaddexp(lse0, sinks.expand_as(lse0)),
                                           atol=1e-3, rtol=1e-4)
        with self.assertRaisesRegex(ValueError, "sinks: not a CUDA device array"):
            self.ops.paged_attention("gpu.causal", **batch, max_query_len=64,
                                     sinks=sinks.cpu())
        with self.assertRaisesRegex(ValueError, "sinks: dtype bf16, expected fp32"):
            self.ops.paged_attention("gpu.causal", **batch, max_query_len=64,
                                     sinks=sinks.bfloat16())

    def test_checks_are_the_ctypes_calls(self):
        batch = paged_batch([2], [20], device="cuda")
        with self.assertRaisesRegex(ValueError, "q: dtype fp16, expected bf16"):
            self.ops.paged_attention("gpu.causal", **dict(batch, q=batch["q"].half()),
                                     max_query_len=2)
        with self.assertRaisesRegex(TypeError, "expected an integral value"):
            self.ops.paged_attention("gpu.sliding", **batch, max_query_len=2,
                                     params={"window": 1.5})
        with self.assertRaisesRegex(KeyError, "no kernel or plan registered under 'gpu.nope'"):
            self.ops.paged_attention("gpu.nope", **batch, max_query_len=2)

    def test_varlen_matches_the_ctypes_call(self):
        gen = torch.Generator().manual_seed(2)
        cu = torch.tensor([0, 50, 51, 180], dtype=torch.int32, device="cuda")
        qkv = torch.randn(180, HEADS + 2 * KV_HEADS, HEAD_DIM, generator=gen)
        qkv = qkv.to(torch.bfloat16).cuda()
        q, k, v = qkv.split([HEADS, KV_HEADS, KV_HEADS], dim=1)
        doc = document_ids(3, 129, "cuda")
        want = self.encoder.varlen(q, k, v, cu, max_seq_len=129, arrays={"doc": doc})
        out = self.ops.varlen_attention("gpu.encoder", q, k, v, cu, max_seq_len=129,
                                        out=nan_like(q), arrays={"doc": doc})
        sinks = torch.linspace(-2.0, 6.0, HEADS, device="cuda")
        want_sinks = self.encoder.varlen(q, k, v, cu, max_seq_len=129, arrays={"doc": doc},
                                         sinks=sinks)
        out_sinks = self.ops.varlen_attention("gpu.encoder", q, k, v, cu, max_seq_len=129,
                                              out=nan_like(q), arrays={"doc": doc}, sinks=sinks)
        torch.cuda.synchronize()
        self.assert_identical(out, want, "varlen out")
        self.assert_identical(out_sinks, want_sinks, "varlen out with sinks")
        self.assertFalse(torch.equal(out_sinks, out), "the sinks changed nothing")

    def test_compile_fullgraph_matches_eager(self):
        def step(batch, doc, window, longest):
            lse = batch["q"].new_empty(batch["q"].shape[:2], dtype=torch.float32)
            sliding = self.ops.paged_attention("gpu.sliding", **batch, max_query_len=longest,
                                               lse=lse, params={"window": window})
            document = self.ops.paged_attention("gpu.document", **batch, max_query_len=longest,
                                                arrays={"doc": doc})
            return sliding, lse, document

        batch = paged_batch([1, 17, 64, 1], [300, 17, 200, 33], device="cuda", seed=3)
        doc = document_ids(4, 512, "cuda")
        explained = torch._dynamo.explain(step)(batch, doc, 40, 64)
        self.assertEqual((explained.graph_count, explained.graph_break_count), (1, 0),
                         explained.break_reasons)
        torch._dynamo.reset()
        compiled = torch.compile(step, fullgraph=True)  # inductor
        for seed, query_lens in ((3, [1, 17, 64, 1]), (4, [2, 5, 1, 30])):
            with self.subTest(query_lens=query_lens):
                batch = paged_batch(query_lens, [300, 17, 200, 33], device="cuda", seed=seed)
                # The library refuses a max_query_len above the token count: pass each batch's.
                got = compiled(batch, doc, 40, max(query_lens))
                want = step(batch, doc, 40, max(query_lens))
                torch.cuda.synchronize()
                for name, g, w in zip(("sliding", "lse", "document"), got, want):
                    self.assert_identical(g, w, f"compiled {name}")

    def plan_setup(self, key):
        """A plan of the causal kernel and static buffers for three batches of 4 requests."""
        kernel = self.kernels["causal"]
        plan = kernel.plan(max_num_reqs=4, max_num_tokens=48, max_query_len=32,
                           num_heads=HEADS, num_kv_heads=KV_HEADS)
        self.ops.register(key, plan)
        batches = [([1, 1, 1, 1], [100, 37, 300, 5]), ([1, 20, 1, 3], [64, 200, 17, 90]),
                   ([1, 1, 1, 1], [1000, 2, 500, 130])]
        width = 64  # blocks per request: 1000 keys need 63
        inputs = [paged_batch(ql, sl, device="cuda", seed=10 + i, width=width)
                  for i, (ql, sl) in enumerate(batches)]
        static, write = static_batch(inputs, num_reqs=4, num_tokens=48, width=width)
        out = torch.zeros_like(static["q"])

        def load(i):
            """Plans batch i (outside any capture) and writes it into the static buffers."""
            b = inputs[i]
            plan.update(b["query_start_loc"].tolist(), b["seq_lens"].tolist(), width)
            return write(b), b

        return plan, static, out, load, len(batches)

    def check_replays(self, graph, run, static, out, load, count, sinks=None):
        for i in range(count):
            with self.subTest(batch=i):
                tokens, b = load(i)
                out.fill_(float("nan"))
                graph.replay()
                torch.cuda.synchronize()
                replayed = out[:tokens].clone()
                out.fill_(float("nan"))
                run()  # eager, same plan update
                torch.cuda.synchronize()
                self.assert_identical(replayed, out[:tokens], f"replay of batch {i}")
                # And close to the unplanned kernel over the batch's own tensors.
                # max_query_len read from the batch
                want = self.kernels["causal"](**b, sinks=sinks)
                torch.cuda.synchronize()
                # Split-KV decode merges float32 partials: within bf16 rounding, not equal.
                torch.testing.assert_close(replayed.float(), want.float(), atol=2e-2, rtol=2e-2,
                                           msg=lambda m: f"batch {i}, planned vs unplanned: {m}")

    def test_plan_run_in_a_cuda_graph(self):
        plan, static, out, load, count = self.plan_setup("gpu.plan")
        load(0)

        def run():
            self.ops.plan_run("gpu.plan", **static, out=out)

        graph = capture_graph(run)
        self.check_replays(graph, run, static, out, load, count)

    def test_plan_run_with_sinks_in_a_cuda_graph(self):
        # Split requests merge their partials without the sink and add it once.
        plan, static, out, load, count = self.plan_setup("gpu.plan.sinks")
        sinks = torch.linspace(-1.0, 5.0, HEADS, device="cuda")
        load(0)

        def run():
            self.ops.plan_run("gpu.plan.sinks", **static, out=out, sinks=sinks)

        graph = capture_graph(run)
        self.check_replays(graph, run, static, out, load, count, sinks=sinks)

    def test_compiled_plan_run_in_a_cuda_graph(self):
        plan, static, out, load, count = self.plan_setup("gpu.plan.compiled")
        load(0)

        @torch.compile(fullgraph=True)
        def step(static, out):
            self.ops.plan_run("gpu.plan.compiled", **static, out=out)

        def run():
            step(static, out)

        graph = capture_graph(run)
        self.check_replays(graph, run, static, out, load, count)


if __name__ == "__main__":
    unittest.main()
