"""zeroplan's own model on a tp x pp x cp x dp (x ep) mesh (zeroplan.memory.mesh, memory.activations.mesh).

Expected numbers come from the module shapes (counted by hand below) or from validation/tp_measured.json
(PyTorch's tensor-parallel API measured on gloo, validation/measure_tp.py)."""

import json
from pathlib import Path

import pytest

from zeroplan.errors import ZeroplanError
from zeroplan.memory.activations import activation_bytes
from zeroplan.memory.activations.mesh import MEGATRON, rank_activations, stage_activations
from zeroplan.memory.mesh import share_states, shard_groups, stage_shares
from zeroplan.memory.recipes import make_recipe
from zeroplan.memory.setup import Attention, Optimizer, Precision, TrainingSetup, ZeroStage
from zeroplan.models.families import parse_family_config
from zeroplan.models.mesh import Mesh, mesh_problems
from zeroplan.models.params import count_params
from zeroplan.models.presets import load_model, model_facts

MEASURED = json.loads((Path(__file__).parent.parent / "validation" / "tp_measured.json").read_text())


def test_tp1_rank_holds_the_whole_model():
    spec = load_model("llama-3.1-8b")
    (share,) = stage_shares(spec.config.decoder(), Mesh(gpus=8))
    assert share.total == count_params(spec).num_params


def test_tp2_splits_everything_but_the_norms():
    spec = load_model("llama-3.1-8b")
    norms = 4096 * (2 * 32 + 1)  # two RMSNorms per layer and the final one, replicated
    (share,) = stage_shares(spec.config.decoder(), Mesh(gpus=8, tp=2))
    assert share.norm == norms
    assert share.total == (count_params(spec).num_params - norms) // 2 + norms


def test_pipeline_stages_put_embedding_first_and_head_last():
    spec = load_model("llama-3.1-8b")
    first, last = stage_shares(spec.config.decoder(), Mesh(gpus=8, pp=2))
    layer = (count_params(spec).num_params - 2 * 128256 * 4096 - 4096) // 32
    assert first.total == 16 * layer + 128256 * 4096
    assert last.total == 16 * layer + 128256 * 4096 + 4096
    assert (first.first_layer, first.last_layer, last.first_layer, last.last_layer) == (0, 15, 16, 31)


def test_experts_split_by_ep_and_tp_with_their_own_zero_group():
    spec = load_model("mixtral-8x7b")
    mesh = Mesh(gpus=16, tp=2, ep=4)
    (share,) = stage_shares(spec.config.decoder(), mesh)
    assert share.experts == 8 * 3 * 4096 * 14336 * 32 // (4 * 2)
    assert shard_groups(mesh) == (8, 2)
    recipe = make_recipe(Precision.bf16_mixed, Optimizer.adamw)
    states = share_states(share, mesh, recipe, ZeroStage.zero1)
    assert states.optimizer_states == 12 * (-(-share.dense // 8) + -(-share.experts // 2))


def test_zero_shards_over_dp_times_cp_not_the_gpu_count():
    assert shard_groups(Mesh(gpus=64, tp=4, pp=2, cp=2, ep=2)) == (4 * 2, 4 * 2 // 2)  # dp 4 x cp 2; experts / ep


@pytest.mark.parametrize(("mesh", "message"), [
    (Mesh(gpus=8, pp=3), "--gpus 8 is not a multiple of tp x pp x cp = 1 x 3 x 1 = 3"),
    (Mesh(gpus=24, tp=3), "num_attention_heads (32) is not a multiple of --tp 3"),
    (Mesh(gpus=24, pp=24), "32 layers do not split into 24 pipeline stages: torchtitan's split of 34 effective "
                           "layers (embedding and head weigh one each) leaves a stage empty"),
    (Mesh(gpus=4, pp=4, pp_first_layers=7, pp_last_layers=8),
     "32 layers less 7 + 8 (first/last stages) = 17 do not split evenly over the 2 middle pipeline stages "
     "(Megatron-LM's rule)"),
    (Mesh(gpus=16, tp=16), "num_key_value_heads (8) is not a multiple of --tp 16"),
])
def test_a_mesh_that_does_not_divide_is_one_line_with_the_numbers(mesh, message):
    _, _, arch = model_facts("llama-3.1-8b")
    assert mesh_problems(mesh, arch)[0] == message


def test_activations_at_tp1_are_the_single_gpu_model():
    _, _, arch = model_facts("llama-3.1-8b")
    setup = TrainingSetup(seq_len=2048)
    assert rank_activations(arch, setup, Mesh(gpus=8))[0].total_bytes == activation_bytes(arch, setup).total_bytes


def test_megatron_sequence_parallel_keeps_less_than_pytorchs():
    _, _, arch = model_facts("llama-3.1-8b")
    setup, mesh = TrainingSetup(seq_len=2048), Mesh(gpus=8, tp=4, sequence_parallel=True)
    torch_style = rank_activations(arch, setup, mesh)[0]
    megatron = rank_activations(arch, setup, mesh, MEGATRON)[0]
    gathered = 2 * 2 * 2048 * 4096 * 32  # the q/k/v and MLP inputs, e T h each, whole under PyTorch's SP
    assert torch_style.layers_bytes - megatron.layers_bytes == gathered - gathered // 4


def test_1f1b_first_stage_holds_pp_micro_batches():
    _, _, arch = model_facts("llama-3.1-8b")
    setup = TrainingSetup(seq_len=2048, grad_accum=8)
    one, _ = rank_activations(arch, setup, Mesh(gpus=4, pp=4))
    stages, _ = stage_activations(arch, setup, Mesh(gpus=4, pp=4))
    assert stages[0].layers_bytes == 4 * sum(one.layer_bytes[:8])
    assert stages[3].layers_bytes == sum(one.layer_bytes[24:])


def test_cp_needs_a_sequence_it_divides():
    _, _, arch = model_facts("llama-3.1-8b")
    with pytest.raises(ZeroplanError, match="--seq-len 2047 is not a multiple of --cp 2"):
        rank_activations(arch, TrainingSetup(seq_len=2047), Mesh(gpus=2, cp=2))


@pytest.mark.parametrize("row", MEASURED["rows"], ids=lambda r: f"tp{r['tp']}-dp{r['dp']}-sp{int(r.get('sequence_parallel', False))}-r{r['rank']}")
def test_within_two_percent_of_pytorch_tensor_parallel_measured(row):
    config = parse_family_config({"model_type": "llama", **MEASURED["config"]}, strict=False)
    mesh = Mesh(gpus=row["tp"] * row["dp"], tp=row["tp"], sequence_parallel=row.get("sequence_parallel", False))
    (share,) = stage_shares(config.decoder(), mesh)
    states = share_states(share, mesh, make_recipe(Precision.fp32, Optimizer.adamw),
                          ZeroStage.zero3 if row["dp"] > 1 else ZeroStage.zero0)
    setup = TrainingSetup(precision=Precision.fp32, seq_len=MEASURED["seq_len"], micro_batch=MEASURED["batch"],
                          attention=Attention.flash)
    acts = rank_activations(config.architecture(), setup, mesh)[0].total_bytes
    for name, ours in (("parameters", states.parameters), ("gradients", states.gradients),
                       ("optimizer", states.optimizer_states), ("activations", acts)):
        assert abs(ours - row[name]) <= 0.02 * row[name], name


def test_cli_estimate_states_the_mesh(runner):
    from zeroplan.cli.app import app

    result = runner.invoke(app, ["estimate", "--model", "llama-3.1-8b", "--gpus", "8", "--tp", "2", "--pp", "2",
                                 "--stage", "1", "-f", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["mesh"]["describe"] == "tp 2 x pp 2 x cp 1 x dp 2 = 8 GPUs"
    assert any(a.startswith("mesh tp 2 x pp 2") for a in data["assumptions"])


def test_cli_refuses_a_mesh_that_does_not_divide_in_one_line(runner):
    from zeroplan.cli.app import app

    result = runner.invoke(app, ["estimate", "--model", "llama-3.1-8b", "--gpus", "8", "--tp", "3"])
    assert result.exit_code != 0
    assert "--gpus 8 is not a multiple of tp x pp x cp = 3 x 1 x 1 = 3" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_virtual_stages_mean_the_interleaved_schedule_unless_told():
    from zeroplan.models.mesh import Schedule
    from zeroplan.scenario.parallel import MeshArgs

    assert MeshArgs(pp="2").mesh(8).schedule is Schedule.one_f_one_b
    assert MeshArgs(pp="2", vpp="2").mesh(8).schedule is Schedule.interleaved
    assert MeshArgs(pp="2", schedule=Schedule.zbv).mesh(8).schedule is Schedule.zbv
    assert MeshArgs(pp="2", schedule=Schedule.zbv).given == ["--pp", "--pp-schedule zbv"]


def test_megatron_refuses_a_schedule_its_formula_does_not_know(runner):
    from zeroplan.cli.app import app

    result = runner.invoke(app, ["estimate", "--model", "llama-3.1-8b", "--gpus", "16", "--pp", "2", "--vpp", "2",
                                 "--pp-schedule", "1f1b", "--method", "megatron"])
    assert result.exit_code != 0
    assert result.stderr.strip() == ("error: --pp-schedule 1f1b with --vpp 2: Megatron's formula knows 1f1b, and "
                                     "interleaved-1f1b with --vpp 2 or more")
