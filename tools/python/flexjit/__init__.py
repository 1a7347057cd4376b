"""Python binding of the flexjit C API (runtime/include/flexjit/flexjit.h) through ctypes.

    import flexjit
    ctx = flexjit.Context()
    prog = ctx.program_from_file("dsl/lib/standard.mask")
    kern = ctx.kernel(prog, "sliding", head_dim=128, dtype="bf16", page_size=16)
    out = kern(q, k_cache, v_cache, block_table, query_start_loc, seq_lens,
               params={"window": 1024}, max_query_len=4096)

Tensors are PyTorch tensors or objects with `__cuda_array_interface__`; torch is never imported
here, so compiling works on machines without it. docs/python.md describes the module.
"""

import ctypes
import sys

from ._arrays import Array, describe, is_torch_tensor, paged_fields
from ._capi import Dtype, KernelDesc, PagedAttentionArgs, Status, library

__all__ = ["Context", "Program", "Kernel", "Launch", "FlexjitError", "Status", "Dtype",
           "runtime_version", "library_path"]


class FlexjitError(RuntimeError):
    """A call returned a status other than FJ_SUCCESS. `status` is a Status, `message` the
    context's last error (fj_context_last_error), `call` the C function."""

    def __init__(self, status, message, call):
        try:
            self.status = Status(status)
        except ValueError:
            self.status = status
        self.message = message
        self.call = call
        described = library().fj_status_string(status).decode()
        super().__init__(f"{call}: {described}" + (f"\n{message}" if message else ""))


def _check(status, context_handle, call):
    if status != Status.SUCCESS:
        message = library().fj_context_last_error(context_handle) if context_handle else b""
        raise FlexjitError(status, (message or b"").decode(errors="replace"), call)


def runtime_version():
    """fj_runtime_version(): major * 10000 + minor * 100 + patch."""
    return int(library().fj_runtime_version())


def library_path():
    """Path of the loaded libflexjit_runtime.so."""
    return library().flexjit_path


def _dtype_name(dtype):
    text = dtype.name.lower() if isinstance(dtype, Dtype) else str(dtype)
    names = {"bf16": "bf16", "bfloat16": "bf16", "torch.bfloat16": "bf16",
             "fp16": "fp16", "float16": "fp16", "half": "fp16", "torch.float16": "fp16"}
    if text not in names:
        raise ValueError(f"dtype {dtype!r} is not supported (bf16, fp16)")
    return names[text]


class _Handle:
    """Owns one C handle; `close()` (or garbage collection) destroys it once."""

    _destroy = None

    def __init__(self, handle):
        self._handle = handle

    @property
    def handle(self):
        if not self._handle:
            raise ValueError(f"{type(self).__name__} is closed")
        return self._handle

    def close(self):
        if getattr(self, "_handle", None):
            getattr(library(), self._destroy)(self._handle)
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if sys.is_finalizing():
            return
        self.close()


class Context(_Handle):
    """fj_context: a kernel cache and the last-error messages of its calls."""

    _destroy = "fj_context_destroy"

    def __init__(self):
        handle = ctypes.c_void_p()
        status = library().fj_context_create(ctypes.byref(handle))
        _check(status, None, "fj_context_create")
        super().__init__(handle.value)

    def last_error(self):
        return library().fj_context_last_error(self.handle).decode(errors="replace")

    def program(self, source, name=None):
        """Parses and checks mask source text; FlexjitError(INVALID_SOURCE) lists every error."""
        data = source.encode() if isinstance(source, str) else bytes(source)
        handle = ctypes.c_void_p()
        status = library().fj_program_create(self.handle, name.encode() if name else None, data,
                                             len(data), ctypes.byref(handle))
        _check(status, self.handle, "fj_program_create")
        return Program(self, handle.value)

    def program_from_file(self, path):
        handle = ctypes.c_void_p()
        status = library().fj_program_create_from_file(self.handle, str(path).encode(),
                                                       ctypes.byref(handle))
        _check(status, self.handle, "fj_program_create_from_file")
        return Program(self, handle.value)

    def kernel(self, program, mask, *, head_dim=128, dtype="bf16", page_size=16, arch=None):
        """Compiles (or fetches from the cache) the paged attention kernel of `mask`. With `arch`
        ("sm_90a", ...) no GPU is needed; without it, the current CUDA device's is used.
        Errors: FlexjitError NOT_FOUND (unknown mask), UNSUPPORTED (head dim, page size, ...)."""
        dtype = _dtype_name(dtype)
        desc = KernelDesc(struct_size=ctypes.sizeof(KernelDesc), mask=mask.encode(),
                          head_dim=head_dim, dtype=int(Dtype[dtype.upper()]),
                          page_size=page_size, arch=arch.encode() if arch else None)
        handle = ctypes.c_void_p()
        status = library().fj_kernel_create(self.handle, program.handle, ctypes.byref(desc),
                                            ctypes.byref(handle))
        _check(status, self.handle, "fj_kernel_create")
        return Kernel(self, program, handle.value, mask, head_dim, dtype, page_size)


class Program(_Handle):
    """fj_program: a checked mask file. Keeps its context alive."""

    _destroy = "fj_program_destroy"

    def __init__(self, context, handle):
        super().__init__(handle)
        self.context = context
        self._slots = {}

    @property
    def param_count(self):
        count = ctypes.c_int32()
        _check(library().fj_program_param_count(self.handle, ctypes.byref(count)),
               self.context.handle, "fj_program_param_count")
        return count.value

    def param_slot(self, name):
        """Index of runtime parameter `name` in the launch's params array (NOT_FOUND if none)."""
        if name not in self._slots:
            slot = ctypes.c_int32()
            status = library().fj_program_param_slot(self.handle, name.encode(),
                                                     ctypes.byref(slot))
            _check(status, self.context.handle, "fj_program_param_slot")
            self._slots[name] = slot.value
        return self._slots[name]

    def param_values(self, params):
        """The int32 params array for a launch from {name: int}. Parameters not named are 0:
        masks that do not read a parameter need no value for it."""
        values = (ctypes.c_int32 * max(self.param_count, 1))()
        for name, value in (params or {}).items():
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"parameter {name!r}: only int scalars can be passed today, got "
                                f"{type(value).__name__}")
            if not -2**31 <= value < 2**31:
                raise ValueError(f"parameter {name!r}: {value} does not fit in int32")
            values[self.param_slot(name)] = value
        return values


class Kernel(_Handle):
    """fj_kernel: one compiled paged attention kernel (mask, head dim, dtype, page size)."""

    _destroy = "fj_kernel_destroy"

    def __init__(self, context, program, handle, mask, head_dim, dtype, page_size):
        super().__init__(handle)
        self.context = context
        self.program = program
        self.mask = mask
        self.head_dim = head_dim
        self.dtype = dtype
        self.page_size = page_size

    @property
    def name(self):
        text = ctypes.c_char_p()
        _check(library().fj_kernel_name(self.handle, ctypes.byref(text)), self.context.handle,
               "fj_kernel_name")
        return text.value.decode()

    def prepare(self, q, k_cache, v_cache, block_table, query_start_loc, seq_lens, *, out=None,
                lse=None, max_query_len=None, params=None, scale=0.0, kv_layout="NHD"):
        """Checks the arrays once and builds the C argument struct: Launch.launch() then only
        calls fj_paged_attention. `out` defaults to a new tensor like q (torch only).
        `max_query_len` is the host copy of the longest query; computed from a torch
        query_start_loc if omitted (a device synchronisation)."""
        if out is None:
            if not is_torch_tensor(q):
                raise ValueError("out is required when q is not a torch tensor")
            out = q.new_empty(q.shape)
        if max_query_len is None:
            if not is_torch_tensor(query_start_loc):
                raise ValueError("max_query_len is required when query_start_loc is not a torch "
                                 "tensor")
            lengths = query_start_loc[1:] - query_start_loc[:-1]
            max_query_len = int(lengths.max()) if lengths.numel() else 0
        named = dict(q=q, out=out, k_cache=k_cache, v_cache=v_cache, block_table=block_table,
                     query_start_loc=query_start_loc, seq_lens=seq_lens)
        if lse is not None:
            named["lse"] = lse
        arrays = {name: describe(obj, name) for name, obj in named.items()}
        fields = paged_fields(head_dim=self.head_dim, page_size=self.page_size,
                              dtype=self.dtype, kv_layout=kv_layout, **arrays)
        torch = sys.modules.get("torch") if is_torch_tensor(q) else None
        device = arrays["q"].device_index
        if torch is not None and device is not None and torch.cuda.current_device() != device:
            raise ValueError(f"q is on cuda:{device} but the current CUDA device is "
                             f"cuda:{torch.cuda.current_device()} (use torch.cuda.device)")
        values = self.program.param_values(params)
        args = PagedAttentionArgs(struct_size=ctypes.sizeof(PagedAttentionArgs),
                                  max_query_len=int(max_query_len), scale=float(scale),
                                  params=ctypes.cast(values, ctypes.POINTER(ctypes.c_int32)),
                                  num_params=self.program.param_count, **fields)
        return Launch(self, args, values, named, torch.cuda.current_stream(q.device).cuda_stream
                      if torch is not None else None)

    def __call__(self, q, k_cache, v_cache, block_table, query_start_loc, seq_lens, *,
                 stream=None, **options):
        """Checks, launches on `stream` (default: torch's current stream for torch tensors, else
        the legacy default stream) and returns `out`."""
        launch = self.prepare(q, k_cache, v_cache, block_table, query_start_loc, seq_lens,
                              **options)
        launch.launch(stream)
        return launch.out


def _stream_handle(stream):
    if stream is None or isinstance(stream, int):
        return stream or None
    if hasattr(stream, "cuda_stream"):
        return stream.cuda_stream or None
    if hasattr(stream, "__cuda_stream__"):
        return stream.__cuda_stream__()[1] or None
    raise TypeError(f"stream: expected an int handle, a torch.cuda.Stream or an object with "
                    f"__cuda_stream__, got {type(stream).__name__}")


class Launch:
    """A prepared call: the C argument struct plus references keeping its arrays alive."""

    def __init__(self, kernel, args, param_values, arrays, default_stream):
        self.kernel = kernel
        self.args = args
        self.arrays = arrays
        self._param_values = param_values
        self._default_stream = default_stream
        self._launch = library().fj_paged_attention
        self._args_ref = ctypes.byref(args)

    @property
    def out(self):
        return self.arrays["out"]

    def launch(self, stream=None):
        """Enqueues the kernel; no synchronisation. `stream` defaults to torch's current stream
        when the arrays were torch tensors (as it was at prepare time)."""
        handle = _stream_handle(stream) if stream is not None else self._default_stream
        status = self._launch(self.kernel.handle, self._args_ref, handle)
        if status != Status.SUCCESS:
            _check(status, self.kernel.context.handle, "fj_paged_attention")
