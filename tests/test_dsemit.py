"""The emitted DeepSpeed config: passes zeroplan's config rules, and reads back as the configuration planned."""

import json
from dataclasses import replace

import pytest

from zeroplan.advise.advisor import advise
from zeroplan.advise.emit import deepspeed_config
from zeroplan.advise.policy import ARTICLE, DEFAULT, with_overrides
from zeroplan.check.findings import RunContext
from zeroplan.check.rules import run_checks
from zeroplan.deepspeed.emit import DEFAULT_NVME_PATH, zero_section
from zeroplan.deepspeed.reader import parse_ds_config
from zeroplan.errors import ZeroplanError
from zeroplan.hardware.presets import load_hardware
from zeroplan.hardware.spec import Topology
from zeroplan.memory.estimate import Scenario, evaluate, overheads_for
from zeroplan.memory.setup import (
    DeepSpeedKnobs,
    OffloadDevice,
    Parallelism,
    Precision,
    TrainingSetup,
    ZeroStage,
)
from zeroplan.memory.states import ModelSummary

H100 = load_hardware("h100-sxm-80gb")
V100 = load_hardware("v100-sxm-32gb")
# host memory for the gradient partitions ZeRO-3 keeps on the CPU under optimizer offload, not for the states
NVME_ONLY = with_overrides(DEFAULT, {"host_memory_gib_per_node": 1500}, "test")
HOST_2048 = with_overrides(DEFAULT, {"host_memory_gib_per_node": 2048}, "test")


def bare(num_params: float, hw=H100, gpus: int = 8, nodes: int = 1, precision=Precision.bf16_mixed) -> Scenario:
    n = int(num_params)
    return Scenario(model=ModelSummary(name="m", num_params=n, largest_layer_params=n // 100),
                    setup=TrainingSetup(precision=precision), parallelism=Parallelism(gpus=gpus, nodes=nodes),
                    hardware=hw, overheads=overheads_for(hw, None, None, None))


CASES = [
    pytest.param(bare(1e9), DEFAULT, 512, id="zero0"),
    pytest.param(bare(9e9), DEFAULT, 512, id="zero1"),
    pytest.param(bare(18e9), DEFAULT, 512, id="zero2"),
    pytest.param(bare(30e9), DEFAULT, 96, id="zero3"),
    pytest.param(bare(50e9), DEFAULT, 512, id="zero3-optimizer-cpu"),
    pytest.param(bare(200e9), DEFAULT, 512, id="zero3-param-cpu"),
    pytest.param(bare(200e9), NVME_ONLY, 512, id="zero3-nvme"),
    pytest.param(bare(5e9, hw=V100), DEFAULT, 256, id="v100-fp16"),
    pytest.param(bare(9e9, precision=Precision.bf16_true), DEFAULT, 512, id="bf16-true"),
    pytest.param(bare(1e9, precision=Precision.fp32), DEFAULT, 64, id="fp32"),
    pytest.param(bare(30e9, gpus=16, nodes=2), DEFAULT, 1024, id="multinode"),
    pytest.param(bare(30e9), ARTICLE, 1024, id="article-zero3"),
]


@pytest.mark.parametrize(("scn", "policy", "batch"), CASES)
def test_emitted_config_passes_zeroplan_check(scn, policy, batch):
    advice = advise(scn, policy, global_batch=batch)
    config = json.loads(json.dumps(deepspeed_config(advice)))  # what lands in the file
    findings = run_checks(parse_ds_config(config), RunContext(parallelism=scn.parallelism, hardware=scn.hardware))
    assert [f for f in findings if f.severity in ("error", "warning")] == []


@pytest.mark.parametrize(("scn", "policy", "batch"), CASES)
def test_emitted_config_reads_back_as_the_plan(scn, policy, batch):
    advice = advise(scn, policy, global_batch=batch)
    rec = advice.recommendation
    parsed = parse_ds_config(deepspeed_config(advice))
    assert parsed.stage is rec.stage
    assert parsed.train_batch_size == rec.micro_batch * rec.grad_accum * rec.gpus == batch
    assert (parsed.train_micro_batch_size_per_gpu, parsed.gradient_accumulation_steps) == (rec.micro_batch, rec.grad_accum)
    assert parsed.precision is advice.scenario.setup.precision
    assert (parsed.knobs.offload_optimizer, parsed.knobs.offload_param) == (rec.offload_optimizer, rec.offload_param)
    # The memory of the config as DeepSpeed reads it is the memory the advisor planned.
    setup = replace(advice.scenario.setup, **{**parsed.setup_fields(), "checkpointing": rec.checkpointing})
    again = replace(advice.scenario, setup=setup, knobs=parsed.knobs)
    assert evaluate(again, parsed.stage).total == rec.plan.peak_bytes


def test_precision_by_hardware():
    assert deepspeed_config(advise(bare(1e9), global_batch=64))["bf16"] == {"enabled": True}
    fp16 = deepspeed_config(advise(bare(1e9, hw=V100), global_batch=64))
    assert "bf16" not in fp16 and fp16["fp16"] == {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}


def test_zero_sections():
    knobs = DeepSpeedKnobs(overlap_comm=True)
    assert zero_section(ZeroStage.zero0, knobs) == {"stage": 0}
    assert zero_section(ZeroStage.zero2, knobs) == {
        "stage": 2, "overlap_comm": True, "contiguous_gradients": True, "reduce_bucket_size": 500_000_000,
        "allgather_bucket_size": 500_000_000}
    offload = replace(knobs, offload_optimizer=OffloadDevice.nvme, offload_param=OffloadDevice.nvme)
    zero3 = zero_section(ZeroStage.zero3, offload)
    assert zero3["offload_param"] == {"device": "nvme", "pin_memory": True, "nvme_path": DEFAULT_NVME_PATH}
    assert zero3["stage3_prefetch_bucket_size"] == 50_000_000 and "allgather_bucket_size" not in zero3
    assert zero_section(ZeroStage.zero3, offload, "/scratch")["offload_optimizer"]["nvme_path"] == "/scratch"


def test_nothing_to_emit_when_nothing_fits():
    with pytest.raises(ZeroplanError, match="nothing to emit: nothing fits on 8 GPUs; ZeRO-3 fits on"):
        deepspeed_config(advise(bare(400e9), HOST_2048, global_batch=512))
    with pytest.raises(ZeroplanError, match="consider model simplification or hardware upgrade"):
        deepspeed_config(advise(bare(30e9), ARTICLE, Topology.pcie, global_batch=512))
