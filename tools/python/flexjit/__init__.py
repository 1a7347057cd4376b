"""Python binding of the flexjit C API (runtime/include/flexjit/flexjit.h) through ctypes.

    import flexjit
    ctx = flexjit.Context()
    prog = ctx.program_from_file("dsl/lib/standard.mask")
    kern = ctx.kernel(prog, "sliding", head_dim=128, dtype="bf16", page_size=16)
    out = kern(q, k_cache, v_cache, block_table, query_start_loc, seq_lens,
               params={"window": 1024}, max_query_len=4096)
    doc = ctx.kernel(prog, "document", page_size=16)        # reads the array param doc[b, kv]
    out = doc(q, k_cache, v_cache, block_table, query_start_loc, seq_lens,
              arrays={"doc": doc_ids}, max_query_len=4096)   # doc_ids: int32 [num_reqs, S]

Tensors are PyTorch tensors or objects with `__cuda_array_interface__`; torch is never imported
here, so compiling works on machines without it. docs/python.md describes the module.
"""

import ctypes
import math
import numbers
import struct
import sys
from typing import NamedTuple, Optional, Tuple

from . import _capi
from ._arrays import Array, array_param_fields, cache_write_fields, describe, is_torch_tensor, \
    merge_states_fields, merge_states_n_fields, paged_fields, varlen_fields
from ._capi import (ArrayArg, Define, Device, Dtype, KernelDesc, KvCacheWriteArgs,
                    MergeStatesArgs, MergeStatesNArgs, PagedAttentionArgs, ParamType, PlanShape,
                    Status, VarlenAttentionArgs, library)
from .context_parallel import KvShard, shard_positions, shard_seq_lens

__all__ = ["Context", "Program", "Kernel", "Launch", "Plan", "FlexjitError", "Status", "Dtype",
           "ParamType", "ParamInfo", "runtime_version", "library_path", "define_text",
           # Context parallelism (context_parallel.py; Context.merge_states_n merges the shards).
           "KvShard", "shard_seq_lens", "shard_positions",
           # FlexAttention-style functions, traced (trace.py) and run (flex.py).
           "flex_attention", "flex_attention_paged", "compile_flex", "FlexKernel", "flex_plan",
           "FlexPlan", "trace",
           "to_source", "TraceError", "runtime", "and_masks", "or_masks", "where", "minimum",
           "maximum", "clamp", "tanh", "exp", "exp2", "log", "log2", "sqrt", "sigmoid", "floor",
           "ceil"]


from .flex import (FlexKernel, FlexPlan, compile_flex, flex_attention,  # noqa: E402
                   flex_attention_paged, flex_plan)
from .trace import (TraceError, and_masks, ceil, clamp, exp, exp2, floor, log, log2,  # noqa: E402
                    maximum, minimum, or_masks, runtime, sigmoid, sqrt, tanh, to_source, where)


def __getattr__(name):
    # flexjit.torch_ops imports torch and registers torch.ops.flexjit.* on first use only, so
    # that the module imports and compiles masks without torch.
    if name == "torch_ops":
        from . import _torch_ops
        globals()["torch_ops"] = _torch_ops
        return _torch_ops
    raise AttributeError(f"module 'flexjit' has no attribute {name!r}")


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


# Spellings of the fp8 cache dtype (OCP e4m3, the "fn" variant: vLLM's kv_cache_dtype "fp8").
_FP8_NAMES = ("fp8", "fp8_e4m3", "e4m3", "float8_e4m3fn", "torch.float8_e4m3fn")


def _kv_dtype_name(kv_dtype, dtype):
    """The K/V cache dtype of a kernel whose q and out are `dtype` ("bf16" or "fp16"): "fp8"
    for an fp8 cache (_FP8_NAMES, Dtype.FP8_E4M3), else `dtype` (None, or dtype's own name)."""
    if kv_dtype is None:
        return dtype
    text = kv_dtype.name.lower() if isinstance(kv_dtype, Dtype) else str(kv_dtype)
    if text in _FP8_NAMES:
        return "fp8"
    try:
        same = _dtype_name(kv_dtype) == dtype
    except ValueError:
        same = False
    if not same:
        raise ValueError(f"kv_dtype {kv_dtype!r} is not supported: 'fp8' (e4m3), or the "
                         f"kernel's dtype {dtype!r}")
    return dtype


def define_text(name, value):
    """The literal text of compile-time const override `name` = `value` (fj_define.value):
    True -> "true", 30 -> "30", 0.5 -> "0.5"; a str is passed as it is."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"define {name!r}: {value} is not a finite number")
        return repr(value)
    if isinstance(value, str):
        return value
    raise TypeError(f"define {name!r}: expected a str, int, float or bool, got "
                    f"{type(value).__name__}")


def _float_bits(name, value):
    """The int32 slot value of a float32 parameter: the float's bits."""
    try:
        return struct.unpack("<i", struct.pack("<f", float(value)))[0]
    except OverflowError:
        raise ValueError(f"parameter {name!r}: {value} does not fit in float32") from None


class ParamInfo(NamedTuple):
    """fj_param_info of one runtime parameter: `type` a ParamType, `slot` its index among the
    scalars (params) or the arrays (arrays=), `rank` 0 for scalars, `dims` the declared
    dimension names of an array ("b", "h", "q", "kv" or a free name)."""

    name: str
    type: ParamType
    slot: int
    rank: int
    dims: Tuple[str, ...]

    @property
    def is_array(self):
        return self.rank > 0

    def __str__(self):
        base = {ParamType.INT: "int", ParamType.BOOL: "bool", ParamType.FLOAT: "float",
                ParamType.INT_ARRAY: "int", ParamType.FLOAT_ARRAY: "float"}.get(self.type, "?")
        return f"{self.name}: {base}" + (f"[{', '.join(self.dims)}]" if self.dims else "")


class _Handle:
    """Owns one C handle; `close()` (or garbage collection) destroys it once."""

    _destroy = None

    def __init__(self, handle):
        self._handle = handle
        # The handle as the launch paths pass it (_capi.unchecked: no conversion per call).
        # close() makes it null, so a launch after close() fails in the library's null check and
        # its failure path raises handle's ValueError.
        self._handle_arg = ctypes.c_void_p(handle)

    @property
    def handle(self):
        if not self._handle:
            raise ValueError(f"{type(self).__name__} is closed")
        return self._handle

    def close(self):
        if getattr(self, "_handle", None):
            getattr(library(), self._destroy)(self._handle)
            self._handle = None
            self._handle_arg.value = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # sys.is_finalizing bound now: at interpreter exit the module's globals (sys) may be gone
    # before the last handles are collected.
    def __del__(self, _is_finalizing=sys.is_finalizing):
        if _is_finalizing():
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

    def kernel(self, program, mask, *, score=None, defines=None, head_dim=128, dtype="bf16",
               page_size=16, arch=None, kv_dtype=None):
        """Compiles (or fetches from the cache) the attention kernel of `mask`: a mask or a
        variant of `program`, with `score` (a score's name, only with a mask: a variant names
        its own) and `defines` ({const name: value} overrides of compile-time consts, values
        str/int/float/bool, see define_text). page_size 0 gives the contiguous-K/V (encoder)
        kernel of Kernel.varlen. With `arch` ("sm_90a", ...) no GPU is needed; without it, the
        current CUDA device's is used; "cpu" is the CPU backend (launches over host memory).
        `kv_dtype` (since 0.8): "fp8" for a paged fp8 (e4m3) K/V cache read with k_scale and
        v_scale at launch; None (or `dtype`): the cache is `dtype`. Errors: FlexjitError
        NOT_FOUND (unknown mask, variant, score or const), INVALID_ARGUMENT (bad define, an fp8
        cache without pages), UNSUPPORTED (head dim, page size, ...)."""
        dtype = _dtype_name(dtype)
        kv_dtype = _kv_dtype_name(kv_dtype, dtype)
        defines = dict(defines or {})
        texts = [(str(name), define_text(name, value)) for name, value in defines.items()]
        define_array = (Define * max(len(texts), 1))(
            *[Define(name.encode(), text.encode()) for name, text in texts])
        desc = KernelDesc(struct_size=ctypes.sizeof(KernelDesc), mask=mask.encode(),
                          head_dim=head_dim, dtype=int(Dtype[dtype.upper()]),
                          page_size=page_size, arch=arch.encode() if arch else None,
                          score=score.encode() if score else None,
                          defines=ctypes.cast(define_array, ctypes.POINTER(Define)),
                          num_defines=len(texts),
                          kv_dtype=int(Dtype.FP8_E4M3) if kv_dtype == "fp8" else 0)
        handle = ctypes.c_void_p()
        status = library().fj_kernel_create(self.handle, program.handle, ctypes.byref(desc),
                                            ctypes.byref(handle))
        _check(status, self.handle, "fj_kernel_create")
        return Kernel(self, program, handle.value, mask, head_dim, dtype, page_size, score=score,
                      defines=dict(texts), kv_dtype=kv_dtype, arch=arch)

    def kv_cache_write(self, key, value, k_cache, v_cache, slot_mapping, *, k_scale=None,
                       v_scale=None, kv_layout="NHD", device=None, stream=None):
        """fj_kv_cache_write: row t of key and value ([num_tokens, num_kv_heads, head_dim],
        bf16 or fp16, any strides with head_dim contiguous) goes to slot slot_mapping[t] (int64
        [num_tokens]: block * page_size + offset; a negative slot, or one past the cache, is
        skipped) of k_cache and v_cache (as Kernel.prepare takes them, `kv_layout`). A cache of
        key's dtype gets a copy; an fp8 cache (torch.float8_e4m3fn, or uint8) gets e4m3(x /
        scale), rounded to nearest even and saturated to +-448, with k_scale and v_scale as
        Kernel.prepare takes them. `device`: "cpu" (host memory, done when the call returns) or
        "cuda" (enqueued on `stream`, default torch's current one); default "cpu" for torch
        CPU tensors, else "cuda". Errors: ValueError (arrays, scales), FlexjitError."""
        host = _on_host(device, key)
        named = dict(key=key, value=value, k_cache=k_cache, v_cache=v_cache,
                     slot_mapping=slot_mapping)
        described = {name: describe(obj, name) for name, obj in named.items()}
        for name, given in (("k_scale", k_scale), ("v_scale", v_scale)):
            if given is not None:
                named[name], described[name] = _scale_array(name, given, host,
                                                            described["key"].device_index)
        fields = cache_write_fields(kv_layout=kv_layout, host=host, **described)
        args = KvCacheWriteArgs(struct_size=ctypes.sizeof(KvCacheWriteArgs),
                                device=int(Device.CPU if host else Device.CUDA), **fields)
        stream = _call_stream(stream, host, key, described["key"])
        _check(library().fj_kv_cache_write(self.handle, ctypes.byref(args), stream), self.handle,
               "fj_kv_cache_write")

    def merge_states(self, out_a, lse_a, out_b, lse_b, *, out=None, lse=None, sinks=None,
                     device=None, stream=None):
        """fj_merge_states: merges two partial attentions over disjoint key sets by their LSE
        (per row, out = the e^lse-weighted mean of out_a and out_b, lse = log(e^lse_a +
        e^lse_b)). out_a, out_b, out: [num_tokens, num_heads, head_dim] bf16 or fp16 (any
        strides with head_dim contiguous; out may be out_a or out_b; default: a new tensor like
        out_a, torch only); lse_a, lse_b, lse (optional, not one of them): float32 [num_tokens,
        num_heads]; sinks: float32 [num_heads] sink logits, counted once here (the partials
        leave them out). `device` and `stream` as kv_cache_write's. Returns out. Errors:
        ValueError (arrays), FlexjitError."""
        out = _default_out(out_a, out)
        host = _on_host(device, out_a)
        named = dict(out_a=out_a, lse_a=lse_a, out_b=out_b, lse_b=lse_b, out=out, lse=lse,
                     sinks=sinks)
        described = {name: describe(obj, name) for name, obj in named.items() if obj is not None}
        args = MergeStatesArgs(struct_size=ctypes.sizeof(MergeStatesArgs),
                               device=int(Device.CPU if host else Device.CUDA),
                               **merge_states_fields(host=host, **described))
        stream = _call_stream(stream, host, out_a, described["out_a"])
        _check(library().fj_merge_states(self.handle, ctypes.byref(args), stream), self.handle,
               "fj_merge_states")
        return out

    def merge_states_n(self, states_out, states_lse, *, out=None, lse=None, sinks=None,
                       device=None, stream=None):
        """fj_merge_states_n (since 0.9): merges num_states partial attentions over disjoint
        key sets, such as context parallelism's shards after an all-gather, in one call: per
        row, with m the largest lse_s, out = sum_s e^(lse_s - m) out_s / sum_s e^(lse_s - m)
        and lse = m + log(sum_s e^(lse_s - m)), summed in state order (the result does not
        depend on timing or threads). A state of lse -inf adds nothing; a row empty in every
        state gives out 0 and lse -inf (with sinks: the sink).

        states_out: [num_states, num_tokens, num_heads, head_dim] bf16 or fp16 (any strides
        with head_dim contiguous); states_lse: float32 [num_states, num_tokens, num_heads]
        (heads contiguous). out: [num_tokens, num_heads, head_dim] of states_out's dtype (may
        be one state's rows; default: a new tensor, torch only); lse (optional, outside
        states_lse): float32 [num_tokens, num_heads]; sinks: float32 [num_heads], counted once
        here (the shards leave them out). `device` and `stream` as kv_cache_write's ("cuda"
        since 0.10: one launch, head dims up to 256). Returns out. Errors: ValueError
        (arrays), FlexjitError."""
        if out is None:
            if not is_torch_tensor(states_out):
                raise ValueError("out is required when states_out is not a torch tensor")
            out = states_out.new_empty(states_out.shape[1:])
        host = _on_host(device, states_out)
        named = dict(states_out=states_out, states_lse=states_lse, out=out, lse=lse, sinks=sinks)
        described = {name: describe(obj, name) for name, obj in named.items() if obj is not None}
        args = MergeStatesNArgs(struct_size=ctypes.sizeof(MergeStatesNArgs),
                                device=int(Device.CPU if host else Device.CUDA),
                                **merge_states_n_fields(host=host, **described))
        stream = _call_stream(stream, host, states_out, described["states_out"])
        _check(library().fj_merge_states_n(self.handle, ctypes.byref(args), stream),
               self.handle, "fj_merge_states_n")
        return out


def _on_host(device, first):
    """Whether a context-level call runs on the host: `device` "cpu" or "cuda", by default
    "cpu" for a torch CPU tensor `first`, else "cuda"."""
    if device is None:
        return is_torch_tensor(first) and not first.is_cuda
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    return device == "cpu"


def _call_stream(stream, host, first, described):
    """The stream of a context-level call: `stream` as given, else torch's current one on the
    device of a CUDA torch tensor `first`, else None (the legacy default; ignored on the
    host)."""
    if stream is not None:
        return _stream_handle(stream)
    if not host and is_torch_tensor(first):
        return _torch_stream(sys.modules["torch"], described.device_index)
    return None


class Program(_Handle):
    """fj_program: a checked mask file. Keeps its context alive."""

    _destroy = "fj_program_destroy"

    def __init__(self, context, handle):
        super().__init__(handle)
        self.context = context
        self._slots = {}
        self._infos = {}
        # A program's parameters never change: what every launch needs is read once.
        self._param_count = self._count("fj_program_param_count")
        self._array_count = self._count("fj_program_array_count")
        self._params_type = ctypes.c_int32 * max(self._param_count, 1)
        self._arrays_type = ArrayArg * max(self._array_count, 1)

    def _count(self, call):
        count = ctypes.c_int32()
        _check(getattr(library(), call)(self.handle, ctypes.byref(count)), self.context.handle,
               call)
        return count.value

    @property
    def param_count(self):
        """Number of scalar runtime parameters (the length of a launch's params)."""
        self.handle  # raises ValueError once closed
        return self._param_count

    @property
    def array_count(self):
        """Number of array runtime parameters (the length of a launch's arrays)."""
        self.handle  # raises ValueError once closed
        return self._array_count

    def param_slot(self, name):
        """Index of scalar runtime parameter `name` in the launch's params array (NOT_FOUND if
        none, or if `name` is an array parameter)."""
        if name not in self._slots:
            slot = ctypes.c_int32()
            status = library().fj_program_param_slot(self.handle, name.encode(),
                                                     ctypes.byref(slot))
            _check(status, self.context.handle, "fj_program_param_slot")
            self._slots[name] = slot.value
        return self._slots[name]

    def param_info(self, name):
        """ParamInfo of runtime parameter `name`, scalar or array (fj_program_param_info).
        Errors: FlexjitError NOT_FOUND."""
        if name not in self._infos:
            info = _capi.ParamInfo(struct_size=ctypes.sizeof(_capi.ParamInfo))
            status = library().fj_program_param_info(self.handle, str(name).encode(),
                                                     ctypes.byref(info))
            _check(status, self.context.handle, "fj_program_param_info")
            try:
                kind = ParamType(info.type)
            except ValueError:
                kind = info.type
            dims = tuple(info.dims[i].decode() for i in range(max(0, min(info.rank, 2))))
            self._infos[name] = ParamInfo(name, kind, info.slot, info.rank, dims)
        return self._infos[name]

    def param_values(self, params):
        """The int32 params array for a launch from {name: value}: an int parameter takes an
        int, a float parameter a number (its float32 bits are passed), a bool parameter a bool
        (or 0/1). Parameters not named are 0 (0.0, false): masks that do not read a parameter
        need no value for it. Errors: FlexjitError NOT_FOUND (unknown name), TypeError (an
        array parameter, which goes in arrays=, or a value of the wrong type), ValueError (out
        of range)."""
        values = self._params_type()
        for name, value in (params or {}).items():
            info = self.param_info(name)
            if info.is_array:
                raise TypeError(f"parameter {name!r} is an array ({info}): pass it in arrays=, "
                                f"not params=")
            values[info.slot] = _scalar_value(info, value)
        return values

    def array_values(self, arrays, *, num_reqs, num_heads, host=False):
        """The fj_array descriptors of a launch from {name: device array}, by array slot, and
        the Arrays seen. Each array is a torch tensor or an object with
        __cuda_array_interface__: int32 for int[...] parameters, float32 for float[...], of the
        declared rank (array_param_fields has the checks; `host`: host memory, for a CPU
        kernel). Arrays not named are passed empty ({null, 0, 0, 0}; the kernel reads 0 from
        them). Errors: FlexjitError NOT_FOUND (unknown name), TypeError (a scalar parameter),
        ValueError (dtype, rank, shape)."""
        descriptors = self._arrays_type()
        seen = {}
        for name, obj in (arrays or {}).items():
            info = self.param_info(name)
            if not info.is_array:
                raise TypeError(f"parameter {name!r} is a scalar ({info}): pass it in params=, "
                                f"not arrays=")
            array = describe(obj, name)
            dtype = "fp32" if info.type == ParamType.FLOAT_ARRAY else "int32"
            data, rows, cols, row_stride = array_param_fields(
                array, dtype=dtype, dims=info.dims, num_reqs=num_reqs, num_heads=num_heads,
                host=host)
            descriptors[info.slot] = ArrayArg(data or None, rows, cols, row_stride)
            seen[name] = array
        return descriptors, seen


def _scalar_value(info, value):
    """The int32 slot value of scalar parameter `info` from a Python value."""
    name = info.name
    if info.type == ParamType.FLOAT:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"parameter {name!r} ({info}): expected a number, got "
                            f"{type(value).__name__}")
        return _float_bits(name, value)
    if info.type == ParamType.BOOL:
        if isinstance(value, bool) or (isinstance(value, numbers.Integral) and
                                       int(value) in (0, 1)):
            return int(bool(value))
        raise TypeError(f"parameter {name!r} ({info}): expected a bool, got {value!r}")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"parameter {name!r} ({info}): expected an int, got "
                        f"{type(value).__name__}")
    value = int(value)
    if not -2**31 <= value < 2**31:
        raise ValueError(f"parameter {name!r}: {value} does not fit in int32")
    return value


class Kernel(_Handle):
    """fj_kernel: one compiled attention kernel (mask or variant, score, defines, head dim,
    dtype, page size; page size 0: the contiguous-K/V kernel of varlen(); the K/V cache's dtype
    `kv_dtype`, "fp8" or `dtype`; `arch`, "cpu" for the CPU backend, None for the device's)."""

    _destroy = "fj_kernel_destroy"

    def __init__(self, context, program, handle, mask, head_dim, dtype, page_size, score=None,
                 defines=None, kv_dtype=None, arch=None):
        super().__init__(handle)
        self.context = context
        self.program = program
        self.mask = mask
        self.score = score
        self.defines = dict(defines or {})
        self.head_dim = head_dim
        self.dtype = dtype
        self.page_size = page_size
        self.kv_dtype = kv_dtype or dtype
        self.arch = arch
        self.host = arch == "cpu"  # launches run on the host, over host memory
        self._templates = _Templates()  # _checked_args: checked geometry -> _Template
        self._paged_call = _capi.unchecked("fj_paged_attention")

    @property
    def name(self):
        text = ctypes.c_char_p()
        _check(library().fj_kernel_name(self.handle, ctypes.byref(text)), self.context.handle,
               "fj_kernel_name")
        return text.value.decode()

    def prepare(self, q, k_cache, v_cache, block_table, query_start_loc, seq_lens, *, out=None,
                lse=None, sinks=None, max_query_len=None, params=None, arrays=None, scale=0.0,
                kv_layout="NHD", k_scale=None, v_scale=None, kv_shard=None):
        """Checks the arrays once and builds the C argument struct: Launch.launch() then only
        calls fj_paged_attention. `out` defaults to a new tensor like q (torch only).
        `max_query_len` is the host copy of the longest query; computed from a torch
        query_start_loc if omitted (a device synchronisation). `params`: {name: value} of scalar
        runtime parameters (Program.param_values); `arrays`: {name: device array} of array
        parameters (Program.array_values), e.g. {"prefix_len": int32 [num_reqs]}. `sinks`:
        attention sinks (since 0.7), float32 [num_heads] on q's device: head h's logit joins
        the softmax denominator of each of its rows (fj_paged_attention_args.sinks).
        `k_scale`, `v_scale` (since 0.8, a kernel of kv_dtype "fp8" only, and then required):
        the fp8 cache's dequantization scales, each a number or a float32 array of 1 element
        or one per kv head, where the caches are; K element = e4m3 value * k_scale[kv head].
        `kv_shard` (since 0.9; CUDA kernels since 0.10): a KvShard, when the call holds one
        shard of each request's keys (context parallelism: seq_lens, the block table and the
        caches are the shard's); pass lse= and merge the shards with Context.merge_states_n.
        None: the call holds every key."""
        if self.page_size == 0:
            raise ValueError(f"kernel {self.mask!r} was created with page_size 0 (contiguous "
                             f"K/V): use varlen()")
        out = _default_out(q, out)
        if max_query_len is None:
            max_query_len = _max_length(query_start_loc, "max_query_len", "query_start_loc")
        named = dict(q=q, out=out, k_cache=k_cache, v_cache=v_cache, block_table=block_table,
                     query_start_loc=query_start_loc, seq_lens=seq_lens)
        named.update((name, a) for name, a in (("lse", lse), ("sinks", sinks)) if a is not None)
        described = {name: describe(obj, name) for name, obj in named.items()}
        for name, given in (("k_scale", k_scale), ("v_scale", v_scale)):
            if given is not None:
                named[name], described[name] = _scale_array(name, given, self.host,
                                                            described["q"].device_index)
        if kv_shard is not None:
            for name, obj in _shard_arrays(kv_shard).items():
                named[name], described[name] = obj, _describe_shard_array(obj, name)
            described.update(kv_shard_rank=kv_shard.rank, kv_shard_count=kv_shard.count,
                             kv_shard_interleave=kv_shard.interleave)
        fields = paged_fields(head_dim=self.head_dim, page_size=self.page_size,
                              dtype=self.dtype, kv_dtype=self.kv_dtype, host=self.host,
                              kv_layout=kv_layout, **described)
        common = self._common(q, described, params, arrays, num_reqs=fields["num_reqs"],
                              num_heads=fields["num_heads"])
        args = PagedAttentionArgs(struct_size=ctypes.sizeof(PagedAttentionArgs),
                                  max_query_len=int(max_query_len), scale=float(scale),
                                  **common.fields, **fields)
        named.update(common.keep)
        return Launch(self, args, common.values, named, common.stream)

    def __call__(self, q, k_cache, v_cache, block_table, query_start_loc, seq_lens, *,
                 out=None, lse=None, sinks=None, max_query_len=None, params=None, arrays=None,
                 scale=0.0, kv_layout="NHD", stream=None, k_scale=None, v_scale=None,
                 kv_shard=None):
        """Checks (as prepare()), launches on `stream` (default: torch's current stream for
        torch tensors, else the legacy default stream) and returns `out`."""
        if self.page_size != 0:
            if out is None:
                out = _default_out(q, out)
            if max_query_len is None:
                max_query_len = _max_length(query_start_loc, "max_query_len", "query_start_loc")
        data, default_stream, key = self._checked_args(
            q, k_cache, v_cache, block_table, query_start_loc, seq_lens, out, lse, sinks,
            max_query_len, scale, kv_layout, _params_key(params) if params else (), k_scale,
            v_scale, kv_shard, arrays)
        if data is None:
            args, default_stream = self._template(
                key, q, k_cache, v_cache, block_table, query_start_loc, seq_lens, out, lse,
                sinks, max_query_len, params, arrays, scale, kv_layout, k_scale, v_scale,
                kv_shard)
            data = ctypes.byref(args)
        if stream is not None:
            default_stream = _stream_handle(stream)
        status = self._paged_call(self._handle_arg, data,
                                  _stream_arg(default_stream) if default_stream else None)
        if status:
            self._failed(status, "fj_paged_attention")
        return out

    def paged_args(self, q, k_cache, v_cache, block_table, query_start_loc, seq_lens, *, out,
                   lse=None, sinks=None, max_query_len, params=None, arrays=None, scale=0.0,
                   kv_layout="NHD", k_scale=None, v_scale=None, kv_shard=None):
        """(fj_paged_attention_args, default stream handle) of one call, with prepare()'s
        checks and struct, for callers that launch at once (__call__, torch.ops.flexjit).
        prepare() runs on the first call of each geometry: the sizes, strides, dtypes and
        devices of the torch tensors (array parameters' too, by name), the current device, and
        max_query_len, scale, kv_layout, params and scales given as numbers (by value), and a
        kv_shard's rank, count and interleave (its arrays like the other tensors). Its
        struct is kept, and a later call of the same geometry copies it and writes its own
        pointers: everything prepare() checks is part of the geometry, so the checks hold, and
        only the copy and the pointers cost."""
        data, stream, key = self._checked_args(
            q, k_cache, v_cache, block_table, query_start_loc, seq_lens, out, lse, sinks,
            max_query_len, scale, kv_layout, _params_key(params) if params else (), k_scale,
            v_scale, kv_shard, arrays)
        if data is not None:
            return _struct_of(data), stream
        return self._template(key, q, k_cache, v_cache, block_table, query_start_loc, seq_lens,
                              out, lse, sinks, max_query_len, params, arrays, scale, kv_layout,
                              k_scale, v_scale, kv_shard)

    def _checked_args(self, q, k_cache, v_cache, block_table, query_start_loc, seq_lens, out,
                      lse, sinks, max_query_len, scale, kv_layout, params_key, k_scale=None,
                      v_scale=None, kv_shard=None, arrays=None):
        """(fj_paged_attention_args, default stream, None) of a call whose geometry an earlier
        call checked (_template), with this call's pointers; else (None, None, key): the key to
        keep the call's template under, None where there is none (arguments that are not torch
        tensors, unhashable values). The struct is bytes, or with array parameters a byref()
        of a struct of its own that keeps this call's descriptors (_struct_of reads either).
        `params_key` stands for the scalar parameters (_params_key), `arrays` is {name: tensor}.
        Written out flat: this runs on every call."""
        calls = _torch_calls.get(type(q)) or _torch_calls_of(q)
        templates = self._templates
        try:
            device = calls.current_device() if calls is not None and q.is_cuda else None
            # The fast path: the last template's guards (_tensor_guards) check the tensors'
            # geometry in one C call, and the rest of the key is compared as it stands.
            fast_scalars, guards, template = templates.fast
            names = tuple(arrays) if arrays else None
            if (guards is not None and k_scale is None and v_scale is None and kv_shard is None
                    and fast_scalars == (device, max_query_len, scale, kv_layout, params_key,
                                         lse is None, sinks is None, names)
                    and (guards.check(q, out, k_cache, v_cache, block_table, query_start_loc,
                                      seq_lens) if lse is None and sinks is None and not arrays
                         else guards.check(q, out, k_cache, v_cache, block_table,
                                           query_start_loc, seq_lens,
                                           *[t for t in (lse, sinks) if t is not None],
                                           *(arrays.values() if arrays else ())))):
                key = None
            else:
                key = (device, max_query_len, scale, kv_layout, params_key,
                       q.shape, q.stride(), q.dtype, q.device,
                       out.shape, out.stride(), out.dtype, out.device,
                       k_cache.shape, k_cache.stride(), k_cache.dtype, k_cache.device,
                       v_cache.shape, v_cache.stride(), v_cache.dtype, v_cache.device,
                       block_table.shape, block_table.stride(), block_table.dtype,
                       block_table.device,
                       query_start_loc.shape, query_start_loc.stride(), query_start_loc.dtype,
                       query_start_loc.device,
                       seq_lens.shape, seq_lens.stride(), seq_lens.dtype, seq_lens.device,
                       None if lse is None else (lse.shape, lse.stride(), lse.dtype,
                                                 lse.device),
                       None if sinks is None else (sinks.shape, sinks.stride(), sinks.dtype,
                                                   sinks.device),
                       None if k_scale is None and v_scale is None else
                       (_scale_key(k_scale), _scale_key(v_scale)),
                       None if kv_shard is None else _shard_key(kv_shard),
                       None if not arrays else
                       tuple((name, t.shape, t.stride(), t.dtype, t.device)
                             for name, t in arrays.items()))
                last_key, template = templates.last
                if key != last_key:
                    template = templates.get(key)
                    if template is None:
                        return None, None, key
                    templates.last = key, template
                if k_scale is None and v_scale is None and kv_shard is None:
                    templates.fast = ((device, max_query_len, scale, kv_layout, params_key,
                                       lse is None, sinks is None, names),
                                      templates.guards_of(key, q, out, k_cache, v_cache,
                                                          block_table, query_start_loc, seq_lens,
                                                          lse, sinks,
                                                          *(arrays.values() if arrays else ())),
                                      template)
        except (AttributeError, TypeError):  # not torch tensors; unhashable values
            return None, None, None
        data = _PAGED_POINTERS.pack(
            template.head, q.data_ptr(), out.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(),
            query_start_loc.data_ptr(), seq_lens.data_ptr(), block_table.data_ptr(),
            0 if lse is None else lse.data_ptr(), template.middle,
            0 if sinks is None else sinks.data_ptr(),
            0 if k_scale is None else template.k_scale or k_scale.data_ptr(),
            0 if v_scale is None else template.v_scale or v_scale.data_ptr(),
            template.after_scales,
            0 if kv_shard is None or kv_shard.offsets is None else kv_shard.offsets.data_ptr(),
            0 if kv_shard is None or kv_shard.global_seq_lens is None else
            kv_shard.global_seq_lens.data_ptr(), template.tail)
        if template.array_slots:
            # The kept descriptors (by slot) with this call's data pointers, in memory of this
            # call's struct: a launch in flight on another thread keeps its own.
            descriptors = type(template.descriptors).from_buffer_copy(template.descriptors)
            for (slot, read), array in zip(template.array_slots, arrays.values()):
                if read:
                    pointer = array.data_ptr()
                    if pointer & 3:  # prepare() says why
                        return None, None, None
                    descriptors[slot].data = pointer
            args = PagedAttentionArgs.from_buffer_copy(data)
            args.arrays = descriptors
            data = ctypes.byref(args)
        return data, None if calls is None or template.device is None else \
            calls.current_stream(template.device), None

    def _template(self, key, q, k_cache, v_cache, block_table, query_start_loc, seq_lens, out,
                  lse, sinks, max_query_len, params, arrays, scale, kv_layout, k_scale=None,
                  v_scale=None, kv_shard=None):
        """prepare()'s (struct, default stream) of a call, its template kept under `key`
        (unless None) for _checked_args."""
        launch = self.prepare(q, k_cache, v_cache, block_table, query_start_loc, seq_lens,
                              out=out, lse=lse, sinks=sinks, max_query_len=max_query_len,
                              params=params, arrays=arrays, scale=scale, kv_layout=kv_layout,
                              k_scale=k_scale, v_scale=v_scale, kv_shard=kv_shard)
        if key is not None:
            raw = bytes(launch.args)
            # A scale given as a number points into memory of its own (_scale_array): its
            # pointer is part of the template, and the template keeps that memory, as it keeps
            # the params array the struct points into.
            fixed = [launch.arrays[name] if isinstance(given, numbers.Real) else None
                     for name, given in (("k_scale", k_scale), ("v_scale", v_scale))]
            # Array parameters: each one's slot, in the call's order, and whether the launch
            # reads its memory (an empty one goes as null), with prepare()'s descriptors.
            descriptors = launch._param_values[1]
            slots = tuple((slot, bool(descriptors[slot].data))
                          for slot in (self.program.param_info(name).slot
                                       for name in (arrays or {})))
            self._templates.keep(key, _Template(
                raw[:_PAGED_POINTERS_START], raw[_PAGED_POINTERS_END:_PAGED_SINKS],
                raw[_PAGED_SCALES_END:_PAGED_SHARDS], raw[_PAGED_SHARDS_END:],
                (launch._param_values, fixed),
                None if self.host else getattr(q.device, "index", None),
                launch.args.k_scale if fixed[0] is not None else 0,
                launch.args.v_scale if fixed[1] is not None else 0,
                slots, descriptors if slots else None))
        return launch.args, launch._default_stream

    def _failed(self, status, call):
        """Raises for a launch's failed `status`: ValueError if the kernel was closed (its
        handle went in as null), else FlexjitError."""
        self.handle  # noqa: B018 (raises ValueError once closed)
        _check(status, self.context.handle, call)

    def enqueue(self, args, stream):
        """fj_paged_attention of a struct from paged_args on `stream` (a handle or None)."""
        status = self._paged_call(self._handle_arg, ctypes.byref(args),
                                  _stream_arg(stream) if stream else None)
        if status:
            self._failed(status, "fj_paged_attention")

    def prepare_varlen(self, q, k, v, cu_seqlens, *, out=None, lse=None, sinks=None,
                       max_seq_len=None, params=None, arrays=None, scale=0.0):
        """As prepare(), for a page_size 0 kernel over contiguous, packed K/V without a cache
        (fj_varlen_attention, the encoder case): q, k, v, out [num_tokens, heads, head_dim]
        (k and v with num_kv_heads heads), cu_seqlens int32 [num_seqs + 1]; `max_seq_len` is
        the host copy of the longest sequence (computed from a torch cu_seqlens if omitted)."""
        if self.page_size != 0:
            raise ValueError(f"kernel {self.mask!r} is paged (page_size {self.page_size}): "
                             f"varlen needs one created with page_size=0")
        out = _default_out(q, out)
        if max_seq_len is None:
            max_seq_len = _max_length(cu_seqlens, "max_seq_len", "cu_seqlens")
        named = dict(q=q, k=k, v=v, out=out, cu_seqlens=cu_seqlens)
        named.update((name, a) for name, a in (("lse", lse), ("sinks", sinks)) if a is not None)
        described = {name: describe(obj, name) for name, obj in named.items()}
        fields = varlen_fields(head_dim=self.head_dim, dtype=self.dtype, **described)
        common = self._common(q, described, params, arrays, num_reqs=fields["num_seqs"],
                              num_heads=fields["num_heads"])
        args = VarlenAttentionArgs(struct_size=ctypes.sizeof(VarlenAttentionArgs),
                                   max_seq_len=int(max_seq_len), scale=float(scale),
                                   **common.fields, **fields)
        named.update(common.keep)
        return Launch(self, args, common.values, named, common.stream,
                      call="fj_varlen_attention")

    def plan(self, *, max_num_reqs, max_num_tokens, max_query_len, num_heads, num_kv_heads):
        """fj_plan_create: a plan for batches of at most this shape (in the current CUDA
        context; compiles the variant's split-KV decode kernel)."""
        shape = PlanShape(struct_size=ctypes.sizeof(PlanShape), max_num_reqs=int(max_num_reqs),
                          max_num_tokens=int(max_num_tokens), max_query_len=int(max_query_len),
                          num_heads=int(num_heads), num_kv_heads=int(num_kv_heads))
        handle = ctypes.c_void_p()
        _check(library().fj_plan_create(self.handle, ctypes.byref(shape), ctypes.byref(handle)),
               self.context.handle, "fj_plan_create")
        return Plan(self, handle.value)

    def workspace_size(self, arrays, *, num_reqs, num_heads):
        """fj_attention_workspace_size: bytes of workspace a launch with these array parameters
        ({name: device array}, as arrays=) needs; 0 when the variant summarises none."""
        descriptors, _ = self.program.array_values(arrays, num_reqs=num_reqs,
                                                   num_heads=num_heads, host=self.host)
        size = ctypes.c_uint64()
        _check(library().fj_attention_workspace_size(self.handle, descriptors,
                                                     self.program.array_count,
                                                     ctypes.byref(size)),
               self.context.handle, "fj_attention_workspace_size")
        return size.value

    def varlen(self, q, k, v, cu_seqlens, *, stream=None, **options):
        """prepare_varlen() then launch on `stream` (as __call__); returns `out`."""
        launch = self.prepare_varlen(q, k, v, cu_seqlens, **options)
        launch.launch(stream)
        return launch.out

    def _common(self, q, described, params, arrays, *, num_reqs, num_heads):
        """What paged and varlen launches share: the current device check, the scalar params
        and the array parameters, the default stream (none for a CPU kernel)."""
        torch = sys.modules.get("torch") if is_torch_tensor(q) and not self.host else None
        device = described["q"].device_index
        if torch is not None and device is not None and torch.cuda.current_device() != device:
            raise ValueError(f"q is on cuda:{device} but the current CUDA device is "
                             f"cuda:{torch.cuda.current_device()} (use torch.cuda.device)")
        values = self.program.param_values(params)
        descriptors, seen = self.program.array_values(arrays, num_reqs=num_reqs,
                                                      num_heads=num_heads, host=self.host)
        for array in seen.values():
            if array.device_index is not None and device is not None and \
                    array.device_index != device:
                raise ValueError(f"{array.name}: on cuda:{array.device_index}, q on "
                                 f"cuda:{device}")
        # The ctypes arrays go in as they are: the struct points at them and keeps them alive.
        fields = dict(params=values, num_params=self.program._param_count, arrays=descriptors,
                      num_arrays=self.program._array_count)
        stream = _torch_stream(torch, device) if torch is not None else None
        keep = {f"array:{name}": obj for name, obj in (arrays or {}).items()}
        return _Common(fields, (values, descriptors), keep, stream)


class _Templates(dict):
    """Kernel._checked_args' templates by geometry key, at most LIMIT (the oldest go first),
    and the last one used: a call of the last one's geometry compares its key with that key
    instead of hashing it. `fast` is the last one again with its tensors' guards
    (_tensor_guards) and the key's other items: a call that passes them builds no key at all.
    clear() forgets every check."""

    LIMIT = 64

    def __init__(self):
        super().__init__()
        self.last = (None, None)  # (key, _Template), replaced at once: threads read it whole
        self.fast = (None, None, None)  # (the key's other items, guards, _Template), likewise
        self._guards = {}  # key -> _tensor_guards of its tensors, or None

    def keep(self, key, template):
        if len(self) >= self.LIMIT:
            oldest = next(iter(self))
            del self[oldest]
            self._guards.pop(oldest, None)
        self[key] = template

    def guards_of(self, key, *tensors):
        """The guards of the kept template under `key`, made from `tensors` (the call's, whose
        geometry is the key's) the first time; None where torch has none."""
        try:
            return self._guards[key]
        except KeyError:
            guards = self._guards[key] = _tensor_guards([t for t in tensors if t is not None])
            return guards

    def clear(self):
        super().clear()
        self._guards.clear()
        self.last = (None, None)
        self.fast = (None, None, None)


def _tensor_guards(tensors):
    """torch's C++ check of tensors' dispatch keys, dtype, device, requires_grad, sizes and
    strides (what torch.compile's guards call), made from `tensors`: its check(*tensors) is
    true when tensors of the same geometry come again, in one call where reading the key's
    attributes takes some thirty. None where this torch has no such class or it will not take
    the arguments (then every call builds the key)."""
    torch = sys.modules.get("torch")
    try:
        guards_class = torch._C._dynamo.guards.TensorGuards
        # Every size and stride as it is: a None there would leave that dimension unchecked.
        guards = guards_class(*tensors, dynamic_dims_sizes=[list(t.shape) for t in tensors],
                              dynamic_dims_strides=[list(t.stride()) for t in tensors])
        first = tensors[0]
        probe = first.as_strided([max(size - 1, 0) for size in first.shape], first.stride(),
                                 first.storage_offset())
        if guards.check(*tensors) is not True or (
                probe.shape != first.shape and guards.check(probe, *tensors[1:])):
            return None  # it must pass the tensors themselves and fail a smaller first one
        return guards
    except Exception:  # noqa: BLE001 (an internal class: any failure means none)
        return None


class _Template(NamedTuple):
    """A checked call's fj_paged_attention_args around its pointers (Kernel._checked_args)."""

    head: bytes  # the bytes before q
    middle: bytes  # the bytes between lse and sinks
    after_scales: bytes  # the bytes between v_scale and kv_shard_offsets (kv_scale_stride)
    tail: bytes  # the bytes after global_seq_lens (the shard's rank, count, interleave)
    keep: object  # the ctypes arrays and scale memory the struct points into
    device: Optional[int]  # q's CUDA device: the default stream is torch's current one there
    k_scale: int  # the pointer of a k_scale given as a number (fixed), else 0: the tensor's
    v_scale: int
    array_slots: tuple = ()  # ((slot, read), ...) of the call's array parameters, in its order
    descriptors: object = None  # prepare()'s fj_array descriptors by slot (the struct's, never
    #                             written again): each call copies them with its data pointers


# The pointer fields q .. lse are consecutive, and so are sinks, k_scale and v_scale, and then
# kv_shard_offsets and global_seq_lens: a call writes them with one pack.
_PAGED_POINTERS_START = PagedAttentionArgs.q.offset
_PAGED_POINTERS_END = PagedAttentionArgs.lse.offset + 8
_PAGED_SINKS = PagedAttentionArgs.sinks.offset
_PAGED_SCALES_END = PagedAttentionArgs.v_scale.offset + 8
_PAGED_SHARDS = PagedAttentionArgs.kv_shard_offsets.offset
_PAGED_SHARDS_END = PagedAttentionArgs.global_seq_lens.offset + 8
_PAGED_POINTERS = struct.Struct(
    f"<{_PAGED_POINTERS_START}s8Q{_PAGED_SINKS - _PAGED_POINTERS_END}s3Q"
    f"{_PAGED_SHARDS - _PAGED_SCALES_END}s2Q"
    f"{ctypes.sizeof(PagedAttentionArgs) - _PAGED_SHARDS_END}s")
assert [name for name, _ in PagedAttentionArgs._fields_[1:9]] == [
    "q", "out", "k_cache", "v_cache", "query_start_loc", "seq_lens", "block_table", "lse"]
assert _PAGED_POINTERS_END - _PAGED_POINTERS_START == 8 * 8
assert _PAGED_SCALES_END - _PAGED_SINKS == 3 * 8
assert _PAGED_SHARDS_END - _PAGED_SHARDS == 2 * 8
assert _PAGED_POINTERS.size == ctypes.sizeof(PagedAttentionArgs)


def _scale_key(scale):
    """A k_scale or v_scale as part of a geometry key (Kernel._checked_args): a number by its
    type and bits (its memory is the template's), a tensor by its geometry (its pointer is
    written at each call), None. Raises AttributeError for other objects (no kept call)."""
    if scale is None:
        return None
    if isinstance(scale, numbers.Real):
        return (type(scale), _DOUBLE.pack(float(scale)))
    return scale.shape, scale.stride(), scale.dtype, scale.device


def _shard_key(kv_shard):
    """A KvShard as part of a geometry key (Kernel._checked_args): its layout by value, its
    arrays by their geometry (their pointers are written at each call). Raises AttributeError
    for arrays that are not torch tensors (no kept call)."""
    return (kv_shard.rank, kv_shard.count, kv_shard.interleave) + tuple(
        None if a is None else (a.shape, a.stride(), a.dtype, a.device)
        for a in (kv_shard.offsets, kv_shard.global_seq_lens))


def _shard_arrays(kv_shard):
    """{struct field name: array} of the arrays a KvShard has (Launch.arrays keeps them)."""
    if not isinstance(kv_shard, KvShard):
        raise TypeError(f"kv_shard: expected a flexjit.KvShard, got {type(kv_shard).__name__}")
    return {name: obj for name, obj in (("kv_shard_offsets", kv_shard.offsets),
                                        ("global_seq_lens", kv_shard.global_seq_lens))
            if obj is not None}


def _describe_shard_array(obj, name):
    """The Array of a KvShard array (`name` its struct field), named as the KvShard's field in
    messages: a ctypes int32 array (host memory, which KvShard made of a list) or what
    describe() takes."""
    label = {"kv_shard_offsets": "kv_shard.offsets",
             "global_seq_lens": "kv_shard.global_seq_lens"}[name]
    if isinstance(obj, ctypes.Array):
        return Array(label, ctypes.addressof(obj), (len(obj),), (1,), "int32", False, None)
    return describe(obj, label)


_scale_tensors = {}  # (bits, CUDA device index) -> float32 [1] tensor of that value


def _scale_array(name, scale, host, device_index):
    """(object holding the memory, its Array) of k_scale or v_scale `scale`: an array as it is
    (describe), or a number placed where the kernel reads it: a float32 of its own on the host
    for a CPU kernel, else a one-element float32 tensor on CUDA device `device_index` (None:
    the current one), made once per value and device and kept (which needs torch)."""
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        return scale, describe(scale, name)
    value = float(scale)
    if not math.isfinite(value):
        raise ValueError(f"{name}: {value} is not a finite number")
    if host:
        memory = (ctypes.c_float * 1)(value)
        return memory, Array(name, ctypes.addressof(memory), (1,), (1,), "fp32", False, None)
    torch = sys.modules.get("torch")
    if torch is None:
        raise TypeError(f"{name}: a number is placed in device memory with torch, which is not "
                        f"imported; pass a float32 device array")
    if device_index is None:
        device_index = torch.cuda.current_device()
    key = (_DOUBLE.pack(value), device_index)
    memory = _scale_tensors.get(key)
    if memory is None:
        if len(_scale_tensors) >= 1024:  # the kept templates and launches keep their own
            _scale_tensors.clear()
        memory = _scale_tensors[key] = torch.tensor([value], dtype=torch.float32,
                                                    device=f"cuda:{device_index}")
    return memory, describe(memory, name)


class _TorchCalls(NamedTuple):
    """What the launch paths ask torch, through the C functions behind torch.cuda's."""

    current_device: object  # () -> the current CUDA device's index
    current_stream: object  # (device index) -> the handle of torch's current stream there


_torch_calls = {}  # type of torch tensor -> _TorchCalls, once torch is imported


def _torch_calls_of(obj):
    """_TorchCalls if `obj` is a torch tensor (and torch is imported), else None."""
    torch = sys.modules.get("torch") if is_torch_tensor(obj) else None
    if torch is None:
        return None
    device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device
    calls = _TorchCalls(device, lambda index: _torch_stream(torch, index))
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        calls = _TorchCalls(device, raw)
    _torch_calls[type(obj)] = calls
    return calls


_DOUBLE = struct.Struct("<d")


def _params_key(params):
    """params ({name: value}) as part of a geometry key: each value with its type (8 == 8.0 ==
    True, but an int parameter takes only 8) and, unless an int, its bits as a double (-0.0 ==
    0.0, but their float32 bits differ)."""
    key = []
    for name, value in params.items():
        if isinstance(value, int):
            key.append((name, type(value), value))
            continue
        try:
            bits = _DOUBLE.pack(float(value))
        except (TypeError, ValueError, OverflowError):
            bits = None
        key.append((name, type(value), value, bits))
    return tuple(key)


def _struct_of(data):
    """A fj_paged_attention_args of its own from _checked_args' struct: a copy of bytes, or the
    struct a byref() holds (made for that call alone)."""
    if isinstance(data, bytes):
        return PagedAttentionArgs.from_buffer_copy(data)
    return data._obj


_stream_args = {}  # stream handle -> its c_void_p


def _stream_arg(handle):
    """A stream handle (an int, or None) as the launch paths pass it (_capi.unchecked): None
    for the default stream, else a c_void_p, kept per handle (a process uses few streams)."""
    if not handle:
        return None
    arg = _stream_args.get(handle)
    if arg is None:
        if len(_stream_args) >= 256:
            _stream_args.clear()
        arg = _stream_args[handle] = ctypes.c_void_p(handle)
    return arg


def _torch_stream(torch, device):
    """torch's current stream on `device` (an index; None: the current device), as an int."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:  # what torch.cuda.current_stream reads, without building a Stream
        return raw(torch.cuda.current_device() if device is None else device)
    return torch.cuda.current_stream(device).cuda_stream


class _Common(NamedTuple):
    fields: dict
    values: object  # the ctypes arrays the struct points into
    keep: dict  # objects whose memory the launch reads
    stream: Optional[int]


def _default_out(q, out):
    if out is not None:
        return out
    if not is_torch_tensor(q):
        raise ValueError("out is required when q is not a torch tensor")
    return q.new_empty(q.shape)


def _max_length(starts, what, name):
    """The longest starts[i+1] - starts[i] of a torch tensor (a device synchronisation)."""
    if not is_torch_tensor(starts):
        raise ValueError(f"{what} is required when {name} is not a torch tensor")
    lengths = starts[1:] - starts[:-1]
    return int(lengths.max()) if lengths.numel() else 0


def _stream_handle(stream):
    if stream is None or isinstance(stream, int):
        return stream or None
    if hasattr(stream, "cuda_stream"):
        return stream.cuda_stream or None
    if hasattr(stream, "__cuda_stream__"):
        return stream.__cuda_stream__()[1] or None
    raise TypeError(f"stream: expected an int handle, a torch.cuda.Stream or an object with "
                    f"__cuda_stream__, got {type(stream).__name__}")


def _host_int32(values, name):
    """A ctypes int32 array of a host sequence (list, tuple, numpy array, CPU torch tensor, or
    a ctypes int32 array, taken as is: what a caller updating every step keeps)."""
    if isinstance(values, ctypes.Array) and values._type_ is ctypes.c_int32:
        return values, len(values)
    if is_torch_tensor(values):
        if values.device.type != "cpu":
            raise ValueError(f"{name}: the plan takes host copies (a CPU tensor or a list)")
        values = values.tolist()
    values = [int(v) for v in values]
    return (ctypes.c_int32 * max(1, len(values)))(*values), len(values)


class Plan(_Handle):
    """fj_plan: work lists for planned launches of one kernel (split-KV decode, mixed batches,
    CUDA graphs). update() from host copies of the lengths, then run() a prepared Launch (or
    replay a graph that captured one run)."""

    _destroy = "fj_plan_destroy"

    def __init__(self, kernel, handle):
        super().__init__(handle)
        self.kernel = kernel  # the plan uses the kernel: keep it alive
        self._run = _capi.unchecked("fj_plan_run")

    def update(self, query_start_loc, seq_lens, max_blocks_per_req, stream=None):
        """fj_plan_update: query_start_loc (num_reqs + 1) and seq_lens (num_reqs) on the host;
        the work lists are copied on `stream` (default: torch's current stream if torch is
        loaded, else the legacy default stream)."""
        qsl, n_qsl = _host_int32(query_start_loc, "query_start_loc")
        lens, n = _host_int32(seq_lens, "seq_lens")
        if n_qsl != n + 1:
            raise ValueError(f"query_start_loc has {n_qsl} entries, seq_lens {n}: expected "
                             f"one more")
        _check(library().fj_plan_update(self.handle, qsl, lens, n, int(max_blocks_per_req),
                                        _current_stream(stream)),
               self.kernel.context.handle, "fj_plan_update")

    def run(self, launch, stream=None):
        """fj_plan_run over a Launch prepared by Kernel.prepare (same kernel)."""
        status = self._run(self._handle_arg, launch._args_ref, launch._stream_arg
                           if stream is None else _stream_arg(_stream_handle(stream)))
        if status:
            self._failed(status)

    def run_args(self, args, stream):
        """fj_plan_run over a struct from Kernel.paged_args on `stream` (a handle or None)."""
        self._run_data(ctypes.byref(args), stream)

    def _run_data(self, data, stream):
        """fj_plan_run of `data` (Kernel._checked_args' bytes, or a byref() of a struct) on
        `stream` (a handle or None)."""
        status = self._run(self._handle_arg, data, _stream_arg(stream))
        if status:
            self._failed(status)

    def _failed(self, status):
        self.handle  # noqa: B018 (raises ValueError once closed)
        _check(status, self.kernel.context.handle, "fj_plan_run")


def _current_stream(stream):
    if stream is not None:
        return _stream_handle(stream)
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return torch.cuda.current_stream().cuda_stream or None
    return None


class Launch:
    """A prepared call: the C argument struct plus references keeping its arrays alive
    (`arrays` by argument name; array parameters as "array:NAME")."""

    def __init__(self, kernel, args, param_values, arrays, default_stream,
                 call="fj_paged_attention"):
        self.kernel = kernel
        self.args = args
        self.arrays = arrays
        self.call = call
        self._param_values = param_values
        self._default_stream = default_stream
        self._stream_arg = _stream_arg(default_stream)
        self._launch = _capi.unchecked(call)
        self._kernel_arg = kernel._handle_arg  # null once the kernel is closed
        self._args_ref = ctypes.byref(args)

    @property
    def out(self):
        return self.arrays["out"]

    def launch(self, stream=None):
        """Enqueues the kernel; no synchronisation. `stream` defaults to torch's current stream
        when the arrays were torch tensors (as it was at prepare time)."""
        status = self._launch(self._kernel_arg, self._args_ref, self._stream_arg
                              if stream is None else _stream_arg(_stream_handle(stream)))
        if status:
            self.kernel._failed(status, self.call)
