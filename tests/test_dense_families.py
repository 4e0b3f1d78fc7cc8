"""The dense families of 2024-26 against transformers: every published config in validation/hf_reference/
counts.json and every small per-family config in validation/hf_reference/variants.json (both measured by
validation/hf_reference/count.py: transformers 5.24 building the model on the meta device)."""

from __future__ import annotations

import json

import pytest
from hfreference import (
    REFERENCE,
    counted_layers,
    counted_totals,
    hf_config,
    measured_signatures,
    measured_totals,
    reference,
)

from zeroplan.models.families import parse_family_config
from zeroplan.models.params import count_params, module_inventory

# Published configs of the dense families (and of older families with a 2025 trap: Mistral-Small's heads
# wider than hidden, Phi-4's and Phi-4-mini's tie flags).
PUBLISHED = ["Qwen3-0.6B", "Qwen3-8B", "Qwen3-32B", "gemma-3-1b", "gemma-3-27b", "GLM-4-9B-0414", "OLMo-2-32B",
             "OLMo-3-7B", "granite-3.1-8b", "SmolLM3-3B", "gemma-2b", "gpt-j-6b", "Mistral-Small-24B", "phi-4",
             "Phi-4-mini", "Ministral-3-3B-Reasoning-2512", "starcoder2-7b", "aya-23-8B"]
VARIANTS = json.loads((REFERENCE / "variants.json").read_text(encoding="utf-8"))["models"]


def _variant_config(name: str) -> dict:
    return json.loads((REFERENCE / "variants" / f"{name}.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("model", PUBLISHED)
def test_published_config_counts_as_transformers_builds_it(model: str) -> None:
    config = parse_family_config(hf_config(model), strict=False)
    assert counted_totals(config) == measured_totals(model)
    assert counted_layers(config) == measured_signatures(model)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_per_family_variant_counts_as_transformers_builds_it(name: str) -> None:
    config = parse_family_config(_variant_config(name), strict=False)
    ref = VARIANTS[name]
    counted = count_params(config)
    assert (counted.num_params, counted.largest_layer_params, counted.num_embedding_params) == (
        ref["num_params"], ref["largest_layer_params"], ref["num_embedding_params"])
    # kinds transformers tells apart by class only (DeepSeek-V4's hash and top-k routers) have one signature here
    assert counted_layers(config) == sorted({str(sorted({m["module"]: sorted(m["params"].values())
                                                         for m in kind["modules"]}.items()))
                                             for kind in ref["layer_types"]})


@pytest.mark.parametrize("model", PUBLISHED)
def test_tie_flag_is_the_family_default_where_the_file_has_none(model: str) -> None:
    head = next(m for m in module_inventory(parse_family_config(hf_config(model), strict=False))
                if m.name == "lm_head")
    assert head.tied == reference(model)["lm_head_tied"]


def test_gemma3_vocab_defaults_to_the_config_class_262208() -> None:
    resolved = reference("gemma-3-27b")["resolved_config"]["vocab_size"]
    assert not resolved["from_published_config"]
    arch = parse_family_config(hf_config("gemma-3-27b"), strict=False).architecture()
    assert arch.vocab_size == resolved["value"] == 262_208


def test_mistral_small_head_dim_is_its_own_not_hidden_over_heads() -> None:
    arch = parse_family_config(hf_config("Mistral-Small-24B"), strict=False).architecture()
    published = hf_config("Mistral-Small-24B")  # 32 heads of 128 from 5120, not of 5120 / 32 = 160
    assert (arch.num_attention_heads, arch.head_dim, arch.hidden_size) == (
        published["num_attention_heads"], published["head_dim"], published["hidden_size"])
    assert arch.head_dim != arch.hidden_size // arch.num_attention_heads
    q = next(m for m in module_inventory(parse_family_config(hf_config("Mistral-Small-24B"), strict=False))
             if m.name.endswith("q_proj"))
    assert (q.in_features, q.out_features) == (arch.hidden_size, arch.num_attention_heads * arch.head_dim)


def test_layer_types_follow_the_config_class() -> None:
    assert parse_family_config(hf_config("OLMo-3-7B"), strict=False).architecture().attention_types == tuple(
        reference("OLMo-3-7B")["resolved_config"]["layer_types"]["value"])
    gemma = parse_family_config(hf_config("gemma-3-27b"), strict=False).architecture()
    assert gemma.attention_types == tuple(reference("gemma-3-27b")["resolved_config"]["layer_types"]["value"])
    assert gemma.sliding_window == 1024 and gemma.qk_norm == "head" and gemma.norms_per_layer == 4
    smol = parse_family_config(hf_config("SmolLM3-3B"), strict=False).architecture()
    assert smol.no_rope_layers == tuple(range(3, 36, 4))  # no_rope_layer_interval 4: every 4th layer is NoPE
    assert parse_family_config(hf_config("OLMo-2-32B"), strict=False).architecture().qk_norm == "full"


def test_multimodal_config_counts_the_language_model_and_says_so() -> None:
    counted = count_params(parse_family_config(hf_config("gemma-3-27b"), strict=False))
    assert counted.num_params == reference("gemma-3-27b")["num_params"]
    assert any("vision tower" in note and "not counted" in note for note in counted.notes)
    assert count_params(parse_family_config(hf_config("Qwen3-8B"), strict=False)).notes == ()


@pytest.mark.parametrize("model", PUBLISHED)
def test_largest_module_is_the_one_transformers_names(model: str) -> None:
    config = parse_family_config(hf_config(model), strict=False)
    largest = count_params(config).largest_layer_params
    first = next(m for m in module_inventory(config) if m.params == largest)
    assert first.name.replace("*", "N") == reference(model)["largest_layer_module"]


@pytest.mark.torch
def test_variants_json_is_what_transformers_builds_now(monkeypatch) -> None:
    """Re-measures the per-family configs with the installed transformers (skipped without it)."""
    pytest.importorskip("transformers")
    import importlib

    count = importlib.import_module("validation.hf_reference.count")
    monkeypatch.setattr(count, "CONFIG_DIR", REFERENCE / "variants")
    for name, ref in VARIANTS.items():
        measured = count.count(name)
        assert (measured["num_params"], measured["largest_layer_params"], measured["num_embedding_params"]) == (
            ref["num_params"], ref["largest_layer_params"], ref["num_embedding_params"]), name


def test_the_outputs_say_the_vision_tower_is_not_counted() -> None:
    from zeroplan.cli.presets import models_output
    from zeroplan.memory.setup import DeepSpeedKnobs
    from zeroplan.models.presets import model_facts
    from zeroplan.scenario import resolve_model

    rows = {row["name"]: row for row in models_output()[0]["models"]}
    assert any("vision tower" in note for note in rows["gemma3-27b"]["not_counted"])
    assert rows["qwen3-8b"]["not_counted"] == []
    summary, _ = resolve_model("gemma3-27b", None, None, DeepSpeedKnobs())
    assert summary.count_notes == model_facts("gemma3-27b")[1].notes != ()


def test_estimate_json_names_what_the_count_leaves_out(runner) -> None:
    from zeroplan.cli.app import app

    result = runner.invoke(app, ["estimate", "--model", "gemma3-27b", "--gpus", "8", "-f", "json"])
    data = json.loads(result.stdout)
    assert result.exit_code == 0 and any("vision tower" in n for n in data["model"]["count_notes"])
    assert any(a.startswith("parameter count: gemma3:") and "not counted" in a for a in data["assumptions"])
