"""MoE, MLA and hybrid families: counts, module shapes and layer layouts equal what transformers 5.24 built on
the meta device for the published configs (validation/hf_reference/counts.json, written by its count.py), and
the config traps those families carry."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import ValidationError

from zeroplan.models.block import MoE
from zeroplan.models.families import parse_family_config
from zeroplan.models.params import count_params, module_inventory
from zeroplan.models.params.decoder import persistent_buffer_numel

REFERENCE = Path(__file__).resolve().parent.parent / "validation" / "hf_reference"
COUNTS = json.loads((REFERENCE / "counts.json").read_text())["models"]
MOE_MODELS = [
    "DeepSeek-V2-Lite", "DeepSeek-V3", "GLM-4.5-Air", "Kimi-K2", "Llama-4-Maverick-17B-128E",
    "Llama-4-Scout-17B-16E", "Qwen1.5-MoE-A2.7B", "Qwen3-235B-A22B", "Qwen3-30B-A3B", "Qwen3-Next-80B-A3B",
    "gpt-oss-120b", "gpt-oss-20b", "granite-3.0-1b-a400m",
]


def published(name: str):
    """The published config.json as a user gives it; a multimodal one through its text_config."""
    raw = json.loads((REFERENCE / "configs" / f"{name}.json").read_text())
    return parse_family_config(raw.get("text_config", raw), strict=False)


MOE_TYPES = {"qwen3_moe", "qwen2_moe", "qwen3_next", "llama4_text", "deepseek_v2", "deepseek_v3", "kimi_k2",
             "glm4_moe", "gpt_oss", "granitemoe"}
# Small configs that switch each option on or take the class defaults: validation/hf_reference/variants/<name>.json,
# measured by variants.py (count.py's measurement) into variants.json.
VARIANT_FILES = {p.stem: json.loads(p.read_text()) for p in sorted((REFERENCE / "variants").glob("*.json"))}
VARIANTS = {name: config for name, config in VARIANT_FILES.items() if config["model_type"] in MOE_TYPES}
VARIANT_COUNTS = json.loads((REFERENCE / "variants.json").read_text())["models"]


@pytest.mark.parametrize("name", VARIANTS)
def test_small_variant_counts_equal_what_transformers_built(name: str) -> None:
    counted, reference = count_params(parse_family_config(VARIANTS[name], strict=False)), VARIANT_COUNTS[name]
    assert (counted.num_params, counted.largest_layer_params, counted.num_embedding_params,
            counted.num_active_params) == (reference["num_params"], reference["largest_layer_params"],
                                           reference["num_embedding_params"], reference["num_active_params"])


@pytest.mark.parametrize("name", VARIANTS)
def test_small_variant_layer_shapes_equal_what_transformers_built(name: str) -> None:
    ours: Counter = Counter()
    for module in module_inventory(parse_family_config(VARIANTS[name], strict=False)):
        if module.name.startswith("model.layers."):
            for shape in module.shapes:
                ours[shape] += module.count
    assert ours == _layer_shapes_reference(VARIANT_COUNTS[name])


def test_every_moe_family_has_variants() -> None:
    assert {config["model_type"] for config in VARIANTS.values()} == MOE_TYPES


def test_the_reference_has_every_moe_model() -> None:
    assert set(MOE_MODELS) <= set(COUNTS)
    assert all("moe" in COUNTS[name] for name in MOE_MODELS)


@pytest.mark.parametrize("name", MOE_MODELS)
def test_counts_equal_transformers(name: str) -> None:
    counted, reference = count_params(published(name)), COUNTS[name]
    assert (counted.num_params, counted.largest_layer_params, counted.num_embedding_params,
            counted.num_active_params) == (reference["num_params"], reference["largest_layer_params"],
                                           reference["num_embedding_params"], reference["num_active_params"])


def _layer_shapes_reference(reference: dict) -> Counter:
    """Every parameter tensor shape of the decoder layers, with multiplicity (layers x tensors)."""
    shapes: Counter = Counter()
    for kind in reference["layer_types"]:
        for module in kind["modules"]:
            for shape in module["params"].values():
                shapes[tuple(shape)] += kind["num_layers"]
    return shapes


@pytest.mark.parametrize("name", MOE_MODELS)
def test_layer_tensor_shapes_equal_transformers(name: str) -> None:
    """FSDP2 pads and ZeroRedundancyOptimizer partitions per tensor: the shapes, not only their sum, must match."""
    ours: Counter = Counter()
    for module in module_inventory(published(name)):
        if module.name.startswith("model.layers."):
            assert module.shapes, module.name
            for shape in module.shapes:
                ours[shape] += module.count
    assert ours == _layer_shapes_reference(COUNTS[name])


def _indices(ranges: str) -> list[int]:
    out: list[int] = []
    for part in ranges.split(","):
        first, _, last = part.partition("-")
        out += range(int(first), int(last or first) + 1)
    return out


@pytest.mark.parametrize("name", MOE_MODELS)
def test_moe_layer_layout_equals_transformers(name: str) -> None:
    """Dense-then-MoE (first_k_dense_replace), interleaved (Llama 4 Maverick) or all MoE: the layers that route."""
    built = sorted(i for kind in COUNTS[name]["layer_types"] if kind["label"].startswith("moe")
                   for i in _indices(kind["layers"]))
    assert published(name).moe_layer_indices() == built
    assert len(built) == COUNTS[name]["moe"]["num_moe_layers"]


@pytest.mark.parametrize("name", ["Qwen3-Next-80B-A3B", "gpt-oss-20b", "gpt-oss-120b", "Llama-4-Scout-17B-16E"])
def test_attention_layer_types_equal_transformers(name: str) -> None:
    """Linear/full (Qwen3-Next), sliding/full (gpt-oss), chunked/NoPE-full (Llama 4) as the config class builds them."""
    assert published(name).attention_layer_types() == COUNTS[name]["resolved_config"]["layer_types"]["value"]


@pytest.mark.parametrize("name", ["DeepSeek-V3", "GLM-4.5-Air"])
def test_router_correction_bias_is_a_buffer_not_a_parameter(name: str) -> None:
    """e_score_correction_bias (one per routed expert per MoE layer) is in the state dict, not in the count."""
    buffers = COUNTS[name]["persistent_buffers"]["model.layers.N.mlp.gate.e_score_correction_bias"]
    config = published(name)
    assert buffers["numel_total"] == len(config.moe_layer_indices()) * config.routed_experts
    assert not any("correction" in m.name for m in module_inventory(config))


@pytest.mark.parametrize("name", MOE_MODELS)
def test_persistent_buffers_equal_transformers(name: str) -> None:
    """The state dict's buffers that are not parameters: only the router correction biases, where built."""
    built = sum(entry["numel_total"] for entry in COUNTS[name]["persistent_buffers"].values())
    assert persistent_buffer_numel(published(name).decoder()) == built


@pytest.mark.parametrize("name", ["DeepSeek-V2-Lite", "DeepSeek-V3", "Kimi-K2", "GLM-4.5-Air"])
def test_the_description_has_the_correction_buffer_where_transformers_does(name: str) -> None:
    moe = {layer.mlp for layer, _ in published(name).decoder().layers if isinstance(layer.mlp, MoE)}
    built = "model.layers.N.mlp.gate.e_score_correction_bias" in COUNTS[name]["persistent_buffers"]
    assert [m.correction_bias for m in moe] == [built]


@pytest.mark.parametrize(("name", "mtp"), [("DeepSeek-V3", 1), ("GLM-4.5-Air", 1), ("Kimi-K2", 0)])
def test_mtp_layers_are_not_counted_and_the_notes_say_so(name: str, mtp: int) -> None:
    config = published(name)
    assert config.num_hidden_layers == COUNTS[name]["resolved_config"]["num_hidden_layers"]["value"]
    assert config.mtp_layers == mtp
    assert (len(config.notes()) == 1 and "not counted" in config.notes()[0]) if mtp else config.notes() == ()
    assert config.decoder().notes == config.notes()


def test_kimi_k2_is_read_as_deepseek_v3() -> None:
    config = published("Kimi-K2")
    assert type(config).__name__ == "DeepseekV3Config" and config.model_type == "kimi_k2"


# Keys a file leaves out take the config class's default (configuration_<family>.py, transformers 5.24).
@pytest.mark.parametrize(("config", "expected"), [
    # Qwen3MoeConfig has no head_dim field: d / h = 64, not the 128 Qwen3-30B-A3B's file states.
    ({"model_type": "qwen3_moe"}, {"head_dim": 64, "num_experts": 128, "num_experts_per_tok": 8,
                                   "intermediate_size": 768, "num_key_value_heads": 4}),
    ({"model_type": "qwen2_moe"}, {"num_experts": 60, "num_experts_per_tok": 4, "intermediate_size": 1408}),
    ({"model_type": "qwen3_next"}, {"head_dim": 256, "num_experts": 512, "num_experts_per_tok": 10}),
    ({"model_type": "llama4_text"}, {"num_experts": 16, "num_experts_per_tok": 1, "head_dim": 128}),
    ({"model_type": "deepseek_v3"}, {"num_experts": 256, "num_experts_per_tok": 8, "head_dim": 192,
                                     "num_key_value_heads": 128}),
    ({"model_type": "glm4_moe"}, {"head_dim": 42, "num_experts": 128}),  # Glm4MoeAttention: 4096 // 96
    ({"model_type": "gpt_oss"}, {"num_experts": 128, "num_experts_per_tok": 4, "sliding_window": 128}),
    ({"model_type": "granitemoe"}, {"num_experts": 8, "num_experts_per_tok": 2, "num_key_value_heads": 32,
                                    "tie_word_embeddings": False}),
])
def test_config_class_defaults(config: dict, expected: dict) -> None:
    arch = parse_family_config(config, strict=True).architecture()
    assert {key: getattr(arch, key) for key in expected} == expected


def test_layouts_from_their_keys() -> None:
    qwen = parse_family_config({"model_type": "qwen3_moe", "num_hidden_layers": 6, "decoder_sparse_step": 2,
                                "mlp_only_layers": [3]}, strict=True)
    assert qwen.moe_layer_indices() == [1, 5]
    llama = parse_family_config({"model_type": "llama4_text", "num_hidden_layers": 6,
                                 "interleave_moe_layer_step": 3}, strict=True)
    assert llama.moe_layer_indices() == [2, 5]
    assert parse_family_config({"model_type": "deepseek_v3", "num_hidden_layers": 5, "first_k_dense_replace": 2},
                               strict=True).moe_layer_indices() == [2, 3, 4]
    no_chunks = parse_family_config({"model_type": "llama4_text", "num_hidden_layers": 4,
                                     "attention_chunk_size": None}, strict=True)
    assert no_chunks.attention_layer_types() == ["full_attention"] * 4
    assert parse_family_config({"model_type": "qwen3_next", "num_hidden_layers": 4, "full_attention_interval": 2},
                               strict=True).attention_layer_types() == ["linear_attention", "full_attention"] * 2


def test_aliases_name_the_same_count() -> None:
    """attribute_map spellings: gpt-oss num_experts, DeepSeek-V3 num_local_experts, Qwen num_local_experts."""
    pairs = [("gpt_oss", "num_experts", "num_local_experts"), ("deepseek_v3", "num_local_experts", "n_routed_experts"),
             ("qwen3_moe", "num_local_experts", "num_experts"), ("deepseek_v2", "num_experts", "n_routed_experts")]
    for model_type, alias, canonical in pairs:
        base = {"model_type": model_type, "num_hidden_layers": 2, "num_experts_per_tok": 2}
        assert (count_params(parse_family_config({**base, alias: 8}, strict=True))
                == count_params(parse_family_config({**base, canonical: 8}, strict=True)))


@pytest.mark.parametrize(("config", "message"), [
    ({"model_type": "qwen3_moe", "num_experts": 4, "num_experts_per_tok": 8},
     "num_experts_per_tok (8) is more than num_experts (4)"),
    ({"model_type": "deepseek_v2"}, "num_experts_per_tok is not set"),  # DeepseekV2Config's default is None
    ({"model_type": "deepseek_v3", "first_k_dense_replace": None}, "first_k_dense_replace"),
    ({"model_type": "gpt_oss", "num_hidden_layers": 2, "layer_types": ["full_attention"]},
     "layer_types has 1 entries, num_hidden_layers is 2"),
    ({"model_type": "qwen3_next", "num_hidden_layers": 1, "layer_types": ["sliding_attention"]},
     "'sliding_attention' is not one of"),
    ({"model_type": "deepseek_v2", "hidden_size": 100, "num_attention_heads": 3, "num_experts_per_tok": 2},
     "hidden_size (100) is not a multiple of num_attention_heads (3)"),
    ({"model_type": "qwen2_moe", "hidden_size": 100, "num_attention_heads": 3}, "hidden_size (100)"),
    # Llama4TextConfig types head_dim `int` (a strict dataclass): null is refused, as transformers refuses it.
    ({"model_type": "llama4_text", "head_dim": None}, "head_dim"),
])
def test_impossible_configs_are_refused(config: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_family_config(config, strict=True)


def test_the_output_says_the_mtp_layers_are_not_counted() -> None:
    from zeroplan.api import estimate

    assumptions = estimate(model="deepseek-v3", gpus=64).assumptions
    assert "parameter count: num_nextn_predict_layers: 1 multi-token-prediction layer(s) in the checkpoint, not built " \
        "by transformers: not counted" in assumptions
    assert not any("multi-token" in a for a in estimate(model="qwen3-30b-a3b", gpus=8).assumptions)


@pytest.mark.parametrize("name", MOE_MODELS)
def test_architecture_fields_follow_the_description(name: str) -> None:
    """Experts, top-k, widths, the dense/MoE layout and the MLA dims, as transformers resolved the config."""
    arch, resolved, moe = published(name).architecture(), COUNTS[name]["resolved_config"], COUNTS[name]["moe"]
    assert (arch.num_experts, arch.num_experts_per_tok) == (moe["num_routed_experts"], moe["top_k"])
    assert arch.num_moe_layers == moe["num_moe_layers"]
    assert arch.num_layers == resolved["num_hidden_layers"]["value"]
    expert_width = resolved.get("moe_intermediate_size", resolved["intermediate_size"])["value"]
    assert arch.intermediate_size == expert_width
    for key in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
        if key in resolved:
            assert getattr(arch, key) == (resolved[key]["value"] or 0)
    if "layer_types" in resolved and len(set(resolved["layer_types"]["value"])) > 1:
        assert list(arch.attention_types) == resolved["layer_types"]["value"]


@pytest.mark.parametrize("name", ["Llama-4-Scout-17B-16E", "Llama-4-Maverick-17B-128E"])
def test_a_multimodal_llama4_config_counts_its_text_model(name: str) -> None:
    """The published config.json (model_type llama4) read through its text_config, as transformers'
    get_text_config(); the output says the vision tower is not counted."""
    raw = json.loads((REFERENCE / "configs" / f"{name}.json").read_text())
    outer = parse_family_config(raw, strict=False)
    assert replace(count_params(outer), notes=()) == replace(count_params(published(name)), notes=())
    assert count_params(outer).num_params == COUNTS[name]["num_params"]
    assert any("vision tower" in note for note in count_params(outer).notes)
