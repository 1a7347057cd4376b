"""The Python module on bad input (issue 31): every failure of the C API becomes a FlexjitError
with its status and a message, never a crash or a quiet success. The CPU backend's calls run on
host memory behind stand-in arrays (ctypes buffers), so the host-side checks really run."""

import ctypes
import unittest

from support import REPO, CudaArray, library_available

import flexjit
from flexjit import Status

MASKS = str(REPO / "dsl" / "lib" / "standard.mask")


class HostArray(CudaArray):
    """A stand-in array over host memory of its own (64-byte aligned), for CPU kernels."""

    CTYPES = {"<f2": ctypes.c_uint16, "|u1": ctypes.c_uint8, "<i8": ctypes.c_int64}

    def __init__(self, shape, typestr, fill=0):
        count = 1
        for extent in shape:
            count *= extent
        ctype = self.CTYPES.get(typestr, ctypes.c_int32)
        self.memory = ctypes.create_string_buffer(count * ctypes.sizeof(ctype) + 64)
        base = ctypes.addressof(self.memory)
        super().__init__(shape, typestr, ptr=(base + 63) // 64 * 64)
        self.values = (ctype * count).from_address(self.ptr)
        if fill:  # the buffer starts zeroed
            for i in range(count):
                self.values[i] = fill


def cpu_batch(block_ids):
    """One request of 4 new tokens after 12 cached ones (one page of 16) in a cache of 2 blocks,
    4 heads over 2 kv heads of 64, fp16; `block_ids` is its block-table row."""
    qsl = HostArray((2,), "<i4")
    qsl.values[1] = 4
    seq_lens = HostArray((1,), "<i4", fill=16)
    table = HostArray((1, len(block_ids)), "<i4")
    for i, block in enumerate(block_ids):
        table.values[i] = block
    return dict(q=HostArray((4, 4, 64), "<f2", fill=0x3C00),
                out=HostArray((4, 4, 64), "<f2"),
                k_cache=HostArray((2, 16, 2, 64), "<f2", fill=0x3800),
                v_cache=HostArray((2, 16, 2, 64), "<f2", fill=0x3C00),
                block_table=table, query_start_loc=qsl, seq_lens=seq_lens)


@unittest.skipUnless(library_available(), "libflexjit_runtime.so not found (set FLEXJIT_LIBRARY)")
class BadInputTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ctx = flexjit.Context()
        cls.program = cls.ctx.program_from_file(MASKS)

    def assert_fails(self, status, words, call, *args, **kwargs):
        with self.assertRaises(flexjit.FlexjitError) as caught:
            call(*args, **kwargs)
        self.assertEqual(caught.exception.status, status, caught.exception)
        self.assertIn(words, caught.exception.message)

    def test_files_that_are_no_mask_files(self):
        for path, words in (("/tmp", "directory"), ("/proc/self/mem", "cannot read"),
                            ("/dev/zero", "too large"), ("/nonexistent/x.mask", "cannot open")):
            with self.subTest(path):
                self.assert_fails(Status.NOT_FOUND, words, self.ctx.program_from_file, path)

    def test_unsupported_architectures_stop_before_nvrtc(self):
        for arch, words in (("sm_70", "sm_80 or later"), ("sm_75", "sm_80 or later"),
                            ("banana", "not of the form"), ("sm_90a\x1b[2J", "'sm_90a?[2J'")):
            with self.subTest(arch):
                self.assert_fails(Status.UNSUPPORTED, words, self.ctx.kernel, self.program,
                                  "causal", arch=arch)

    def test_a_define_that_divides_by_zero(self):
        self.assert_fails(Status.NOT_FOUND, "division by zero", self.ctx.kernel, self.program,
                          "chunked", arch="cpu", defines={"chunk": 0})

    def test_diagnostics_show_no_control_bytes(self):
        with self.assertRaises(flexjit.FlexjitError) as caught:
            self.ctx.program("mask m = q >= kv \x1b[2J\x07 @\n", name="hostile.mask")
        self.assertEqual(caught.exception.status, Status.INVALID_SOURCE)
        self.assertIn("hostile.mask:1:", caught.exception.message)
        self.assertNotIn("\x1b", caught.exception.message)
        self.assertNotIn("\x07", caught.exception.message)

    def test_num_blocks_comes_from_the_cache(self):
        kernel = self.ctx.kernel(self.program, "causal", head_dim=64, dtype="fp16", page_size=16,
                                 arch="cpu")
        launch = kernel.prepare(**cpu_batch([1]), max_query_len=4)
        self.assertEqual(launch.args.num_blocks, 2)
        launch.launch()  # a valid call runs

    def test_block_ids_past_the_cache_are_rejected_on_the_cpu(self):
        kernel = self.ctx.kernel(self.program, "causal", head_dim=64, dtype="fp16", page_size=16,
                                 arch="cpu")
        for block in (2, 1000000, 2**31 - 1, -1):
            with self.subTest(block=block):
                launch = kernel.prepare(**cpu_batch([block]), max_query_len=4)
                self.assert_fails(Status.INVALID_ARGUMENT, f"block_table[0][0] ({block})",
                                  launch.launch)

    def test_max_query_len_zero_with_rows_is_rejected(self):
        for arch in ("cpu", "sm_90a"):
            with self.subTest(arch=arch):
                kernel = self.ctx.kernel(self.program, "causal", head_dim=64, dtype="fp16",
                                         page_size=16, arch=arch)
                launch = kernel.prepare(**cpu_batch([1]), max_query_len=0)
                self.assert_fails(Status.INVALID_ARGUMENT, "max_query_len is 0", launch.launch)

    def test_out_pointers_and_handles(self):
        lib = flexjit._capi.library()
        self.assertEqual(lib.fj_program_param_count(self.program.handle, None),
                         Status.INVALID_ARGUMENT)
        self.assertIn("count is null", self.ctx.last_error())
        self.assertEqual(lib.fj_program_array_count(self.program.handle, None),
                         Status.INVALID_ARGUMENT)
        self.assertIn("count is null", self.ctx.last_error())
        kernel = self.ctx.kernel(self.program, "causal", head_dim=64, arch="cpu")
        self.assertEqual(lib.fj_kernel_name(kernel.handle, None), Status.INVALID_ARGUMENT)
        self.assertIn("name is null", self.ctx.last_error())


if __name__ == "__main__":
    unittest.main()
