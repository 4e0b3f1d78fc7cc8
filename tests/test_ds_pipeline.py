"""A ds_config's `pipeline` block as DeepSpeed's PipelineEngine (zeroplan/deepspeed/parallel.py,
zeroplan/memory/pipeengine.py; docs/parallelism.md "DeepSpeed's PipelineEngine")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from zeroplan.cli.app import app
from zeroplan.deepspeed.parallel import config_mesh, pipeline_partition, pipeline_stages
from zeroplan.errors import SpecError
from zeroplan.memory.activations.mesh import stage_activations
from zeroplan.memory.pipeengine import PIPE_ZERO_ASSERTION, pipe_buffer_bytes
from zeroplan.memory.setup import Checkpointing, TrainingSetup
from zeroplan.models.mesh import Mesh, Schedule
from zeroplan.models.presets import model_facts

DATA = Path(__file__).parent / "data" / "dspipe"
MEASURED = json.loads((Path(__file__).parent.parent / "validation" / "ds_pipeline.json").read_text())
BASE = ["--model", "llama-3.1-8b", "--gpus", "8", "--seq-len", "4096"]


def _run(*args: str):
    return CliRunner().invoke(app, list(args))


def test_deepspeeds_train_schedule_holds_min_pp_less_stage_and_m():
    """DeepSpeed's TrainSchedule, run from its source (validation/ds_pipeline.py): on every stage of pp 2/3/4/8 and
    m 1..16 the forwards alive at once, and the received inputs held after the first stage, are min(pp - r, m):
    zeroplan's 1F1B count. No buffer slot is reused while its micro-batch is alive."""
    from zeroplan.memory.activations.pipeline import chunks_in_flight

    assert len(MEASURED["schedule"]) == 136
    for row in MEASURED["schedule"]:
        mesh = Mesh(gpus=row["pp"], pp=row["pp"], schedule=Schedule.one_f_one_b)
        n = chunks_in_flight(mesh, row["m"], row["stage"])
        assert row["forwards_alive"] == n, row
        assert row["inputs_held"] == (n if row["stage"] else 0), row
        assert row["num_pipe_buffers"] == max(2, n) and not row["slot_reused_while_alive"], row


@pytest.mark.parametrize("block, stages", [({}, 1), ({"stages": "auto"}, 1), ({"stages": 1}, 1), ({"stages": 4}, 4),
                                           ({"stages": 4.0}, 4)])
def test_stages_read(block, stages):
    assert pipeline_stages({"pipeline": block}) == stages


@pytest.mark.parametrize("value", ["4", 0, -2, 2.5, True])
def test_bad_stages_are_one_line(value):
    with pytest.raises(SpecError, match="pipeline.stages: expected a whole number of stages"):
        pipeline_stages({"pipeline": {"stages": value}})


@pytest.mark.parametrize("partition, method", [(None, "parameters"), ("best", "parameters"), ("uniform", "uniform"),
                                               ("type:transformer", "type:transformer"), ("Parameters", "parameters")])
def test_partition_method(partition, method):
    block = {"stages": 2} | ({"partition": partition} if partition else {})
    assert pipeline_partition({"pipeline": block})[0] == method


def test_config_mesh_is_a_1f1b_pipeline():
    mesh = config_mesh(json.loads((DATA / "pipeline_zero1.json").read_text()), "ds.json", 8)
    assert (mesh.pp, mesh.dp, mesh.tp, mesh.schedule, mesh.pipe_partition) == (4, 2, 1, Schedule.one_f_one_b,
                                                                                "parameters")


def test_pipe_buffers_per_rank():
    """(n + 1) b s h e on a stage's input side (after the first) and again on its output side (before the last)."""
    boundary = 1 * 4096 * 4096 * 2
    assert [pipe_buffer_bytes(r, 4, min(4 - r, 8), boundary) for r in range(4)] == [
        5 * boundary, 2 * 4 * boundary, 2 * 3 * boundary, 2 * boundary]
    assert pipe_buffer_bytes(0, 1, 1, boundary) == 0


def test_pipe_buffers_are_the_only_difference_from_the_1f1b_model():
    arch = model_facts("llama-3.1-8b")[2]
    setup = TrainingSetup(seq_len=4096, grad_accum=8, checkpointing=Checkpointing.full)
    plain = Mesh(gpus=8, pp=4, pp_layers=(7, 9, 9, 7))
    engine = Mesh(gpus=8, pp=4, pp_layers=(7, 9, 9, 7), pipe_partition="parameters")
    (ours, _), (theirs, _) = stage_activations(arch, setup, plain), stage_activations(arch, setup, engine)
    boundary = 4096 * 4096 * 2
    for r, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        # the plain mesh is PyTorch's pipelining, whose own term (memory/pipelining.py) is in its pipe_buffer_bytes
        saved = a.total_bytes - a.pipe_buffer_bytes
        assert b.total_bytes - saved == b.pipe_buffer_bytes == pipe_buffer_bytes(r, 4, min(4 - r, 8), boundary)


def test_estimate_lays_the_config_out_as_deepspeed_splits_it():
    result = _run("estimate", *BASE, "--deepspeed-config", str(DATA / "pipeline_zero1.json"), "-f", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [rank["layers"] for rank in data["mesh"]["ranks"]] == [[[0, 6]], [[7, 15]], [[16, 24]], [[25, 31]]]
    assert [rank["in_flight"] for rank in data["mesh"]["ranks"]] == [4, 3, 2, 1]
    assert data["setup"]["checkpointing"] == "full"  # pipeline.activation_checkpoint_interval 1
    text = " ".join(data["assumptions"])
    assert "PipelineModule's default partition_method 'parameters' assumed" in text
    assert "DeepSpeed itself does not read pipeline.stages" in text
    assert "ds_utils.partition_balanced" in text


def test_zero_2_is_refused_with_deepspeeds_assertion():
    result = _run("estimate", *BASE, "--deepspeed-config", str(DATA / "pipeline_zero2.json"))
    assert result.exit_code == 1
    assert PIPE_ZERO_ASSERTION in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_a_stage_flag_above_1_is_refused_too():
    result = _run("estimate", *BASE, "--deepspeed-config", str(DATA / "pipeline_zero1.json"), "--stage", "3")
    assert result.exit_code == 1 and "ZeRO-3 with DeepSpeed's PipelineEngine" in result.stderr


def test_stages_not_dividing_the_gpus_are_one_line():
    result = _run("estimate", *BASE, "--deepspeed-config", str(DATA / "pipeline_3_stages.json"))
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: --gpus 8 is not a multiple of tp x pp x cp = 1 x 3 x 1 = 3"


@pytest.mark.parametrize("config, rule", [("pipeline_zero2.json", "pipeline-zero-stage"),
                                          ("pipeline_3_stages.json", "mesh-does-not-divide")])
def test_check_reports_a_finding(config, rule):
    result = _run("check", "--deepspeed-config", str(DATA / config), "--model", "llama-3.1-8b", "--gpus", "8",
                  "--format", "json")
    assert result.exit_code == 1, result.output
    assert rule in result.stdout


def test_check_passes_the_zero_1_pipeline():
    result = _run("check", "--deepspeed-config", str(DATA / "pipeline_zero1.json"), "--model", "llama-3.1-8b",
                  "--gpus", "8")
    assert result.exit_code == 0, result.output


def test_a_partition_leaving_a_stage_without_a_layer_is_one_line(tmp_path):
    """gemma2-2b's 256k-vocabulary tables each outweigh five of its layers: 'parameters' over 8 stages gives the
    first and last stage none (0, 5, 5, 4, 4, 4, 4, 0; validation/ds_pipeline.json)."""
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 1},
                                "pipeline": {"stages": 8}}))
    result = _run("estimate", "--model", "gemma2-2b", "--gpus", "8", "--deepspeed-config", str(path))
    assert result.exit_code == 1
    assert "a stage without a decoder layer is not modelled" in result.stderr


@pytest.mark.parametrize("interval, extra, words", [
    (2, [], "pipeline.activation_checkpoint_interval 2 checkpoints 2 layers as one unit"),
    (-1, [], "pipeline.activation_checkpoint_interval: expected a whole number of layers"),
])
def test_checkpoint_interval_refusals(tmp_path, interval, extra, words):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "pipeline": {
        "stages": 2, "activation_checkpoint_interval": interval}}))
    result = _run("estimate", *BASE, "--deepspeed-config", str(path), *extra)
    assert result.exit_code == 1 and words in result.stderr, result.output


def test_checkpointing_flag_wins_over_the_interval():
    result = _run("estimate", *BASE, "--deepspeed-config", str(DATA / "pipeline_zero1.json"), "--checkpointing",
                  "selective", "-f", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["setup"]["checkpointing"] == "selective"


def test_advise_refuses_a_pipeline_file_in_one_line(tmp_path, monkeypatch):
    """advise plans data parallelism: a --from file whose DeepSpeed config sets pipeline stages is refused, never
    advised as data parallelism (as an AutoTP file is, tests/test_advise_from_mesh.py)."""
    import yaml

    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text((DATA / "pipeline_zero1.json").read_text())
    (tmp_path / "sft.yaml").write_text(yaml.safe_dump({
        "model_name_or_path": "meta-llama/Llama-3.1-8B", "stage": "sft", "finetuning_type": "full",
        "per_device_train_batch_size": 1, "gradient_accumulation_steps": 8, "bf16": True, "deepspeed": "ds.json"}))
    result = _run("advise", "--from", "sft.yaml", "--model", "llama-3.1-8b", "--gpus", "8")
    assert result.exit_code == 1, result.output
    assert result.stderr.strip() == ("error: ds.json: pipeline.stages 4 is a pipeline mesh; advise plans data "
                                     "parallelism only: add --search-parallelism to plan the mesh, or `zeroplan "
                                     "estimate --from` the file for this layout")
