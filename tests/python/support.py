"""Shared helpers of the Python tests: paths, and stand-ins for device arrays."""

import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "python"))
sys.path.insert(0, str(REPO / "tools" / "bench"))

import flexjit  # noqa: E402
from flexjit._arrays import contiguous_strides  # noqa: E402


def library_available():
    """Whether libflexjit_runtime.so loads (FLEXJIT_LIBRARY, else the build tree's)."""
    try:
        flexjit.runtime_version()
        return True
    except OSError:
        return False

_ITEMSIZE = {"<f2": 2, "<f4": 4, "<i4": 4, "<i8": 8, "|u1": 1}  # |u1: fp8 bytes


class CudaArray:
    """An object exposing __cuda_array_interface__ (no memory behind it)."""

    def __init__(self, shape, typestr="<f2", strides=None, ptr=0x7F0000000000):
        self.shape, self.typestr, self.ptr = tuple(shape), typestr, ptr
        self.strides = tuple(strides) if strides is not None else contiguous_strides(shape)

    @property
    def __cuda_array_interface__(self):
        item = _ITEMSIZE[self.typestr]
        return {"shape": self.shape, "typestr": self.typestr, "data": (self.ptr, False),
                "strides": tuple(s * item for s in self.strides), "version": 3}

    def view(self, index, dim=1):
        """Like tensor.select(dim, index): drops dimension `dim`."""
        item = _ITEMSIZE[self.typestr]
        return CudaArray(self.shape[:dim] + self.shape[dim + 1:], self.typestr,
                         self.strides[:dim] + self.strides[dim + 1:],
                         self.ptr + index * self.strides[dim] * item)


class _Device:
    def __init__(self, index):
        self.index = index


def fake_cuda_tensors(test):
    """Skips a test of FakeTensors on CUDA devices where real torch is imported without a
    usable CUDA device (a CPU-only torch, or no driver): the launch paths then ask torch.cuda
    for the current device, which raises. Without torch, or with a GPU, the test runs."""
    import functools

    @functools.wraps(test)
    def run(self, *args, **kwargs):
        torch = sys.modules.get("torch")
        if torch is not None and not torch.cuda.is_available():
            self.skipTest("torch is imported without a CUDA device: FakeTensors on cuda would "
                          "reach torch.cuda")
        return test(self, *args, **kwargs)
    return run


class FakeTensor:
    """Quacks like a torch.Tensor for flexjit._arrays (type module starts with 'torch')."""

    def __init__(self, shape, dtype="torch.bfloat16", strides=None, ptr=0x7F0000000000,
                 device=0):
        self.shape, self.dtype, self._ptr = tuple(shape), dtype, ptr
        self._strides = tuple(strides) if strides is not None else contiguous_strides(shape)
        self.is_cuda = device is not None
        self.device = _Device(device)

    def data_ptr(self):
        return self._ptr

    def stride(self):
        return self._strides


FakeTensor.__module__ = "torch.fake"
