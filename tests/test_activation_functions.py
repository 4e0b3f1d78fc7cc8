"""The MLP activation is read as the config names it, and its saved bytes are the measured ones. Torch-free.

validation/act_fns_measured.json is data measured by validation/measure_act_fns.py (PyTorch's saved
tensors for every name in transformers' ACT2CLS, fp32 and bf16); the table zeroplan uses must agree.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from zeroplan.memory.activations import activation_bytes
from zeroplan.memory.activations.traits import ACTIVATION_SAVES
from zeroplan.memory.setup import Attention, Precision, TrainingSetup
from zeroplan.models.families import parse_family_config
from zeroplan.models.families.base import HF_ACTIVATIONS

MEASURED = json.loads((Path(__file__).resolve().parents[1] / "validation" / "act_fns_measured.json").read_text())
ELEMENT_BYTES = {"fp32": 4, "bf16": 2}


@pytest.mark.parametrize("name", sorted(MEASURED["activations"]))
def test_table_is_the_measurement(name):
    saves = ACTIVATION_SAVES[name]
    for dtype, row in MEASURED["activations"][name].items():
        assert saves.tensors * ELEMENT_BYTES[dtype] + saves.mask_bytes == row["bytes_per_element"], dtype
        assert saves.saves_output == row["saves_output"], dtype


def test_every_name_transformers_knows_is_measured_and_accepted():
    assert set(MEASURED["activations"]) == HF_ACTIVATIONS
    assert HF_ACTIVATIONS <= set(ACTIVATION_SAVES)


def _gpt2(**kw):
    cfg = dict(model_type="gpt2", n_embd=768, n_layer=12, n_head=12, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return parse_family_config(cfg | kw, strict=False).architecture()


def test_gpt2_config_names_its_activation():
    assert _gpt2().hidden_act == "gelu_new"  # GPT2Config default
    assert _gpt2(activation_function="gelu_pytorch_tanh").hidden_act == "gelu_pytorch_tanh"


def test_gelu_pytorch_tanh_keeps_three_tensors_fewer_than_gelu_new():
    """gelu_new keeps 4 T f tensors (input, tanh, 0.5 x, 1 + tanh), the fused op 1: 3 e T f per layer less."""
    setup = TrainingSetup(precision=Precision.fp32, seq_len=1024, micro_batch=1, attention=Attention.eager)
    new = activation_bytes(_gpt2(), setup).total_bytes
    tanh = activation_bytes(_gpt2(activation_function="gelu_pytorch_tanh"), setup).total_bytes
    assert new - tanh == 12 * 3 * 4 * 1024 * 3072


@pytest.mark.parametrize(("model_type", "key", "family_default"), [
    ("llama", "hidden_act", "silu"), ("mistral", "hidden_act", "silu"), ("qwen2", "hidden_act", "silu"),
    ("phi3", "hidden_act", "silu"), ("gemma2", "hidden_activation", "gelu_pytorch_tanh"),
    ("gpt_neox", "hidden_act", "gelu"), ("opt", "activation_function", "relu"), ("falcon", "activation", "gelu"),
])
def test_each_family_reads_its_own_key(model_type, key, family_default):
    assert parse_family_config({"model_type": model_type}, strict=False).architecture().hidden_act == family_default
    arch = parse_family_config({"model_type": model_type, key: "quick_gelu"}, strict=False).architecture()
    assert arch.hidden_act == "quick_gelu"


def test_gemma2_reads_hidden_activation_not_hidden_act():
    """Gemma2MLP: ACT2FN[config.hidden_activation]; a config.json's hidden_act beside it is not used."""
    cfg = {"model_type": "gemma2", "hidden_act": "relu", "hidden_activation": "gelu_pytorch_tanh"}
    assert parse_family_config(cfg, strict=False).architecture().hidden_act == "gelu_pytorch_tanh"


@pytest.mark.parametrize(("proj", "act"), [("relu", "relu"), ("gated-gelu", "gelu_new"), ("gated-silu", "silu"),
                                           ("gelu", "gelu")])
def test_t5_dense_act_fn_follows_t5config(proj, act):
    cfg = {"model_type": "t5", "feed_forward_proj": proj}
    assert parse_family_config(cfg, strict=False).architecture().hidden_act == act


def test_unknown_activation_is_one_line_naming_key_and_value():
    with pytest.raises(ValueError, match=r"activation_function \('gelu_fancy'\) is not an activation transformers"):
        _gpt2(activation_function="gelu_fancy")
    with pytest.raises(ValueError, match=r"feed_forward_proj \('gated-swoosh'\)|'swoosh'"):
        parse_family_config({"model_type": "t5", "feed_forward_proj": "gated-swoosh"}, strict=False)


def test_relu_output_shared_with_the_gate_product():
    """A gated relu MLP: relu saves its output, which the gate product saves too: 3 e T f, not 4 (measured:
    validation/measure_activations.py family llama-relu)."""
    llama = parse_family_config({"model_type": "llama", "hidden_size": 64, "intermediate_size": 176,
                                 "num_hidden_layers": 2, "num_attention_heads": 4}, strict=False).architecture()
    setup = TrainingSetup(seq_len=32)
    silu = activation_bytes(llama, setup).layer_terms
    relu = activation_bytes(replace(llama, hidden_act="relu"), setup).layer_terms
    assert sum(t.bytes for t in silu) - sum(t.bytes for t in relu) == 2 * 32 * 176


def test_gemma3_accepts_the_unused_hidden_act_of_published_configs():
    cfg = {"model_type": "gemma3_text", "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh"}
    assert parse_family_config(cfg, strict=False).architecture().hidden_act == "gelu_pytorch_tanh"
