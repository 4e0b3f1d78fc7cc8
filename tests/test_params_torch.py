"""zeroplan's counts equal what transformers builds: every preset, and small configs that reach each option.

Optional validation: needs torch and transformers (skipped when absent); models are built on the
meta device, so no weights are allocated. Ground truth is the installed transformers (5.x).
"""

from __future__ import annotations

import importlib

import pytest

from zeroplan.models.families import ModelSpec, parse_family_config
from zeroplan.models.params import count_params
from zeroplan.registry import preset_names

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def validation():
    """validation/count_params.py, imported only when these tests run (torch takes seconds to import)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return importlib.import_module("validation.count_params")


# Tiny shapes keep the builds fast; each variant switches on one family option or leaves a key out.
LLAMA_TINY = dict(vocab_size=100, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4)
VARIANTS = {
    "gpt2-defaults": {"model_type": "gpt2", "n_layer": 2},
    "gpt2-n_inner-untied": {"model_type": "gpt2", "n_layer": 2, "n_inner": 100, "tie_word_embeddings": False},
    "gpt_neox-defaults": {"model_type": "gpt_neox", "num_hidden_layers": 1},
    "gpt_neox-no-attention-bias": {
        "model_type": "gpt_neox", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 96, "attention_bias": False, "tie_word_embeddings": True,
    },
    "opt-defaults": {"model_type": "opt", "num_hidden_layers": 2},
    "opt-350m-shape": {  # word_embed_proj_dim != hidden_size: project_in/out; post-LN, no final norm
        "model_type": "opt", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2, "ffn_dim": 96,
        "num_attention_heads": 4, "word_embed_proj_dim": 32, "do_layer_norm_before": False,
    },
    "opt-no-bias-no-affine": {
        "model_type": "opt", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2, "ffn_dim": 96,
        "num_attention_heads": 4, "enable_bias": False, "layer_norm_elementwise_affine": False,
    },
    "opt-remove-final-norm": {"model_type": "opt", "num_hidden_layers": 1, "_remove_final_layer_norm": True},
    "bloom-defaults": {"model_type": "bloom"},
    "bloom-aliases": {
        "model_type": "bloom", "vocab_size": 100, "n_embed": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
    },
    "falcon-defaults": {"model_type": "falcon", "num_hidden_layers": 2},
    "falcon-new-architecture": {
        "model_type": "falcon", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 8, "new_decoder_architecture": True, "num_kv_heads": 2,
    },
    "falcon-new-one-norm": {
        "model_type": "falcon", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 8, "new_decoder_architecture": True, "num_ln_in_parallel_attn": 1,
    },
    "falcon-mha-sequential-bias": {
        "model_type": "falcon", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "multi_query": False, "parallel_attn": False, "bias": True,
        "ffn_hidden_size": 96, "tie_word_embeddings": False,
    },
    "llama-defaults": {"model_type": "llama", "num_hidden_layers": 1},
    "llama-biases-head_dim": {
        "model_type": "llama", **LLAMA_TINY, "num_key_value_heads": 2, "head_dim": 24,
        "attention_bias": True, "mlp_bias": True, "tie_word_embeddings": True,
    },
    "mistral-defaults": {"model_type": "mistral", "num_hidden_layers": 1},
    "mistral-head_dim": {"model_type": "mistral", **LLAMA_TINY, "num_key_value_heads": 1, "head_dim": 32},
    "mixtral-defaults": {"model_type": "mixtral", "num_hidden_layers": 1},
    "mixtral-4-of-16": {
        "model_type": "mixtral", **LLAMA_TINY, "num_key_value_heads": 2, "num_local_experts": 16,
        "num_experts_per_tok": 4,
    },
    "qwen2-defaults": {"model_type": "qwen2", "num_hidden_layers": 1},
    "qwen2-tied-gqa": {"model_type": "qwen2", **LLAMA_TINY, "num_key_value_heads": 2, "tie_word_embeddings": True},
    "gemma2-defaults": {"model_type": "gemma2", "num_hidden_layers": 2},
    "gemma2-bias-untied": {
        "model_type": "gemma2", **LLAMA_TINY, "num_key_value_heads": 2, "head_dim": 8,
        "attention_bias": True, "tie_word_embeddings": False,
    },
    "phi3-defaults": {"model_type": "phi3", "num_hidden_layers": 1},
    "phi3-gqa": {"model_type": "phi3", **LLAMA_TINY, "num_key_value_heads": 2, "pad_token_id": None},
    "t5-defaults": {"model_type": "t5"},
    "t5-gated-asymmetric": {
        "model_type": "t5", "vocab_size": 100, "d_model": 32, "d_kv": 16, "d_ff": 48, "num_layers": 3,
        "num_decoder_layers": 2, "num_heads": 4, "relative_attention_num_buckets": 8,
        "feed_forward_proj": "gated-gelu",
    },
}


def _ours(config: dict) -> tuple[int, int, int, int]:
    counted = count_params(parse_family_config(config, strict=False))
    return (counted.num_params, counted.largest_layer_params, counted.num_embedding_params, counted.num_active_params)


@pytest.mark.parametrize("name", preset_names("models"))
def test_preset_counts_equal_transformers(validation, name: str) -> None:
    ours, theirs = validation.compare(name)
    assert ours == theirs


@pytest.mark.parametrize("config", VARIANTS.values(), ids=VARIANTS.keys())
def test_variant_counts_equal_transformers(validation, config: dict) -> None:
    # HF mode: keys zeroplan does not model (pad_token_id) go to transformers and are ignored here.
    spec = ModelSpec(name="variant", source="test", config=parse_family_config(config, strict=False))
    hf_only = {k: v for k, v in config.items() if k not in type(spec.config).hf_keys()}
    model = validation.build_on_meta(spec, **hf_only)
    assert _ours(config) == validation.count_with_torch(model)


def test_t5_v1_1_checkpoint_keeps_its_own_lm_head(validation, tmp_path) -> None:
    """tie_word_embeddings: false (T5 v1.1, Flan-T5) -> a separate lm_head, as a loaded checkpoint has it.

    transformers >= 5 ties T5's lm_head in `from_config` whatever the flag says (the flag now only
    turns off the decoder-output scaling), but `from_pretrained` keeps a checkpoint's own lm_head.
    """
    config = {
        "model_type": "t5", "vocab_size": 100, "d_model": 32, "d_kv": 8, "d_ff": 48, "num_layers": 2,
        "num_heads": 4, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False,
    }
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    hf_keys = {k: v for k, v in config.items() if k != "model_type"}
    model = T5ForConditionalGeneration(T5Config(**hf_keys))
    model.lm_head.weight = torch.nn.Parameter(torch.randn(100, 32))  # what a v1.1 checkpoint stores
    model.save_pretrained(tmp_path)
    loaded = T5ForConditionalGeneration.from_pretrained(tmp_path)
    assert _ours(config) == validation.count_with_torch(loaded)
