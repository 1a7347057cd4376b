"""flexjit.transformers: the configuration mapping without torch (CI), and random-weight tiny
models of transformers run with attn_implementation="flexjit" against "eager" (skipped with the
reason without torch and transformers; the CUDA bf16 case also without a GPU).

    FLEXJIT_LIBRARY=build/lib/libflexjit_runtime.so python3 -m unittest -v test_transformers
"""

import copy
import inspect
import types
import unittest

from support import library_available

import flexjit
from flexjit import transformers as fjt

try:
    import torch
    import transformers
except ImportError as error:
    torch = transformers = None
    _MISSING = f"needs torch and transformers ({error})"


class _StubArray:
    """A captured [B] or [B, kv] int32 array for tracing only (to_source reads no data)."""

    def __init__(self, *shape):
        self.shape = shape

    @property
    def __array_interface__(self):
        return {"shape": self.shape, "typestr": "<i4", "data": (0, False), "version": 3}


class ConfigMapping(unittest.TestCase):
    """layer_attention / layer_plan over plain dicts, as transformers' configs hold them."""

    def test_llama_is_causal(self):
        plan = fjt.layer_plan({"model_type": "llama", "num_hidden_layers": 3})
        self.assertEqual(plan, [fjt.LayerAttention("causal", None, None)] * 3)

    def test_mistral_sliding_window_on_every_layer(self):
        plan = fjt.layer_plan({"model_type": "mistral", "num_hidden_layers": 2,
                               "sliding_window": 4096})
        self.assertEqual(plan, [fjt.LayerAttention("sliding", 4096, None)] * 2)

    def test_gemma2_alternates_and_softcaps(self):
        config = {"model_type": "gemma2", "num_hidden_layers": 4, "sliding_window": 4096,
                  "attn_logit_softcapping": 50.0,
                  "layer_types": ["sliding_attention", "full_attention"] * 2}
        self.assertEqual(fjt.layer_plan(config), [
            fjt.LayerAttention("sliding", 4096, 50.0), fjt.LayerAttention("causal", None, 50.0),
            fjt.LayerAttention("sliding", 4096, 50.0), fjt.LayerAttention("causal", None, 50.0)])

    def test_layer_types_win_over_sliding_window(self):
        # Qwen2 keeps sliding_window set while its first max_window_layers layers are full.
        config = {"num_hidden_layers": 2, "sliding_window": 64,
                  "layer_types": ["full_attention", "sliding_attention"]}
        self.assertEqual([layer.kind for layer in fjt.layer_plan(config)], ["causal", "sliding"])

    def test_errors_name_the_field(self):
        cases = [
            ({"num_hidden_layers": 1, "layer_types": ["chunked_attention"]}, "layer_types[0]",
             "chunked_attention"),
            ({"num_hidden_layers": 1, "layer_types": ["sliding_attention"],
              "sliding_window": None}, "sliding_window", "positive int"),
            ({"num_hidden_layers": 1, "sliding_window": 0}, "sliding_window", "positive int"),
            ({"num_hidden_layers": 1, "attn_logit_softcapping": 0.0}, "attn_logit_softcapping",
             "positive"),
            ({"num_hidden_layers": 1, "use_bidirectional_attention": True},
             "use_bidirectional_attention", "causal"),
            ({"num_hidden_layers": 1, "is_causal": False}, "is_causal", "causal"),
            ({"num_hidden_layers": None}, "num_hidden_layers", "count"),
        ]
        for config, field, words in cases:
            with self.subTest(field=field), self.assertRaises(fjt.UnsupportedConfig) as caught:
                fjt.layer_plan(config)
            self.assertEqual(caught.exception.field, field)
            self.assertIn(field, str(caught.exception))
            self.assertIn(words, str(caught.exception))

    def test_gpt_oss_layers_have_sinks(self):
        config = {"model_type": "gpt_oss", "num_hidden_layers": 4, "sliding_window": 128,
                  "layer_types": ["sliding_attention", "full_attention"] * 2}
        self.assertEqual(fjt.layer_plan(config), [fjt.LayerAttention("sliding", 128, None, True),
                                                  fjt.LayerAttention("causal", None, None, True)]
                         * 2)
        self.assertFalse(any(layer.sinks for layer in fjt.layer_plan(dict(config,
                                                                          model_type="llama"))))

    def test_config_objects_read_like_dicts(self):
        class Config:
            num_hidden_layers, sliding_window, layer_types = 1, 16, None
        self.assertEqual(fjt.layer_plan(Config()), [fjt.LayerAttention("sliding", 16, None)])


class CallChecks(unittest.TestCase):
    """What the attention function checks of a layer's call before it needs torch."""

    MASKS = fjt.Masks("sliding", 8, 1, 1, None, None, None)

    def layer(self, model_type=None):
        config = {"model_type": model_type, "num_hidden_layers": 2, "sliding_window": 8,
                  "layer_types": ["sliding_attention", "full_attention"]}
        return types.SimpleNamespace(config=config, layer_idx=0, training=False)

    def test_sink_layers_must_pass_s_aux(self):
        # Without it, sinks that transformers passed under another name would go unused.
        with self.assertRaises(fjt.UnsupportedConfig) as caught:
            fjt._check_call(self.layer("gpt_oss"), self.MASKS, 0.0, {})
        self.assertEqual(caught.exception.field, "s_aux")
        self.assertIn("'gpt_oss' has attention sinks, but layer 0 passed no s_aux",
                      str(caught.exception))
        self.assertEqual(fjt._check_call(self.layer("gpt_oss"), self.MASKS, 0.0,
                                         {"s_aux": object()}),
                         fjt.LayerAttention("sliding", 8, None, True))

    def test_s_aux_is_taken_from_any_layer(self):
        # A model type not known for sinks that passes s_aux gets them too.
        self.assertEqual(fjt._check_call(self.layer("mistral"), self.MASKS, 0.0,
                                         {"s_aux": object()}).kind, "sliding")
        self.assertEqual(fjt._check_call(types.SimpleNamespace(), self.MASKS, 0.0,
                                         {"s_aux": object()}),
                         fjt.LayerAttention("sliding", 8, None, True))


class MaskPrograms(unittest.TestCase):
    """The program text of each layer kind: one kernel per window, the cache offsets and the
    padding read from arrays (so no new kernel per batch or step)."""

    def source(self, layer, valid):
        masks = fjt.Masks(layer.kind, layer.window, 1, 1, _StubArray(2), _StubArray(2),
                          _StubArray(2, 9) if valid else None)
        score = fjt.softcap_score(layer.softcap) if layer.softcap is not None else None
        return flexjit.to_source(fjt.mask_mod(layer, masks), score)

    def test_sources(self):
        causal = self.source(fjt.LayerAttention("causal"), False)
        self.assertIn("param shift: int[b]", causal)
        self.assertIn("param first: int[b]", causal)
        self.assertIn("mask causal = kv <= q + shift[b] && kv >= first[b]", causal)
        sliding = self.source(fjt.LayerAttention("sliding", 4096, 50.0), False)
        self.assertIn("const window: int = 4096", sliding)
        self.assertIn("q + shift[b] - kv < window", sliding)
        self.assertIn("const cap: float = 50.0", sliding)
        self.assertIn("score softcap = cap * tanh(score / cap)", sliding)
        keys = self.source(fjt.LayerAttention("causal"), True)
        self.assertIn("param valid: int[b, kv]", keys)
        self.assertIn("valid[b, kv] != 0", keys)

    def test_launch_values_are_the_masks_tensors(self):
        # The CUDA path launches each layer kind's kernel with the Masks' tensors in place of
        # the traced closures' (_layer_op): every launch value of the trace must be one.
        if torch is None:
            self.skipTest(_MISSING)
        for layer in (fjt.LayerAttention("causal"), fjt.LayerAttention("sliding", 128, 30.0)):
            for keys in (False, True):
                with self.subTest(layer=layer, keys=keys):
                    mask, score, roles = fjt.layer_functions(layer, keys)
                    traced = flexjit.flex.traced_program(mask, score)
                    found = {traced.resolve(b, mask, score) is roles[field]
                             for b in traced.bindings for field in roles
                             if b.name == field}
                    self.assertEqual(found, {True})
                    self.assertEqual(sorted(b.name for b in traced.bindings), sorted(roles))
                    self.assertTrue(all(b.kind == "array" for b in traced.bindings))

    def test_paged_view_addresses_the_contiguous_cache(self):
        # CUDA decode steps read the [B, Hkv, S, D] cache as a paged one (_PagedView): every
        # key's row must be where the view and its block table put it, and no page that a
        # request's keys reach may start past the tensor.
        if torch is None:
            self.skipTest(_MISSING)
        for batch, kv_heads, keys, sliced in ((3, 2, 21, False), (2, 4, 64, False),
                                              (1, 1, 130, False), (4, 2, 77, True)):
            with self.subTest(batch=batch, kv_heads=kv_heads, keys=keys, sliced=sliced):
                cache = torch.zeros(batch, kv_heads, keys + (9 if sliced else 0), 64)
                cache = cache[:, :, :keys] if sliced else cache
                self.assertTrue(fjt._pageable(cache, cache, cache))
                s0, s1, s2, _ = cache.stride()
                pages = -(-keys // fjt._PAGE)
                table = fjt.view_block_table(torch, batch, s0 // s2, pages, "cpu")
                blocks = (batch - 1) * (s0 // s2) + (pages - 1) * fjt._PAGE + 1
                view = fjt._PagedView(cache, "fp32", blocks)
                block_stride, slot_stride, head_stride, _ = view.stride()
                self.assertEqual(view.shape, (blocks, fjt._PAGE, kv_heads, 64))
                self.assertLess(int(table.max()), blocks)
                for b in range(batch):
                    for k in range(keys):
                        for h in range(kv_heads):
                            at = int(table[b, k // fjt._PAGE]) * block_stride + \
                                (k % fjt._PAGE) * slot_stride + h * head_stride
                            self.assertEqual(at, b * s0 + h * s1 + k * s2)

    @unittest.skipUnless(library_available(), "needs libflexjit_runtime.so")
    def test_sources_compile(self):
        for layer in (fjt.LayerAttention("causal"), fjt.LayerAttention("sliding", 128, 30.0)):
            for valid in (False, True):
                with self.subTest(layer=layer, valid=valid):
                    program = flexjit.Context().program(self.source(layer, valid))
                    self.assertIsNotNone(program)


# Tiny random-weight models: 2 to 4 layers of head dim 64 (a flexjit head dim), grouped-query
# heads, windows of 8 so that prompts of up to 21 tokens and the decode steps cross them.
def _configs():
    common = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=64, max_position_embeddings=512,
                  pad_token_id=0, bos_token_id=1, eos_token_id=None)
    configs = {
        "llama": transformers.LlamaConfig(num_hidden_layers=2, **common),
        "mistral": transformers.MistralConfig(num_hidden_layers=2, sliding_window=8, **common),
        # A cap of 0.5 bends the random model's scores (|score| ~ 0.5) where 50 would not.
        "gemma2": transformers.Gemma2Config(num_hidden_layers=4, sliding_window=8,
                                            attn_logit_softcapping=0.5,
                                            query_pre_attn_scalar=64, **common),
        "qwen2": transformers.Qwen2Config(num_hidden_layers=3, use_sliding_window=True,
                                          sliding_window=8, max_window_layers=1, **common),
        "gemma3": transformers.Gemma3TextConfig(
            num_hidden_layers=3, sliding_window=8, query_pre_attn_scalar=64,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"], **common),
    }
    if hasattr(transformers, "GptOssConfig"):
        # Sliding then full, a learnable sink per query head on both (s_aux); 2 experts, both
        # per token (with one, a bf16 rounding can flip a token's expert and move its logits
        # by far more than attention's rounding: the CUDA check did at step 36 of 64); plain
        # RoPE (its default YaRN expects longer contexts).
        configs["gpt_oss"] = transformers.GptOssConfig(
            num_hidden_layers=2, sliding_window=8, num_local_experts=2, num_experts_per_tok=2,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, **common)
    return configs


PROMPT_LENGTHS = (5, 13, 21)


def _prompts(device):
    """Left-padded prompts of PROMPT_LENGTHS tokens: (input_ids, attention_mask)."""
    gen = torch.Generator().manual_seed(7)
    width = max(PROMPT_LENGTHS)
    ids = torch.zeros(len(PROMPT_LENGTHS), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, length in enumerate(PROMPT_LENGTHS):
        ids[row, width - length:] = torch.randint(2, 512, (length,), generator=gen)
        mask[row, width - length:] = 1
    return ids.to(device), mask.to(device)


def _teacher_forced(model, ids, mask, new_tokens):
    """Logits of the prefill (every prompt position) and of each decode step fed
    new_tokens[:, step], with a DynamicCache, as generate() feeds a model."""
    # The cache's keyword and output field: `past_key_values` until transformers 5.2x renamed
    # it `cache` (the GPU machine has 5.17, this repo's venvs have had 5.24).
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else \
        "past_key_values"
    with torch.no_grad():
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        cache, steps = getattr(out, name), [out.logits[:, -1]]
        prefill = out.logits
        for step in range(new_tokens.shape[1] - 1):
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            positions = positions[:, -1:] + 1
            out = model(input_ids=new_tokens[:, step:step + 1], attention_mask=mask,
                        position_ids=positions, use_cache=True, **{name: cache})
            cache = getattr(out, name)
            steps.append(out.logits[:, -1])
    return prefill, torch.stack(steps, dim=1)


class Models(unittest.TestCase):
    """Each model built twice from one config and seed, eager and flexjit: greedy generate()
    with eager, its tokens teacher-forced through both, per-step logits compared; greedy
    agreement of flexjit's own generate()."""

    def setUp(self):
        if torch is None:
            self.skipTest(_MISSING)
        if not library_available():
            self.skipTest("needs libflexjit_runtime.so")

    def run_models(self, device, dtype, new_tokens, tolerance):
        # float32 models round q, k and v to fp16 (the CPU backend computes bf16/fp16 inputs in
        # float32); bf16 models run the kernels in bf16.
        fjt.register(float32_as="fp16")
        ids, mask = _prompts(device)
        real = mask.bool()
        report = {}
        for name, config in _configs().items():
            with self.subTest(model=name):
                torch.manual_seed(0)
                eager = transformers.AutoModelForCausalLM.from_config(
                    copy.deepcopy(config), attn_implementation="eager", dtype=dtype)
                ours = transformers.AutoModelForCausalLM.from_config(
                    copy.deepcopy(config), attn_implementation="flexjit", dtype=dtype)
                ours.load_state_dict(eager.state_dict())
                eager, ours = eager.to(device).eval(), ours.to(device).eval()
                with torch.no_grad():
                    greedy = eager.generate(input_ids=ids, attention_mask=mask,
                                            max_new_tokens=new_tokens, do_sample=False)
                    mine = ours.generate(input_ids=ids, attention_mask=mask,
                                         max_new_tokens=new_tokens, do_sample=False)
                tokens = greedy[:, ids.shape[1]:]
                prefill_e, steps_e = _teacher_forced(eager, ids, mask, tokens)
                prefill_f, steps_f = _teacher_forced(ours, ids, mask, tokens)
                self.assertTrue(torch.isfinite(prefill_f).all(), "NaN or inf in the prefill "
                                "logits (padding rows included)")
                self.assertTrue(torch.isfinite(steps_f).all())
                scale = steps_e.abs().max().item()
                prefill_diff = (prefill_e - prefill_f).abs()[real].max().item()
                step_diff = (steps_e - steps_f).abs().amax(dim=(0, 2))
                agreement = (mine[:, ids.shape[1]:] == tokens).float().mean().item()
                static_diff = self.static_cache_diff(eager, ours, ids, mask)
                report[name] = (prefill_diff, step_diff.max().item(), static_diff, scale,
                                agreement)
                print(f"\n{name} {device} {dtype}: prefill max|diff| {prefill_diff:.2e}, "
                      f"decode max|diff| {step_diff.max().item():.2e} over {len(step_diff)} "
                      f"steps, static cache {static_diff:.2e} (max|logit| {scale:.3f}), "
                      f"greedy agreement {agreement:.3f}")
                self.assertLessEqual(prefill_diff, tolerance * scale)
                for step, diff in enumerate(step_diff.tolist()):
                    self.assertLessEqual(diff, tolerance * scale, f"decode step {step}")
                self.assertLessEqual(static_diff, tolerance * scale)
        return report

    def static_cache_diff(self, eager, ours, ids, mask):
        """Max |logit difference| of 8 greedy steps with a StaticCache (the query offset is a
        tensor, the keys are the whole cache, and generate() builds the masks ahead of the
        forward), per request up to the first step whose token differs: later steps see
        different inputs."""
        options = dict(input_ids=ids, attention_mask=mask, max_new_tokens=8, do_sample=False,
                       cache_implementation="static", output_logits=True,
                       return_dict_in_generate=True)
        with torch.no_grad():
            expected, got = eager.generate(**options), ours.generate(**options)
        worst = 0.0
        for row in range(ids.shape[0]):
            for step, (a, b) in enumerate(zip(expected.logits, got.logits)):
                worst = max(worst, (a[row] - b[row]).abs().max().item())
                if expected.sequences[row, ids.shape[1] + step] != \
                        got.sequences[row, ids.shape[1] + step]:
                    break
        return worst

    def test_cpu_float32(self):
        # fp16 rounds q, k, v and the output to 11 significant bits (relative 2^-11 = 4.9e-4);
        # through 2 to 4 layers the logits move by a few 1e-4 of their scale. 1e-2 of the
        # scale stays far below what a wrong key costs: one key more or less out of 5 to 29
        # changes a row's attention by 1/30 and the logits by several 1e-2 of their scale.
        self.run_models("cpu", torch.float32, new_tokens=24, tolerance=1e-2)

    def test_cpu_right_padding_and_holes(self):
        # A 2-D mask that is not left padding (right padding, a hole) takes the valid[b, kv]
        # form; compared on the positions that are not padding, one forward without a cache.
        fjt.register(float32_as="fp16")
        ids, _ = _prompts("cpu")
        mask = torch.ones_like(ids)
        mask[0, 15:] = 0  # right padding
        mask[1, 3:6] = 0  # a hole
        for name in ("llama", "gemma2"):
            config = _configs()[name]
            with self.subTest(model=name):
                torch.manual_seed(0)
                eager = transformers.AutoModelForCausalLM.from_config(
                    copy.deepcopy(config), attn_implementation="eager").eval()
                ours = transformers.AutoModelForCausalLM.from_config(
                    copy.deepcopy(config), attn_implementation="flexjit").eval()
                ours.load_state_dict(eager.state_dict())
                with torch.no_grad():
                    expected = eager(input_ids=ids, attention_mask=mask, use_cache=False).logits
                    got = ours(input_ids=ids, attention_mask=mask, use_cache=False).logits
                self.assertTrue(torch.isfinite(got).all())
                diff = (expected - got).abs()[mask.bool()].max().item()
                self.assertLessEqual(diff, 1e-2 * expected.abs().max().item())

    def test_cpu_bfloat16(self):
        # The kernels' own dtype, as on the GPU: see test_cuda_bfloat16.
        self.run_models("cpu", torch.bfloat16, new_tokens=24, tolerance=5e-2)

    def test_cuda_bfloat16(self):
        if not torch.cuda.is_available():
            self.skipTest("needs a CUDA device")
        # Both sides round to bf16 (8 significant bits, 2^-8 = 3.9e-3) after every layer, and
        # eager rounds its scores and probabilities too: on the CPU backend the logits differ by
        # 0.6e-2 to 1.1e-2 of their scale (one bf16 step at 1.0 is 7.8e-3). 5e-2 of the scale
        # still catches a window off by one (0.27 of it).
        self.run_models("cuda", torch.bfloat16, new_tokens=64, tolerance=5e-2)


class Errors(unittest.TestCase):
    """What is not mapped raises UnsupportedConfig naming the field, before any kernel runs."""

    def setUp(self):
        if torch is None:
            self.skipTest(_MISSING)
        fjt.register(float32_as="fp16")

    def model(self, config):
        torch.manual_seed(0)
        return transformers.AutoModelForCausalLM.from_config(
            config, attn_implementation="flexjit").eval()

    def forward(self, model, **kwargs):
        ids = torch.randint(2, 100, (1, 6))
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=torch.ones_like(ids), **kwargs)

    def assert_field(self, field, call):
        with self.assertRaises(fjt.UnsupportedConfig) as caught:
            call()
        self.assertEqual(caught.exception.field, field)
        return caught.exception

    def small(self, cls, **extra):
        return cls(vocab_size=128, hidden_size=128, intermediate_size=128, num_hidden_layers=1,
                   num_attention_heads=2, num_key_value_heads=1, head_dim=64, **extra)

    def test_s_aux_of_another_shape(self):
        if not hasattr(transformers, "GptOssConfig"):
            self.skipTest("this transformers has no gpt-oss")
        model = self.model(self.small(transformers.GptOssConfig, num_local_experts=2,
                                      num_experts_per_tok=1, sliding_window=8))
        model.model.layers[0].self_attn.sinks = torch.nn.Parameter(torch.zeros(3))
        error = self.assert_field("s_aux", lambda: self.forward(model))
        self.assertIn("one sink logit per query head (2), got shape (3,)", str(error))

    def test_float32_without_float32_as(self):
        fjt.register()
        model = self.model(self.small(transformers.LlamaConfig))
        self.assert_field("dtype", lambda: self.forward(model))

    def test_output_attentions(self):
        model = self.model(self.small(transformers.LlamaConfig))
        self.assert_field("output_attentions", lambda: self.forward(model,
                                                                    output_attentions=True))

    def test_dropout_in_training(self):
        model = self.model(self.small(transformers.LlamaConfig, attention_dropout=0.1)).train()
        ids = torch.randint(2, 100, (1, 6))
        self.assert_field("attention_dropout", lambda: model(input_ids=ids))

    def test_dense_4d_mask(self):
        model = self.model(self.small(transformers.LlamaConfig))
        dense = torch.zeros(1, 1, 6, 6)
        self.assert_field("attention_mask", lambda: model(input_ids=torch.randint(2, 100, (1, 6)),
                                                          attention_mask=dense))

    def test_packed_sequences(self):
        # position_ids that restart, without an attention_mask or a cache: transformers'
        # packed-sequence mask, which flexjit does not map yet.
        model = self.model(self.small(transformers.LlamaConfig))
        ids = torch.randint(2, 100, (1, 6))
        positions = torch.tensor([[0, 1, 2, 0, 1, 2]])
        with torch.no_grad():
            self.assert_field("attention_mask", lambda: model(
                input_ids=ids, position_ids=positions, use_cache=False))

    def test_continuous_batching_is_refused_by_transformers(self):
        # docs/transformers.md: transformers' continuous batching accepts only sdpa,
        # paged|eager and flash implementations. When a version accepts registered ones this
        # fails, and the paged path can be integrated.
        if not hasattr(transformers.GenerationMixin, "generate_batch"):
            self.skipTest("this transformers has no continuous batching")
        model = self.model(self.small(transformers.LlamaConfig))
        # transformers 5.24: "... not supported for continuous batching"; 5.17: "Specified
        # attn_implementation="paged|flexjit" is not supported".
        with self.assertRaisesRegex(ValueError, "not supported"):
            model.generate_batch(inputs=[[2, 3, 4]], generation_config=transformers.
                                 GenerationConfig(max_new_tokens=2, do_sample=False))


if __name__ == "__main__":
    unittest.main()
