"""The MoE, MLA and hybrid families' counts equal what transformers builds, for small configs that reach each
option (a layout key, a bias, a qk-norm, a null q_lora_rank, ...) and for the config classes' defaults.

Optional validation: needs torch and transformers (skipped when absent); models are built on the meta device.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from zeroplan.models.families import ModelSpec, parse_family_config
from zeroplan.models.params import count_params

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def validation():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return importlib.import_module("validation.count_params")


# The MoE families' small configs in validation/hf_reference/variants/ (variants.py records what transformers built).
MOE_TYPES = {"qwen3_moe", "qwen2_moe", "qwen3_next", "llama4_text", "deepseek_v2", "deepseek_v3", "kimi_k2",
             "glm4_moe", "gpt_oss", "granitemoe"}
_FILES = sorted((Path(__file__).resolve().parent.parent / "validation" / "hf_reference" / "variants").glob("*.json"))
VARIANTS = {p.stem: c for p in _FILES if (c := json.loads(p.read_text()))["model_type"] in MOE_TYPES}


@pytest.mark.parametrize("config", VARIANTS.values(), ids=VARIANTS.keys())
def test_variant_counts_equal_transformers(validation, config: dict) -> None:
    spec = ModelSpec(name="variant", source="test", config=parse_family_config(config, strict=False))
    counted = count_params(spec)
    ours = (counted.num_params, counted.largest_layer_params, counted.num_embedding_params, counted.num_active_params)
    assert ours == validation.count_with_torch(validation.build_on_meta(spec))


@pytest.mark.parametrize(("model", "preset"), [("Llama-4-Scout-17B-16E", "llama-4-scout"),
                                               ("Llama-4-Maverick-17B-128E", "llama-4-maverick")])
def test_llama4_text_model_is_the_multimodal_model_without_its_vision_tower(validation, model: str,
                                                                            preset: str) -> None:
    """The presets count the text model; their notes quote the vision encoder and projector left out."""
    from zeroplan.models.presets import load_model

    measured = importlib.import_module("validation.multimodal_params").parts(model)
    assert measured["text"] == count_params(load_model(preset)).num_params
    assert (measured["vision"], measured["projector"]) == (415_856_640, 39_321_600)  # as the notes say
    assert f"{measured['vision']:,}" in load_model("llama-4-scout").note
