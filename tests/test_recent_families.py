"""Issue 25's families: the rules their readers add beyond the block description (the counts themselves are held to
transformers 5.25 by tests/test_dense_families.py's variants, the names by tests/test_named_torch.py)."""

from __future__ import annotations

import json

import pytest
from hfreference import REFERENCE
from pydantic import ValidationError

from zeroplan.models.families import parse_family_config
from zeroplan.models.params import count_params


def _variant(name: str) -> dict:
    return json.loads((REFERENCE / "variants" / f"{name}.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", ["qwen3_vl-tiny", "qwen3_vl_moe-tiny", "qwen3_5-tiny", "qwen3_5_moe-tiny"])
def test_qwen_vision_language_head_is_tied_by_the_outer_config(name):
    """Qwen3VLConfig / Qwen3_5Config carry tie_word_embeddings (default false); the text_config's flag is not read."""
    data = _variant(name)
    untied = count_params(parse_family_config(data, strict=False))
    tied = count_params(parse_family_config({**data, "tie_word_embeddings": True}, strict=False))
    text = data["text_config"]
    assert untied.num_params - tied.num_params == text["vocab_size"] * text["hidden_size"]
    assert any("vision tower and multimodal projector are not counted" in n for n in untied.notes)


def test_exaone4_without_layer_types_needs_a_window_and_an_integer_pattern():
    with pytest.raises(ValidationError, match="layer_types missing with sliding_window None"):
        parse_family_config({"model_type": "exaone4", "sliding_window": None}, strict=False)
    with pytest.raises(ValidationError, match="sliding_window_pattern 'LLLG'"):
        parse_family_config({"model_type": "exaone4", "sliding_window_pattern": "LLLG"}, strict=False)
    typed = parse_family_config({"model_type": "exaone4", "sliding_window_pattern": "LLLG", "num_hidden_layers": 2,
                                 "layer_types": ["sliding_attention", "full_attention"]}, strict=False)
    assert typed.architecture().no_rope_layers == (1,)  # the full layer is NoPE while a window is set


def test_deepseek_v32_indexer_needs_the_low_rank_query():
    with pytest.raises(ValidationError, match="q_lora_rank is null"):
        parse_family_config({"model_type": "deepseek_v32", "q_lora_rank": None}, strict=False)


def test_ernie_moe_aliases_and_layer_range():
    data = _variant("ernie4_5_moe-tiny")
    aliased = {k: v for k, v in data.items() if k not in ("moe_num_experts", "moe_k")} | {
        "num_experts": data["moe_num_experts"], "num_experts_per_tok": data["moe_k"]}
    assert count_params(parse_family_config(aliased, strict=False)) == count_params(
        parse_family_config(data, strict=False))
    with pytest.raises(ValidationError, match="name the same setting"):
        parse_family_config({**data, "num_experts": data["moe_num_experts"] + 1}, strict=False)
    arch = parse_family_config(data, strict=False).architecture()
    assert arch.mlp_types == ("dense", "moe", "moe", "dense")  # moe_layer_start_index 1, moe_layer_end_index 2


def test_cohere2_full_layers_are_nope_and_have_no_qk_norm():
    arch = parse_family_config({"model_type": "cohere2", "num_hidden_layers": 8}, strict=False).architecture()
    assert arch.no_rope_layers == (3, 7) and arch.qk_norm == "none" and arch.parallel_attn
