"""DeepSpeed-Ulysses (`--cp N --cp-comm a2a`, a ds_config's `sequence_parallel_size`): the terms it adds over the
ring model (hand-derived from UlyssesSPAttentionHF, deepspeedai/DeepSpeed@edaa722:deepspeed/runtime/
sequence_parallel/ulysses_sp.py), its all-to-all cost (Jacobs et al. 2023, arXiv:2309.14509), and its inputs."""

import json

import pytest
from typer.testing import CliRunner

from zeroplan.cli.app import app
from zeroplan.memory.activations.mesh import rank_activations
from zeroplan.memory.setup import DeepSpeedKnobs, Parallelism, TrainingSetup, ZeroStage
from zeroplan.models.mesh import CpComm, Mesh
from zeroplan.models.presets import model_facts

LLAMA = model_facts("llama-3.1-8b")[2]  # 32 layers, h 4096, 32 heads, 8 kv heads, head dim 128
SETUP = TrainingSetup(seq_len=32768, micro_batch=2)  # bf16: e = 2


def _acts(cp: int, comm: CpComm, setup: TrainingSetup = SETUP):
    return rank_activations(LLAMA, setup, Mesh(gpus=cp, cp=cp, cp_comm=comm))[0]


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_ulysses_adds_the_all_to_all_output_per_layer_and_per_sample_rotary_tables(cp):
    """kv 8 >= cp: per layer the o_proj input e b (s/cp) a d; the cos and sin tables b times (2 e (s/cp) d each)."""
    s_local = 32768 // cp
    ring, ulysses = _acts(cp, CpComm.p2p), _acts(cp, CpComm.a2a)
    per_layer = 2 * 2 * s_local * 32 * 128
    tables = (2 - 1) * 2 * 2 * s_local * 128
    assert ulysses.total_bytes - ring.total_bytes == 32 * per_layer + tables


def test_kv_heads_below_cp_are_replicated_to_one_per_rank():
    """cp 16 > kv 8: each rank's k and v are one head over the whole sequence, 2 e b s d, where the ring model
    counts 2 e b (s/cp) kv d: the difference 2 e b (s/cp) d (cp - kv) per layer, beside the o_proj input."""
    s_local = 32768 // 16
    ring, ulysses = _acts(16, CpComm.p2p), _acts(16, CpComm.a2a)
    kv = 2 * 2 * 2 * s_local * 128 * (16 - 8)
    per_layer = 2 * 2 * s_local * 32 * 128 + kv
    assert ulysses.total_bytes - ring.total_bytes == 32 * per_layer + 2 * 2 * s_local * 128


def test_full_checkpointing_recomputes_the_delta_once():
    """Under full checkpointing a layer keeps its input: the Ulysses terms live in the one recomputed layer only."""
    from zeroplan.memory.setup import Checkpointing

    full = TrainingSetup(seq_len=32768, micro_batch=2, checkpointing=Checkpointing.full)
    ring, ulysses = _acts(4, CpComm.p2p, full), _acts(4, CpComm.a2a, full)
    s_local = 32768 // 4
    assert ulysses.recompute_bytes - ring.recompute_bytes == 2 * 2 * s_local * 32 * 128
    assert ulysses.layer_bytes == ring.layer_bytes


def test_all_to_all_bytes_and_time():
    """Per layer 4 all-to-alls forward and 4 backward: q and the output b (s/cp) a d e, k and v b (s/cp) kv d e,
    (cp - 1)/cp of each leaving the rank; inside one node at the fabric's bus bandwidth, exposed."""
    from zeroplan.hardware.presets import load_hardware
    from zeroplan.memory.mesh import MeshModel, stage_shares
    from zeroplan.models.params import count_params
    from zeroplan.models.presets import load_model
    from zeroplan.perf.collectives import GB_PER_S, US
    from zeroplan.perf.mesh import mesh_layout, mesh_step

    spec, hw = load_model("llama-3.1-8b"), load_hardware("h100-sxm-80gb")
    mesh = Mesh(gpus=8, cp=4, cp_comm=CpComm.a2a)
    layout = mesh_layout(MeshModel(mesh, stage_shares(spec.config.decoder(), mesh)), spec.architecture(),
                         count_params(spec), hw, Parallelism(gpus=8, nodes=1))
    setup = TrainingSetup(seq_len=32768, grad_accum=1)
    cost = mesh_step(layout, setup, ZeroStage.zero1, DeepSpeedKnobs()).cost
    tokens, e = 32768 / 4, 2
    sizes = [tokens * 32 * 128 * e] * 2 + [tokens * 8 * 128 * e] * 2
    assert cost.cp_bytes == pytest.approx(32 * 2 * sum(sizes) * 3 / 4)
    one = sum(hw.intra_node_alpha_us * US + 3 / 4 * x / (hw.intra_node_busbw_gbps * GB_PER_S) for x in sizes)
    assert cost.cp_exposed_s == pytest.approx(32 * 2 * one) == pytest.approx(cost.cp_comm_s)


def _error(*args: str) -> str:
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code != 0 and "Traceback" not in res.output, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.output
    return lines[0].removeprefix("error: ")


@pytest.mark.parametrize(("args", "words"), [
    (["--model", "llama-3.1-8b", "--gpus", "6", "--cp", "3"], "num_attention_heads (32) is not a multiple of --cp 3"),
    (["--model", "llama-3.1-8b", "--gpus", "8", "--cp", "3"], "--gpus 8 is not a multiple of tp x pp x cp"),
    (["--model", "qwen2.5-7b", "--gpus", "7", "--cp", "7"],
     "num_key_value_heads (4) neither divides nor is a multiple of --cp 7"),
    (["--model", "llama-3.1-8b", "--gpus", "8", "--cp", "2", "--tp", "2"],
     "--cp-comm a2a (DeepSpeed-Ulysses) is modelled over data parallelism only"),
    (["--model", "llama-3.1-8b", "--gpus", "8", "--cp", "2", "--attention", "eager"],
     "context parallelism (DeepSpeed-Ulysses) runs flash kernels"),
    (["--model", "llama-3.1-8b", "--gpus", "8", "--cp", "2", "--method", "megatron"],
     "--cp-comm a2a (DeepSpeed-Ulysses) is zeroplan's own model"),
])  # fmt: skip
def test_bad_ulysses_input_is_one_line_with_the_numbers(args, words):
    # throughput times the mesh and reads no attention kernel; --method is estimate's
    only_estimate = "--method" in args or "eager" in args
    for command in ("estimate",) if only_estimate else ("estimate", "throughput"):
        assert words in _error(command, *args, "--cp-comm", "a2a", "--seq-len", "4096")


def _ds(tmp_path, **keys) -> str:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 3}, "bf16": {"enabled": True},
                                "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, **keys}))
    return str(path)


def test_a_ds_config_sequence_parallel_size_is_ulysses_on_dp_x_sp(tmp_path):
    """sequence_parallel_size 4 on 8 GPUs: cp 4 by all-to-all, dp 2; ZeRO over dp x sp = 8 (seq_data_parallel_group);
    train_batch_size counts dp = 2 ranks (deepspeed/runtime/config.py: world_size / sequence_parallel_size)."""
    ds = _ds(tmp_path, sequence_parallel_size=4, train_batch_size=2)
    flags = ["--model", "llama-3.1-8b", "--gpus", "8", "--seq-len", "32768", "--deepspeed-config", ds, "-f", "json"]
    res = CliRunner().invoke(app, ["estimate", *flags])
    assert res.exit_code == 0, res.output
    mesh = json.loads(res.stdout)["mesh"]
    assert (mesh["cp"], mesh["dp"], mesh["cp_comm"], mesh["zero_group"]) == (4, 2, "a2a", 8)
    same = CliRunner().invoke(app, ["estimate", "--model", "llama-3.1-8b", "--gpus", "8", "--seq-len", "32768",
                                    "--stage", "3", "--cp", "4", "--cp-comm", "a2a", "-f", "json"])
    assert json.loads(same.stdout)["activations"] == json.loads(res.stdout)["activations"]
    assert json.loads(same.stdout)["stages"][0]["gpu_bytes"] == json.loads(res.stdout)["stages"][0]["gpu_bytes"]


def test_a_from_file_whose_ds_config_has_sequence_parallel_size(tmp_path, monkeypatch):
    """A LLaMA-Factory YAML naming the ds_config: estimate lays the run on the Ulysses mesh, check reads it."""
    import yaml

    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 3}, "bf16": {"enabled": "auto"},
                                                  "train_micro_batch_size_per_gpu": "auto",
                                                  "gradient_accumulation_steps": "auto", "sequence_parallel_size": 4}))
    (tmp_path / "sft.yaml").write_text(yaml.safe_dump({
        "model_name_or_path": "meta-llama/Llama-3.1-8B", "finetuning_type": "full", "per_device_train_batch_size": 1,
        "gradient_accumulation_steps": 1, "cutoff_len": 32768, "bf16": True, "deepspeed": "ds.json"}))
    res = CliRunner().invoke(app, ["estimate", "--from", "sft.yaml", "--gpus", "8", "-f", "json"])
    assert res.exit_code == 0, res.output
    mesh = json.loads(res.stdout)["mesh"]
    assert (mesh["cp"], mesh["dp"], mesh["cp_comm"]) == (4, 2, "a2a"), mesh
    checked = CliRunner().invoke(app, ["check", "--from", "sft.yaml", "--gpus", "8", "-f", "json"])
    report = json.loads(checked.stdout)
    assert checked.exit_code == report["exit_code"] in (0, 1), checked.output
    assert not [f for plan in report["plans"] for f in plan["findings"] if f["rule"] == "invalid-input"], report


def test_a_ds_config_sequence_parallel_size_not_dividing_the_gpus_is_one_line(tmp_path):
    line = _error("estimate", "--model", "llama-3.1-8b", "--gpus", "8", "--deepspeed-config",
                  _ds(tmp_path, sequence_parallel_size=3))
    assert line.endswith("sequence_parallel_size 3 does not divide the 8 GPUs (DeepSpeed: 'world_size ... is not "
                         "divisible by sequence_parallel_size')"), line


def test_a_plan_mesh_states_cp_comm(tmp_path):
    from zeroplan.check.planfiles import load_plan

    (tmp_path / "ds.json").write_text(_ds(tmp_path) and (tmp_path / "ds.json").read_text())
    (tmp_path / "plan.yaml").write_text("model: llama-3.1-8b\nhardware: h100-sxm-80gb\ngpus: 8\ndeepspeed: ds.json\n"
                                        "training:\n  seq_len: 32768\nmesh:\n  cp: 4\n  cp_comm: a2a\n")
    run = load_plan(tmp_path / "plan.yaml")
    assert run.mesh == Mesh(gpus=8, cp=4, cp_comm=CpComm.a2a)


def test_the_api_takes_cp_comm():
    from zeroplan import api

    est = api.estimate(model="llama-3.1-8b", gpus=8, cp=4, cp_comm="a2a", seq_len=32768, stage=3)
    assert est.scenario.mesh.mesh.cp_comm is CpComm.a2a
    from zeroplan.errors import UsageError

    with pytest.raises(UsageError, match="--cp-comm .ring. is not one of: p2p, a2a"):
        api.estimate(model="llama-3.1-8b", gpus=8, cp=4, cp_comm="ring", seq_len=32768, stage=3)


def test_accelerate_sp_size_is_ulysses_under_deepspeed_only(tmp_path, monkeypatch):
    """parallelism_config_sp_size: DeepSpeed's ALST under DEEPSPEED (the only sp_backend); refused elsewhere."""
    import yaml

    monkeypatch.chdir(tmp_path)
    base = {"num_processes": 8, "num_machines": 1, "mixed_precision": "bf16",
            "parallelism_config": {"parallelism_config_sp_size": 4, "parallelism_config_sp_backend": "deepspeed"}}
    (tmp_path / "ds.yaml").write_text(yaml.safe_dump({**base, "distributed_type": "DEEPSPEED",
                                                      "deepspeed_config": {"zero_stage": 3}}))
    res = CliRunner().invoke(app, ["estimate", "--from", "ds.yaml", "--model", "llama-3.1-8b", "--seq-len", "32768",
                                   "-f", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["mesh"]["describe"] == "tp 1 x pp 1 x cp 4 x dp 2 = 8 GPUs (cp all-to-all " \
        "(DeepSpeed-Ulysses))"
    (tmp_path / "fsdp.yaml").write_text(yaml.safe_dump({**base, "distributed_type": "FSDP"}))
    line = _error("estimate", "--from", "fsdp.yaml", "--model", "llama-3.1-8b")
    assert "parallelism_config.parallelism_config_sp_size: 4 (sequence parallelism)" in line, line


def test_check_reports_a_ulysses_mesh_the_heads_do_not_split_into(tmp_path):
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 3}, "bf16": {"enabled": True},
                                                  "train_micro_batch_size_per_gpu": 1}))
    (tmp_path / "plan.yaml").write_text("model: llama-3.1-8b\nhardware: h100-sxm-80gb\ngpus: 6\ndeepspeed: ds.json\n"
                                        "training:\n  seq_len: 32768\nmesh:\n  cp: 3\n  cp_comm: a2a\n")
    res = CliRunner().invoke(app, ["check", str(tmp_path / "plan.yaml"), "-f", "json"])
    findings = [f for plan in json.loads(res.stdout)["plans"] for f in plan["findings"]]
    tail = "; memory not estimated on this mesh"
    assert [f["message"] for f in findings if f["rule"] == "mesh-does-not-divide"] == [
        "num_attention_heads (32) is not a multiple of --cp 3 (DeepSpeed-Ulysses splits the heads over the "
        "sequence-parallel ranks)" + tail,
        "num_key_value_heads (8) neither divides nor is a multiple of --cp 3 (DeepSpeed-Ulysses: 'KV attention head "
        "count ... is not divisible by SP size ... or vice versa')" + tail], findings
