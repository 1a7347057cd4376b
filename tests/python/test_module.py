"""flexjit (the Python module) over the real libflexjit_runtime.so, without a GPU: compiling for
an explicit architecture works everywhere; launching stops at the driver, after every check."""

import ctypes
import os
import subprocess
import sys
import unittest

from support import REPO, CudaArray, FakeTensor

import flexjit
from flexjit import Status

MASKS = str(REPO / "dsl" / "lib" / "standard.mask")


def library_available():
    try:
        flexjit.runtime_version()
        return True
    except OSError:
        return False


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

    def test_handles_are_freed_by_garbage_collection(self):
        ctx = flexjit.Context()
        program = ctx.program("mask m = q >= kv\n")
        kernel = ctx.kernel(program, "m", head_dim=64, arch="sm_80")
        self.assertIn("sm80", kernel.name)
        del ctx, program, kernel  # the kernel keeps program and context alive until it goes


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


if __name__ == "__main__":
    unittest.main()
