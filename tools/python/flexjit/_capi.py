"""ctypes mirror of runtime/include/flexjit/flexjit.h and the loader of libflexjit_runtime.so.

The structs below copy the header field by field (order and types); tests/python checks their
sizes and offsets against the C compiler's. Change both together.
"""

import ctypes
import enum
import os
import pathlib

LIBRARY_NAME = "libflexjit_runtime.so"

PACKAGE_DIR = pathlib.Path(__file__).resolve().parent
# tools/python/flexjit/_capi.py -> the repository root, when the package runs from a checkout;
# None when it is installed (from the wheel: the library is then in PACKAGE_DIR/lib).
REPO_ROOT = PACKAGE_DIR.parents[2] if PACKAGE_DIR.parent.name == "python" and \
    PACKAGE_DIR.parents[1].name == "tools" else None


class Status(enum.IntEnum):
    """fj_status."""

    SUCCESS = 0
    INVALID_ARGUMENT = 1
    INVALID_SOURCE = 2
    NOT_FOUND = 3
    UNSUPPORTED = 4
    COMPILE = 5
    CUDA = 6
    INTERNAL = 7


class Dtype(enum.IntEnum):
    """fj_dtype."""

    FP16 = 1
    BF16 = 2
    FP8_E4M3 = 3  # since 0.8: a K/V cache dtype only (kv_dtype, cache_dtype)


class Device(enum.IntEnum):
    """fj_device: where a context-level call (fj_kv_cache_write, fj_merge_states) runs."""

    CUDA = 0
    CPU = 1


class ParamType(enum.IntEnum):
    """fj_param_type."""

    INT = 1
    BOOL = 2
    FLOAT = 3
    INT_ARRAY = 4
    FLOAT_ARRAY = 5


class ParamInfo(ctypes.Structure):
    """fj_param_info."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("type", ctypes.c_int),  # fj_param_type, a C enum: int-sized
        ("slot", ctypes.c_int32),
        ("rank", ctypes.c_int32),
        ("dims", ctypes.c_char_p * 2),
    ]


class Define(ctypes.Structure):
    """fj_define."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("value", ctypes.c_char_p),
    ]


class KernelDesc(ctypes.Structure):
    """fj_kernel_desc."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("mask", ctypes.c_char_p),
        ("head_dim", ctypes.c_int32),
        ("dtype", ctypes.c_int),  # a C enum: int-sized
        ("page_size", ctypes.c_int32),
        ("arch", ctypes.c_char_p),
        ("score", ctypes.c_char_p),
        ("defines", ctypes.POINTER(Define)),
        ("num_defines", ctypes.c_uint32),
        ("kv_dtype", ctypes.c_int),  # since 0.8; 0: dtype, FP8_E4M3: an fp8 cache
    ]


class ArrayArg(ctypes.Structure):
    """fj_array."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("rows", ctypes.c_int32),
        ("cols", ctypes.c_int32),
        ("row_stride", ctypes.c_int32),
    ]


class PagedAttentionArgs(ctypes.Structure):
    """fj_paged_attention_args."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("q", ctypes.c_void_p),
        ("out", ctypes.c_void_p),
        ("k_cache", ctypes.c_void_p),
        ("v_cache", ctypes.c_void_p),
        ("query_start_loc", ctypes.c_void_p),
        ("seq_lens", ctypes.c_void_p),
        ("block_table", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),
        ("num_tokens", ctypes.c_int32),
        ("num_reqs", ctypes.c_int32),
        ("num_heads", ctypes.c_int32),
        ("num_kv_heads", ctypes.c_int32),
        ("max_query_len", ctypes.c_int32),
        ("max_blocks_per_req", ctypes.c_int32),
        ("q_stride_token", ctypes.c_int64),
        ("q_stride_head", ctypes.c_int64),
        ("out_stride_token", ctypes.c_int64),
        ("out_stride_head", ctypes.c_int64),
        ("k_stride_block", ctypes.c_int64),
        ("k_stride_slot", ctypes.c_int64),
        ("k_stride_head", ctypes.c_int64),
        ("v_stride_block", ctypes.c_int64),
        ("v_stride_slot", ctypes.c_int64),
        ("v_stride_head", ctypes.c_int64),
        ("block_table_stride", ctypes.c_int64),
        ("lse_stride_token", ctypes.c_int64),
        ("scale", ctypes.c_float),
        ("params", ctypes.POINTER(ctypes.c_int32)),
        ("num_params", ctypes.c_int32),
        ("num_arrays", ctypes.c_int32),
        ("arrays", ctypes.POINTER(ArrayArg)),
        ("bad_index", ctypes.POINTER(ctypes.c_int32)),
        ("workspace", ctypes.c_void_p),  # null: the kernel's own buffer
        ("workspace_bytes", ctypes.c_uint64),
        ("num_blocks", ctypes.c_int64),  # since 0.5; 0: unchecked
        ("sinks", ctypes.c_void_p),  # since 0.7; float32 [num_heads], null: no sinks
        # Since 0.8: an fp8 cache's float32 scales, k_scale[kv_head * kv_scale_stride].
        ("k_scale", ctypes.c_void_p),
        ("v_scale", ctypes.c_void_p),
        ("kv_scale_stride", ctypes.c_int32),
        # Since 0.9: context parallelism, the call holds one shard of each request's keys; key
        # j of the shard has position kv_shard_offsets[r] + (j / I) * N * I + R * I + j % I.
        ("kv_shard_offsets", ctypes.c_void_p),  # int32 [num_reqs] or null
        ("global_seq_lens", ctypes.c_void_p),  # int32 [num_reqs]; null: not sharded
        ("kv_shard_rank", ctypes.c_int32),  # R
        ("kv_shard_count", ctypes.c_int32),  # N, 0 reads as 1
        ("kv_shard_interleave", ctypes.c_int32),  # I, 0 reads as 1
    ]


class VarlenAttentionArgs(ctypes.Structure):
    """fj_varlen_attention_args."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("out", ctypes.c_void_p),
        ("cu_seqlens", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),
        ("num_tokens", ctypes.c_int32),
        ("num_seqs", ctypes.c_int32),
        ("num_heads", ctypes.c_int32),
        ("num_kv_heads", ctypes.c_int32),
        ("max_seq_len", ctypes.c_int32),
        ("q_stride_token", ctypes.c_int64),
        ("q_stride_head", ctypes.c_int64),
        ("k_stride_token", ctypes.c_int64),
        ("k_stride_head", ctypes.c_int64),
        ("v_stride_token", ctypes.c_int64),
        ("v_stride_head", ctypes.c_int64),
        ("out_stride_token", ctypes.c_int64),
        ("out_stride_head", ctypes.c_int64),
        ("lse_stride_token", ctypes.c_int64),
        ("scale", ctypes.c_float),
        ("params", ctypes.POINTER(ctypes.c_int32)),
        ("num_params", ctypes.c_int32),
        ("num_arrays", ctypes.c_int32),
        ("arrays", ctypes.POINTER(ArrayArg)),
        ("bad_index", ctypes.POINTER(ctypes.c_int32)),
        ("workspace", ctypes.c_void_p),  # null: the kernel's own buffer
        ("workspace_bytes", ctypes.c_uint64),
        ("cu_seqlens_k", ctypes.c_void_p),  # since 0.6; null: keys packed like the queries
        ("num_tokens_k", ctypes.c_int32),
        ("q_stride_batch", ctypes.c_int64),
        ("k_stride_batch", ctypes.c_int64),
        ("v_stride_batch", ctypes.c_int64),
        ("out_stride_batch", ctypes.c_int64),
        ("sinks", ctypes.c_void_p),  # since 0.7; float32 [num_heads], null: no sinks
    ]


class KvCacheWriteArgs(ctypes.Structure):
    """fj_kv_cache_write_args."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("key", ctypes.c_void_p),
        ("value", ctypes.c_void_p),
        ("k_cache", ctypes.c_void_p),
        ("v_cache", ctypes.c_void_p),
        ("slot_mapping", ctypes.c_void_p),
        ("num_tokens", ctypes.c_int32),
        ("num_kv_heads", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("page_size", ctypes.c_int32),
        ("num_blocks", ctypes.c_int64),
        ("key_stride_token", ctypes.c_int64),
        ("key_stride_head", ctypes.c_int64),
        ("value_stride_token", ctypes.c_int64),
        ("value_stride_head", ctypes.c_int64),
        ("k_stride_block", ctypes.c_int64),
        ("k_stride_slot", ctypes.c_int64),
        ("k_stride_head", ctypes.c_int64),
        ("v_stride_block", ctypes.c_int64),
        ("v_stride_slot", ctypes.c_int64),
        ("v_stride_head", ctypes.c_int64),
        ("device", ctypes.c_int),  # fj_device, since 0.4
        # Since 0.8: cache_dtype FP8_E4M3 quantizes `dtype` inputs with the scales.
        ("dtype", ctypes.c_int),
        ("cache_dtype", ctypes.c_int),
        ("k_scale", ctypes.c_void_p),
        ("v_scale", ctypes.c_void_p),
        ("kv_scale_stride", ctypes.c_int32),
    ]


class MergeStatesArgs(ctypes.Structure):
    """fj_merge_states_args."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("dtype", ctypes.c_int),
        ("out_a", ctypes.c_void_p),
        ("lse_a", ctypes.c_void_p),
        ("out_b", ctypes.c_void_p),
        ("lse_b", ctypes.c_void_p),
        ("out", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),
        ("num_tokens", ctypes.c_int32),
        ("num_heads", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("out_a_stride_token", ctypes.c_int64),
        ("out_a_stride_head", ctypes.c_int64),
        ("out_b_stride_token", ctypes.c_int64),
        ("out_b_stride_head", ctypes.c_int64),
        ("out_stride_token", ctypes.c_int64),
        ("out_stride_head", ctypes.c_int64),
        ("lse_a_stride_token", ctypes.c_int64),
        ("lse_b_stride_token", ctypes.c_int64),
        ("lse_stride_token", ctypes.c_int64),
        ("device", ctypes.c_int),  # fj_device, since 0.4
        ("sinks", ctypes.c_void_p),  # since 0.7; float32 [num_heads], null: no sinks
    ]


class MergeStatesNArgs(ctypes.Structure):
    """fj_merge_states_n_args (since 0.9)."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("dtype", ctypes.c_int),
        ("device", ctypes.c_int),
        ("num_states", ctypes.c_int32),
        ("states_out", ctypes.c_void_p),
        ("states_lse", ctypes.c_void_p),
        ("out", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),
        ("num_tokens", ctypes.c_int32),
        ("num_heads", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("out_stride_state", ctypes.c_int64),
        ("out_stride_token", ctypes.c_int64),
        ("out_stride_head", ctypes.c_int64),
        ("lse_stride_state", ctypes.c_int64),
        ("lse_stride_token", ctypes.c_int64),
        ("merged_stride_token", ctypes.c_int64),
        ("merged_stride_head", ctypes.c_int64),
        ("merged_lse_stride_token", ctypes.c_int64),
        ("sinks", ctypes.c_void_p),
    ]


def library_candidates():
    """Where the library is looked for, in order: $FLEXJIT_LIBRARY, then the installed package's
    lib/ (the wheel), then, in a checkout, the repository's build folders (build/lib, .carry/lib,
    build-*/lib), then the dynamic loader's search path."""
    env = os.environ.get("FLEXJIT_LIBRARY")
    if env:
        return [env]
    found = [PACKAGE_DIR / "lib" / LIBRARY_NAME]
    if REPO_ROOT is not None:
        found += [REPO_ROOT / "build" / "lib" / LIBRARY_NAME,
                  REPO_ROOT / ".carry" / "lib" / LIBRARY_NAME]
        found += sorted(REPO_ROOT.glob("build-*/lib/" + LIBRARY_NAME))
    return [str(p) for p in found if p.is_file()] + [LIBRARY_NAME]


class PlanShape(ctypes.Structure):
    """fj_plan_shape."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("max_num_reqs", ctypes.c_int32),
        ("max_num_tokens", ctypes.c_int32),
        ("max_query_len", ctypes.c_int32),
        ("num_heads", ctypes.c_int32),
        ("num_kv_heads", ctypes.c_int32),
    ]


def signatures():
    """{function name: (restype, argtypes)} of every C API function this module calls."""
    p = ctypes.POINTER
    status = ctypes.c_int
    ctx, prog, kern = ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p
    return {
        "fj_status_string": (ctypes.c_char_p, [status]),
        "fj_runtime_version": (ctypes.c_uint32, []),
        "fj_context_create": (status, [p(ctx)]),
        "fj_context_destroy": (status, [ctx]),
        "fj_context_last_error": (ctypes.c_char_p, [ctx]),
        "fj_program_create": (status, [ctx, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                                       p(prog)]),
        "fj_program_create_from_file": (status, [ctx, ctypes.c_char_p, p(prog)]),
        "fj_program_destroy": (status, [prog]),
        "fj_program_param_slot": (status, [prog, ctypes.c_char_p, p(ctypes.c_int32)]),
        "fj_program_param_count": (status, [prog, p(ctypes.c_int32)]),
        "fj_program_array_count": (status, [prog, p(ctypes.c_int32)]),
        "fj_program_param_info": (status, [prog, ctypes.c_char_p, p(ParamInfo)]),
        "fj_kernel_create": (status, [ctx, prog, p(KernelDesc), p(kern)]),
        "fj_kernel_destroy": (status, [kern]),
        "fj_kernel_name": (status, [kern, p(ctypes.c_char_p)]),
        "fj_attention_workspace_size": (status, [kern, p(ArrayArg), ctypes.c_int32,
                                                 p(ctypes.c_uint64)]),
        "fj_paged_attention": (status, [kern, p(PagedAttentionArgs), ctypes.c_void_p]),
        "fj_varlen_attention": (status, [kern, p(VarlenAttentionArgs), ctypes.c_void_p]),
        "fj_plan_create": (status, [kern, p(PlanShape), p(ctypes.c_void_p)]),
        "fj_plan_destroy": (status, [ctypes.c_void_p]),
        "fj_plan_update": (status, [ctypes.c_void_p, p(ctypes.c_int32), p(ctypes.c_int32),
                                    ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p]),
        "fj_plan_run": (status, [ctypes.c_void_p, p(PagedAttentionArgs), ctypes.c_void_p]),
        "fj_kv_cache_write": (status, [ctx, p(KvCacheWriteArgs), ctypes.c_void_p]),
        "fj_merge_states": (status, [ctx, p(MergeStatesArgs), ctypes.c_void_p]),
        "fj_merge_states_n": (status, [ctx, p(MergeStatesNArgs), ctypes.c_void_p]),
    }


def _declare(lib):
    for name, (restype, argtypes) in signatures().items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes
    return lib


_library = None


def library():
    """The loaded runtime library (loaded once): the first candidate that loads and has every
    function declared here. Raises OSError listing every place tried."""
    global _library
    if _library is None:
        errors = []
        for candidate in library_candidates():
            try:
                _library = _declare(ctypes.CDLL(candidate))
                _library.flexjit_path = candidate
                break
            except OSError as error:
                errors.append(f"{candidate}: {error}")
            except AttributeError as error:  # a symbol of this module's C API is missing
                errors.append(f"{candidate}: {error} (a library older than this module: "
                              f"rebuild it)")
        else:
            raise OSError("cannot load the flexjit runtime library (set FLEXJIT_LIBRARY):\n  "
                          + "\n  ".join(errors))
    return _library


_unchecked = {}


def unchecked(name):
    """Function `name` of the library without argtypes, for the launch paths: ctypes converts no
    argument, so each must already be a ctypes object (a c_void_p handle, a byref()), a bytes
    object (passed as a pointer to its bytes) or None (null); never a Python int, which would
    go as a C int. Returns the status as an int."""
    function = _unchecked.get(name)
    if function is None:
        lib = library()
        function = _unchecked[name] = lib._FuncPtr((name, lib))
        function.restype = ctypes.c_int
    return function
