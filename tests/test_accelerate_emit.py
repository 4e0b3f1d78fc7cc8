"""The Accelerate config for PyTorch-engine recommendations: keys per engine, the block class per family, notes."""

import importlib

import pytest

from zeroplan.advise.accelerate import LAYER_CLASSES, accelerate_config, layer_class
from zeroplan.advise.advisor import advise
from zeroplan.advise.policy import DEFAULT
from zeroplan.errors import UsageError, ZeroplanError
from zeroplan.hardware.presets import load_hardware
from zeroplan.memory.estimate import Scenario, overheads_for
from zeroplan.memory.setup import (
    Checkpointing,
    Engine,
    Parallelism,
    Precision,
    TrainingSetup,
)
from zeroplan.memory.states import ModelSummary
from zeroplan.models.architecture import Architecture

H100 = load_hardware("h100-sxm-80gb")
LLAMA = Architecture(family="llama", hidden_size=4096, num_layers=32, num_attention_heads=32, num_key_value_heads=8,
                     head_dim=128, intermediate_size=14336, vocab_size=128256, gated_mlp=True, norm="rmsnorm",
                     tie_word_embeddings=False)


def advice_for(engine: Engine, num_params: float, arch=None, gpus=8, nodes=1, **setup):
    n = int(num_params)
    scn = Scenario(model=ModelSummary(name="m", num_params=n, largest_layer_params=n // 100), arch=arch,
                   setup=TrainingSetup(**setup), parallelism=Parallelism(gpus=gpus, nodes=nodes), hardware=H100,
                   overheads=overheads_for(H100, None, None, None), engine=engine)
    return advise(scn, DEFAULT, global_batch=512 if gpus == 8 else 1024)


def test_fsdp1_config(monkeypatch):
    monkeypatch.setattr("zeroplan.memory.estimate.activations_for", lambda arch, setup: None)
    config, notes = accelerate_config(advice_for(Engine.fsdp, 30e9, arch=LLAMA))
    assert config["distributed_type"] == "FSDP" and config["mixed_precision"] == "bf16"
    assert (config["num_processes"], config["num_machines"]) == (8, 1)
    assert config["fsdp_config"] == {
        "fsdp_version": 1, "fsdp_sharding_strategy": "FULL_SHARD", "fsdp_backward_prefetch": "BACKWARD_PRE",
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "fsdp_transformer_layer_cls_to_wrap": "LlamaDecoderLayer",
        "fsdp_activation_checkpointing": False, "fsdp_offload_params": False}


def test_fsdp2_config_and_multi_node():
    config, notes = accelerate_config(advice_for(Engine.fsdp2, 1e9, gpus=16, nodes=2, precision=Precision.fp16_mixed))
    fsdp = config["fsdp_config"]
    assert (fsdp["fsdp_version"], fsdp["fsdp_reshard_after_forward"]) == (2, False)
    assert "fsdp_sharding_strategy" not in fsdp  # FSDP2: reshard_after_forward replaces it
    assert "fsdp_transformer_layer_cls_to_wrap" not in fsdp and any("_no_split_modules" in n for n in notes)
    assert (config["mixed_precision"], config["num_processes"], config["num_machines"]) == ("fp16", 16, 2)
    assert any("machine_rank" in n for n in notes)


def test_ddp_config_says_what_the_file_cannot():
    config, notes = accelerate_config(advice_for(Engine.ddp, 4.5e9, precision=Precision.fp32))
    assert config == {"compute_environment": "LOCAL_MACHINE", "distributed_type": "MULTI_GPU",
                      "mixed_precision": "no", "num_machines": 1, "num_processes": 8, "machine_rank": 0}
    assert any("ZeroRedundancyOptimizer" in n for n in notes)
    assert any("gradient_as_bucket_view" in n for n in notes)


def test_checkpointing_when_the_plan_needs_it(monkeypatch):
    from types import SimpleNamespace

    def fake(arch, setup):  # activations only fit FULL_SHARD with full recomputation
        per_seq = {Checkpointing.none: 60, Checkpointing.selective: 60, Checkpointing.full: 1}[setup.checkpointing]
        return SimpleNamespace(total_bytes=per_seq * 2**30 * setup.micro_batch, assumptions=())

    monkeypatch.setattr("zeroplan.memory.estimate.activations_for", fake)
    advice = advice_for(Engine.fsdp, 9e9, arch=LLAMA)
    assert advice.recommendation.checkpointing is Checkpointing.full
    config, _ = accelerate_config(advice)
    assert config["fsdp_config"]["fsdp_activation_checkpointing"] is True


def test_nothing_to_emit_and_deepspeed_refused():
    with pytest.raises(ZeroplanError, match="nothing to emit"):
        accelerate_config(advice_for(Engine.fsdp2, 2e12))  # beyond FSDP2's CPU offload too
    with pytest.raises(UsageError, match="--emit-deepspeed"):
        accelerate_config(advice_for(Engine.deepspeed, 1e9))


def test_every_supported_family_has_its_block_class():
    from zeroplan.models.families import FAMILIES

    assert [f for f in FAMILIES if layer_class(f) is None] == []
    assert layer_class(None) is None and layer_class("unknown") is None


@pytest.mark.torch
@pytest.mark.parametrize("family", sorted(LAYER_CLASSES))
def test_block_classes_are_transformers_own(family):
    pytest.importorskip("transformers")
    try:
        module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    except ImportError:
        pytest.skip(f"transformers has no {family}")
    pretrained = [getattr(module, n) for n in dir(module) if n.endswith("PreTrainedModel")]
    assert any(LAYER_CLASSES[family] in (getattr(c, "_no_split_modules", None) or ()) for c in pretrained)
