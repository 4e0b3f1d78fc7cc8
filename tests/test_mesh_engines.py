"""FSDP2 on a (dp, tp) mesh against PyTorch's own run (validation/tp_measured.json, measured by
validation/measure_tp.py: TP 2 x FSDP2 2, fully_shard over the dp dimension of a 2-D DeviceMesh), and the engines a
mesh still refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zeroplan.memory.engines import engine_stage_base
from zeroplan.memory.mesh import tensor_parallel_layout
from zeroplan.memory.recipes import make_recipe
from zeroplan.memory.setup import (
    DeepSpeedKnobs,
    Engine,
    Optimizer,
    Parallelism,
    Precision,
    ZeroStage,
)
from zeroplan.models.families import parse_family_config
from zeroplan.models.mesh import Mesh
from zeroplan.models.params import module_inventory

MEASURED = json.loads((Path(__file__).parent.parent / "validation" / "tp_measured.json").read_text())
FSDP2_ROWS = [r for r in MEASURED["rows"] if r["dp"] > 1]


@pytest.mark.parametrize("row", FSDP2_ROWS, ids=lambda r: f"tp{r['tp']}-fsdp2-{r['dp']}-sp{int(r.get('sequence_parallel', False))}-r{r['rank']}")
def test_fsdp2_on_the_tensor_parallel_shards_is_the_measured_bytes(row):
    config = parse_family_config({"model_type": "llama", **MEASURED["config"]}, strict=False)
    mesh = Mesh(gpus=row["tp"] * row["dp"], tp=row["tp"])
    dec = config.decoder()
    layout = tensor_parallel_layout(module_inventory(config), config.architecture().num_layers, mesh, dec)
    base = engine_stage_base(Engine.fsdp2, None, layout, make_recipe(Precision.fp32, Optimizer.adamw),
                             ZeroStage.zero3, Parallelism(gpus=row["dp"]), DeepSpeedKnobs())
    for name, ours in (("parameters", base.states.parameters), ("gradients", base.states.gradients),
                       ("optimizer", base.states.optimizer_states)):
        assert ours == row[name], (name, ours, row[name])  # exact: FSDP2 pads dim 0 of each local shard


def test_fsdp2_with_hugging_faces_tp_plan_keeps_the_embedding_whole():
    from zeroplan.models.presets import load_model

    spec = load_model("llama-3.1-8b")
    dec, inventory = spec.config.decoder(), module_inventory(spec.config)
    torch_style = tensor_parallel_layout(inventory, 32, Mesh(gpus=8, tp=2), dec)
    hf = tensor_parallel_layout(inventory, 32, Mesh(gpus=8, tp=2, vocab_parallel_embedding=False), dec)
    assert hf.root_numel - torch_style.root_numel == 128_256 * 4096 // 2


def test_cli_estimates_fsdp2_with_tp(runner):
    from zeroplan.cli.app import app

    result = runner.invoke(app, ["estimate", "--model", "llama-3.1-8b", "--gpus", "8", "--tp", "2", "--engine", "fsdp2",
                                 "--stage", "3", "-f", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["engine"] == "fsdp2" and data["mesh"]["describe"] == "tp 2 x pp 1 x cp 1 x dp 4 = 8 GPUs"


@pytest.mark.parametrize("args, message", [
    (["--engine", "fsdp2", "--tp", "2", "--pp", "2"], "--engine fsdp2 with --pp 2: zeroplan models FSDP2 on the 2-D"),
    (["--engine", "ddp", "--tp", "2"], "--engine ddp with a tp/pp/cp/ep mesh"),
    (["--engine", "fsdp", "--tp", "2"], "--engine fsdp with a tp/pp/cp/ep mesh"),
])
def test_engines_not_modelled_on_a_mesh_are_one_line(runner, args, message):
    from zeroplan.cli.app import app

    result = runner.invoke(app, ["estimate", "--model", "llama-3.1-8b", "--gpus", "8", *args])
    assert result.exit_code == 1
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
