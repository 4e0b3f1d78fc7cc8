"""Bad Hugging Face config.json input (issue 13, item 7): unknown keys are ignored; a wrong type, a missing
required key or an impossible shape is one line naming the key and the value; the model is named after the
file's stem, or its folder for a file called config.json."""

from __future__ import annotations

import json
import re

import pytest

from zeroplan.errors import SpecError
from zeroplan.models.presets import load_model_file

GRANITE = {"model_type": "granite", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 96,
           "num_hidden_layers": 2, "num_attention_heads": 4}


def _write(path, data: dict):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_keys_zeroplan_does_not_read_are_ignored(tmp_path) -> None:
    plain = load_model_file(_write(tmp_path / "a.json", GRANITE))
    extra = load_model_file(_write(tmp_path / "b.json", {**GRANITE, "rope_scaling": {"type": "yarn"},
                                                          "embedding_multiplier": 12.0, "whatever": [1, 2]}))
    assert plain.config == extra.config


@pytest.mark.parametrize(("change", "message"), [
    ({"hidden_size": "64"}, "hidden_size: expected a whole number, got '64'"),
    ({"num_hidden_layers": 2.5}, "num_hidden_layers: expected a whole number, got 2.5"),
    ({"hidden_size": 66}, "hidden_size (66) is not a multiple of num_attention_heads (4), and no head_dim is given"),
    ({"num_key_value_heads": 3}, "num_attention_heads (4) is not a multiple of num_key_value_heads (3)"),
    ({"hidden_size": None}, "hidden_size: missing; a Hugging Face config.json states it"),
    ({"model_type": "qwen3", "num_key_value_heads": 2, "layer_types": ["full_attention"]},
     "layer_types has 1 entries, num_hidden_layers is 2"),
], ids=["string", "float", "heads", "kv-heads", "missing", "layer-types"])
def test_bad_value_is_one_line_naming_key_and_value(tmp_path, change: dict, message: str) -> None:
    data = {k: v for k, v in {**GRANITE, **change}.items() if v is not None}
    with pytest.raises(SpecError) as info:
        load_model_file(_write(tmp_path / "m.json", data))
    text = str(info.value)
    assert "\n" not in text and text.startswith(str(tmp_path / "m.json")) and message in text


def test_head_dim_lifts_the_divisibility_rule(tmp_path) -> None:
    spec = load_model_file(_write(tmp_path / "m.json", {**GRANITE, "hidden_size": 66, "head_dim": 16}))
    assert spec.architecture().head_dim == 16


def test_experts_per_token_above_experts_is_one_line(tmp_path) -> None:
    data = {"model_type": "mixtral", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "num_local_experts": 2, "num_experts_per_tok": 3}
    with pytest.raises(SpecError, match=re.escape("num_experts_per_tok (3) is more than num_local_experts (2)")):
        load_model_file(_write(tmp_path / "moe.json", data))


def test_multimodal_text_config_missing_key_names_its_path(tmp_path) -> None:
    data = {"model_type": "gemma3", "text_config": {"num_hidden_layers": 2, "num_attention_heads": 4}}
    with pytest.raises(SpecError, match=re.escape("text_config.hidden_size: missing")):
        load_model_file(_write(tmp_path / "mm.json", data))


def test_model_name_is_the_stem_or_the_folder_of_a_config_json(tmp_path) -> None:
    assert load_model_file(_write(tmp_path / "granite-tiny.json", GRANITE)).name == "granite-tiny"
    assert load_model_file(_write(tmp_path / "My-Model" / "config.json", GRANITE)).name == "My-Model"


def test_multimodal_text_model_zeroplan_does_not_describe_is_one_line(tmp_path) -> None:
    data = {"model_type": "gemma3", "text_config": {"model_type": "qwen2_5_vl_text", "hidden_size": 64,
                                                    "num_hidden_layers": 2, "num_attention_heads": 4}}
    with pytest.raises(SpecError, match=re.escape("text_config.model_type 'qwen2_5_vl_text' is not a supported")):
        load_model_file(_write(tmp_path / "mm.json", data))


def test_a_key_the_config_class_lacks_is_ignored_like_any_other(tmp_path) -> None:
    # GraniteConfig has no layer_types: transformers' Granite builds every layer alike, whatever the file says.
    data = {**GRANITE, "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 8}
    assert load_model_file(_write(tmp_path / "g.json", data)).architecture().attention_types == ()
