"""The fine-tune rules of phi, phi3, gpt_neox and falcon (zeroplan/memory/activations/layouts.py): the module names
they read are the ones transformers gives (zeroplan.models.named, itself checked against transformers), an estimate
no longer calls their activations an upper bound, and bitsandbytes before 0.43.2 keeps each 4-bit matmul's input
in them as in Llama's layout. The measured comparison is tests/test_finetune_validation.py's."""

import json
from pathlib import Path

import pytest

from zeroplan.memory.activations import activation_bytes
from zeroplan.memory.activations.layouts import LAYOUTS, final_norm, layer_prefix, norm_names
from zeroplan.memory.activations.tuning import MODELLED_FAMILIES, UPPER_BOUND, tuned_activations
from zeroplan.memory.finetune import ALL_LINEAR, Finetune, tune
from zeroplan.memory.quant import Quant
from zeroplan.memory.setup import Attention, Checkpointing, Precision, TrainingSetup
from zeroplan.models.named import named_parameters
from zeroplan.models.presets import model_from_data

ACTS = json.loads((Path(__file__).resolve().parent.parent / "validation" / "finetune_activations.json").read_text())
KEYS = [k for k, c in ACTS["config"].items() if c.get("model_type", k) in LAYOUTS]  # the measured wirings


def _spec(key: str):
    return model_from_data({"model_type": key, **ACTS["config"][key]}, "tiny", hf_name="tiny")


def test_every_layout_family_is_modelled_and_measured():
    assert set(LAYOUTS) <= MODELLED_FAMILIES
    assert {ACTS["config"][k].get("model_type", k) for k in KEYS} == set(LAYOUTS)
    # each wiring once: one shared norm (phi, falcon-7b), two norms on the layer input, the sequence (phi3, NeoX)
    assert {"gpt_neox-sequential", "falcon-new"} <= set(KEYS)


@pytest.mark.parametrize("key", KEYS)
def test_the_rules_read_the_modules_transformers_names(key):
    spec = _spec(key)
    arch = spec.architecture()
    modules = {p.module for p in named_parameters(spec)}
    lay = LAYOUTS[arch.family]
    prefix = layer_prefix(arch.family, 0)
    for local in (*lay.qkv, lay.o, lay.up, lay.down, *norm_names(arch)):
        assert prefix + local in modules, (key, local)
    root, norm = final_norm(arch.family)
    assert root + norm in modules


def _estimate(key: str, finetune: Finetune):
    spec = _spec(key)
    arch = spec.architecture()
    setup = TrainingSetup(precision=Precision.bf16_mixed, seq_len=64, micro_batch=2, attention=Attention.eager,
                          checkpointing=Checkpointing.none)
    tuning = tune(named_parameters(spec), finetune, arch.family)
    return tuned_activations(activation_bytes(arch, setup), arch, setup, tuning, 4), arch


@pytest.mark.parametrize("key", KEYS)
def test_the_estimate_drops_the_upper_bound_note(key):
    acts, arch = _estimate(key, Finetune(lora_rank=8, lora_targets=(ALL_LINEAR,)))
    assert not any(a.startswith(UPPER_BOUND.split("{")[0]) for a in acts.assumptions)


def _old_bnb_delta(key: str) -> tuple[list[int], object]:
    qlora = dict(lora_rank=8, lora_targets=(ALL_LINEAR,), quant=Quant.nf4)
    now, arch = _estimate(key, Finetune(**qlora))
    old, _ = _estimate(key, Finetune(**qlora, bnb_version="0.42.0"))
    return [b - a for a, b in zip(now.layer_bytes, old.layer_bytes)], arch


def test_old_bitsandbytes_keeps_phi_shared_input_once():
    """phi: q, k, v and fc1 read one normed tensor (kept once for the four MatMul4Bit); dense reads eager's
    output copy, fc2 the activation's output. Layer 0's normed input needs no gradient (frozen embeddings and
    LayerNorm): its four matmuls keep nothing; layer 1's do."""
    deltas, arch = _old_bnb_delta("phi")
    t, e, h, f = 2 * 64, 2, arch.hidden_size, arch.intermediate_size
    assert deltas == [e * t * h + e * t * f, 2 * e * t * h + e * t * f]


def test_old_bitsandbytes_keeps_both_parallel_inputs_of_neox():
    """GPT-NeoX's parallel residual: query_key_value and dense_h_to_4h read two normed tensors, each kept."""
    deltas, arch = _old_bnb_delta("gpt_neox")
    t, e, h, f = 2 * 64, 2, arch.hidden_size, arch.intermediate_size
    assert deltas == [e * t * h + e * t * f, 3 * e * t * h + e * t * f]
