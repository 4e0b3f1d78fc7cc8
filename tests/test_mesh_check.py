"""`zeroplan check` with a mesh: a plan's `mesh:` and a config's tensor_parallel.autotp_size lay the model out on
a tensor x pipeline x context x data mesh; each way it does not divide is one finding with the numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zeroplan.check.planfiles import load_plan
from zeroplan.check.runner import check_run

FIELD = Path(__file__).parent / "data" / "field" / "deepspeed"
LF_AUTOTP = FIELD / "hiyouga__LLaMA-Factory__examples__deepspeed__ds_z2_autotp_config.json"
DSE_AUTOTP = FIELD / "deepspeedai__DeepSpeedExamples__training__tensor_parallel__hf_integration__configs__ds_config.json"


def _plan(tmp_path, mesh: dict | None, gpus: int = 8, model: str = "llama-3.1-8b", ds: dict | None = None) -> Path:
    (tmp_path / "ds.json").write_text(json.dumps(ds or {"zero_optimization": {"stage": 1}, "bf16": {"enabled": True},
                                                     "train_micro_batch_size_per_gpu": 1,
                                                     "gradient_accumulation_steps": "auto"}))
    lines = [f"model: {model}", "hardware: h100-sxm-80gb", f"gpus: {gpus}", "deepspeed: ds.json",
             "training:", "  seq_len: 2048", "  gradient_accumulation_steps: 8"]
    if mesh:
        lines += ["mesh:"] + [f"  {k}: {json.dumps(v)}" for k, v in mesh.items()]
    path = tmp_path / "plan.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("mesh, gpus, model, messages", [
    ({"tp": 8, "pp": 2}, 12, "llama-3.1-8b",
     ["--gpus 12 is not a multiple of tp x pp x cp = 8 x 2 x 1 = 16"]),
    ({"tp": 3}, 12, "llama-3.1-8b",
     ["num_attention_heads (32) is not a multiple of --tp 3", "num_key_value_heads (8) is not a multiple of --tp 3"]),
    ({"pp": 4, "pp_first_layers": 7, "pp_last_layers": 8}, 8, "llama-3.1-8b",
     ["32 layers less 7 + 8 (first/last stages) = 17 do not split evenly over the 2 middle pipeline stages "
      "(Megatron-LM's rule)"]),
    ({"pp": 8, "vpp": 5}, 8, "llama-3.1-8b", ["32 layers do not split into --pp 8 x --vpp 5 = 40 pipeline stages: "
                                              "torchtitan's split of 34 effective layers (embedding and head weigh one "
                                              "each) leaves a stage empty"]),
    ({"ep": 3}, 12, "llama-3.1-8b", ["--ep 3 divides experts, and llama has none"]),
])
def test_each_mesh_problem_is_one_finding_with_the_numbers(tmp_path, mesh, gpus, model, messages):
    result = check_run(load_plan(_plan(tmp_path, mesh, gpus, model)))
    found = [f.message for f in result.findings if f.rule == "mesh-does-not-divide"]
    assert [m.removesuffix("; memory not estimated on this mesh") for m in found] == messages
    assert result.memory is None and not any(f.rule == "does-not-fit" for f in result.findings)


def test_a_mesh_that_divides_is_estimated_on_its_data_parallel_group(tmp_path):
    result = check_run(load_plan(_plan(tmp_path, {"tp": 2, "pp": 2, "pp_schedule": "interleaved-1f1b", "vpp": 2})))
    assert not [f for f in result.findings if f.severity == "error"]
    assert result.run.scenario.mesh.mesh.dp == 2 and result.run.context.dp_world == 2
    assert result.memory is not None


@pytest.mark.parametrize("config, tp", [(LF_AUTOTP, 2), (DSE_AUTOTP, 4)])
def test_autotp_configs_from_the_field_are_tensor_parallel_meshes(tmp_path, config, tp):
    (tmp_path / "ds.json").write_text(config.read_text())
    (tmp_path / "plan.yaml").write_text("model: llama-3.1-8b\nhardware: h100-sxm-80gb\ngpus: 8\ndeepspeed: ds.json\n")
    run = load_plan(tmp_path / "plan.yaml")
    assert run.mesh.tp == tp and run.context.dp_world == 8 // tp
    assert run.config.train_batch_size == 8 // tp  # "auto" filled with micro 1 x accumulation 1 x dp
    assert not run.mesh.vocab_parallel_embedding and not run.mesh.vocab_parallel_logits


def test_autotp_keeps_the_embedding_whole_and_splits_the_head():
    from zeroplan.memory.mesh import stage_shares
    from zeroplan.models.mesh import Mesh
    from zeroplan.models.presets import load_model

    dec = load_model("llama-3.1-8b").config.decoder()
    (torch_style,) = stage_shares(dec, Mesh(gpus=8, tp=2))
    (autotp,) = stage_shares(dec, Mesh(gpus=8, tp=2, vocab_parallel_embedding=False, vocab_parallel_logits=False))
    assert autotp.dense - torch_style.dense == 128_256 * 4096 // 2  # the other half of the token table
    assert autotp.whole_embedding_grad == 0


def test_plan_mesh_and_autotp_together_are_one_error(tmp_path):
    from zeroplan.errors import ZeroplanError

    with pytest.raises(ZeroplanError, match="both give a mesh; give it in one place"):
        load_plan(_plan(tmp_path, {"tp": 2}, ds={"zero_optimization": {"stage": 2}, "tensor_parallel": {"autotp_size": 2},
                                                 "train_micro_batch_size_per_gpu": 1}))


@pytest.mark.parametrize("ds, words", [
    ({"pipeline": {"stages": 2}, "tensor_parallel": {"autotp_size": 2}},
     "pipeline.stages 2 with tensor_parallel.autotp_size 2: AutoTP under DeepSpeed's PipelineEngine is not modelled"),
    ({"sequence_parallel_size": 3}, "sequence_parallel_size 3 does not divide the 8 GPUs"),
    ({"sequence_parallel_size": 2, "pipeline": {"stages": 2}},
     "sequence_parallel_size 2 with pipeline.stages 2: Ulysses beside AutoTP or PipelineEngine is not modelled"),
    ({"sequence_parallel_size": 2, "tensor_parallel": {"autotp_size": 2}},
     "sequence_parallel_size 2 with tensor_parallel.autotp_size 2: Ulysses beside AutoTP or PipelineEngine is not modelled"),
    ({"tensor_parallel": {"autotp_size": 3}}, "tensor_parallel.autotp_size 3 does not divide the 8 GPUs"),
])
def test_what_a_config_states_beyond_autotp_is_refused(tmp_path, ds, words):
    from zeroplan.errors import ZeroplanError

    with pytest.raises(ZeroplanError, match=words.replace("(", r"\(").replace(")", r"\)")):
        load_plan(_plan(tmp_path, None, ds={"train_micro_batch_size_per_gpu": 1, **ds}))


def test_autotp_logits_are_whole_unless_the_head_is_vocab_parallel():
    from zeroplan.memory.activations.mesh import rank_activations
    from zeroplan.memory.setup import TrainingSetup
    from zeroplan.models.mesh import Mesh
    from zeroplan.models.presets import model_facts

    arch, setup = model_facts("llama-3.1-8b")[2], TrainingSetup(seq_len=2048)
    one = rank_activations(arch, setup, Mesh(gpus=1))[0]
    autotp = rank_activations(arch, setup, Mesh(gpus=2, tp=2, vocab_parallel_embedding=False,
                                                 vocab_parallel_logits=False))[0]
    vocab = rank_activations(arch, setup, Mesh(gpus=2, tp=2, vocab_parallel_embedding=False))[0]
    assert autotp.logits_bytes == one.logits_bytes
    assert vocab.logits_bytes == -(-one.logits_bytes // 2)


def test_a_plan_batch_on_a_mesh_counts_data_parallel_ranks(tmp_path):
    from zeroplan.errors import ZeroplanError

    path = _plan(tmp_path, {"tp": 2, "pp": 2})
    path.write_text(path.read_text().replace("  gradient_accumulation_steps: 8", "  gradient_accumulation_steps: 8\n"
                                             "  train_micro_batch_size_per_gpu: 1\n  train_batch_size: 64"))
    with pytest.raises(ZeroplanError, match=r"x data-parallel ranks \(2\) = 16"):
        load_plan(path)


ACCELERATE_TP = {"distributed_type": "FSDP", "num_processes": 8, "mixed_precision": "bf16",
                 "fsdp_config": {"fsdp_version": 2, "fsdp_reshard_after_forward": True},
                 "parallelism_config": {"parallelism_config_dp_shard_size": 4, "parallelism_config_tp_size": 2}}


@pytest.mark.parametrize("command", ["estimate", "check"])
def test_accelerate_tp_size_is_fsdp2_on_a_tensor_parallel_mesh(runner, tmp_path, command):
    import yaml

    from zeroplan.cli.app import app

    path = tmp_path / "acc.yaml"
    path.write_text(yaml.safe_dump(ACCELERATE_TP))
    result = runner.invoke(app, [command, "--from", str(path), "--model", "llama-3.1-8b", "-f", "json"])
    assert result.exit_code == 0, result.output
    if command == "estimate":
        data = json.loads(result.stdout)
        assert data["engine"] == "fsdp2" and data["mesh"]["describe"] == "tp 2 x pp 1 x cp 1 x dp 4 = 8 GPUs"
        assert any("Hugging Face's tp_plan" in a for a in data["assumptions"])


def test_accelerate_tp_size_under_the_check_is_the_mesh(tmp_path):
    import yaml

    from zeroplan.check.runner import check_from_file
    from zeroplan.scenario import ScenarioArgs

    path = tmp_path / "acc.yaml"
    path.write_text(yaml.safe_dump(ACCELERATE_TP))
    report = check_from_file(ScenarioArgs(from_file=str(path), model="llama-3.1-8b"))
    (result,) = report.results
    assert result.run.mesh.tp == 2 and not result.run.mesh.vocab_parallel_embedding
    assert result.run.scenario.mesh is not None and result.memory is not None
