"""The PyTorch engines' formulas on exact small cases, the stage mapping and the --engine CLI (torch-free)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from zeroplan.cli.app import app
from zeroplan.errors import ZeroplanError
from zeroplan.memory.engines import (
    engine_stage_base,
    layout_for,
    param_peak_bytes,
    supported_stages,
)
from zeroplan.memory.engines.ddp import greedy_partition
from zeroplan.memory.engines.fsdp import dim0_shard
from zeroplan.memory.engines.storage import torch_storage
from zeroplan.memory.summary import summarize_model
from zeroplan.memory.recipes import make_recipe
from zeroplan.memory.setup import (
    DeepSpeedKnobs,
    Engine,
    EngineOptions,
    Optimizer,
    Parallelism,
    Precision,
    ZeroStage,
)
from zeroplan.models.families import GPT2Config
from zeroplan.models.params import count_params

# validation/measure_engines.py's model: wte 64,000 + wpe 4,096 + 4 blocks of 49,984 + ln_f 128 = 268,160
CONFIG = GPT2Config(model_type="gpt2", vocab_size=1000, n_positions=64, n_embd=64, n_layer=4, n_head=4)
PSI = 268_160
FP32 = make_recipe(Precision.fp32, Optimizer.adamw)
MIXED = make_recipe(Precision.bf16_mixed, Optimizer.adamw)


def base(engine, stage, gpus, recipe=FP32, **options):
    summary = summarize_model("tiny", count_params(CONFIG), CONFIG.architecture(), DeepSpeedKnobs())
    return engine_stage_base(engine, summary, layout_for(CONFIG), recipe, ZeroStage(stage), Parallelism(gpus=gpus),
                             DeepSpeedKnobs(), EngineOptions(**options))


def test_layout_splits_root_and_blocks():
    layout = layout_for(CONFIG)
    assert layout.unit_numels == (68_224, 49_984, 49_984, 49_984, 49_984)
    assert sum(layout.unit_numels) == PSI


def test_mixed_precision_keeps_fp32_params_as_master():
    assert tuple(torch_storage(MIXED)) == (4, 4, 8, 2)
    assert tuple(torch_storage(make_recipe(Precision.bf16_true, Optimizer.adamw))) == (2, 2, 4, 2)


def test_ddp_buckets_are_a_second_gradient_buffer_unless_bucket_view():
    plain, view = base("ddp", 0, 2), base("ddp", 0, 2, gradient_as_bucket_view=True)
    def bucket(b):  # the buffers besides AdamW's foreach temporary in the step (4 B per parameter, both)
        return [t.bytes for t in b.buffers if not t.name.startswith("AdamW foreach")]

    assert plain.states.total == 16 * PSI and bucket(plain) == [4 * PSI]
    assert bucket(view) == []


def test_zero_redundancy_optimizer_is_greedy_largest_first():
    assert greedy_partition([10, 7, 5, 3], 2) == [13, 12]
    b = base("ddp", 1, 4)  # measured 2,690,048 B on the busiest of 4 ranks
    assert b.states.total == 2_690_048 and b.notes


@pytest.mark.parametrize("stage, gpus, peak", [(2, 2, 1_608_960), (3, 2, 1_209_088), (3, 4, 940_928), (2, 3, 1_430_240)])
def test_fsdp1_measured_cases(stage, gpus, peak):
    b = base("fsdp", stage, gpus)
    assert b.states.parameters == sum(-(-u // gpus) for u in layout_for(CONFIG).unit_numels) * 4
    assert param_peak_bytes(b) == peak


def test_fsdp2_pads_dim0_per_parameter():
    assert dim0_shard((64, 192), 3) == 22 * 192
    assert base("fsdp2", 3, 3).states.total == 1_456_448  # measured, busiest rank
    assert param_peak_bytes(base("fsdp2", 3, 2)) == 1_282_048
    assert param_peak_bytes(base("fsdp2", 2, 2, MIXED)) == 1_172_608


@pytest.mark.parametrize("engine, stage", [("ddp", 2), ("ddp", 3), ("fsdp", 1), ("fsdp2", 0), ("fsdp2", 1)])
def test_unmapped_stages_name_the_alternative(engine, stage):
    with pytest.raises(ZeroplanError, match="use --engine"):
        base(engine, stage, 2)


def test_supported_stages():
    assert supported_stages(Engine.fsdp) == (ZeroStage.zero0, ZeroStage.zero2, ZeroStage.zero3)


runner = CliRunner()


def test_cli_engine_json_has_engine_terms():
    out = runner.invoke(app, ["estimate", "--model", "gpt2", "--gpus", "4", "--engine", "fsdp", "-f", "json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["engine"] == "fsdp" and [s["stage"] for s in data["stages"]] == [0, 2, 3]
    names = {x["name"]: x["value"] for x in data["stages"][2]["engine_settings"]}
    assert names["sharding_strategy"] == "FULL_SHARD"


def test_cli_deepspeed_json_has_no_engine_stage_keys():
    out = runner.invoke(app, ["estimate", "--params", "1e9", "--gpus", "4", "-f", "json"])
    assert "engine_settings" not in out.stdout


def test_cli_unmapped_stage_is_one_error_line():
    out = runner.invoke(app, ["estimate", "--params", "1e9", "--engine", "ddp", "-s", "3"])
    assert out.exit_code == 1 and "fsdp" in out.output and "Traceback" not in out.output


def test_plan_with_engine_fsdp(tmp_path):
    out = runner.invoke(app, ["check", "configs/plans/llama3.1-8b-fsdp-8xh100.yaml"])
    assert out.exit_code == 0, out.output
    bad = tmp_path / "bad.yaml"  # the deepspeed: stand-in, at a stage FSDP has no equivalent for
    plan = open("configs/plans/llama3.1-8b-fsdp-8xh100.yaml").read()
    bad.write_text(plan.replace("fsdp:\n  sharding_strategy: FULL_SHARD", "deepspeed:\n  zero_optimization: {stage: 1}"))
    out = runner.invoke(app, ["check", str(bad)])
    assert out.exit_code == 1 and "no ZeRO-1" in out.output
