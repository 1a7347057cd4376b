"""flexjit (the Python module) over the real libflexjit_runtime.so, without a GPU: compiling for
an explicit architecture works everywhere; launching stops at the driver, after every check; CPU
kernels run on host memory (attention sinks against their closed form)."""

import ctypes
import math
import os
import struct
import subprocess
import sys
import unittest

from support import REPO, CudaArray, FakeTensor, fake_cuda_tensors, library_available
from test_bad_input import HostArray, cpu_batch

import flexjit
from flexjit import ParamType, Status, _capi

MASKS = str(REPO / "dsl" / "lib" / "standard.mask")

# Every kind of runtime parameter, and a variant reading them.
TYPED = """param temp: float
param window: int
param full: bool
param bias: float[h]
param table: int[N]
mask m = full || (q >= kv && q - kv < window + table[0])
score s = score / temp + bias[h]
variant v = m with s
"""


def paged_arrays(dtype="<f2", num_tokens=5, heads=4, kv_heads=2, head_dim=64, page=16,
                 blocks=6, reqs=2):
    """Stand-in arrays of a paged call: joint K/V cache [blocks, 2, page, kv_heads, D]."""
    joint = CudaArray((blocks, 2, page, kv_heads, head_dim), dtype, ptr=0x7F0000100000)
    return dict(q=CudaArray((num_tokens, heads, head_dim), dtype, ptr=0x7F0000200000),
                out=CudaArray((num_tokens, heads, head_dim), dtype, ptr=0x7F0000300000),
                k_cache=joint.view(0), v_cache=joint.view(1),
                block_table=CudaArray((reqs, 3), "<i4", ptr=0x7F0000400000),
                query_start_loc=CudaArray((reqs + 1,), "<i4", ptr=0x7F0000500000),
                seq_lens=CudaArray((reqs,), "<i4", ptr=0x7F0000600000))


def torch_like_paged_arrays():
    """Stand-in torch tensors of a paged call (3 tokens, 32 heads over 8, head dim 128, page
    64, a joint cache), each with its own device object, as torch's compare equal."""
    joint = FakeTensor((10, 64, 8, 256), ptr=0x7F0000000000)
    return dict(q=FakeTensor((3, 32, 128), ptr=0x7F0000100000),
                out=FakeTensor((3, 32, 128), ptr=0x7F0000200000),
                k_cache=FakeTensor((10, 64, 8, 128), strides=joint.stride(), ptr=joint.data_ptr()),
                v_cache=FakeTensor((10, 64, 8, 128), strides=joint.stride(),
                                   ptr=joint.data_ptr() + 256),
                block_table=FakeTensor((1, 10), "torch.int32", ptr=0x7F0000300000),
                query_start_loc=FakeTensor((2,), "torch.int32", ptr=0x7F0000400000),
                seq_lens=FakeTensor((1,), "torch.int32", ptr=0x7F0000500000))


@unittest.skipUnless(library_available(), "libflexjit_runtime.so not found (set FLEXJIT_LIBRARY)")
class ModuleTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ctx = flexjit.Context()
        cls.program = cls.ctx.program_from_file(MASKS)

    def test_version_matches_header(self):
        header = (REPO / "runtime" / "include" / "flexjit" / "flexjit.h").read_text()
        parts = [int(line.split()[2]) for line in header.splitlines()
                 if line.startswith("#define FJ_VERSION_") and len(line.split()) == 3]
        major, minor, patch = parts
        self.assertEqual(flexjit.runtime_version(), major * 10000 + minor * 100 + patch)

    def test_compiles_for_sm90a_without_a_gpu(self):
        kernel = self.ctx.kernel(self.program, "sliding", head_dim=128, dtype="bf16",
                                 page_size=16, arch="sm_90a")
        self.assertEqual(kernel.name, "prefill_sliding_hd128_bf16_page16_sm90a")
        kernel.close()
        kernel.close()  # closing twice is harmless
        with self.assertRaises(ValueError):
            kernel.name

    def test_statuses_become_exceptions_with_the_last_error(self):
        with self.assertRaises(flexjit.FlexjitError) as caught:
            self.ctx.kernel(self.program, "no_such_mask", arch="sm_90a")
        self.assertEqual(caught.exception.status, Status.NOT_FOUND)
        self.assertIn("no_such_mask", caught.exception.message)
        with self.assertRaises(flexjit.FlexjitError) as caught:
            self.ctx.kernel(self.program, "causal", page_size=24, arch="sm_90a")
        self.assertEqual(caught.exception.status, Status.UNSUPPORTED)
        self.assertIn("page_size 24", str(caught.exception))
        with self.assertRaises(flexjit.FlexjitError) as caught:
            self.ctx.program("mask m = q >= kvv\nmask n = qq < 1\n", name="bad.mask")
        self.assertEqual(caught.exception.status, Status.INVALID_SOURCE)
        self.assertIn("bad.mask:1:", caught.exception.message)
        self.assertIn("bad.mask:2:", caught.exception.message)
        with self.assertRaises(flexjit.FlexjitError) as caught:
            self.ctx.program_from_file(str(REPO / "no" / "such.mask"))
        self.assertEqual(caught.exception.status, Status.NOT_FOUND)

    def test_standard_param_info(self):
        self.assertEqual((self.program.param_count, self.program.array_count), (1, 4))
        expected = {"window": (ParamType.INT, 0, 0, ()),
                    "prefix_len": (ParamType.INT_ARRAY, 0, 1, ("b",)),
                    "ranges": (ParamType.INT_ARRAY, 1, 2, ("b", "r")),
                    "doc": (ParamType.INT_ARRAY, 2, 2, ("b", "kv")),
                    "slopes": (ParamType.FLOAT_ARRAY, 3, 1, ("h",))}
        for name, (kind, slot, rank, dims) in expected.items():
            with self.subTest(name=name):
                info = self.program.param_info(name)
                self.assertEqual((info.name, info.type, info.slot, info.rank, info.dims),
                                 (name, kind, slot, rank, dims))
                self.assertEqual(info.is_array, rank > 0)
        self.assertEqual(str(self.program.param_info("doc")), "doc: int[b, kv]")
        self.assertEqual(str(self.program.param_info("slopes")), "slopes: float[h]")
        with self.assertRaises(flexjit.FlexjitError) as caught:
            self.program.param_info("cap")  # a const, not a runtime parameter
        self.assertEqual(caught.exception.status, Status.NOT_FOUND)
        with self.assertRaises(flexjit.FlexjitError) as caught:
            self.program.param_slot("doc")
        self.assertEqual(caught.exception.status, Status.NOT_FOUND)
        self.assertIn("fj_program_param_info", caught.exception.message)

    def test_param_packing(self):
        program = self.ctx.program(TYPED, name="typed.mask")
        self.assertEqual((program.param_count, program.array_count), (3, 2))
        self.assertEqual([program.param_info(n).type for n in ("temp", "window", "full")],
                         [ParamType.FLOAT, ParamType.INT, ParamType.BOOL])
        values = program.param_values({"temp": 0.5, "window": -3, "full": True})
        self.assertEqual(list(values), [0x3F000000, -3, 1])
        values = program.param_values({"temp": -2, "full": 0})  # ints are numbers; 0/1 bools
        self.assertEqual(list(values), [struct.unpack("<i", struct.pack("<f", -2.0))[0], 0, 0])
        self.assertEqual(list(program.param_values({"temp": 1e-3})),
                         [struct.unpack("<i", struct.pack("<f", 1e-3))[0], 0, 0])
        self.assertEqual(list(program.param_values({"full": False})), [0, 0, 0])
        with self.assertRaises(flexjit.FlexjitError) as caught:
            program.param_values({"tmp": 1.0})
        self.assertEqual(caught.exception.status, Status.NOT_FOUND)
        self.assertIn("tmp", caught.exception.message)
        cases = [({"bias": [1.0, 2.0]}, TypeError, "'bias' is an array (bias: float[h]): pass "
                  "it in arrays="),
                 ({"table": 3}, TypeError, "pass it in arrays="),
                 ({"window": 1.5}, TypeError, "expected an int, got float"),
                 ({"window": True}, TypeError, "expected an int, got bool"),
                 ({"window": 2**31}, ValueError, "does not fit in int32"),
                 ({"temp": True}, TypeError, "expected a number, got bool"),
                 ({"temp": "0.5"}, TypeError, "expected a number, got str"),
                 ({"temp": 1e39}, ValueError, "does not fit in float32"),
                 ({"full": 2}, TypeError, "expected a bool, got 2")]
        for params, error, message in cases:
            with self.subTest(params=params):
                with self.assertRaises(error) as caught:
                    program.param_values(params)
                self.assertIn(message, str(caught.exception))

    def test_kernels_with_scores_variants_and_defines(self):
        def name(mask, **options):
            kernel = self.ctx.kernel(self.program, mask, head_dim=64, dtype="fp16",
                                     arch="sm_90a", **options)
            self.assertEqual((kernel.mask, kernel.score), (mask, options.get("score")))
            return kernel.name
        self.assertEqual(name("causal_softcap"), "prefill_causal_softcap_hd64_fp16_page16_sm90a")
        self.assertEqual(name("causal", score="softcap"),
                         "prefill_causal_softcap_hd64_fp16_page16_sm90a")
        self.assertEqual(name("causal_alibi"), "prefill_causal_alibi_hd64_fp16_page16_sm90a")
        self.assertEqual(name("document", score="alibi", page_size=0),
                         "encoder_document_alibi_hd64_fp16_sm90a")
        self.assertIn("gemma2_local", name("gemma2_local", defines={"cap": 30}))
        self.assertIn("chunked", name("chunked", defines={"chunk": 128}))
        kernel = self.ctx.kernel(self.program, "causal_softcap", head_dim=64, arch="sm_90a",
                                 defines={"cap": 30.5})
        self.assertEqual(kernel.defines, {"cap": "30.5"})

    def test_kernel_errors(self):
        cases = [
            (dict(mask="causal_softcap", score="softcap"), (Status.NOT_FOUND,),
             "names its own score"),
            (dict(mask="causal", score="no_such_score"), (Status.NOT_FOUND,), "no_such_score"),
            (dict(mask="causal", defines={"no_such_const": 1}), (Status.NOT_FOUND,),
             "no_such_const"),
            # The header says INVALID_ARGUMENT for a bad define; the library says NOT_FOUND.
            (dict(mask="causal_softcap", defines={"cap": "abc"}),
             (Status.INVALID_ARGUMENT, Status.NOT_FOUND), "cap=abc"),
            (dict(mask="causal_softcap", defines={"cap": True}),
             (Status.INVALID_ARGUMENT, Status.NOT_FOUND), "cap=true"),
            (dict(mask="chunked", defines={"chunk": 0.5}),
             (Status.INVALID_ARGUMENT, Status.NOT_FOUND), "chunk=0.5"),
            (dict(mask="causal", defines={"cap": "1\n2"}), (Status.INVALID_ARGUMENT,),
             "control character"),
        ]
        for options, statuses, message in cases:
            with self.subTest(options=options):
                with self.assertRaises(flexjit.FlexjitError) as caught:
                    self.ctx.kernel(self.program, head_dim=64, arch="sm_90a", **options)
                self.assertIn(caught.exception.status, statuses)
                self.assertIn(message, caught.exception.message)
        with self.assertRaisesRegex(ValueError, "define 'cap': inf is not a finite number"):
            self.ctx.kernel(self.program, "causal_softcap", arch="sm_90a",
                            defines={"cap": math.inf})
        with self.assertRaisesRegex(TypeError, "define 'cap': expected a str"):
            self.ctx.kernel(self.program, "causal_softcap", arch="sm_90a",
                            defines={"cap": [1]})

    def test_params_by_name(self):
        program = self.ctx.program("param a: int\nparam window: int\n"
                                   "mask m = q >= kv && q - kv < window + a\n")
        self.assertEqual(program.param_count, 2)
        self.assertEqual(program.param_slot("window"), 1)
        values = program.param_values({"window": 7})
        self.assertEqual(list(values), [0, 7])
        with self.assertRaises(flexjit.FlexjitError) as caught:
            program.param_values({"windw": 7})
        self.assertEqual(caught.exception.status, Status.NOT_FOUND)
        with self.assertRaises(TypeError):
            program.param_values({"window": [1, 2]})

    def test_launch_reaches_the_driver_after_every_check(self):
        # With stand-in pointers every argument check passes and the call fails only where it
        # needs the CUDA driver (absent here) or the device: FJ_ERROR_CUDA, not
        # INVALID_ARGUMENT. This proves the struct arrives intact.
        kernel = self.ctx.kernel(self.program, "sliding", head_dim=64, dtype="fp16",
                                 page_size=16, arch="sm_90a")
        arrays = paged_arrays()
        launch = kernel.prepare(**arrays, max_query_len=4, params={"window": 8})
        self.assertEqual(launch.args.k_stride_block, 2 * 16 * 2 * 64)
        self.assertEqual(launch.args.v_cache - launch.args.k_cache, 16 * 2 * 64 * 2)
        with self.assertRaises(flexjit.FlexjitError) as caught:
            launch.launch()
        self.assertEqual(caught.exception.status, Status.CUDA, caught.exception)

    @fake_cuda_tensors
    def test_array_params_at_launch(self):
        kernel = self.ctx.kernel(self.program, "document", head_dim=64, dtype="fp16",
                                 page_size=16, arch="sm_90a")
        doc = CudaArray((2, 96), "<i4", strides=(128, 1), ptr=0x7F0000700000)
        launch = kernel.prepare(**paged_arrays(), max_query_len=4, arrays={"doc": doc})
        self.assertEqual(launch.args.num_arrays, 4)
        slots = [(a.data or 0, a.rows, a.cols, a.row_stride)
                 for a in launch.args.arrays[:launch.args.num_arrays]]
        self.assertEqual(slots, [(0, 0, 0, 0), (0, 0, 0, 0), (0x7F0000700000, 2, 96, 128),
                                 (0, 0, 0, 0)])
        self.assertIs(launch.arrays["array:doc"], doc)
        with self.assertRaises(flexjit.FlexjitError) as caught:
            launch.launch()
        self.assertEqual(caught.exception.status, Status.CUDA, caught.exception)
        # Omitted, the array the mask reads arrives empty: the library refuses it.
        launch = kernel.prepare(**paged_arrays(), max_query_len=4)
        with self.assertRaises(flexjit.FlexjitError) as caught:
            launch.launch()
        self.assertEqual(caught.exception.status, Status.INVALID_ARGUMENT)
        self.assertIn("`doc`", caught.exception.message)

        alibi = self.ctx.kernel(self.program, "causal_alibi", head_dim=64, dtype="fp16",
                                page_size=16, arch="sm_90a")
        slopes = FakeTensor((4,), "torch.float32", ptr=0x7F0000800000, device=None)
        with self.assertRaisesRegex(ValueError, "slopes: not a CUDA device array"):
            alibi.prepare(**paged_arrays(), max_query_len=4, arrays={"slopes": slopes})
        launch = alibi.prepare(**paged_arrays(), max_query_len=4,
                               arrays={"slopes": CudaArray((4,), "<f4", ptr=0x7F0000800000)})
        self.assertEqual((launch.args.arrays[3].rows, launch.args.arrays[3].cols,
                          launch.args.arrays[3].row_stride), (4, 1, 1))
        with self.assertRaises(flexjit.FlexjitError) as caught:
            launch.launch()
        self.assertEqual(caught.exception.status, Status.CUDA, caught.exception)

        rswa = self.ctx.kernel(self.program, "rswa", head_dim=64, dtype="fp16", page_size=16,
                               arch="sm_90a")
        cases = [({"prefix_len": CudaArray((2,), "<f4")}, ValueError,
                  "prefix_len: dtype fp32, expected int32"),
                 ({"prefix_len": CudaArray((2, 1), "<i4")}, ValueError,
                  "declared int32[b] (1-D)"),
                 ({"prefix_len": CudaArray((1,), "<i4")}, ValueError,
                  "the call needs 2 (num_reqs)"),
                 ({"slopes": CudaArray((3,), "<f4")}, ValueError, "the call needs 4 (num_heads)"),
                 ({"window": CudaArray((2,), "<i4")}, TypeError, "pass it in params="),
                 ({"prefix_len": [1, 2]}, TypeError, "__cuda_array_interface__")]
        for arrays, error, message in cases:
            with self.subTest(arrays=arrays):
                with self.assertRaises(error) as caught:
                    rswa.prepare(**paged_arrays(), max_query_len=4, params={"window": 8},
                                 arrays=arrays)
                self.assertIn(message, str(caught.exception))
        with self.assertRaises(flexjit.FlexjitError) as caught:
            rswa.prepare(**paged_arrays(), max_query_len=4, arrays={"prefx_len": None})
        self.assertEqual(caught.exception.status, Status.NOT_FOUND)
        tensors = dict(q=FakeTensor((5, 4, 64), "torch.float16"),
                       out=FakeTensor((5, 4, 64), "torch.float16"),
                       k_cache=FakeTensor((6, 16, 2, 64), "torch.float16"),
                       v_cache=FakeTensor((6, 16, 2, 64), "torch.float16"),
                       block_table=FakeTensor((2, 3), "torch.int32"),
                       query_start_loc=FakeTensor((3,), "torch.int32"),
                       seq_lens=FakeTensor((2,), "torch.int32"))
        with self.assertRaisesRegex(ValueError, "prefix_len: on cuda:1, q on cuda:0"):
            rswa.prepare(**tensors, max_query_len=4,
                         arrays={"prefix_len": FakeTensor((2,), "torch.int32", device=1)})

    def test_workspace(self):
        # Since 0.3 the launch structs end with a workspace; the module passes none (null: the
        # kernel's own buffer), and a caller's is checked against fj_attention_workspace_size.
        kernel = self.ctx.kernel(self.program, "document", head_dim=64, dtype="fp16",
                                 page_size=16, arch="sm_90a")
        doc = CudaArray((2, 96), "<i4", strides=(128, 1), ptr=0x7F0000700000)
        launch = kernel.prepare(**paged_arrays(), max_query_len=4, arrays={"doc": doc})
        self.assertEqual((launch.args.workspace, launch.args.workspace_bytes), (None, 0))
        size = ctypes.c_uint64(1)
        status = _capi.library().fj_attention_workspace_size(
            kernel.handle, launch.args.arrays, launch.args.num_arrays, ctypes.byref(size))
        self.assertEqual(status, Status.SUCCESS)
        # doc is summarised along kv: 2 lines of 6 + 1 (min, max) pairs, 112 bytes, rounded up
        # to 256.
        self.assertEqual(size.value, 256)
        launch.args.workspace = 0x7F0000900000
        launch.args.workspace_bytes = 255
        with self.assertRaises(flexjit.FlexjitError) as caught:
            launch.launch()
        self.assertEqual(caught.exception.status, Status.INVALID_ARGUMENT)
        self.assertIn("workspace_bytes (255) is smaller than the 256 bytes",
                      caught.exception.message)
        launch.args.workspace_bytes = 256
        with self.assertRaises(flexjit.FlexjitError) as caught:
            launch.launch()
        self.assertEqual(caught.exception.status, Status.CUDA, caught.exception)
        # A 0.2 struct ends before the workspace: what lies past it is not read.
        launch.args.struct_size = _capi.PagedAttentionArgs.workspace.offset
        launch.args.workspace_bytes = 255
        with self.assertRaises(flexjit.FlexjitError) as caught:
            launch.launch()
        self.assertEqual(caught.exception.status, Status.CUDA, caught.exception)
        launch.args.struct_size -= 8
        with self.assertRaises(flexjit.FlexjitError) as caught:
            launch.launch()
        self.assertEqual(caught.exception.status, Status.INVALID_ARGUMENT)
        self.assertIn("struct_size", caught.exception.message)

    def test_sinks_reach_the_struct(self):
        # Since 0.7 both launch structs end with `sinks`: the pointer lands where the library
        # reads it (a misaligned one is refused by name), and a 0.6 struct_size hides it.
        sinks = CudaArray((4,), "<f4", ptr=0x7F0000B00000)
        paged = self.ctx.kernel(self.program, "sliding", head_dim=64, dtype="fp16", page_size=16,
                                arch="sm_90a")
        encoder = self.ctx.kernel(self.program, "causal", head_dim=64, dtype="fp16",
                                  page_size=0, arch="sm_90a")
        varlen_arrays = dict(q=CudaArray((9, 4, 64)), k=CudaArray((9, 2, 64)),
                             v=CudaArray((9, 2, 64)), out=CudaArray((9, 4, 64)),
                             cu_seqlens=CudaArray((3,), "<i4"))
        launches = [paged.prepare(**paged_arrays(), max_query_len=4, params={"window": 8},
                                  sinks=sinks),
                    encoder.prepare_varlen(**varlen_arrays, max_seq_len=7, sinks=sinks)]
        for launch in launches:
            with self.subTest(launch.call):
                self.assertEqual(launch.args.sinks, sinks.ptr)
                self.assertIs(launch.arrays["sinks"], sinks)
                with self.assertRaises(flexjit.FlexjitError) as caught:
                    launch.launch()
                self.assertEqual(caught.exception.status, Status.CUDA, caught.exception)
                launch.args.sinks = sinks.ptr + 2
                with self.assertRaises(flexjit.FlexjitError) as caught:
                    launch.launch()
                self.assertEqual(caught.exception.status, Status.INVALID_ARGUMENT)
                self.assertIn("sinks is not 4-byte aligned", caught.exception.message)
                launch.args.struct_size = type(launch.args).sinks.offset
                with self.assertRaises(flexjit.FlexjitError) as caught:
                    launch.launch()
                self.assertEqual(caught.exception.status, Status.CUDA, caught.exception)
        self.assertIsNone(paged.prepare(**paged_arrays(), max_query_len=4).args.sinks)
        self.assertIsNone(encoder.prepare_varlen(**varlen_arrays, max_seq_len=7).args.sinks)
        with self.assertRaisesRegex(ValueError, r"sinks: 2 entries, expected one per query "
                                    r"head \(4\)"):
            paged.prepare(**paged_arrays(), max_query_len=4, sinks=CudaArray((2,), "<f4"))
        with self.assertRaisesRegex(ValueError, "sinks: dtype fp16, expected fp32"):
            encoder.prepare_varlen(**varlen_arrays, max_seq_len=7, sinks=CudaArray((4,)))

    @fake_cuda_tensors
    def test_paged_args_write_each_calls_sinks(self):
        # The kept struct takes each call's sinks pointer, and whether there are sinks (and
        # their shape, dtype, device) is part of the geometry: other sinks run the checks.
        kernel = self.ctx.kernel(self.program, "causal", head_dim=128, dtype="bf16",
                                 page_size=64, arch="sm_90a")
        arrays = torch_like_paged_arrays()  # 32 query heads
        device = arrays["q"].device

        def sinks(ptr, shape=(32,), dtype="torch.float32"):
            made = FakeTensor(shape, dtype, ptr=ptr)
            made.device = device  # one device object, as torch's compare equal
            return made

        for ptr in (0x7F0000600000, 0x7F0000700000):
            args, _ = kernel.paged_args(**arrays, max_query_len=3, sinks=sinks(ptr))
            self.assertEqual(args.sinks, ptr)
            self.assertEqual(args.q, arrays["q"].data_ptr())
        self.assertEqual(len(kernel._templates), 1)
        args, _ = kernel.paged_args(**arrays, max_query_len=3)
        self.assertIsNone(args.sinks)
        self.assertEqual(len(kernel._templates), 2)
        args, _ = kernel.paged_args(**arrays, max_query_len=3, sinks=sinks(0x7F0000800000))
        self.assertEqual((args.sinks, len(kernel._templates)), (0x7F0000800000, 2))
        for bad, message in ((sinks(0x7F0000800000, dtype="torch.bfloat16"),
                              "sinks: dtype bf16, expected fp32"),
                             (sinks(0x7F0000800000, shape=(16,)), "sinks: 16 entries"),
                             (FakeTensor((32,), "torch.float32", device=None),
                              "sinks: not a CUDA device array")):
            with self.subTest(message):
                with self.assertRaisesRegex(ValueError, message):
                    kernel.paged_args(**arrays, max_query_len=3, sinks=bad)
                with self.assertRaisesRegex(ValueError, message):
                    kernel(**arrays, max_query_len=3, sinks=bad)

    def test_float_params_reach_the_struct(self):
        program = self.ctx.program(TYPED, name="typed.mask")
        kernel = self.ctx.kernel(program, "v", head_dim=64, dtype="fp16", page_size=16,
                                 arch="sm_90a")
        launch = kernel.prepare(**paged_arrays(), max_query_len=4,
                                params={"temp": 0.25, "window": 8, "full": True},
                                arrays={"bias": CudaArray((4,), "<f4", ptr=0x7F0000900000),
                                        "table": CudaArray((1,), "<i4", ptr=0x7F0000A00000)})
        self.assertEqual((launch.args.num_params, launch.args.num_arrays), (3, 2))
        self.assertEqual(launch.args.params[:3], [0x3E800000, 8, 1])
        self.assertEqual([launch.args.arrays[i].data for i in range(2)],
                         [0x7F0000900000, 0x7F0000A00000])
        with self.assertRaises(flexjit.FlexjitError) as caught:
            launch.launch()
        self.assertEqual(caught.exception.status, Status.CUDA, caught.exception)

    def test_varlen(self):
        kernel = self.ctx.kernel(self.program, "document", head_dim=64, dtype="fp16",
                                 page_size=0, arch="sm_90a")
        self.assertTrue(kernel.name.startswith("encoder_document_hd64_fp16"), kernel.name)
        qkv = CudaArray((9, 8, 64), ptr=0x7F0000100000)  # fused [tokens, 4 q + 2 k + 2 v, D]
        arrays = dict(q=CudaArray((9, 4, 64), strides=(512, 64, 1), ptr=qkv.ptr),
                      k=CudaArray((9, 2, 64), strides=(512, 64, 1), ptr=qkv.ptr + 4 * 128),
                      v=CudaArray((9, 2, 64), strides=(512, 64, 1), ptr=qkv.ptr + 6 * 128),
                      out=CudaArray((9, 4, 64), ptr=0x7F0000200000),
                      cu_seqlens=CudaArray((3,), "<i4", ptr=0x7F0000300000))
        doc = CudaArray((2, 7), "<i4", ptr=0x7F0000400000)
        launch = kernel.prepare_varlen(**arrays, max_seq_len=7, arrays={"doc": doc})
        self.assertEqual(launch.call, "fj_varlen_attention")
        self.assertEqual((launch.args.num_seqs, launch.args.num_kv_heads,
                          launch.args.k_stride_token, launch.args.max_seq_len), (2, 2, 512, 7))
        self.assertEqual((launch.args.arrays[2].rows, launch.args.arrays[2].cols), (2, 7))
        with self.assertRaises(flexjit.FlexjitError) as caught:
            launch.launch()
        self.assertEqual(caught.exception.status, Status.CUDA, caught.exception)
        launch.args.num_arrays = 1
        with self.assertRaises(flexjit.FlexjitError) as caught:
            launch.launch()
        self.assertEqual(caught.exception.status, Status.INVALID_ARGUMENT)
        self.assertIn("num_arrays is 1 but the program declares 4", caught.exception.message)
        self.assertIn("fj_varlen_attention", str(caught.exception))
        with self.assertRaisesRegex(ValueError, "use varlen"):
            kernel.prepare(**paged_arrays(), max_query_len=4)
        paged = self.ctx.kernel(self.program, "causal", head_dim=64, dtype="fp16",
                                page_size=16, arch="sm_90a")
        with self.assertRaisesRegex(ValueError, "page_size=0"):
            paged.prepare_varlen(**arrays, max_seq_len=7)

    def test_the_library_checks_see_the_fields_we_set(self):
        kernel = self.ctx.kernel(self.program, "causal", head_dim=64, dtype="fp16", page_size=16,
                                 arch="sm_90a")
        launch = kernel.prepare(**paged_arrays(), max_query_len=4)
        cases = [("num_kv_heads", 3, "num_heads (4) must be a positive multiple of num_kv_heads"
                  " (3)"),
                 ("v_stride_slot", 12, "v_stride_slot (12)"),
                 ("block_table_stride", 2, "block_table_stride (2) is smaller than "
                  "max_blocks_per_req (3)"),
                 ("num_params", 0, "num_params is 0 but the program declares 1"),
                 ("num_arrays", 3, "num_arrays is 3 but the program declares 4"),
                 ("scale", float("inf"), "scale is not finite")]
        for field, value, message in cases:
            with self.subTest(field=field):
                saved = getattr(launch.args, field)
                setattr(launch.args, field, value)
                try:
                    with self.assertRaises(flexjit.FlexjitError) as caught:
                        launch.launch()
                finally:
                    setattr(launch.args, field, saved)
                self.assertEqual(caught.exception.status, Status.INVALID_ARGUMENT)
                self.assertIn(message, caught.exception.message)

    @fake_cuda_tensors
    def test_torch_like_tensors(self):
        kernel = self.ctx.kernel(self.program, "causal", head_dim=128, dtype="bf16",
                                 page_size=64, arch="sm_90a")
        joint = FakeTensor((10, 64, 8, 256))  # vLLM's [blocks, page, H_kv, 2 D] layout
        k = FakeTensor((10, 64, 8, 128), strides=joint.stride(), ptr=joint.data_ptr())
        v = FakeTensor((10, 64, 8, 128), strides=joint.stride(), ptr=joint.data_ptr() + 256)
        q = FakeTensor((3, 32, 128))
        meta = dict(block_table=FakeTensor((1, 10), "torch.int32"),
                    query_start_loc=FakeTensor((2,), "torch.int32"),
                    seq_lens=FakeTensor((1,), "torch.int32"))
        launch = kernel.prepare(q, k, v, out=FakeTensor((3, 32, 128)), max_query_len=3,
                                lse=FakeTensor((3, 32), "torch.float32"), **meta)
        self.assertEqual((launch.args.k_stride_block, launch.args.k_stride_slot,
                          launch.args.k_stride_head), (64 * 8 * 256, 8 * 256, 256))
        self.assertEqual(launch.args.lse_stride_token, 32)
        with self.assertRaisesRegex(ValueError, "dtype fp16, expected bf16"):
            kernel.prepare(FakeTensor((3, 32, 128), "torch.float16"), k, v,
                           out=FakeTensor((3, 32, 128)), max_query_len=3, **meta)

    @fake_cuda_tensors
    def test_paged_args_check_each_geometry_once(self):
        # paged_args (what __call__ and the torch op use) keeps prepare()'s struct per geometry
        # and writes only the pointers of later calls: the struct must be prepare()'s, and
        # what prepare() refuses must still be refused.
        kernel = self.ctx.kernel(self.program, "sliding", head_dim=128, dtype="bf16",
                                 page_size=64, arch="sm_90a")
        devices = {}

        def tensors(base):
            joint = FakeTensor((10, 64, 8, 256), ptr=base)
            made = dict(q=FakeTensor((3, 32, 128), ptr=base + 0x100000),
                        out=FakeTensor((3, 32, 128), ptr=base + 0x200000),
                        k_cache=FakeTensor((10, 64, 8, 128), strides=joint.stride(), ptr=base),
                        v_cache=FakeTensor((10, 64, 8, 128), strides=joint.stride(),
                                           ptr=base + 256),
                        block_table=FakeTensor((1, 10), "torch.int32", ptr=base + 0x300000),
                        query_start_loc=FakeTensor((2,), "torch.int32", ptr=base + 0x400000),
                        seq_lens=FakeTensor((1,), "torch.int32", ptr=base + 0x500000),
                        lse=FakeTensor((3, 32), "torch.float32", ptr=base + 0x600000))
            for name, t in made.items():  # one device object per argument, as torch's compare
                t.device = devices.setdefault(name, t.device)
            return made

        def fields(args):
            """The struct's fields, with what params and arrays point to, not where."""
            values = {}
            for name, _ in _capi.PagedAttentionArgs._fields_:
                value = getattr(args, name)
                if isinstance(value, ctypes._Pointer):
                    value = ctypes.cast(value, ctypes.c_void_p).value
                values[name] = value
            values["params"] = args.params[:args.num_params]
            values["arrays"] = [(a.data, a.rows, a.cols, a.row_stride)
                                for a in args.arrays[:args.num_arrays]]
            return values

        for base in (0x7F0000000000, 0x7F1000000000, 0x7F2000000000):
            with self.subTest(base=hex(base)):
                arrays = tensors(base)
                args, stream = kernel.paged_args(**arrays, max_query_len=3,
                                                 params={"window": 8})
                want = kernel.prepare(**arrays, max_query_len=3, params={"window": 8})
                self.assertEqual(fields(args), fields(want.args))
                self.assertEqual(args.q, base + 0x100000)
                self.assertEqual(stream, want._default_stream)
                self.assertEqual(len(kernel._templates), 1)
        arrays = tensors(0x7F3000000000)
        with self.assertRaisesRegex(TypeError, "expected an int, got float"):
            kernel.paged_args(**arrays, max_query_len=3, params={"window": 8.0})
        with self.assertRaisesRegex(TypeError, "expected an int, got bool"):
            kernel.paged_args(**arrays, max_query_len=3, params={"window": True})
        with self.assertRaisesRegex(ValueError, "dtype fp16, expected bf16"):
            kernel.paged_args(**dict(arrays, q=FakeTensor((3, 32, 128), "torch.float16")),
                              max_query_len=3, params={"window": 8})
        args, _ = kernel.paged_args(**arrays, max_query_len=5, params={"window": 8})
        self.assertEqual((args.max_query_len, len(kernel._templates)), (5, 2))

    @fake_cuda_tensors
    def test_paged_args_keep_float_params_by_their_bits(self):
        # -0.0 == 0.0, but their float32 bits differ: a call with one must not reuse the
        # struct kept for the other.
        program = self.ctx.program("param temp: float\nmask causal = q >= kv\n"
                                   "score s = score / temp\n", name="temp.mask")
        kernel = self.ctx.kernel(program, "causal", score="s", head_dim=128, dtype="bf16",
                                 page_size=64, arch="sm_90a")
        arrays = torch_like_paged_arrays()
        for temp, bits in ((0.0, 0), (-0.0, 0x80000000), (0.0, 0), (-0.0, 0x80000000)):
            with self.subTest(temp=temp):
                args, _ = kernel.paged_args(**arrays, max_query_len=3, params={"temp": temp})
                self.assertEqual(args.params[0] & 0xFFFFFFFF, bits)
        self.assertEqual(len(kernel._templates), 2)

    @fake_cuda_tensors
    def test_clearing_the_templates_runs_every_check_again(self):
        # tools/bench/overhead.py times "checks run in full" by clearing _templates.
        kernel = self.ctx.kernel(self.program, "causal", head_dim=128, dtype="bf16",
                                 page_size=64, arch="sm_90a")
        arrays = torch_like_paged_arrays()
        prepared = []
        prepare = kernel.prepare
        kernel.prepare = lambda *a, **k: prepared.append(1) or prepare(*a, **k)
        for _ in range(3):
            kernel.paged_args(**arrays, max_query_len=3)
        self.assertEqual(len(prepared), 1)
        kernel._templates.clear()
        kernel.paged_args(**arrays, max_query_len=3)
        self.assertEqual(len(prepared), 2)

    @fake_cuda_tensors
    def test_launching_after_close_is_a_value_error(self):
        # The launch paths pass the handle without a check of their own: a closed kernel's is
        # null, refused by the library, and reported as the closed handle.
        kernel = self.ctx.kernel(self.program, "causal", head_dim=128, dtype="bf16",
                                 page_size=64, arch="sm_90a")
        arrays = torch_like_paged_arrays()
        launch = kernel.prepare(**arrays, max_query_len=3)
        args, stream = kernel.paged_args(**arrays, max_query_len=3)
        kernel.paged_args(**arrays, max_query_len=3)  # kept: the next call takes the fast path
        kernel.close()
        for call in (launch.launch, lambda: kernel(**arrays, max_query_len=3),
                     lambda: kernel.enqueue(args, stream)):
            with self.assertRaisesRegex(ValueError, "Kernel is closed"):
                call()

    def test_handles_are_freed_by_garbage_collection(self):
        ctx = flexjit.Context()
        program = ctx.program("mask m = q >= kv\n")
        kernel = ctx.kernel(program, "m", head_dim=64, arch="sm_80")
        self.assertIn("sm80", kernel.name)
        del ctx, program, kernel  # the kernel keeps program and context alive until it goes


def _floats(array, count):
    """The float32 values behind a test_bad_input.HostArray (whose `values` are ints)."""
    return (ctypes.c_float * count).from_address(array.ptr)


def _half(bits):
    return struct.unpack("<e", struct.pack("<H", bits))[0]


@unittest.skipUnless(library_available(), "libflexjit_runtime.so not found (set FLEXJIT_LIBRARY)")
class CpuSinksTest(unittest.TestCase):
    """Sinks through the paged struct into the CPU backend, on host memory. test_bad_input's
    batch has q = 1, k = 1/2 and v = 1 everywhere: every score is 64 * 1/2 / sqrt(64) = 4 and
    every value 1, so a row that sees n keys gets out = n e^4 / (n e^4 + e^sink) and lse =
    log(n e^4 + e^sink); a row that sees none out 0 and lse = the sink."""

    SINKS = [-math.inf, -3.0, 4.0, 9.0]  # per head; -inf is no sink

    def test_sinks_join_the_denominator(self):
        ctx = flexjit.Context()
        program = ctx.program("mask causal = q >= kv\nmask nothing = kv < 0\n", name="s.mask")
        for mask in ("causal", "nothing"):
            with self.subTest(mask=mask):
                kernel = ctx.kernel(program, mask, head_dim=64, dtype="fp16", page_size=16,
                                    arch="cpu")
                batch = cpu_batch([1])
                sinks, lse = HostArray((4,), "<f4"), HostArray((4, 4), "<f4")
                _floats(sinks, 4)[:] = self.SINKS
                kernel.prepare(**batch, lse=lse, sinks=sinks, max_query_len=4).launch()
                out, lse = batch["out"].values, _floats(lse, 16)
                for token in range(4):
                    # 12 cached keys and 4 new tokens: token t sits at 12 + t.
                    visible = 13 + token if mask == "causal" else 0
                    for head, sink in enumerate(self.SINKS):
                        total = visible * math.exp(4.0) + math.exp(sink)
                        want_out = visible * math.exp(4.0) / total if total else 0.0
                        want_lse = math.log(total) if total else -math.inf
                        where = f"token {token} head {head}"
                        row = (token * 4 + head) * 64
                        self.assertAlmostEqual(_half(out[row]), want_out, delta=1e-3, msg=where)
                        self.assertAlmostEqual(_half(out[row + 63]), want_out, delta=1e-3,
                                               msg=where)
                        if math.isinf(want_lse):
                            self.assertEqual(lse[token * 4 + head], want_lse, where)
                        else:
                            self.assertAlmostEqual(lse[token * 4 + head], want_lse, delta=1e-4,
                                                   msg=where)


class DefineTextTest(unittest.TestCase):
    def test_literals(self):
        cases = [(True, "true"), (False, "false"), (30, "30"), (-4, "-4"), (0.5, "0.5"),
                 (50.0, "50.0"), (1e-5, "1e-05"), ("2.5", "2.5"), (2**40, str(2**40))]
        for value, text in cases:
            with self.subTest(value=value):
                self.assertEqual(flexjit.define_text("c", value), text)
        with self.assertRaises(ValueError):
            flexjit.define_text("c", math.nan)
        with self.assertRaises(TypeError):
            flexjit.define_text("c", None)


class ImportTest(unittest.TestCase):
    def test_imports_without_torch(self):
        code = ("import sys; sys.modules['torch'] = None; import flexjit; "
                "assert callable(flexjit.Context)")
        env = dict(os.environ, PYTHONPATH=str(REPO / "tools" / "python"))
        subprocess.run([sys.executable, "-c", code], check=True, env=env)

    def test_missing_library_is_reported(self):
        code = "import flexjit\ntry:\n  flexjit.Context()\nexcept OSError as e:\n  print(e)\n"
        env = dict(os.environ, PYTHONPATH=str(REPO / "tools" / "python"),
                   FLEXJIT_LIBRARY="/nonexistent/libflexjit_runtime.so")
        result = subprocess.run([sys.executable, "-c", code], check=True, env=env,
                                capture_output=True, text=True)
        self.assertIn("set FLEXJIT_LIBRARY", result.stdout)
        self.assertIn("/nonexistent/libflexjit_runtime.so", result.stdout)

    def test_a_library_without_our_functions_is_reported(self):
        # Any shared library lacking the C API's functions (an older libflexjit_runtime.so)
        # is refused at load time, not at the first call of a missing function.
        code = "import flexjit\ntry:\n  flexjit.Context()\nexcept OSError as e:\n  print(e)\n"
        env = dict(os.environ, PYTHONPATH=str(REPO / "tools" / "python"),
                   FLEXJIT_LIBRARY="libc.so.6")
        result = subprocess.run([sys.executable, "-c", code], check=True, env=env,
                                capture_output=True, text=True)
        self.assertIn("libc.so.6: ", result.stdout)
        self.assertIn("older than this module", result.stdout)


if __name__ == "__main__":
    unittest.main()
