"""What an estimate says is adapted (the JSON's `finetune.adapted_linears` / `adapted_parameters` and the note the
table prints) equals what peft 0.21.2 wraps: its LoRA `Linear` layers and its `ParamWrapper`s (lora/layer.py),
counted on the meta device for the MoE families of validation/finetune_activations.json's all-linear cases.

On the model types transformers 5 fuses into 3-D experts, peft maps the router and expert names onto parameters
(utils/transformers_weight_conversion.py, target_parameters) and wraps each in a ParamWrapper: all-linear reaches
them, and so do the v4 names given by hand. Optional: needs torch, transformers and peft.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import zeroplan

pytestmark = pytest.mark.torch

CASES = json.loads((Path(__file__).resolve().parent.parent / "validation" / "finetune_activations.json").read_text())[
    "all_linear_moe"]
TARGETS = {  # all-linear on every family; on converted ones also the router alone and the experts alone
    **{(family, "all-linear"): "all-linear" for family in CASES},
    ("qwen3_moe", "q_proj,gate"): ["q_proj", "gate"],
    ("qwen3_moe", "gate_proj,up_proj,down_proj"): ["gate_proj", "up_proj", "down_proj"],
    ("mixtral", "w1,w3"): ["w1", "w3"],
    ("deepseek_v3", "kv_b_proj,gate"): ["kv_b_proj", "gate"],
}


def peft_wraps(family: str, targets) -> tuple[int, int, int]:
    """(LoRA Linear layers, ParamWrappers on 2-D parameters, on 3-D ones) of get_peft_model on meta."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    from peft.tuners.lora.layer import Linear, ParamWrapper

    config = transformers.AutoConfig.for_model(family, **CASES[family]["config"])
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    model = peft.get_peft_model(model, peft.LoraConfig(r=CASES[family]["r"], target_modules=targets))
    wrappers = [m for m in model.modules() if isinstance(m, ParamWrapper)]
    dims = [m.get_param().dim() for m in wrappers]
    return sum(isinstance(m, Linear) for m in model.modules()), dims.count(2), dims.count(3)


@pytest.mark.parametrize(("family", "targets"), TARGETS, ids=[f"{f} {t}" for f, t in TARGETS])
def test_what_is_adapted_is_what_peft_wraps(family: str, targets: str, tmp_path: Path) -> None:
    linears, routers, experts = peft_wraps(family, TARGETS[family, targets])
    case = CASES[family]
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": family, **case["config"]}))
    est = zeroplan.estimate(model=config, lora_rank=case["r"], lora_targets=targets, stage=3, gpus=1, hardware=None)
    finetune = zeroplan.to_dict(est)["finetune"]
    assert (finetune["adapted_linears"], finetune["adapted_parameters"]) == (linears, routers + experts)
    notes = " | ".join(est.assumptions)
    if linears:
        assert f"adapters of rank {case['r']} on {linears} linears" in notes
    else:
        assert "adapters of rank" not in notes
    if routers + experts:
        kinds = ", ".join(f"{n} {what}" for n, what in ((routers, "router weights"), (experts, "expert tensors")) if n)
        assert f"peft adapts {routers + experts} MoE parameters ({kinds})" in notes
    else:
        assert "peft adapts" not in notes


# transformers 5 names GPT-NeoX's head lm_head (it was embed_out): all-linear leaves it out as peft does, by the
# output-embedding rule, and zeroplan finds it by that name (models.named.OUTPUT_HEAD).
NEOX = {"model_type": "gpt_neox", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 96}


def test_all_linear_on_gpt_neox_leaves_the_head_out_as_peft_does(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    from peft.tuners.lora.layer import Linear

    config = transformers.AutoConfig.for_model("gpt_neox", **{k: v for k, v in NEOX.items() if k != "model_type"})
    with torch.device("meta"):
        model = peft.get_peft_model(transformers.AutoModelForCausalLM.from_config(config),
                                    peft.LoraConfig(r=8, target_modules="all-linear"))
    path = tmp_path / "config.json"
    path.write_text(json.dumps(NEOX))
    finetune = zeroplan.to_dict(zeroplan.estimate(model=path, lora_rank=8, lora_targets="all-linear", stage=3, gpus=1,
                                                  hardware=None))["finetune"]
    ours = (finetune["num_trainable_params"], finetune["num_params_with_adapters"], finetune["adapted_linears"])
    assert ours == (*model.get_nb_trainable_parameters(), sum(isinstance(m, Linear) for m in model.modules()))
