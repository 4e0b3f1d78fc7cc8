"""DeepSeek-V4 (zeroplan/models/families/deepseek_v4.py): counted and estimated by zeroplan offline (its activations:
memory/activations/deepseek_v4.py, held to measurement by tests/test_deepseek_v4_activations.py). Its counts and names
are held to transformers 5.25 by tests/test_dense_families.py and tests/test_named_torch.py (the deepseek_v4
variants)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hfreference import REFERENCE
from pydantic import ValidationError

from zeroplan.cli.app import app
from zeroplan.models.families import parse_family_config
from zeroplan.models.params import count_params, module_inventory


def _variant(name: str) -> dict:
    return json.loads((REFERENCE / "variants" / f"{name}.json").read_text(encoding="utf-8"))


def test_legacy_keys_fold_as_the_config_class_folds_them():
    """compress_ratios (cut to num_hidden_layers), compress_rate_hca and num_hash_layers: DeepseekV4Config's
    __post_init__; its width-2 CSA compressor and indexer, an HCA compressor of rate 16, a sliding layer without."""
    config = parse_family_config(_variant("deepseek_v4-legacy-keys"), strict=False)
    assert config.types() == ["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"]
    assert config.mlp_types() == ["hash_moe", "moe", "moe"]
    bias = sorted(m.shapes for m in module_inventory(config) if m.tensors == ("position_bias",))
    assert bias == [((4, 16),), ((4, 32),), ((16, 16),)]  # indexer (2 i_d), CSA (2 h_d), HCA (h_d)


@pytest.mark.parametrize(("change", "message"), [
    ({"layer_types": ["sliding_attention"] * 3}, "layer_types has 3 entries"),
    ({"num_experts_per_tok": 9}, "num_experts_per_tok"),
    ({"o_groups": 3}, "o_groups"),
])
def test_configs_transformers_refuses_are_one_error(change, message):
    with pytest.raises(ValidationError, match=message):
        parse_family_config({**_variant("deepseek_v4-tiny"), **change}, strict=False)


def test_without_the_extra_the_estimate_is_made_by_formula(tmp_path, runner, monkeypatch):
    """No torch, no transformers: the activations are zeroplan's formula, the output says what it assumed."""
    from zeroplan.models import hf

    monkeypatch.setattr(hf, "has_extra", lambda: False)
    (tmp_path / "config.json").write_text(json.dumps(_variant("deepseek_v4-tiny")))
    result = runner.invoke(app, ["estimate", "--model", str(tmp_path / "config.json"), "--seq-len", "64", "-f", "json"])
    assert result.exit_code == 0, result.output
    acts = json.loads(result.output[result.output.index("{"):])["activations"]
    assert not any("copy layer" in t["name"] for t in acts["layer_terms"]), acts
    assert any(t["name"].startswith("attn_hc Sinkhorn divisions") for t in acts["layer_terms"]), acts
    assert any(a.startswith("deepseek_v4 (transformers==5.25.0") for a in acts["assumptions"]), acts


@pytest.mark.torch
def test_the_count_is_transformers_own(tmp_path, runner):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from zeroplan.models.hf import build

    data = _variant("deepseek_v4-tiny")
    ours = count_params(parse_family_config(dict(data), strict=False))
    assert replace(ours, notes=()) == replace(build.describe(dict(data), "v4").counts, notes=())
    (tmp_path / "config.json").write_text(json.dumps(data))
    result = runner.invoke(app, ["estimate", "--model", str(tmp_path / "config.json"), "--seq-len", "64", "-f", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output[result.output.index("{"):])["model"]["num_params"] == ours.num_params
