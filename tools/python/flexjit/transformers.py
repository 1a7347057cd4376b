"""Hugging Face transformers on flexjit: attn_implementation="flexjit" (docs/transformers.md).

    import flexjit.transformers
    flexjit.transformers.register()
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="flexjit")

register() puts two functions into transformers' interfaces under one name: a mask function
(AttentionMaskInterface), which transformers calls once per forward and mask type instead of
building a dense 4-D mask, and returns a Masks object (the cache offsets and the padding as
per-request int32 tensors); and an attention function (AttentionInterface), which each layer
calls with that object and runs flexjit.flex_attention with a mask_mod reading those tensors,
so one kernel serves every batch, prompt length and decode step. A layer's learnable sink
logits (gpt-oss's `s_aux`) go in as flex_attention's `sinks`.

The configuration mapping (layer_attention, LayerAttention, UnsupportedConfig) reads a config
object or a plain dict and needs neither torch nor transformers.
"""

import ctypes
import sys
from typing import NamedTuple, Optional

from . import trace as _trace

__all__ = ["register", "layer_attention", "layer_plan", "LayerAttention", "UnsupportedConfig",
           "Masks", "NAME"]

NAME = "flexjit"

# Model types whose attention adds a learnable sink logit per query head, which transformers
# passes each layer's attention function as `s_aux`.
SINK_MODEL_TYPES = ("gpt_oss",)


class UnsupportedConfig(ValueError):
    """A model configuration or call that flexjit cannot run yet; `field` names the
    configuration field or keyword argument responsible."""

    def __init__(self, field, message):
        self.field = field
        super().__init__(f"flexjit attention: {field}: {message}")


class LayerAttention(NamedTuple):
    """What one decoder layer's attention is: `kind` "causal" or "sliding" (a key is visible
    when 0 <= q - kv < window, in cache positions), `window` (sliding only), `softcap`
    (scores become softcap * tanh(score / softcap) after scaling; None for none) and `sinks`
    (a learnable logit per query head joins each row's softmax denominator: transformers
    passes the layer's as `s_aux`)."""
    kind: str
    window: Optional[int] = None
    softcap: Optional[float] = None
    sinks: bool = False


def _field(config, name, default=None):
    if isinstance(config, dict):
        return config.get(name, default)
    return getattr(config, name, default)


def _config_errors(config):
    """Raises UnsupportedConfig for what no layer of the model can run."""
    if _field(config, "use_bidirectional_attention", False):
        raise UnsupportedConfig("use_bidirectional_attention", "only causal attention is "
                                "mapped")
    if not _field(config, "is_causal", True):
        raise UnsupportedConfig("is_causal", "only causal attention is mapped")


def layer_attention(config, layer_idx):
    """The LayerAttention of layer `layer_idx` of `config` (a transformers config or a dict):
    `layer_types[layer_idx]` when the config has layer_types ("full_attention" or
    "sliding_attention", the window from `sliding_window`), else sliding for every layer when
    `sliding_window` is set (Mistral), else causal; `attn_logit_softcapping` as the score;
    sinks for the model types of SINK_MODEL_TYPES. Raises UnsupportedConfig naming the field
    for what is not mapped."""
    _config_errors(config)
    sinks = _field(config, "model_type") in SINK_MODEL_TYPES
    softcap = _field(config, "attn_logit_softcapping")
    if softcap is not None:
        softcap = float(softcap)
        if not softcap > 0:
            raise UnsupportedConfig("attn_logit_softcapping", f"must be positive, is {softcap}")
    layer_types = _field(config, "layer_types")
    window = _field(config, "sliding_window")
    if layer_types is not None:
        if not 0 <= layer_idx < len(layer_types):
            raise UnsupportedConfig("layer_types", f"has {len(layer_types)} entries, no layer "
                                    f"{layer_idx}")
        layer_type = layer_types[layer_idx]
        if layer_type == "full_attention":
            return LayerAttention("causal", None, softcap, sinks)
        if layer_type != "sliding_attention":
            raise UnsupportedConfig(f"layer_types[{layer_idx}]", f"{layer_type!r} is not "
                                    "mapped (full_attention, sliding_attention)")
    elif window is None:
        return LayerAttention("causal", None, softcap, sinks)
    if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
        raise UnsupportedConfig("sliding_window", f"a sliding layer needs a positive int "
                                f"window, got {window!r}")
    return LayerAttention("sliding", window, softcap, sinks)


def layer_plan(config):
    """layer_attention of every layer (num_hidden_layers of them)."""
    count = _field(config, "num_hidden_layers")
    if not isinstance(count, int) or count < 0:
        raise UnsupportedConfig("num_hidden_layers", f"expected a count, got {count!r}")
    return [layer_attention(config, i) for i in range(count)]


# The mask_mods. q_idx and kv_idx count query rows and key rows of the call from 0; shift[b]
# (q_offset - kv_offset of transformers' mask sizes) moves a query to the key rows' positions,
# first[b] is the request's first non-padding key row (left padding), valid[b, kv] is 1 for a
# key row that is not padding (any other 2-D mask). Each is traced once and compiled once per
# window: the tensors are read at every launch.

def causal_mask(shift, first):
    def causal(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx + shift[b]) & (kv_idx >= first[b])
    return causal


def sliding_mask(shift, first, window):
    def sliding(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx + shift[b]) & (q_idx + shift[b] - kv_idx < window) & \
            (kv_idx >= first[b])
    return sliding


def causal_keys_mask(shift, valid):
    def causal_keys(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx + shift[b]) & (valid[b, kv_idx] != 0)
    return causal_keys


def sliding_keys_mask(shift, valid, window):
    def sliding_keys(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx + shift[b]) & (q_idx + shift[b] - kv_idx < window) & \
            (valid[b, kv_idx] != 0)
    return sliding_keys


def softcap_score(cap):
    def softcap(score, b, h, q_idx, kv_idx):
        return cap * _trace.tanh(score / cap)
    return softcap


def mask_mod(layer, masks):
    """The mask_mod of a LayerAttention over a Masks object."""
    if masks.valid is not None:
        if layer.kind == "sliding":
            return sliding_keys_mask(masks.shift, masks.valid, layer.window)
        return causal_keys_mask(masks.shift, masks.valid)
    if layer.kind == "sliding":
        return sliding_mask(masks.shift, masks.first, layer.window)
    return causal_mask(masks.shift, masks.first)


class Masks:
    """What the mask function hands each layer in place of a 4-D mask: the call's shape, the
    kind ("causal" or "sliding", with `window`) and int32 tensors on the model's device:
    `shift` [B], and `first` [B] (left padding, or no padding: zeros) or `valid` [B, kv_length]
    (any other 2-D attention_mask)."""

    # What it stands for is a [B, 1, q, kv] mask: generate() builds it ahead of the forward for
    # a static cache, and transformers' mask creation passes a mask whose ndim is not 2 on to
    # build_masks, which returns it as it is.
    ndim = 4

    def __init__(self, kind, window, q_length, kv_length, shift, first, valid):
        self.kind, self.window = kind, window
        self.q_length, self.kv_length = q_length, kv_length
        self.shift, self.first, self.valid = shift, first, valid
        self._steps = {}  # the planned decode launches of this forward (_planned_decode)

    def __repr__(self):
        padding = "keys" if self.valid is not None else "left"
        return (f"flexjit.transformers.Masks({self.kind}, window={self.window}, "
                f"q={self.q_length}, kv={self.kv_length}, padding={padding})")


def _same_function(f, g):
    """Whether f and g are the same code over equal captures (transformers builds a new closure
    for each mask; comparing code and cells recognises the ones mapped here)."""
    if f is g:
        return True
    code_f, code_g = getattr(f, "__code__", None), getattr(g, "__code__", None)
    if code_f is None or code_f is not code_g:
        return False
    cells_f, cells_g = f.__closure__ or (), g.__closure__ or ()
    if len(cells_f) != len(cells_g):
        return False
    return all(_same_value(a.cell_contents, b.cell_contents) for a, b in zip(cells_f, cells_g))


def _same_value(a, b):
    if callable(a) and callable(b):
        return _same_function(a, b)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float, str, type(None))) and isinstance(b, (int, float, str,
                                                                       type(None))):
        return a == b
    return False


def _mask_kind(mask_function, local_size):
    """("causal", None) or ("sliding", window) for the mask functions transformers builds for
    create_causal_mask and create_sliding_window_causal_mask; anything else (packed sequences,
    or_mask_function / and_mask_function overlays, chunked or bidirectional masks) raises."""
    masking = sys.modules["transformers.masking_utils"]
    if _same_function(mask_function, masking.causal_mask_function):
        return "causal", None
    if local_size is not None and _same_function(
            mask_function, masking.sliding_window_causal_mask_function(local_size)):
        return "sliding", int(local_size)
    name = getattr(mask_function, "__qualname__", type(mask_function).__name__)
    raise UnsupportedConfig("attention_mask", f"transformers asked for a mask flexjit does not "
                            f"map ({name}: packed sequences, an or/and mask overlay, a chunked "
                            f"or bidirectional mask); causal and sliding-window masks with "
                            f"2-D padding are mapped")


def build_masks(batch_size, q_length, kv_length, q_offset=0, kv_offset=0,
                  mask_function=None, attention_mask=None, local_size=None, device=None,
                  **unused):
    """transformers' AttentionMaskInterface entry (masking_utils.sdpa_mask's arguments):
    returns a Masks object instead of a dense mask. `attention_mask` is the 2-D padding mask
    [B, past + q] (bool, on the model's device) or None. Left padding (each row zeros then
    ones, so also no padding) becomes `first`, the row's first visible key; any other pattern
    the `valid` key flags, sliced to the keys of this call."""
    import torch
    if isinstance(attention_mask, Masks):
        return attention_mask
    kind, window = _mask_kind(mask_function, local_size)
    if isinstance(q_offset, torch.Tensor):  # a static cache's offset: no host synchronisation
        shift = (q_offset.to(device=device, dtype=torch.int32).reshape(()) - kv_offset)
        shift = shift.expand(batch_size).contiguous()
    else:
        shift = torch.full((batch_size,), int(q_offset) - int(kv_offset), dtype=torch.int32,
                           device=device)
    first = valid = None
    if attention_mask is None:
        first = torch.zeros(batch_size, dtype=torch.int32, device=device)
    else:
        if attention_mask.dim() != 2 or attention_mask.shape[0] != batch_size:
            raise UnsupportedConfig("attention_mask", f"expected a 2-D padding mask [batch, "
                                    f"keys], got shape {tuple(attention_mask.shape)}")
        keep = attention_mask.to(torch.bool)
        if bool((keep[:, 1:] >= keep[:, :-1]).all()):  # zeros, then ones: left padding
            first = ((~keep).sum(dim=1) - kv_offset).to(torch.int32)
        else:
            end = kv_offset + kv_length
            if keep.shape[1] < end:  # keys past the mask (a static cache): causal hides them
                keep = torch.nn.functional.pad(keep, (0, end - keep.shape[1]))
            valid = keep[:, kv_offset:end].to(torch.int32).contiguous()
    return Masks(kind, window, q_length, kv_length, shift, first, valid)


def attention_function(float32_as=None):
    """transformers' AttentionInterface entry: (module, query [B, Hq, Sq, D], key and value
    [B, Hkv, Skv, D], attention_mask (the Masks of build_masks), scaling, dropout, **kwargs)
    -> (out [B, Sq, Hq, D], None); kwargs["s_aux"], the layer's sink logits [Hq] in any float
    dtype, are passed as float32 sinks. `float32_as` ("fp16", "bf16" or None): the kernel dtype
    that float32 inputs are rounded to, None to refuse them."""
    if float32_as not in (None, "fp16", "bf16"):
        raise ValueError(f"float32_as: expected None, 'fp16' or 'bf16', got {float32_as!r}")

    def flexjit_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                          **kwargs):
        import torch
        from .flex import flex_attention
        layer = _check_call(module, attention_mask, dropout, kwargs)
        masks = attention_mask
        if query.shape[2] != masks.q_length or key.shape[2] != masks.kv_length:
            raise UnsupportedConfig("attention_mask", f"the mask was prepared for {masks.q_length}"
                                    f" queries and {masks.kv_length} keys, the layer has "
                                    f"{query.shape[2]} and {key.shape[2]} (a cache layout "
                                    f"not mapped)")
        dtype = query.dtype
        if dtype == torch.float32:
            if float32_as is None:
                raise UnsupportedConfig("dtype", "flexjit kernels take bfloat16 or float16; "
                                        "load the model in one of them, or register(float32_as="
                                        "'fp16') to round float32 inputs")
            kernel_dtype = torch.float16 if float32_as == "fp16" else torch.bfloat16
            query, key, value = (t.to(kernel_dtype) for t in (query, key, value))
        sinks = kwargs.get("s_aux")
        if sinks is not None:
            if sinks.dim() != 1 or sinks.shape[0] != query.shape[1]:
                raise UnsupportedConfig("s_aux", f"expected one sink logit per query head "
                                        f"({query.shape[1]}), got shape {tuple(sinks.shape)}")
            sinks = sinks.to(device=query.device, dtype=torch.float32).contiguous()
        if query.is_cuda:
            return _cuda_attention(torch, layer, masks, query, key, value, scaling,
                                   sinks).to(dtype), None
        score = softcap_score(layer.softcap) if layer.softcap is not None else None
        out = flex_attention(query, key, value, score_mod=score, mask_mod=mask_mod(layer, masks),
                             scale=scaling, enable_gqa=query.shape[1] != key.shape[1],
                             sinks=sinks)
        return out.transpose(1, 2).to(dtype), None

    return flexjit_attention


def layer_functions(layer, keys):
    """(mask_mod, score_mod, roles) of a LayerAttention over stand-in int32 tensors: the
    functions flex_attention would trace for it, with `keys` the `valid` form (else `first`);
    roles maps each tensor's Masks field to the stand-in ({"shift": tensor, ...})."""
    import torch
    roles = {"shift": torch.zeros(1, dtype=torch.int32)}
    if keys:
        roles["valid"] = torch.zeros(1, 1, dtype=torch.int32)
    else:
        roles["first"] = torch.zeros(1, dtype=torch.int32)
    masks = Masks(layer.kind, layer.window, 1, 1, roles["shift"], roles.get("first"),
                  roles.get("valid"))
    score = softcap_score(layer.softcap) if layer.softcap is not None else None
    return mask_mod(layer, masks), score, roles


_layer_ops = {}


def _layer_op(kind, window, softcap, keys, head_dim, dtype, device_index):
    """(torch.ops.flexjit.flex_attention's kernel key, ((array param, Masks field), ...)) of a
    layer kind on CUDA device `device_index`: traced and compiled once per kind, head dim and
    dtype (flex.prepare_op), its launch values being the Masks' tensors. Every argument is a
    constant, so that torch.compile runs it once while tracing (assume_constant_result): the
    mask_mods themselves are closures over tensors, which it cannot take as constants."""
    cache_key = (kind, window, softcap, keys, head_dim, dtype, device_index)
    found = _layer_ops.get(cache_key)
    if found is None:
        from . import flex as _flex
        mask, score, roles = layer_functions(LayerAttention(kind, window, softcap), keys)
        op_key, _ = _flex.prepare_op(mask, score, head_dim, dtype, device_index)
        fields = _array_fields(_flex.op_kernel(op_key).traced, mask, score, roles)
        found = _layer_ops[cache_key] = (op_key, fields)
    return found


def _array_fields(traced, mask, score, roles):
    """((array param, Masks field), ...) of a program traced from layer_functions' mask and
    score over the stand-ins `roles`."""
    fields = []
    for binding in traced.bindings:
        obj = traced.resolve(binding, mask, score)
        field = next((name for name, t in roles.items() if t is obj), None)
        if binding.kind != "array" or field is None:
            raise AssertionError(f"flexjit.transformers: the traced mask has a launch value "
                                 f"{binding.name!r} that is not a Masks tensor")
        fields.append((binding.name, field))
    return tuple(fields)


# --- Decode steps through a plan (split-KV decode) ----------------------------------------------
#
# A decode step of the contiguous [B, Hkv, S, D] cache runs, by flex_attention's kernel, one CTA
# per request and kv head over all S keys: at batch 1 and 8k keys 14x the GPU time of cuDNN's
# decode kernel (H200). A plan's split-KV decode kernel reads a paged cache, and the contiguous
# cache is one: with strides (s0, s1, s2, 1), key k of request b and head h is at
# b * s0 + h * s1 + k * s2, which is block b * (s0 / s2) + k / P, slot k % P of a cache whose
# blocks and slots are both s2 apart and heads s1 apart. Blocks overlap, which the kernels
# never mind (they only read), and a request's last page runs past its keys, which they never
# read (keys at or past seq_len are zero-filled without a load: KvTileCopy).

_PAGE = 64
_plans = {}  # (layer, head_dim, dtype, device, B, q_len, Hq, Hkv) -> _DecodePlan


class _PagedView:
    """A layer's K or V [B, Hkv, S, D] seen as a paged cache [blocks, P, Hkv, D] ("NHD") over
    the same memory (above): what the paged launch reads of a torch tensor (shape, stride(),
    dtype, device, data_ptr()) and its Array (__flexjit_array__, _arrays.describe)."""

    is_cuda = True

    def __init__(self, tensor, dtype_name, num_blocks):
        s0, s1, s2, _ = tensor.stride()
        self.shape = (num_blocks, _PAGE, tensor.shape[1], tensor.shape[3])
        self._strides = (s2, s2, s1, 1)
        self.dtype, self.device = tensor.dtype, tensor.device
        self._pointer = tensor.data_ptr()
        self._dtype_name = dtype_name

    def stride(self):
        return self._strides

    def data_ptr(self):
        return self._pointer

    @property
    def __flexjit_array__(self):
        from ._arrays import Array
        return Array("", self._pointer, self.shape, self._strides, self._dtype_name, True,
                     self.device.index)


class _DecodePlan:
    """A FlexPlan of a layer kind and batch shape, the array parameter of each Masks field, and
    the lengths of its last update."""

    def __init__(self, plan, fields):
        self.plan, self.fields, self.updated = plan, fields, None


def _decode_plan(torch, layer, query, key):
    batch, heads, q_len, head_dim = query.shape
    plan_key = (layer, head_dim, query.dtype, query.device.index, batch, q_len, heads,
                key.shape[1])
    entry = _plans.get(plan_key)
    if entry is None:
        from .flex import _kernel_dtype, flex_plan
        if len(_plans) >= 16:  # many batch shapes: free the plans, once their runs are done
            torch.cuda.synchronize()
            for old in _plans.values():
                old.plan.close()
            _plans.clear()
        mask, score, roles = layer_functions(layer, False)
        with torch.cuda.device(query.device):
            plan = flex_plan(mask, score, num_heads=heads, num_kv_heads=key.shape[1],
                             head_dim=head_dim, max_num_reqs=batch, max_query_len=q_len,
                             dtype=_kernel_dtype(query), page_size=_PAGE)
        entry = _plans[plan_key] = _DecodePlan(
            plan, _array_fields(plan.kernel.traced, mask, score, roles))
    return entry


def _pageable(query, key, value):
    """Whether key and value can be read as the paged cache of _PagedView: one layout, rows
    16-byte aligned, block ids within int32."""
    strides = key.stride()
    if value.stride() != strides or value.shape != key.shape or strides[3] != 1:
        return False
    s0, s1, s2 = strides[:3]
    if s2 <= 0 or s0 % s2 or any(s % 8 for s in (s0, s1, s2)):
        return False
    if key.data_ptr() % 16 or value.data_ptr() % 16 or key.dtype != query.dtype:
        return False
    return (key.shape[0] - 1) * (s0 // s2) + key.shape[2] + _PAGE < 2**31


def _planned_decode(torch, layer, masks, query, key, value, scale, sinks):
    """The layer's decode step through a plan's split-KV decode kernel (eager CUDA calls whose
    packed query rows, query tokens times the GQA group, are at most 32, with left padding);
    None where it does not apply (the caller runs flex_attention's kernel). Returns out
    [B, Sq, Hq, D].

    Per forward and layer kind (the Masks object) it updates the plan once for the step's
    lengths, builds the block table of the cache's view, the paged queries' shift (q_idx counts
    from the request's first key in a paged call: shift - (S - Sq)) and the checked argument
    struct (Kernel.prepare); each layer then launches a copy of the struct with its own q, k,
    v, out and sinks."""
    batch, heads, q_len, head_dim = query.shape
    kv_heads, keys = key.shape[1], key.shape[2]
    if masks.valid is not None or q_len * (heads // kv_heads) > 32 or keys == 0 or \
            not _pageable(query, key, value):
        return None
    entry = _decode_plan(torch, layer, query, key)
    queries = query.transpose(1, 2).reshape(batch * q_len, heads, head_dim)
    if queries.stride(2) != 1 or any(s % 8 for s in queries.stride()[:2]) or \
            queries.data_ptr() % 16:
        queries = queries.contiguous()
    out = torch.empty((batch * q_len, heads, head_dim), dtype=query.dtype, device=query.device)
    geometry = (queries.shape, queries.stride(), key.shape, key.stride(), sinks is None, scale)
    step = masks._steps.get(id(entry))
    if step is None or step[0] != geometry:
        step = _decode_step(torch, entry, masks, geometry, queries, key, value, out, sinks,
                            scale)
        if step is None:
            return None
        masks._steps[id(entry)] = step
    from ._capi import PagedAttentionArgs
    args = PagedAttentionArgs.from_buffer_copy(step[1])
    args.q, args.out = queries.data_ptr(), out.data_ptr()
    args.k_cache, args.v_cache = key.data_ptr(), value.data_ptr()
    args.sinks = sinks.data_ptr() if sinks is not None else None
    from . import _torch_stream
    entry.plan.plan._run_data(ctypes.byref(args), _torch_stream(torch, query.device.index))
    return out.view(batch, q_len, heads, head_dim)


def view_block_table(torch, batch, per_request, pages, device):
    """int32 [batch, pages]: request b's page j is block b * per_request + j * _PAGE of a
    _PagedView (per_request: the cache's batch stride over its key stride)."""
    return (torch.arange(batch, dtype=torch.int32, device=device) * per_request)[:, None] + \
        torch.arange(pages, dtype=torch.int32, device=device) * _PAGE


def _decode_step(torch, entry, masks, geometry, queries, key, value, out, sinks, scale):
    """(geometry, the checked struct as bytes, what it points into) of a forward's decode steps
    of one plan (_planned_decode); None when the plan's kernel would need a workspace."""
    from .flex import _starts
    batch, kv_heads, keys, _ = key.shape
    q_len = queries.shape[0] // batch
    s0, _, s2, _ = key.stride()
    pages = -(-keys // _PAGE)
    lengths = (batch, q_len, keys)
    if entry.updated != lengths:
        entry.plan.update(list(range(0, batch * q_len + 1, q_len)), [keys] * batch, pages)
        entry.updated = lengths
    device = queries.device
    per_request = s0 // s2
    block_table = view_block_table(torch, batch, per_request, pages, device)
    starts = _starts(batch, q_len, queries, False)
    seq_lens = torch.full((batch,), keys, dtype=torch.int32, device=device)
    values = {"shift": (masks.shift - (keys - q_len)).to(torch.int32).contiguous(),
              "first": masks.first}
    arrays = {name: values[field] for name, field in entry.fields}
    kernel = entry.plan.kernel.kernel
    if kernel.workspace_size(arrays, num_reqs=batch, num_heads=queries.shape[1]):
        return None
    num_blocks = (batch - 1) * per_request + (pages - 1) * _PAGE + 1
    dtype = kernel.dtype
    launch = kernel.prepare(queries, _PagedView(key, dtype, num_blocks),
                            _PagedView(value, dtype, num_blocks), block_table, starts, seq_lens,
                            out=out, sinks=sinks, max_query_len=0, arrays=arrays, scale=scale,
                            kv_layout="NHD")
    return geometry, bytes(launch.args), (launch, block_table, starts, seq_lens, arrays)


_layer_op_traceable = None


def _cuda_attention(torch, layer, masks, query, key, value, scaling, sinks):
    """The layer's attention on CUDA through torch.ops.flexjit.flex_attention with the kernel
    of _layer_op: no tracing or kernel lookup per call, and traceable by torch.compile (a
    static cache's forward). Returns out [B, Sq, Hq, D]."""
    global _layer_op_traceable
    if _layer_op_traceable is None:
        _layer_op_traceable = torch._dynamo.assume_constant_result(_layer_op)
    from . import _torch_ops
    from .flex import _compiling, _usable, in_graph_starts
    batch, heads, q_len, head_dim = query.shape
    op_key, fields = _layer_op_traceable(layer.kind, layer.window, layer.softcap,
                                         masks.valid is not None, head_dim, query.dtype,
                                         query.device.index)
    arrays = [getattr(masks, field).reshape(batch, -1) for _, field in fields]
    names = [name for name, _ in fields]
    scale = float(scaling) if scaling is not None else 0.0
    if _compiling(torch):
        query, key, value = query.contiguous(), key.contiguous(), value.contiguous()
        out = torch.empty_like(query)
        _torch_ops._flex_attention(op_key, query, key, value, out, None, scale, [], [], names,
                                   arrays, sinks,
                                   *in_graph_starts(torch, batch, q_len, key.shape[2],
                                                    query.device))
        return out.transpose(1, 2)
    query, key, value = _usable(query), _usable(key), _usable(value)
    out = _planned_decode(torch, layer, masks, query, key, value, scale, sinks)
    if out is not None:
        return out
    # Written as [B, Sq, Hq, D], which transformers reshapes to [B, Sq, Hq * D] without a copy.
    out = torch.empty((batch, q_len, heads, head_dim), dtype=query.dtype, device=query.device)
    _torch_ops._flex_attention(op_key, query, key, value, out.transpose(1, 2), None, scale, [],
                               [], names, arrays, sinks)
    return out


def _module_layer(module, config, layer_idx):
    """layer_attention(config, layer_idx), kept on the module for its next calls while its
    config object and index stay the same (reading a transformers config's fields is slow: this
    runs on every layer of every forward)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        from .flex import _compiling
        if _compiling(torch):  # torch.compile reads the config once, while it traces
            return layer_attention(config, layer_idx)
    kept = getattr(module, "_flexjit_layer", None)
    if kept is not None and kept[0] is config and kept[1] == layer_idx:
        return kept[2]
    layer = layer_attention(config, layer_idx)
    try:
        module._flexjit_layer = (config, layer_idx, layer)
    except (AttributeError, TypeError):  # a module that takes no attributes: not kept
        pass
    return layer


def _check_call(module, masks, dropout, kwargs):
    """The LayerAttention of this call after the checks that raise UnsupportedConfig."""
    if kwargs.get("output_attentions"):
        raise UnsupportedConfig("output_attentions", "flexjit does not return attention "
                                "weights")
    if kwargs.get("head_mask") is not None:
        raise UnsupportedConfig("head_mask", "per-head masks of the weights are not mapped")
    if dropout and getattr(module, "training", False):
        raise UnsupportedConfig("attention_dropout", f"dropout {dropout} in training: flexjit "
                                "runs forward only, without dropout")
    if not isinstance(masks, Masks):
        got = "None" if masks is None else f"{type(masks).__name__} of shape " \
            f"{tuple(getattr(masks, 'shape', ()))}"
        raise UnsupportedConfig("attention_mask", f"expected the Masks of flexjit's mask "
                                f"function, got {got}: the model built its mask without "
                                f"transformers' mask interface, or a dense 4-D mask was passed")
    config = getattr(module, "config", None)
    layer_idx = getattr(module, "layer_idx", None)
    has_sinks = kwargs.get("s_aux") is not None
    if config is not None and layer_idx is not None:
        layer = _module_layer(module, config, layer_idx)
    else:
        layer = LayerAttention(masks.kind, masks.window, kwargs.get("softcap"), has_sinks)
    if layer.sinks and not has_sinks:
        # Running without them would quietly give other numbers: a transformers that passes
        # them under another name than s_aux must be mapped first.
        raise UnsupportedConfig("s_aux", f"the config's model_type "
                                f"{_field(config, 'model_type')!r} has attention sinks, but "
                                f"layer {layer_idx} passed no s_aux")
    if (layer.kind, layer.window) != (masks.kind, masks.window):
        raise UnsupportedConfig("layer_types", f"layer {layer_idx} is {layer.kind} "
                                f"(window {layer.window}) in the config, but transformers "
                                f"passed it a {masks.kind} mask (window {masks.window})")
    softcap = kwargs.get("softcap")
    if softcap is not None and (layer.softcap is None or float(softcap) != layer.softcap):
        raise UnsupportedConfig("attn_logit_softcapping", f"the layer passed softcap={softcap},"
                                f" the config has {layer.softcap}")
    return layer


def register(name=NAME, *, float32_as=None):
    """Registers the attention function and the mask function with transformers under `name`
    (then attn_implementation=name). `float32_as`: see attention_function."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
    AttentionInterface.register(name, attention_function(float32_as))
    AttentionMaskInterface.register(name, build_masks)
