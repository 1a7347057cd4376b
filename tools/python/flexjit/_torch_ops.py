"""torch.ops.flexjit: the kernels and plans of this module as PyTorch custom operators.

    import flexjit
    ops = flexjit.torch_ops                    # imports torch and registers the operators
    ops.register("sliding128", kern)           # a Kernel or a Plan, under a string key
    out = ops.paged_attention("sliding128", q, k_cache, v_cache, block_table,
                              query_start_loc, seq_lens, max_query_len=1,
                              params={"window": 1024})

The operators (torch.library define/impl, with fake implementations; SCHEMAS lists them) write
`out` (and `lse`, and the `workspace`) in place and return nothing, so torch.compile traces them
without a graph break and functionalises the writes. They name their kernel or plan by a string
key looked up in this module's registry when the operator runs: torch.compile guards on the key
(a constant of the graph), never on the registry's contents. docs/python.md has the schemas,
the guards and the CUDA-graph rules. Importing flexjit does not import this module.
"""

import contextlib
import ctypes
import numbers
import struct
from typing import NamedTuple

import torch

from . import (Kernel, KvShard, ParamType, Plan, _stream_arg, _struct_of, _torch_calls,
               _torch_calls_of)
from . import flex as _flex

__all__ = ["register", "unregister", "lookup", "paged_attention", "varlen_attention",
           "plan_run", "merge_states_n", "workspace_size", "SCHEMAS"]

# What the operators take. The scalar runtime parameters travel as names and numbers (an
# int or bool parameter's number must be integral), the array parameters as names and tensors;
# `workspace` (uint8, CUDA) is fj_*_attention_args.workspace, needed to capture a launch whose
# variant reads arrays along a position dimension. `sinks` (float32 [num_heads], since 0.7)
# comes last with a default, so calls written for the schemas without it still match; so do
# `k_scale` and `v_scale` after it (since 0.8: an fp8 cache's float32 scales, 1 or num_kv_heads
# elements) in the operators that read a paged cache, and after those a KvShard's fields (since
# 0.9, context parallelism: the int32 [num_reqs] kv_shard_offsets and global_seq_lens, and the
# rank, count and interleave, whose defaults are the call over every key).
SCHEMAS = {
    "paged_attention":
        "(str kernel, Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_table, "
        "Tensor query_start_loc, Tensor seq_lens, Tensor(a!) out, Tensor(b!)? lse, "
        "SymInt max_query_len, float scale, str kv_layout, str[] param_names, "
        "float[] param_values, str[] array_names, Tensor[] arrays, Tensor(c!)? workspace, "
        "Tensor? sinks=None, Tensor? k_scale=None, Tensor? v_scale=None, "
        "Tensor? kv_shard_offsets=None, Tensor? global_seq_lens=None, int kv_shard_rank=0, "
        "int kv_shard_count=1, int kv_shard_interleave=1) -> ()",
    "varlen_attention":
        "(str kernel, Tensor q, Tensor k, Tensor v, Tensor cu_seqlens, Tensor(a!) out, "
        "Tensor(b!)? lse, SymInt max_seq_len, float scale, str[] param_names, "
        "float[] param_values, str[] array_names, Tensor[] arrays, Tensor(c!)? workspace, "
        "Tensor? sinks=None) -> ()",
    "plan_run":
        "(str plan, Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_table, "
        "Tensor query_start_loc, Tensor seq_lens, Tensor(a!) out, Tensor(b!)? lse, "
        "float scale, str kv_layout, str[] param_names, float[] param_values, "
        "str[] array_names, Tensor[] arrays, Tensor(c!)? workspace, Tensor? sinks=None, "
        "Tensor? k_scale=None, Tensor? v_scale=None, Tensor? kv_shard_offsets=None, "
        "Tensor? global_seq_lens=None, int kv_shard_rank=0, int kv_shard_count=1, "
        "int kv_shard_interleave=1) -> ()",
    # flexjit.flex_attention's launch on [B, H, S, D] tensors (the batch and head strides, the
    # query and key lengths are read from q, k, v, out as they are at the call); `kernel` is
    # a key of flexjit.flex.prepare_op, lse float32 [B, Sq, Hq], scale 0: 1/sqrt(D), sinks
    # float32 [Hq].
    "flex_attention":
        "(str kernel, Tensor q, Tensor k, Tensor v, Tensor(a!) out, Tensor(b!)? lse, "
        "float scale, str[] param_names, float[] param_values, str[] array_names, "
        "Tensor[] arrays, Tensor? sinks=None, Tensor? cu_seqlens=None, "
        "Tensor? cu_seqlens_k=None) -> ()",
    # Context.merge_states_n (since 0.9; CUDA tensors since 0.10): states_out [num_states, num_tokens, num_heads, head_dim],
    # states_lse float32 [num_states, num_tokens, num_heads], out [num_tokens, num_heads,
    # head_dim], lse float32 [num_tokens, num_heads], sinks float32 [num_heads].
    "merge_states_n":
        "(Tensor states_out, Tensor states_lse, Tensor(a!) out, Tensor(b!)? lse, "
        "Tensor? sinks=None) -> ()",
}

_registry = {}
_INT, _BOOL = ParamType.INT, ParamType.BOOL


def register(key, target):
    """Makes Kernel or Plan `target` callable by the operators under string `key` (replacing
    what the key named before: compiled graphs that use the key see the new one at their next
    run, without recompiling). Returns the key."""
    if not isinstance(key, str) or not key:
        raise TypeError(f"key: expected a non-empty str, got {key!r}")
    if not isinstance(target, (Kernel, Plan)):
        raise TypeError(f"register: expected a flexjit.Kernel or flexjit.Plan, got "
                        f"{type(target).__name__}")
    _registry[key] = target
    return key


def unregister(key):
    """Forgets `key` (the kernel or plan lives on while anything else holds it)."""
    _registry.pop(key, None)


def lookup(key, kind=None):
    """The Kernel or Plan registered under `key`; KeyError naming the known keys if none, and
    TypeError if it is not a `kind` (Kernel or Plan)."""
    try:
        target = _registry[key]
    except KeyError:
        known = ", ".join(sorted(_registry)) or "none"
        raise KeyError(f"flexjit: no kernel or plan registered under {key!r} (registered: "
                       f"{known}; flexjit.torch_ops.register)") from None
    if kind is not None and not isinstance(target, kind):
        raise TypeError(f"flexjit: {key!r} names a {type(target).__name__}, this operator "
                        f"takes a {kind.__name__}")
    return target


# --- the operators' implementations (CUDA; paged_attention and merge_states_n also CPU) -------

def _named_params(program, names, values):
    """{name: value} for Program.param_values from the operator's two lists: int and bool
    parameters get ints (their numbers must be integral), float parameters the numbers."""
    if len(names) != len(values):
        raise ValueError(f"param_names has {len(names)} entries, param_values {len(values)}")
    params = {}
    for name, value in zip(names, values):
        if program.param_info(name).type in (_INT, _BOOL):
            if not float(value).is_integer():
                raise TypeError(f"parameter {name!r} ({program.param_info(name)}): expected an "
                                f"integral value, got {value!r}")
            value = int(value)
        params[name] = value
    return params


def _named_arrays(names, tensors):
    """{name: tensor} from the operator's two lists; None for none."""
    if len(names) != len(tensors):
        raise ValueError(f"array_names has {len(names)} entries, arrays {len(tensors)}")
    return dict(zip(names, tensors)) or None


def _use_workspace(args, workspace):
    """Points a launch's struct at the caller's workspace (a CUDA tensor; its bytes)."""
    if workspace is None:
        return
    if not workspace.is_cuda or not workspace.is_contiguous():
        raise ValueError("workspace: expected a contiguous CUDA tensor")
    args.workspace = workspace.data_ptr()
    args.workspace_bytes = workspace.numel() * workspace.element_size()


_DOUBLES = struct.Struct("<d")


def _params_key(names, values):
    """The operator's scalar parameters as part of a geometry key (Kernel._checked_args): the
    lists as given, values by their bits. _named_params maps equal lists to equal params, so a
    call that matches a checked one passes the same checks."""
    return ("op", tuple(names), tuple(map(_DOUBLES.pack, values)))


class _Shard(NamedTuple):
    """The operators' shard arguments as Kernel._checked_args reads a KvShard: it keys the
    rank, count and interleave by value and the arrays by geometry, and writes the arrays'
    pointers. A call that matches a kept one passes the checks the KvShard of that one's
    template passed (_template builds it), so the calls in between build none."""

    rank: int
    count: int
    interleave: int
    offsets: object  # a tensor, or None
    global_seq_lens: object


def _shard(offsets, global_seq_lens, rank, count, interleave):
    """_Shard of the operators' trailing arguments; None for their defaults (the call holds
    every key, as kv_shard=None)."""
    if offsets is None and global_seq_lens is None and rank == 0 and count == 1 and \
            interleave == 1:
        return None
    return _Shard(rank, count, interleave, offsets, global_seq_lens)


def _template(kernel, key, q, k_cache, v_cache, block_table, query_start_loc, seq_lens, out,
              lse, sinks, max_query_len, scale, kv_layout, param_names, param_values,
              array_names, arrays, workspace, k_scale, v_scale, shard):
    """Kernel._template from the operator's lists and _Shard (prepare()'s checks, KvShard's),
    with the workspace."""
    args, stream = kernel._template(
        key, q, k_cache, v_cache, block_table, query_start_loc, seq_lens, out, lse, sinks,
        max_query_len,
        (_named_params(kernel.program, param_names, param_values)
         if param_names or param_values else None),
        _named_arrays(array_names, arrays), scale,
        kv_layout, k_scale, v_scale,
        None if shard is None else KvShard(shard.rank, shard.count, shard.interleave,
                                           offsets=shard.offsets,
                                           global_seq_lens=shard.global_seq_lens))
    _use_workspace(args, workspace)
    return ctypes.byref(args), stream


def _with_workspace(data, workspace):
    """A kept call's struct (_checked_args') pointed at the caller's workspace."""
    args = _struct_of(data)
    _use_workspace(args, workspace)
    return ctypes.byref(args)


# The paged implementations run on every eager call of the operators: Kernel._checked_args
# finds the checks of an earlier call of the same geometry (array parameters' included), and
# the launch goes out without another layer of calls. paged_attention also
# runs CPU kernels (arch "cpu") over CPU tensors.

def _paged_attention_impl(kernel, q, k_cache, v_cache, block_table, query_start_loc, seq_lens,
                          out, lse, max_query_len, scale, kv_layout, param_names, param_values,
                          array_names, arrays, workspace, sinks=None, k_scale=None,
                          v_scale=None, kv_shard_offsets=None, global_seq_lens=None,
                          kv_shard_rank=0, kv_shard_count=1, kv_shard_interleave=1):
    target = _registry.get(kernel)
    if not isinstance(target, Kernel):
        target = lookup(kernel, Kernel)  # raises
    shard = _shard(kv_shard_offsets, global_seq_lens, kv_shard_rank, kv_shard_count,
                   kv_shard_interleave)
    data, stream, key = target._checked_args(
        q, k_cache, v_cache, block_table, query_start_loc, seq_lens, out, lse, sinks,
        max_query_len, scale, kv_layout,
        _params_key(param_names, param_values) if param_names or param_values else (),
        k_scale, v_scale, shard,
        _named_arrays(array_names, arrays))
    if data is None:
        data, stream = _template(target, key, q, k_cache, v_cache, block_table, query_start_loc,
                                 seq_lens, out, lse, sinks, max_query_len, scale, kv_layout,
                                 param_names, param_values, array_names, arrays, workspace,
                                 k_scale, v_scale, shard)
    elif workspace is not None:
        data = _with_workspace(data, workspace)
    status = target._paged_call(target._handle_arg, data, _stream_arg(stream) if stream else None)
    if status:
        target._failed(status, "fj_paged_attention")


def _varlen_attention_impl(kernel, q, k, v, cu_seqlens, out, lse, max_seq_len, scale,
                           param_names, param_values, array_names, arrays, workspace, sinks=None):
    target = lookup(kernel, Kernel)
    launch = target.prepare_varlen(q, k, v, cu_seqlens, out=out, lse=lse, sinks=sinks,
                                   max_seq_len=max_seq_len, scale=scale,
                                   params=_named_params(target.program, param_names,
                                                        param_values),
                                   arrays=_named_arrays(array_names, arrays))
    _use_workspace(launch.args, workspace)
    launch.launch()


def _plan_run_impl(plan, q, k_cache, v_cache, block_table, query_start_loc, seq_lens, out, lse,
                   scale, kv_layout, param_names, param_values, array_names, arrays, workspace,
                   sinks=None, k_scale=None, v_scale=None, kv_shard_offsets=None,
                   global_seq_lens=None, kv_shard_rank=0, kv_shard_count=1,
                   kv_shard_interleave=1):
    target = _registry.get(plan)
    if not isinstance(target, Plan):
        target = lookup(plan, Plan)  # raises
    kernel = target.kernel
    shard = _shard(kv_shard_offsets, global_seq_lens, kv_shard_rank, kv_shard_count,
                   kv_shard_interleave)
    # max_query_len is not read by a planned run (the plan's update has the lengths); passing
    # 0 keeps prepare() from reading query_start_loc back, which capture forbids.
    data, stream, key = kernel._checked_args(
        q, k_cache, v_cache, block_table, query_start_loc, seq_lens, out, lse, sinks, 0, scale,
        kv_layout,
        _params_key(param_names, param_values) if param_names or param_values else (),
        k_scale, v_scale, shard,
        _named_arrays(array_names, arrays))
    if data is None:
        data, stream = _template(kernel, key, q, k_cache, v_cache, block_table, query_start_loc,
                                 seq_lens, out, lse, sinks, 0, scale, kv_layout, param_names,
                                 param_values, array_names, arrays, workspace, k_scale, v_scale,
                                 shard)
    elif workspace is not None:
        data = _with_workspace(data, workspace)
    target._run_data(data, stream)


def _flex_attention_impl(kernel, q, k, v, out, lse, scale, param_names, param_values,
                         array_names, arrays, sinks=None, cu_seqlens=None, cu_seqlens_k=None):
    target = _flex.op_kernel(kernel)
    params = _named_params(target.program, param_names, param_values)
    captured = {}
    for name, tensor in zip(array_names, arrays):
        if tensor.dim() != 2:
            raise ValueError(f"array {name!r}: expected [rows, cols], got {tuple(tensor.shape)}")
        # the descriptor's rows are cols elements apart
        captured[name] = (tensor.contiguous(), tensor.shape[0], tensor.shape[1])
    if len(captured) != len(arrays):
        raise ValueError(f"array_names has {len(array_names)} entries, arrays {len(arrays)}")
    with _on_device(q):
        target.run_values(q, k, v, out, params, captured, lse=lse, sinks=sinks,
                          scale=scale or None, starts=(cu_seqlens, cu_seqlens_k))


def _on_device(tensor):
    """torch.cuda.device(tensor.device), or no context when that is the current device already
    (the usual case: the context manager costs microseconds a call)."""
    if tensor.is_cuda:
        calls = _torch_calls.get(type(tensor)) or _torch_calls_of(tensor)
        if tensor.device.index == calls.current_device():
            return contextlib.nullcontext()
    return torch.cuda.device(tensor.device)


def _merge_states_n_impl(states_out, states_lse, out, lse, sinks=None):
    # On the tensors' device (the host for CPU tensors), through the module's context for
    # context-level calls.
    _flex._default_context().merge_states_n(states_out, states_lse, out=out, lse=lse,
                                            sinks=sinks)


# --- fake implementations: what torch.compile traces ------------------------------------------

def _fake_checks(q, out, lse, sinks):
    """What the fakes check (the CUDA implementations check everything): out is like q, lse
    float32 [num_tokens, num_heads], sinks float32 [num_heads]."""
    torch._check(q.dim() == 3, lambda: f"flexjit: q has shape {tuple(q.shape)}, expected "
                 f"[num_tokens, num_heads, head_dim]")
    torch._check(out.dim() == 3 and out.dtype == q.dtype,
                 lambda: f"flexjit: out is {out.dtype} {tuple(out.shape)}, q {q.dtype}")
    for d in range(3):
        torch._check(out.shape[d] == q.shape[d],
                     lambda: f"flexjit: out {tuple(out.shape)} differs from q {tuple(q.shape)}")
    _fake_lse(lse, q.shape[:2])
    _fake_sinks(sinks, q.shape[1])


def _fake_lse(lse, rows):
    """What the fakes check of an LSE (None, or float32 of the output's [num_tokens,
    num_heads], `rows`)."""
    if lse is not None:
        torch._check(lse.dim() == 2 and lse.dtype == torch.float32,
                     lambda: f"flexjit: lse is {lse.dtype} {tuple(lse.shape)}, expected float32 "
                     f"[num_tokens, num_heads]")
        for d in range(2):
            torch._check(lse.shape[d] == rows[d],
                         lambda: f"flexjit: lse {tuple(lse.shape)}, expected {tuple(rows)}")


def _fake_scales(k_scale, v_scale):
    """What the fakes check of an fp8 cache's scales (None, or float32 of rank 0 or 1)."""
    for name, scale in (("k_scale", k_scale), ("v_scale", v_scale)):
        if scale is not None:
            torch._check(scale.dim() <= 1 and scale.dtype == torch.float32,
                         lambda: f"flexjit: {name} is {scale.dtype} {tuple(scale.shape)}, "
                         f"expected float32 of 1 or num_kv_heads elements")


def _fake_sinks(sinks, num_heads):
    """What the fakes check of sinks (None, or float32 [num_heads])."""
    if sinks is not None:
        torch._check(sinks.dim() == 1 and sinks.dtype == torch.float32,
                     lambda: f"flexjit: sinks is {sinks.dtype} {tuple(sinks.shape)}, expected "
                     f"float32 [num_heads]")
        torch._check(sinks.shape[0] == num_heads,
                     lambda: f"flexjit: sinks {tuple(sinks.shape)}, expected ({num_heads},)")


def _fake_shard(q, seq_lens, offsets, global_seq_lens):
    """What the fakes check of a shard's arrays (None, or int32 [num_reqs] on q's device)."""
    for name, array in (("kv_shard_offsets", offsets), ("global_seq_lens", global_seq_lens)):
        if array is not None:
            torch._check(array.dim() == 1 and array.dtype == torch.int32 and
                         array.device == q.device,
                         lambda: f"flexjit: {name} is {array.dtype} {tuple(array.shape)} on "
                         f"{array.device}, expected int32 [num_reqs] on {q.device}")
            torch._check(array.shape[0] == seq_lens.shape[0],
                         lambda: f"flexjit: {name} {tuple(array.shape)}, expected "
                         f"({seq_lens.shape[0]},) (num_reqs)")


def _paged_attention_fake(kernel, q, k_cache, v_cache, block_table, query_start_loc, seq_lens,
                          out, lse, max_query_len, scale, kv_layout, param_names, param_values,
                          array_names, arrays, workspace, sinks=None, k_scale=None,
                          v_scale=None, kv_shard_offsets=None, global_seq_lens=None,
                          kv_shard_rank=0, kv_shard_count=1, kv_shard_interleave=1):
    _fake_checks(q, out, lse, sinks)
    _fake_scales(k_scale, v_scale)
    _fake_shard(q, seq_lens, kv_shard_offsets, global_seq_lens)


def _varlen_attention_fake(kernel, q, k, v, cu_seqlens, out, lse, max_seq_len, scale,
                           param_names, param_values, array_names, arrays, workspace,
                           sinks=None):
    _fake_checks(q, out, lse, sinks)


def _plan_run_fake(plan, q, k_cache, v_cache, block_table, query_start_loc, seq_lens, out, lse,
                   scale, kv_layout, param_names, param_values, array_names, arrays, workspace,
                   sinks=None, k_scale=None, v_scale=None, kv_shard_offsets=None,
                   global_seq_lens=None, kv_shard_rank=0, kv_shard_count=1,
                   kv_shard_interleave=1):
    _fake_checks(q, out, lse, sinks)
    _fake_scales(k_scale, v_scale)
    _fake_shard(q, seq_lens, kv_shard_offsets, global_seq_lens)


def _flex_attention_fake(kernel, q, k, v, out, lse, scale, param_names, param_values,
                         array_names, arrays, sinks=None, cu_seqlens=None, cu_seqlens_k=None):
    torch._check(q.dim() == 4 and k.dim() == 4 and v.dim() == 4,
                 lambda: f"flexjit: q, k, v have shapes {tuple(q.shape)}, {tuple(k.shape)}, "
                 f"{tuple(v.shape)}, expected [B, H, S, D]")
    torch._check(out.dim() == 4 and out.dtype == q.dtype,
                 lambda: f"flexjit: out is {out.dtype} {tuple(out.shape)}, q {q.dtype}")
    for d in range(4):
        torch._check(out.shape[d] == q.shape[d],
                     lambda: f"flexjit: out {tuple(out.shape)} differs from q {tuple(q.shape)}")
    if lse is not None:
        want = (q.shape[0], q.shape[2], q.shape[1])
        torch._check(lse.dim() == 3 and lse.dtype == torch.float32,
                     lambda: f"flexjit: lse is {lse.dtype} {tuple(lse.shape)}, expected float32 "
                     f"[B, Sq, Hq]")
        for d in range(3):
            torch._check(lse.shape[d] == want[d],
                         lambda: f"flexjit: lse {tuple(lse.shape)}, expected {want}")
    _fake_sinks(sinks, q.shape[1])


def _merge_states_n_fake(states_out, states_lse, out, lse, sinks=None):
    torch._check(states_out.dim() == 4,
                 lambda: f"flexjit: states_out has shape {tuple(states_out.shape)}, expected "
                 f"[num_states, num_tokens, num_heads, head_dim]")
    torch._check(states_lse.dim() == 3 and states_lse.dtype == torch.float32,
                 lambda: f"flexjit: states_lse is {states_lse.dtype} "
                 f"{tuple(states_lse.shape)}, expected float32 [num_states, num_tokens, "
                 f"num_heads]")
    for d in range(3):
        torch._check(states_lse.shape[d] == states_out.shape[d],
                     lambda: f"flexjit: states_lse {tuple(states_lse.shape)}, expected "
                     f"{tuple(states_out.shape[:3])}")
    torch._check(out.dim() == 3 and out.dtype == states_out.dtype,
                 lambda: f"flexjit: out is {out.dtype} {tuple(out.shape)}, states_out "
                 f"{states_out.dtype}")
    for d in range(3):
        torch._check(out.shape[d] == states_out.shape[d + 1],
                     lambda: f"flexjit: out {tuple(out.shape)}, expected "
                     f"{tuple(states_out.shape[1:])}")
    _fake_lse(lse, states_out.shape[1:3])
    _fake_sinks(sinks, states_out.shape[2])


_IMPLS = {"paged_attention": (_paged_attention_impl, _paged_attention_fake),
          "flex_attention": (_flex_attention_impl, _flex_attention_fake),
          "varlen_attention": (_varlen_attention_impl, _varlen_attention_fake),
          "plan_run": (_plan_run_impl, _plan_run_fake),
          "merge_states_n": (_merge_states_n_impl, _merge_states_n_fake)}
# The operators whose implementation also runs on CPU tensors (a kernel created with arch
# "cpu"; merge_states_n on the host); plans are CUDA only, and flex_attention on CPU tensors
# calls its kernel directly.
_CPU_IMPLS = ("paged_attention", "merge_states_n")


def _define():
    library = torch.library.Library("flexjit", "DEF")
    register_fake = getattr(torch.library, "register_fake", None) or torch.library.impl_abstract
    for name, schema in SCHEMAS.items():
        impl, fake = _IMPLS[name]
        library.define(name + schema)
        library.impl(name, impl, "CUDA")
        if name in _CPU_IMPLS:
            library.impl(name, impl, "CPU")
        register_fake("flexjit::" + name, fake, lib=library)
    return library


_library = _define()  # kept: the registrations live as long as this object
# The overloads themselves: calling the packet (torch.ops.flexjit.paged_attention) resolves
# the overload on every call.
_paged_attention = torch.ops.flexjit.paged_attention.default
_varlen_attention = torch.ops.flexjit.varlen_attention.default
_plan_run = torch.ops.flexjit.plan_run.default
_flex_attention = torch.ops.flexjit.flex_attention.default
_merge_states_n = torch.ops.flexjit.merge_states_n.default
# flexjit.flex_attention calls it: a constant while torch.compile traces (called once, then,
# with the functions themselves; its result is the kernel's key and where the launch values
# are), an ordinary call in eager mode.
prepare_flex = torch._dynamo.assume_constant_result(_flex.prepare_op)


# --- Python entry points (traceable by torch.compile) -----------------------------------------

def _scale_tensor(name, scale, like):
    """k_scale or v_scale for the operators: a tensor as it is, a number as a one-element
    float32 tensor on like's device (made at each call, by a fill that a CUDA graph captures
    with the value), None."""
    if scale is None or isinstance(scale, torch.Tensor):
        return scale
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"{name}: expected a number or a float32 tensor, got "
                        f"{type(scale).__name__}")
    return torch.full((1,), float(scale), dtype=torch.float32, device=like.device)


def _shard_args(kv_shard):
    """The operators' five trailing arguments of `kv_shard` (a KvShard whose arrays are torch
    tensors, or None: their defaults, the call over every key)."""
    if kv_shard is None:
        return None, None, 0, 1, 1
    if not isinstance(kv_shard, KvShard):
        raise TypeError(f"kv_shard: expected a flexjit.KvShard, got {type(kv_shard).__name__}")
    for name, array in (("offsets", kv_shard.offsets),
                        ("global_seq_lens", kv_shard.global_seq_lens)):
        if array is not None and not isinstance(array, torch.Tensor):
            raise TypeError(f"kv_shard: the operators take {name} as a torch tensor (int32 "
                            f"[num_reqs] on q's device), got {type(array).__name__}")
    return (kv_shard.offsets, kv_shard.global_seq_lens, kv_shard.rank, kv_shard.count,
            kv_shard.interleave)


def _split(params, arrays):
    params = params or {}
    arrays = arrays or {}
    names = list(params)
    array_names = list(arrays)
    return (names, [float(params[name]) for name in names], array_names,
            [arrays[name] for name in array_names])


def paged_attention(kernel, q, k_cache, v_cache, block_table, query_start_loc, seq_lens, *,
                    max_query_len, out=None, lse=None, sinks=None, params=None, arrays=None,
                    scale=0.0, kv_layout="NHD", workspace=None, k_scale=None, v_scale=None,
                    kv_shard=None):
    """torch.ops.flexjit.paged_attention with Kernel.__call__'s arguments; `kernel` is a key
    given to register(). `max_query_len` (the longest query, a host int) is required: reading
    it from query_start_loc would synchronise. `k_scale`, `v_scale`: an fp8 cache's scales,
    tensors (or numbers, made tensors at each call). `kv_shard`: a flexjit.KvShard whose arrays
    are torch tensors, when the call holds one shard of each request's keys (CUDA kernels since
    0.10; merge the shards' out and lse with merge_states_n). Returns `out` (a new tensor like q
    if None)."""
    if out is None:
        out = q.new_empty(q.shape)
    names, values, array_names, tensors = _split(params, arrays)
    _paged_attention(kernel, q, k_cache, v_cache, block_table, query_start_loc, seq_lens, out,
                     lse, max_query_len, float(scale), kv_layout, names, values, array_names,
                     tensors, workspace, sinks, _scale_tensor("k_scale", k_scale, q),
                     _scale_tensor("v_scale", v_scale, q), *_shard_args(kv_shard))
    return out


def varlen_attention(kernel, q, k, v, cu_seqlens, *, max_seq_len, out=None, lse=None,
                     sinks=None, params=None, arrays=None, scale=0.0, workspace=None):
    """torch.ops.flexjit.varlen_attention with Kernel.varlen's arguments (a page_size 0
    kernel's key); `max_seq_len` is required. Returns `out`."""
    if out is None:
        out = q.new_empty(q.shape)
    names, values, array_names, tensors = _split(params, arrays)
    _varlen_attention(kernel, q, k, v, cu_seqlens, out, lse, max_seq_len, float(scale), names,
                      values, array_names, tensors, workspace, sinks)
    return out


def plan_run(plan, q, k_cache, v_cache, block_table, query_start_loc, seq_lens, *, out=None,
             lse=None, sinks=None, params=None, arrays=None, scale=0.0, kv_layout="NHD",
             workspace=None, k_scale=None, v_scale=None, kv_shard=None):
    """torch.ops.flexjit.plan_run: Plan.run over these tensors, the batch of the plan's last
    update (`plan` is a key given to register()). Capturable in a CUDA graph; update the plan
    outside the capture (Plan.update). `k_scale`, `v_scale`, `kv_shard` as paged_attention's
    (a plan runs sharded since 0.10). Returns `out`."""
    if out is None:
        out = q.new_empty(q.shape)
    names, values, array_names, tensors = _split(params, arrays)
    _plan_run(plan, q, k_cache, v_cache, block_table, query_start_loc, seq_lens, out, lse,
              float(scale), kv_layout, names, values, array_names, tensors, workspace, sinks,
              _scale_tensor("k_scale", k_scale, q), _scale_tensor("v_scale", v_scale, q),
              *_shard_args(kv_shard))
    return out


def merge_states_n(states_out, states_lse, *, out=None, lse=None, sinks=None):
    """torch.ops.flexjit.merge_states_n: Context.merge_states_n of the shards' gathered states
    (states_out [num_states, num_tokens, num_heads, head_dim], states_lse float32 [num_states,
    num_tokens, num_heads]) into `out` (a new tensor if None) and `lse` (float32 [num_tokens,
    num_heads], optional), with the sinks (float32 [num_heads]) counted once here. On the
    tensors' device (CUDA tensors since 0.10). Returns `out`."""
    if out is None:
        out = states_out.new_empty(states_out.shape[1:])
    _merge_states_n(states_out, states_lse, out, lse, sinks)
    return out


def workspace_size(kernel, arrays, *, num_reqs, num_heads):
    """Bytes of workspace (fj_attention_workspace_size) the registered kernel `kernel` needs
    with these array parameters ({name: tensor}); 0 when it summarises none. Allocate it as
    torch.empty(size, dtype=torch.uint8, device="cuda") and pass it as workspace=."""
    target = lookup(kernel)
    target = target.kernel if isinstance(target, Plan) else target
    return target.workspace_size(arrays, num_reqs=num_reqs, num_heads=num_heads)
