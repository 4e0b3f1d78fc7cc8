"""zeroplan's parameter names and shapes (zeroplan.models.named) equal what transformers' named_parameters() yields,
for every model preset and every small config in validation/hf_reference/variants/ (one per family option).

The fine-tuning modes match --freeze globs, LoRA targets and modules_to_save against these names, so a wrong name
(gpt-oss's attention sinks were once `self_attn.weight`; GptOssAttention registers `self.sinks`) is a glob that
silently matches nothing. validation/finetune_measured.json pins the names of seven dense families only; this
covers every family with a decoder description. Optional: needs torch and transformers; built on the meta device.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from zeroplan.models.families import ModelSpec, parse_family_config
from zeroplan.models.named import named_parameters
from zeroplan.models.presets import load_model
from zeroplan.registry import preset_names

pytestmark = pytest.mark.torch

VARIANTS = {p.stem: json.loads(p.read_text()) for p in sorted(
    (Path(__file__).resolve().parent.parent / "validation" / "hf_reference" / "variants").glob("*.json"))}


@pytest.fixture(scope="module")
def validation():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return importlib.import_module("validation.count_params")


def _names_and_shapes(spec: ModelSpec, model) -> tuple[dict, dict]:
    ours = {p.name: tuple(p.shape) for p in named_parameters(spec)}
    return ours, {name: tuple(t.shape) for name, t in model.named_parameters()}


@pytest.mark.parametrize("name", VARIANTS)
def test_variant_names_are_transformers_own(validation, name: str) -> None:
    config = VARIANTS[name]
    spec = ModelSpec(name=name, source="test", config=parse_family_config(config, strict=False))
    if spec.config.decoder() is None:
        pytest.skip(f"{name}: no decoder description")
    hf_only = {k: v for k, v in config.items() if k not in type(spec.config).hf_keys()}  # pad_token_id, ...
    ours, theirs = _names_and_shapes(spec, validation.build_on_meta(spec, **hf_only))
    assert ours == theirs


@pytest.mark.parametrize("name", preset_names("models"))
def test_preset_names_are_transformers_own(validation, name: str) -> None:
    spec = load_model(name)
    if spec.config.decoder() is None or spec.config.model_dump(by_alias=True)["model_type"] == "t5":
        pytest.skip(f"{name}: fine-tuning modes need a decoder description")
    ours, theirs = _names_and_shapes(spec, validation.build_on_meta(spec))
    assert ours == theirs
