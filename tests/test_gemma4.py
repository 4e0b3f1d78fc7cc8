"""Gemma 4's reader (zeroplan/models/families/gemma4.py): the rules it adds beyond the block description. The counts and
names are held to transformers 5.25 by tests/test_dense_families.py and tests/test_named_torch.py (the gemma4
variants), the activations by tests/test_activations_new_families.py."""

from __future__ import annotations

import json

import pytest
from hfreference import REFERENCE
from pydantic import ValidationError

from zeroplan.models.families import parse_family_config
from zeroplan.models.params import count_params, module_inventory


def _variant(name: str) -> dict:
    return json.loads((REFERENCE / "variants" / f"{name}.json").read_text(encoding="utf-8"))


def test_the_last_layer_is_full_attention_whatever_layer_types_says():
    """Gemma4TextConfig.__post_init__ forces layer_types[-1] to full_attention (with a warning): its wider heads."""
    data = _variant("gemma4_text-moe")  # three sliding layers as given
    arch = parse_family_config(data, strict=False).architecture()
    assert arch.attention_types == ("sliding_attention", "sliding_attention", "full_attention")
    q = sorted((m.count, m.out_features) for m in module_inventory(parse_family_config(data, strict=False))
               if m.name.endswith("q_proj"))
    assert q == [(1, 4 * 16), (2, 4 * 8)]  # one global q_proj of global_head_dim, two sliding ones of head_dim


def test_kv_sharing_layers_have_no_k_or_v_and_their_mlp_doubles():
    data = _variant("gemma4_text-tiny")  # 6 layers, the last 2 share, use_double_wide_mlp
    modules = module_inventory(parse_family_config(data, strict=False))
    k_proj = sum(m.count for m in modules if m.name.endswith("k_proj"))
    assert k_proj == data["num_hidden_layers"] - data["num_kv_shared_layers"]
    down = {m.in_features: m.count for m in modules if m.name.endswith("mlp.down_proj")}
    assert down == {data["intermediate_size"]: 4, 2 * data["intermediate_size"]: 2}


def test_k_eq_v_drops_the_global_layers_v_proj_and_takes_their_own_kv_heads():
    data = _variant("gemma4_text-k-eq-v-untied")
    arch = parse_family_config(data, strict=False).architecture()
    assert (arch.global_head_dim, arch.global_key_value_heads, arch.attention_k_eq_v) == (16, 1, True)
    without = parse_family_config({**data, "attention_k_eq_v": False}, strict=False)
    assert without.architecture().global_key_value_heads == data["num_key_value_heads"]  # only read with k_eq_v
    full_layers = arch.attention_types.count("full_attention")
    d, g = data["hidden_size"], data["num_key_value_heads"]
    with_k_eq_v = count_params(parse_family_config(data, strict=False)).num_params
    # without k_eq_v the global layers keep num_key_value_heads and a v_proj (with bias, attention_bias)
    extra_k = full_layers * (d + 1) * (g - 1) * 16
    extra_v = full_layers * (d + 1) * g * 16
    assert count_params(without).num_params - with_k_eq_v == extra_k + extra_v


@pytest.mark.parametrize(("change", "message"), [
    ({"per_layer_config": {"0": {"head_dim": 8}}}, "per_layer_config"),  # not the full layers
    ({"per_layer_config": {str(i): {"head_dim": 8, "num_key_value_heads": 1} for i in (1, 3, 5)}},
     "per_layer_config"),  # kv heads without attention_k_eq_v: not what transformers writes
    ({"num_kv_shared_layers": 5, "layer_types": ["sliding_attention"] + ["full_attention"] * 5},
     "no earlier layer of that type"),
    ({"enable_moe_block": True, "num_experts": 4}, "top_k_experts, moe_intermediate_size are null"),
    ({"num_kv_shared_layers": 7}, "exceeds num_hidden_layers"),
])
def test_configs_transformers_refuses_or_zeroplan_does_not_read_are_one_error(change, message):
    with pytest.raises(ValidationError, match=message):
        parse_family_config({**_variant("gemma4_text-tiny"), **change}, strict=False)


def test_a_config_transformers_saved_reads_as_the_one_it_was_given():
    """transformers 5.25 folds global_head_dim and num_global_key_value_heads into per_layer_config (an override per
    full_attention layer, keys as to_dict writes them) and a saved config.json carries only that: read back the same."""
    data = _variant("gemma4_text-k-eq-v-untied")
    given = parse_family_config(data, strict=False)
    full = [i for i, kind in enumerate(given.architecture().attention_types) if kind == "full_attention"]
    override = {"head_dim": data["global_head_dim"], "num_key_value_heads": data["num_global_key_value_heads"]}
    saved = {k: v for k, v in data.items() if k not in ("global_head_dim", "num_global_key_value_heads")}
    saved["per_layer_config"] = {f"{i:02d}": dict(override) for i in full}
    assert parse_family_config(saved, strict=False).architecture() == given.architecture()
    assert count_params(parse_family_config(saved, strict=False)) == count_params(given)


def test_the_multimodal_config_reads_its_text_config_and_says_the_towers_are_not_counted():
    counted = count_params(parse_family_config(_variant("gemma4-tiny"), strict=False))
    assert any("vision tower and multimodal projector are not counted" in n for n in counted.notes)


@pytest.mark.torch
@pytest.mark.parametrize("name", ["gemma4_text-moe", "gemma4_text-tiny"])
def test_all_linear_lora_targets_what_peft_targets(name, tmp_path, runner):
    """peft's all-linear takes every nn.Linear but the head: Gemma 4's router.proj and the per-layer input linears
    too; zeroplan's trainable count equals peft's on the built model."""
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    from zeroplan.cli.app import app

    data = _variant(name)
    config = transformers.AutoConfig.for_model(data["model_type"], **{k: v for k, v in data.items()
                                                                     if k != "model_type"})
    model = peft.get_peft_model(transformers.AutoModelForCausalLM.from_config(config),
                                peft.LoraConfig(r=4, target_modules="all-linear"))
    theirs = sum(p.numel() for p in model.parameters() if p.requires_grad)
    (tmp_path / "config.json").write_text(json.dumps(data))
    result = runner.invoke(app, ["estimate", "--model", str(tmp_path / "config.json"), "--lora-rank", "4",
                                 "--lora-targets", "all-linear", "-f", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["model"]["num_trainable_params"] == theirs
