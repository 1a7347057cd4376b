"""flex_attention: PyTorch FlexAttention's call, run by flexjit kernels compiled from the traced
mask_mod and score_mod (trace.py).

The contiguous call takes [B, H, S, D] tensors as they are: the encoder kernel (page size 0)
reads them through fj_varlen_attention's batch strides and separate key lengths (since 0.6), so
nothing is copied. docs/python.md#flex_attention describes it.
"""

import contextlib
import ctypes
import numbers
import sys
import threading
from typing import NamedTuple

from . import trace as _trace
from ._arrays import Array, describe, is_torch_tensor, sinks_pointer
from . import _capi
from ._capi import ArrayArg, VarlenAttentionArgs, library

__all__ = ["flex_attention", "flex_attention_paged", "compile_flex", "FlexKernel", "flex_plan",
           "FlexPlan"]

_lock = threading.Lock()
_context = None
_traces = {}  # trace.cache_key -> TracedProgram
_kernels = {}  # (source, head_dim, dtype, page_size, arch, kv_dtype) -> (Program, Kernel)
_CACHE_LIMIT = 256


def _default_context():
    global _context
    if _context is None:
        from . import Context
        _context = Context()
    return _context


def _remember(cache, key, value):
    if len(cache) >= _CACHE_LIMIT:
        del cache[next(iter(cache))]
    cache[key] = value


def traced_program(mask_mod=None, score_mod=None):
    """The TracedProgram of the pair, from the cache when the functions' code and captures'
    structure were traced before (trace.cache_key)."""
    key = _trace.cache_key(mask_mod, score_mod)
    if key is not None:
        with _lock:
            found = _traces.get(key)
        if found is not None:
            return found
    traced = _trace.trace(mask_mod, score_mod)
    if key is not None and traced.cacheable:
        with _lock:
            _remember(_traces, key, traced)
    return traced


class FlexKernel:
    """A traced mask_mod/score_mod compiled for one head dim, dtype, page size (0: contiguous
    [B, H, S, D]), architecture ("cpu": the CPU backend over host memory) and K/V cache dtype
    (a paged fp8 cache: kv_dtype "fp8")."""

    def __init__(self, traced, program, kernel, arch):
        self.traced, self.program, self.kernel, self.arch = traced, program, kernel, arch
        # run_values' launches by geometry (_varlen_key): a call whose shapes, strides, dtypes,
        # devices, params and scale an earlier call checked takes that call's struct and
        # changes only its pointers.
        self._templates = {}

    @property
    def source(self):
        return self.traced.source

    @property
    def name(self):
        return self.kernel.name

    def launch_arguments(self, mask_mod, score_mod, device):
        """(params, arrays) of one call: the Runtime values and extents by name, and the
        captured tensors as 1-D or 2-D arrays on `device` ("cpu" or a torch device), int32 or
        float32, with the objects that keep them alive."""
        params, captured = self.traced.launch_values(mask_mod, score_mod)
        arrays = {}
        for name, (obj, rank, element) in captured.items():
            arrays[name] = _array_argument(name, obj, rank, element, device)
        return params, arrays

    def paged_arguments(self, mask_mod, score_mod, device):
        """(params, arrays) of one paged call (Kernel.__call__'s params= and arrays=): as
        launch_arguments, each captured tensor shaped as the 1-D or 2-D array the program
        declares."""
        params, captured = self.launch_arguments(mask_mod, score_mod, device)
        arrays = {name: data.reshape(rows, cols) if self.program.param_info(name).rank == 2
                  else data.reshape(rows) for name, (data, rows, cols) in captured.items()}
        return params, arrays

    def run(self, q, k, v, out, *, mask_mod=None, score_mod=None, lse=None, sinks=None,
            scale=None, stream=None):
        """Attention over contiguous [B, H, S, D] arrays (torch tensors, or host arrays with
        __array_interface__ for a "cpu" kernel): q and out [B, Hq, Sq, D], k and v [B, Hkv,
        Skv, D], lse float32 [B, Sq, Hq] or None, sinks float32 [Hq] or None (attention sinks,
        fj_varlen_attention_args.sinks). `mask_mod` and `score_mod` are this call's
        functions (the ones traced, or others of the same cache key: their captured tensors
        and Runtime values are read now)."""
        arrays, lse_stride, host = self._checked(q, k, v, out, lse, sinks)
        params, captured = self.launch_arguments(mask_mod, score_mod, "cpu" if host else q.device)
        return self._launch(arrays, q, out, params, captured, lse_stride, scale, stream, host)

    def run_values(self, q, k, v, out, params, captured, *, lse=None, sinks=None, scale=None,
                   stream=None, starts=(None, None)):
        """run() with the launch values given rather than read from the functions: `params`
        {name: value}, `captured` {array param: (object holding the data, rows, cols)} on the
        kernel's device (launch_arguments' result; torch.ops.flexjit.flex_attention's).
        `starts`: (cu_seqlens, cu_seqlens_k) int32 device tensors of the batch's uniform
        lengths (arange(B + 1) * S), or None each for kept ones (_starts): a compiled graph
        passes its own, because a tensor this call made and kept would come from a CUDA
        graph's memory pool while torch's cudagraph trees record it."""
        key = None if self.arch == "cpu" else _varlen_key(q, k, v, out, lse, sinks, params,
                                                          captured, scale)
        if key is not None and starts != (None, None):
            # A template made with given starts keeps none of them (they may be a graph's) and
            # serves only calls that give theirs.
            key = (key, starts[0] is not None, starts[1] is not None)
        template = self._templates.get(key) if key is not None else None
        if template is not None:
            template.launch(self, q, k, v, out, lse, sinks, captured, stream, starts)
            return out
        arrays, lse_stride, host = self._checked(q, k, v, out, lse, sinks)
        return self._launch(arrays, q, out, params, captured, lse_stride, scale, stream, host,
                            key, starts)

    def _checked(self, q, k, v, out, lse, sinks):
        """(described arrays by name, lse's token stride, whether on the host) after run()'s
        checks."""
        if self.kernel.page_size != 0:
            raise ValueError("run() needs a kernel of page size 0 (compile_flex(page_size=0))")
        host = self.arch == "cpu"
        named = dict(q=q, k=k, v=v, out=out)
        named.update((name, a) for name, a in (("lse", lse), ("sinks", sinks)) if a is not None)
        arrays = {n: _describe(obj, n, host) for n, obj in named.items()}
        for name in ("q", "k", "v", "out"):
            a = arrays[name]
            if len(a.shape) != 4:
                raise ValueError(f"{name}: expected [B, H, S, D], got shape {a.shape}")
            if a.dtype != self.kernel.dtype:
                raise ValueError(f"{name}: dtype {a.dtype}, the kernel's is {self.kernel.dtype}")
            if a.shape[3] != self.kernel.head_dim:
                raise ValueError(f"{name}: head dim {a.shape[3]}, the kernel's is "
                                 f"{self.kernel.head_dim}")
            if a.shape[3] > 1 and a.strides[3] != 1:
                raise ValueError(f"{name}: the last dimension must be contiguous")
        batch, heads, q_len, _ = arrays["q"].shape
        _, kv_heads, kv_len, _ = arrays["k"].shape
        if arrays["out"].shape != arrays["q"].shape:
            raise ValueError(f"out: shape {arrays['out'].shape}, q's is {arrays['q'].shape}")
        if arrays["v"].shape != arrays["k"].shape:
            raise ValueError(f"v: shape {arrays['v'].shape}, k's is {arrays['k'].shape}")
        if arrays["k"].shape[0] != batch:
            raise ValueError(f"k: batch {arrays['k'].shape[0]}, q's is {batch}")
        if kv_heads == 0 or heads % kv_heads != 0:
            raise ValueError(f"q has {heads} heads, k {kv_heads}: not a multiple")
        lse_stride = 0
        if lse is not None:
            a = arrays["lse"]
            if a.dtype != "fp32" or a.shape != (batch, q_len, heads) or a.strides[2] != 1 or \
                    (batch > 1 and a.strides[0] != q_len * a.strides[1]):
                raise ValueError(f"lse: expected float32 [B, Sq, Hq] = {(batch, q_len, heads)} "
                                 f"with rows packed by token, got {a.dtype} {a.shape} strides "
                                 f"{a.strides}")
            lse_stride = a.strides[1]
        if sinks is not None:
            a = arrays["sinks"]
            sinks_pointer(a, heads)
            if a.device_index != arrays["q"].device_index:
                raise ValueError(f"sinks: on cuda:{a.device_index}, q on "
                                 f"cuda:{arrays['q'].device_index}")
        return arrays, lse_stride, host

    def _launch(self, arrays, q, out, params, captured, lse_stride, scale, stream, host,
                key=None, starts=(None, None)):
        """fj_varlen_attention over described, checked [B, H, S, D] arrays (run()'s checks):
        `params` {name: value}, `captured` {array param: (object holding the data, rows,
        cols)} on the kernel's device. A `key` (_varlen_key) keeps the launch's struct as the
        template of later calls of that geometry."""
        batch, heads, q_len, _ = arrays["q"].shape
        _, kv_heads, kv_len, _ = arrays["k"].shape
        lse, sinks = arrays.get("lse"), arrays.get("sinks")
        param_values = self.program.param_values(params)
        descriptors = self.program._arrays_type()
        for name, (keep, rows, cols) in captured.items():
            slot = self.program.param_info(name).slot
            descriptors[slot] = ArrayArg(_pointer(keep, host), rows, cols, cols)
        given, given_k = starts
        starts = given if given is not None else _starts(batch, q_len, q, host)
        key_starts = None if kv_len == q_len else \
            given_k if given_k is not None else _starts(batch, kv_len, q, host)
        args = VarlenAttentionArgs(
            struct_size=ctypes.sizeof(VarlenAttentionArgs),
            q=arrays["q"].ptr, k=arrays["k"].ptr, v=arrays["v"].ptr, out=arrays["out"].ptr,
            cu_seqlens=_pointer(starts, host), lse=lse.ptr if lse is not None else None,
            num_tokens=batch * q_len, num_seqs=batch, num_heads=heads, num_kv_heads=kv_heads,
            max_seq_len=q_len, scale=float(scale) if scale is not None else 0.0,
            params=param_values, num_params=self.program.param_count,
            num_arrays=self.program.array_count, arrays=descriptors,
            cu_seqlens_k=_pointer(key_starts, host) if key_starts is not None else None,
            num_tokens_k=batch * kv_len, lse_stride_token=lse_stride,
            sinks=sinks.ptr if sinks is not None else None)
        for name, length in (("q", q_len), ("k", kv_len), ("v", kv_len), ("out", q_len)):
            a = arrays[name]
            setattr(args, f"{name}_stride_token", a.strides[2])
            setattr(args, f"{name}_stride_head", a.strides[1])
            # Row i of sequence s is at s * stride_batch + (s * length + i) * stride_token.
            setattr(args, f"{name}_stride_batch", a.strides[0] - length * a.strides[2])
        if stream is None and not host and is_torch_tensor(q):
            from . import _torch_stream
            stream = _torch_stream(sys.modules["torch"], q.device.index)
        status = library().fj_varlen_attention(self.kernel.handle, ctypes.byref(args), stream)
        if status != 0:
            from . import _check
            _check(status, self.kernel.context.handle, "fj_varlen_attention")
        if key is not None:
            if len(self._templates) >= 64:
                self._templates.clear()
            slots = tuple((self.program.param_info(name).slot, name) for name in captured)
            self._templates[key] = _VarlenTemplate(
                bytes(args), bytes(descriptors), type(descriptors), slots,
                (param_values, None if given is not None else starts,
                 None if given_k is not None else key_starts), q.device.index)
        return out


def _varlen_key(q, k, v, out, lse, sinks, params, captured, scale):
    """What FlexKernel._checked and _launch read of a call but its pointers, hashable; None
    for arrays that are not torch tensors (and values that do not hash)."""
    from . import _DOUBLE, _params_key
    try:
        return (q.shape, q.stride(), q.dtype, q.device, k.shape, k.stride(), k.dtype, k.device,
                v.shape, v.stride(), v.dtype, v.device,
                out.shape, out.stride(), out.dtype, out.device,
                None if lse is None else (lse.shape, lse.stride(), lse.dtype, lse.device),
                None if sinks is None else (sinks.shape, sinks.stride(), sinks.dtype,
                                            sinks.device),
                None if scale is None else _DOUBLE.pack(float(scale)),
                _params_key(params) if params else (),
                tuple((name, rows, cols, data.dtype, data.device)
                      for name, (data, rows, cols) in captured.items()))
    except (AttributeError, TypeError, ValueError):
        return None


class _VarlenTemplate(NamedTuple):
    """A checked fj_varlen_attention call of one geometry (FlexKernel._templates): its struct
    and array descriptors as bytes, the descriptor slot of each captured array, and what the
    struct points into (the params array, cu_seqlens), kept alive here."""

    args: bytes
    descriptors: bytes
    descriptors_type: type
    slots: tuple  # (array slot, captured name)
    keep: tuple
    device: object  # q's CUDA device index

    def launch(self, kernel, q, k, v, out, lse, sinks, captured, stream, starts=(None, None)):
        """fj_varlen_attention of a copy of the struct with this call's pointers (a fresh copy:
        calls from several threads do not share one); given `starts` replace the kept ones."""
        args = VarlenAttentionArgs.from_buffer_copy(self.args)
        if starts[0] is not None:
            args.cu_seqlens = starts[0].data_ptr()
        if starts[1] is not None and args.cu_seqlens_k:
            args.cu_seqlens_k = starts[1].data_ptr()
        args.q, args.k, args.v, args.out = q.data_ptr(), k.data_ptr(), v.data_ptr(), \
            out.data_ptr()
        if lse is not None:
            args.lse = lse.data_ptr()
        if sinks is not None:
            args.sinks = sinks.data_ptr()
        if self.slots:
            descriptors = self.descriptors_type.from_buffer_copy(self.descriptors)
            for slot, name in self.slots:
                descriptors[slot].data = captured[name][0].data_ptr() or None
            args.arrays = descriptors
        if stream is None:
            from . import _torch_stream
            stream = _torch_stream(sys.modules["torch"], self.device)
        from . import _stream_arg
        status = _capi.unchecked("fj_varlen_attention")(kernel.kernel._handle_arg,
                                                        ctypes.byref(args), _stream_arg(stream))
        if status:
            kernel.kernel._failed(status, "fj_varlen_attention")


def _describe(obj, name, host):
    if is_torch_tensor(obj):
        array = describe(obj, name)
        if array.is_cuda == host:
            raise ValueError(f"{name}: on {'a CUDA device' if array.is_cuda else 'the host'}, "
                             f"the kernel runs on {'the host' if host else 'a CUDA device'}")
        return array
    interface = getattr(obj, "__array_interface__", None)
    if host and interface is not None:
        itemsizes = {"<f2": ("fp16", 2), "<f4": ("fp32", 4), "<i4": ("int32", 4)}
        dtype, item = itemsizes.get(interface["typestr"], (interface["typestr"], 1))
        shape = tuple(int(n) for n in interface["shape"])
        strides = interface.get("strides")
        if strides is None:
            from ._arrays import contiguous_strides
            strides = contiguous_strides(shape)
        else:
            strides = tuple(s // item for s in strides)
        return Array(name, int(interface["data"][0]), shape, strides, dtype, False, None)
    raise TypeError(f"{name}: expected a torch tensor" + (" or an object with "
                    "__array_interface__" if host else "") + f", got {type(obj).__name__}")


def _pointer(obj, host):
    if isinstance(obj, ctypes.Array):
        return ctypes.cast(obj, ctypes.c_void_p).value
    if is_torch_tensor(obj):
        return obj.data_ptr() or None
    return int(obj.__array_interface__["data"][0]) or None


_starts_cache = {}


def _starts(batch, length, like, host):
    """cu_seqlens of `batch` sequences of `length` rows: on the host (a ctypes array) for the
    CPU backend, else an int32 tensor on like's device (kept per shape and device)."""
    if host and not is_torch_tensor(like):
        return (ctypes.c_int32 * (batch + 1))(*range(0, (batch + 1) * length, length or 1))
    torch = sys.modules["torch"]
    key = (batch, length, str(like.device))
    found = _starts_cache.get(key)
    if found is None:
        found = torch.arange(batch + 1, dtype=torch.int32, device=like.device) * length
        _remember(_starts_cache, key, found)
    return found


def _array_argument(name, obj, rank, element, device):
    """(object holding the data, rows, cols) of captured tensor `obj` as the 1-D or 2-D array
    the traced program declares: int32 for integer and bool tensors, float32 for floating ones;
    a 0-d tensor is one element, a 3-D or 4-D one [shape[0], the rest]."""
    shape = _trace._shape_of(obj)
    if len(shape) != rank:
        raise ValueError(f"captured tensor {name!r}: traced with {rank} dimensions, now has "
                         f"{len(shape)}")
    rows = shape[0] if rank >= 1 else 1
    cols = 1
    for extent in shape[1:]:
        cols *= extent
    if is_torch_tensor(obj):
        torch = sys.modules["torch"]
        dtype = torch.float32 if element == "float" else torch.int32
        data = obj.to(device=device, dtype=dtype).contiguous()
        return data, rows, cols
    interface = obj.__array_interface__
    want = "<f4" if element == "float" else "<i4"
    if device != "cpu" or interface["typestr"] != want or interface.get("strides") not in (
            None, tuple(_contiguous_bytes(shape, 4))):
        raise ValueError(f"captured array {name!r}: a host array must be contiguous {want} "
                         f"(got {interface['typestr']}); convert it, or capture a torch tensor")
    return obj, rows, cols


def _contiguous_bytes(shape, item):
    strides, step = [], item
    for n in reversed(shape):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


def compile_flex(mask_mod=None, score_mod=None, *, head_dim, dtype="bf16", page_size=0,
                 arch=None, kv_dtype=None):
    """The FlexKernel of the traced pair (traces and kernels are cached: a function of the same
    code and capture structure, even with other tensor values, reuses both). `kv_dtype`:
    "fp8" for a paged fp8 cache (Context.kernel's), None: the cache is `dtype`."""
    traced = traced_program(mask_mod, score_mod)
    from . import _dtype_name, _kv_dtype_name
    dtype = _dtype_name(dtype)
    kv_dtype = _kv_dtype_name(kv_dtype, dtype)
    key = (traced.source, head_dim, dtype, page_size, arch, kv_dtype)
    with _lock:
        found = _kernels.get(key)
    if found is None:
        context = _default_context()
        program = context.program(traced.source, name="traced.mask")
        kernel = context.kernel(program, traced.mask, score=traced.score, head_dim=head_dim,
                                dtype=dtype, page_size=page_size, arch=arch, kv_dtype=kv_dtype)
        found = (program, kernel)
        with _lock:
            _remember(_kernels, key, found)
    return FlexKernel(traced, found[0], found[1], arch)


def _forward_only(*tensors):
    """Raises if grad is enabled and a tensor (None: no tensor) requires it."""
    torch = sys.modules["torch"]
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        raise RuntimeError("flexjit.flex_attention is forward only: an input requires grad "
                           "(use torch.no_grad() or .detach())")


def _kernel_dtype(tensor):
    """"bf16" or "fp16" of a tensor or a torch dtype."""
    dtype = getattr(tensor, "dtype", tensor)
    names = {"torch.bfloat16": "bf16", "torch.float16": "fp16"}
    if str(dtype) not in names:
        raise ValueError(f"dtype {dtype} is not supported (bfloat16, float16)")
    return names[str(dtype)]


def _usable(t):
    """`t` itself when the kernel can read it (last dimension contiguous, other strides
    multiples of 8 elements, 16-byte aligned), else a contiguous copy."""
    strides = t.stride()
    if t.shape[-1] > 1 and strides[-1] != 1 or any(s % 8 for s in strides[:-1]) or \
            t.data_ptr() % 16:
        return t.contiguous()
    return t


def flex_attention(query, key, value, score_mod=None, mask_mod=None, scale=None,
                   enable_gqa=False, return_lse=False, *, sinks=None):
    """torch.nn.attention.flex_attention.flex_attention's forward, on flexjit kernels.

    query [B, Hq, Sq, D], key and value [B, Hkv, Skv, D] (Hkv = Hq unless enable_gqa), bfloat16
    or float16 torch tensors on a CUDA device, or on the CPU (the CPU backend). Sq may differ
    from Skv: q_idx and kv_idx both count from 0, as in torch. No block mask: the mask's tiles
    are classified by the compiled kernel. `sinks`: attention sinks (gpt-oss's), a float32 [Hq]
    tensor on query's device: head h's logit joins the softmax denominator of each of its rows,
    with no value. Returns out [B, Hq, Sq, D] (and, with return_lse, the natural-log LSE
    [B, Hq, Sq], float32, a view of a [B, Sq, Hq] tensor)."""
    torch = sys.modules.get("torch")
    if torch is None or not all(isinstance(t, torch.Tensor) for t in (query, key, value)):
        raise TypeError("flex_attention takes torch tensors (FlexKernel.run takes host arrays)")
    _forward_only(query, key, value, sinks)
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        raise ValueError(f"expected [B, H, S, D] tensors, got {tuple(query.shape)}, "
                         f"{tuple(key.shape)}, {tuple(value.shape)}")
    batch, heads, q_len, head_dim = query.shape
    if key.shape[1] != heads and not enable_gqa:
        raise ValueError(f"query has {heads} heads, key {key.shape[1]}: pass enable_gqa=True "
                         f"for grouped-query attention")
    host = query.device.type == "cpu"
    if not host and query.device.type != "cuda":
        raise ValueError(f"device {query.device} is not supported (cuda, cpu)")
    compiling = _compiling(torch)
    if compiling:  # data_ptr() cannot be read while torch.compile traces
        query, key, value = query.contiguous(), key.contiguous(), value.contiguous()
    else:
        query, key, value = _usable(query), _usable(key), _usable(value)
    out = torch.empty((batch, heads, q_len, head_dim), dtype=query.dtype, device=query.device)
    lse = torch.empty((batch, q_len, heads), dtype=torch.float32, device=query.device) \
        if return_lse else None
    if host:
        kernel = compile_flex(mask_mod, score_mod, head_dim=head_dim,
                              dtype=_kernel_dtype(query), page_size=0, arch="cpu")
        kernel.run(query, key, value, out, mask_mod=mask_mod, score_mod=score_mod, lse=lse,
                   sinks=sinks, scale=scale)
    else:
        from . import _torch_ops
        # prepare_op is a constant of the graph while torch.compile traces
        # (assume_constant_result): it traces, compiles and registers the kernel then.
        op_key, bindings = _torch_ops.prepare_flex(mask_mod, score_mod, head_dim, query.dtype,
                                                   query.device.index)
        if compiling:
            names, values, array_names, arrays = op_values(bindings, mask_mod, score_mod,
                                                           query.device)
        else:
            params, captured = _op_kernels[op_key].launch_arguments(mask_mod, score_mod,
                                                                    query.device)
            names, values = list(params), [float(x) for x in params.values()]
            array_names = list(captured)
            arrays = [data.reshape(rows, cols) for data, rows, cols in captured.values()]
        starts = in_graph_starts(torch, batch, q_len, key.shape[2], query.device) \
            if compiling else (None, None)
        _torch_ops._flex_attention(op_key, query, key, value, out, lse,
                                   float(scale) if scale is not None else 0.0, names, values,
                                   array_names, arrays, sinks, *starts)
    return (out, lse.transpose(1, 2)) if return_lse else out


def in_graph_starts(torch, batch, q_len, kv_len, device):
    """(cu_seqlens, cu_seqlens_k) of a uniform [B, H, S, D] batch made in the graph being
    compiled, for torch.ops.flexjit.flex_attention (FlexKernel.run_values' `starts`)."""
    counts = torch.arange(batch + 1, dtype=torch.int32, device=device)
    return counts * q_len, counts * kv_len


def _compiling(torch):
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and hasattr(compiler, "is_compiling"):
        return compiler.is_compiling()
    return torch._dynamo.is_compiling()


# torch.ops.flexjit.flex_attention names its FlexKernel by a string key (prepare_op).
_op_kernels = {}


def op_kernel(key):
    """The FlexKernel that prepare_op registered under `key`."""
    try:
        return _op_kernels[key]
    except KeyError:
        raise KeyError(f"flexjit: no flex_attention kernel under {key!r} (keys come from "
                       f"flexjit.flex.prepare_op, in this process)") from None


def prepare_op(mask_mod, score_mod, head_dim, dtype, device_index):
    """(key, bindings) of the pair on CUDA device `device_index`: the kernel is traced,
    compiled and kept under `key` for torch.ops.flexjit.flex_attention; `bindings` describes
    the launch values as constants (op_values reads them): (name, kind, root, path, rank,
    element, dim) per runtime parameter, or None when the trace holds objects met without a
    path (a callable other than a Python function), which only an eager call can pass."""
    torch = sys.modules["torch"]
    with torch.cuda.device(device_index):
        kernel = compile_flex(mask_mod, score_mod, head_dim=head_dim,
                              dtype=_kernel_dtype(dtype), page_size=0)
    key = f"flex.{kernel.name}.{device_index}.{id(kernel.kernel):x}"
    with _lock:
        if key not in _op_kernels:
            _op_kernels[key] = kernel  # the registry keeps the kernel (and so its id) alive
    bindings = kernel.traced.bindings
    if any(b.obj is not None for b in bindings):
        return key, None
    return key, tuple((b.name, b.kind, b.root, tuple(b.path), b.rank, b.element, b.dim)
                      for b in bindings)


def op_values(bindings, mask_mod, score_mod, device):
    """(param_names, param_values, array_names, arrays) of torch.ops.flexjit.flex_attention,
    read from the functions along prepare_op's bindings in plain Python and torch calls that
    torch.compile traces: each captured tensor is converted (int32 or float32, contiguous,
    [rows, cols]) in the graph, so its value at each call is what the kernel reads."""
    if bindings is None:
        raise TypeError("flexjit.flex_attention under torch.compile takes Python functions "
                        "(def or lambda) as mask_mod and score_mod, whose captures are found "
                        "along their closures and globals")
    torch = sys.modules["torch"]
    names, values, array_names, arrays = [], [], [], []
    for name, kind, root, path, rank, element, dim in bindings:
        obj = mask_mod if root == "mask" else score_mod
        for step, where in path:
            if step == "cell":
                obj = obj.__closure__[where].cell_contents
            elif step == "global":
                obj = obj.__globals__[where]
            else:
                obj = obj[where]
        if kind == "scalar":
            names.append(name)
            values.append(float(obj.value))
        elif kind == "extent":
            names.append(name)
            values.append(float(obj.shape[dim]))
        else:
            if not isinstance(obj, torch.Tensor):
                raise TypeError(f"captured array {name!r}: under torch.compile a captured "
                                f"array must be a torch tensor, got {type(obj).__name__}")
            data = obj.to(device=device, dtype=torch.float32 if element == "float"
                          else torch.int32).contiguous()
            array_names.append(name)
            arrays.append(data.reshape(data.shape[0] if rank >= 1 else 1, -1))
    return names, values, array_names, arrays


def _cache_kv_dtype(k_cache):
    """The kernel kv_dtype a torch K cache asks for: "fp8" for torch.float8_e4m3fn or uint8
    (e4m3 bytes), else None (the cache is q's dtype)."""
    return "fp8" if str(k_cache.dtype) in ("torch.float8_e4m3fn", "torch.uint8") else None


def flex_attention_paged(query, k_cache, v_cache, block_table, query_start_loc, seq_lens, *,
                         score_mod=None, mask_mod=None, scale=None, max_query_len=None,
                         kv_layout="NHD", out=None, lse=None, sinks=None, plan=None,
                         k_scale=None, v_scale=None):
    """The traced pair over vLLM's paged KV cache (Kernel.__call__'s arguments, CUDA tensors,
    or CPU tensors for the CPU backend): query [num_tokens, Hq, D], caches [blocks, page, Hkv,
    D] ("NHD") or [blocks, Hkv, page, D] ("HND"), block_table, query_start_loc, seq_lens int32,
    sinks float32 [Hq] or None (as flex_attention's). `b` is the request and q_idx the query's
    logical position (seq_len - query_len + its row in the request: a decode step's query sees
    the position after its history), as every paged call (docs/architecture.md#call-contract).
    An fp8 cache (torch.float8_e4m3fn, or uint8 e4m3 bytes) takes its dequantization scales
    `k_scale` and `v_scale` (numbers, or float32 tensors of 1 or Hkv elements), and the kernel
    is compiled for it. Returns out (and fills lse when given).

    With `plan` (a FlexPlan of the same functions, from flex_plan), the batch its last update()
    described runs planned (split-KV decode) through torch.ops.flexjit.plan_run: no host-device
    synchronisation, capturable in a CUDA graph; max_query_len is not read."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(query, torch.Tensor):
        raise TypeError("flex_attention_paged takes torch tensors")
    _forward_only(query, k_cache, v_cache, sinks)
    if plan is not None:
        return _planned(plan, query, k_cache, v_cache, block_table, query_start_loc, seq_lens,
                        mask_mod, score_mod, scale, kv_layout, out, lse, sinks, k_scale,
                        v_scale)
    page_size = k_cache.shape[1] if kv_layout == "NHD" else k_cache.shape[2]
    host = query.device.type == "cpu"
    with contextlib.nullcontext() if host else torch.cuda.device(query.device):
        kernel = compile_flex(mask_mod, score_mod, head_dim=query.shape[-1],
                              dtype=_kernel_dtype(query), page_size=page_size,
                              arch="cpu" if host else None, kv_dtype=_cache_kv_dtype(k_cache))
        params, arrays = kernel.paged_arguments(mask_mod, score_mod, query.device)
        return kernel.kernel(query, k_cache, v_cache, block_table, query_start_loc, seq_lens,
                             out=out, lse=lse, sinks=sinks, max_query_len=max_query_len,
                             params=params, arrays=arrays,
                             scale=float(scale) if scale is not None else 0.0,
                             kv_layout=kv_layout, k_scale=k_scale, v_scale=v_scale)


def _planned(plan, query, k_cache, v_cache, block_table, query_start_loc, seq_lens, mask_mod,
             score_mod, scale, kv_layout, out, lse, sinks, k_scale, v_scale):
    """flex_attention_paged(plan=): the checks that tie the call to the plan, then
    torch.ops.flexjit.plan_run with the plan's workspace."""
    if not isinstance(plan, FlexPlan):
        raise TypeError(f"plan: expected a flexjit.FlexPlan (flexjit.flex_plan), got "
                        f"{type(plan).__name__}")
    traced = traced_program(mask_mod, score_mod)
    if traced.source != plan.kernel.source:
        raise ValueError(f"plan: made for other functions (mask {plan.kernel.traced.mask!r}, "
                         f"score {plan.kernel.traced.score!r}) than this call's (mask "
                         f"{traced.mask!r}, score {traced.score!r}), or for other captured "
                         f"numbers, which are compile-time constants (flexjit.runtime makes "
                         f"one a parameter); make a plan of these functions")
    if query.device.type != "cuda":
        raise ValueError(f"plan: plans run on CUDA tensors, query is on {query.device}")
    if plan.device is not None and query.device.index != plan.device:
        raise ValueError(f"plan: made on cuda:{plan.device}, query is on {query.device}")
    torch = sys.modules["torch"]
    from . import _torch_ops
    with torch.cuda.device(query.device):
        params, arrays = plan.kernel.paged_arguments(mask_mod, score_mod, query.device)
        workspace = plan._workspace_for(arrays, num_reqs=seq_lens.shape[0],
                                        num_heads=query.shape[1], device=query.device)
        return _torch_ops.plan_run(plan.op_key, query, k_cache, v_cache, block_table,
                                   query_start_loc, seq_lens, out=out, lse=lse, sinks=sinks,
                                   params=params, arrays=arrays,
                                   scale=float(scale) if scale is not None else 0.0,
                                   kv_layout=kv_layout, workspace=workspace, k_scale=k_scale,
                                   v_scale=v_scale)


class FlexPlan:
    """A plan (flexjit.Plan: split-KV decode, mixed batches, CUDA graphs) of the paged kernel
    of a traced mask_mod/score_mod, made by flex_plan. The caller keeps it across steps:
    update() from host copies of each batch's lengths, then flex_attention_paged(...,
    plan=plan). It must outlive the CUDA graphs that captured a run of it."""

    def __init__(self, kernel, plan, device):
        self.kernel = kernel  # the FlexKernel
        self.plan = plan  # the flexjit.Plan
        self.device = device  # the CUDA device index it was made on (None: torch not loaded)
        self._key = None
        self._workspace = None
        self._retired = []  # smaller workspaces, which captured graphs may still point at

    @property
    def op_key(self):
        """The key of torch.ops.flexjit.plan_run's registry this plan is registered under
        (flexjit.torch_ops; registered on first use, unregistered by close())."""
        if self._key is None:
            from . import _torch_ops
            self._key = _torch_ops.register(f"flex_plan.{self.kernel.name}.{id(self):x}",
                                            self.plan)
        return self._key

    def update(self, query_start_loc, seq_lens, max_blocks_per_req, stream=None):
        """Plans the next batch (Plan.update, fj_plan_update) from host copies of its lengths:
        query_start_loc (num_reqs + 1) and seq_lens (num_reqs) as lists, CPU tensors or ctypes
        int32 arrays, and the block table's width; the work lists are copied on `stream`
        (default: torch's current stream). Outside any CUDA-graph capture."""
        self.plan.update(query_start_loc, seq_lens, max_blocks_per_req, stream)

    def _workspace_for(self, arrays, *, num_reqs, num_heads, device):
        """The workspace (uint8 CUDA tensor) a run with these arrays needs, None if none:
        kept and grown here, never while a capture is under way, so that a run can be captured
        (the library's own buffer is not capturable)."""
        if not arrays:
            return None
        size = self.kernel.kernel.workspace_size(arrays, num_reqs=num_reqs, num_heads=num_heads)
        if size == 0:
            return None
        if self._workspace is None or self._workspace.numel() < size:
            torch = sys.modules["torch"]
            if torch.cuda.is_current_stream_capturing():
                raise RuntimeError(f"flexjit: the plan needs a workspace of {size} bytes for "
                                   f"these captured tensors, and a capture is under way: run "
                                   f"it once outside the capture first, with tensors as large")
            if self._workspace is not None:
                self._retired.append(self._workspace)
            self._workspace = torch.empty(size, dtype=torch.uint8, device=device)
        return self._workspace

    def close(self):
        """Unregisters the plan's key and frees the plan (runs of it must have completed)."""
        self._unregister()
        self.plan.close()

    def _unregister(self):
        if self._key is not None:
            sys.modules["flexjit._torch_ops"].unregister(self._key)
            self._key = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self, _is_finalizing=sys.is_finalizing):
        if not _is_finalizing():
            self._unregister()


def _shape_value(name, value, minimum):
    """An int32 field of the plan's shape: an int (not a bool) of at least `minimum`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    if not minimum <= value < 2**31:
        raise ValueError(f"{name}: {value} is out of range (at least {minimum}, below 2**31)")
    return int(value)


def flex_plan(mask_mod=None, score_mod=None, *, num_heads, num_kv_heads, head_dim, max_num_reqs,
              max_query_len=1, max_num_tokens=None, dtype="bf16", page_size=16, device=None,
              kv_dtype=None):
    """A FlexPlan of the traced pair's paged kernel for batches of at most `max_num_reqs`
    requests, `max_num_tokens` query tokens (default max_num_reqs * max_query_len) and
    `max_query_len` tokens per request (1: decode only), with num_heads query heads over
    num_kv_heads; made on CUDA device `device` (default: the current one). `kv_dtype` "fp8":
    for an fp8 cache (runs then take k_scale and v_scale). Compiles the kernel (cached as
    compile_flex's) and its split-KV decode kernel, and allocates the plan's device memory."""
    shape = dict(max_num_reqs=_shape_value("max_num_reqs", max_num_reqs, 0),
                 max_query_len=_shape_value("max_query_len", max_query_len, 0),
                 num_heads=_shape_value("num_heads", num_heads, 1),
                 num_kv_heads=_shape_value("num_kv_heads", num_kv_heads, 1))
    shape["max_num_tokens"] = _shape_value(
        "max_num_tokens", shape["max_num_reqs"] * shape["max_query_len"]
        if max_num_tokens is None else max_num_tokens, 0)
    if shape["num_heads"] % shape["num_kv_heads"]:
        raise ValueError(f"num_heads ({num_heads}) is not a multiple of num_kv_heads "
                         f"({num_kv_heads})")
    head_dim = _shape_value("head_dim", head_dim, 1)
    page_size = _shape_value("page_size", page_size, 1)
    traced_program(mask_mod, score_mod)  # trace errors before any device work
    torch = sys.modules.get("torch")
    if device is not None:
        import torch
    with torch.cuda.device(device) if device is not None else contextlib.nullcontext():
        kernel = compile_flex(mask_mod, score_mod, head_dim=head_dim, dtype=dtype,
                              page_size=page_size, kv_dtype=kv_dtype)
        plan = kernel.kernel.plan(**shape)
        return FlexPlan(kernel, plan, torch.cuda.current_device() if torch is not None else None)
