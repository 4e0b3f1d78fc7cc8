"""`zeroplan advise` and `zeroplan throughput` end to end: JSON keys, policies from the CLI and YAML, the emitted
DeepSpeed config (written atomically, never overwritten without --force), errors as one line on stderr."""

import json

import pytest
import yaml

from zeroplan import scenario
from zeroplan.check.findings import RunContext
from zeroplan.check.rules import run_checks
from zeroplan.cli.app import app
from zeroplan.deepspeed.reader import parse_ds_config
from zeroplan.hardware.presets import load_hardware
from zeroplan.memory.setup import Parallelism
from zeroplan.memory.states import ModelSummary

ZERO3_RULES = ["fit.zero0", "fit.zero1", "fit.zero2", "fit.zero3", "batch.micro", "zero3.overhead"]


def invoke(runner, *args):
    return runner.invoke(app, list(args))


def advise_json(runner, *args) -> dict:
    res = invoke(runner, "advise", *args, "-f", "json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def assert_one_line_error(res, needle: str, code: int = 1) -> None:
    assert res.exit_code == code, res.output
    assert needle in res.stderr
    assert "Traceback" not in res.output and len(res.stderr.strip().splitlines()) == 1


def test_advise_json_keys(runner):
    data = advise_json(runner, "--params", "30e9")
    rec = data["recommendation"]
    assert (rec["stage"], rec["offload_optimizer"], rec["offload_param"], rec["fits"]) == (3, "none", "none", True)
    assert (rec["micro_batch"], rec["grad_accum"], rec["global_batch"], rec["checkpointing"]) == (64, 1, 512, "none")
    assert data["policy"]["name"] == "default" and data["policy"]["tree"] == "default"
    assert data["policy"]["thresholds"]["max_zero3_overhead_pct"]["value"] == 11.0
    assert [step["rule"] for step in data["trace"]] == ZERO3_RULES
    for step in data["trace"] + data["advisories"]:
        assert {"rule", "question", "observed", "threshold", "outcome", "reason", "source", "unit"} <= set(step)
    fit3 = data["trace"][3]
    assert type(fit3["observed"]) is int and fit3["unit"] == "bytes" and fit3["outcome"] == "yes"
    assert data["alternatives"][0]["stage"] == 3 and type(data["alternatives"][0]["peak_bytes"]) is int
    assert rec["plan"] == data["alternatives"][0]
    assert data["hardware"] == "h100-sxm-80gb" and data["parallelism"] == {"gpus": 8, "nodes": 1, "dp": 8}


def test_nothing_fits_is_an_answer_not_an_error(runner, tmp_path):
    # Full ZeRO-3 offload leaves a bare 500B count 2.6 GiB per GPU (DeepSpeed keeps its gradient partitions on
    # the CPU too), but 9.3 TiB of host memory per node: a site limit on host memory leaves nothing that fits.
    path = tmp_path / "host.yaml"
    path.write_text("host_memory_gib_per_node: 2048\n")
    data = advise_json(runner, "--params", "500e9", "--policy-file", str(path))
    rec = data["recommendation"]
    assert (rec["fits"], rec["stage"], rec["offload_optimizer"], rec["plan"]) == (False, None, None, None)
    assert (rec["change"]["kind"], rec["change"]["stage"], rec["change"]["gpus"]) == ("gpus", 3, 120)  # 112 with no headroom; 5 % kept free
    assert data["trace"][-1]["rule"] == "gpus.min"


def test_advise_defaults_to_gemma2_9b(runner, monkeypatch):
    asked = []

    def fake(model, params, largest_layer, knobs):
        asked.append(model)
        return ModelSummary(name=model, num_params=9_241_705_984), None

    monkeypatch.setattr(scenario, "resolve_model", fake)
    data = advise_json(runner)
    assert asked == ["gemma2-9b"] and data["model"]["name"] == "gemma2-9b"
    assert data["recommendation"]["stage"] == 1  # 16 B/param at 8 GPUs, no activations in this stand-in


def test_article_policy(runner):
    data = advise_json(runner, "--params", "30e9", "--policy", "article", "--global-batch", "1024")
    assert [s["rule"] for s in data["trace"]] == [
        "article.zero0-fits", "article.zero2-fits", "article.nvlink", "article.batch-512", "guard.fits"]
    assert data["recommendation"]["summary"] == "use ZeRO-3; ZeRO-3 is acceptable"
    assert data["advisories"] == []
    pcie = advise_json(runner, "--params", "30e9", "--policy", "article", "--topology", "pcie")
    assert pcie["recommendation"]["fits"] is False
    assert pcie["recommendation"]["summary"] == "consider model simplification or hardware upgrade"


def test_set_overrides_a_threshold_and_names_it_as_the_source(runner):
    # over PCIe ZeRO-3's transfers outweigh what sharding saves of the optimizer step (on NVLink it beats ZeRO-0)
    data = advise_json(runner, "--params", "30e9", "--topology", "pcie", "--set", "max_zero3_overhead_pct=0.01")
    step = data["trace"][-1]
    assert (step["rule"], step["outcome"], step["threshold"], step["source"]) == (
        "zero3.overhead", "warn", 0.01, "set by --set")
    assert data["policy"]["thresholds"]["max_zero3_overhead_pct"] == {"value": 0.01, "source": "set by --set"}


def test_policy_file_then_set(runner, tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump({"zero3_min_global_batch": 256, "zero3_topologies": ["nvlink", "multinode"]}))
    data = advise_json(runner, "--params", "30e9", "--policy", "article", "--policy-file", str(path))
    step = data["trace"][3]
    assert (step["question"], step["outcome"], step["source"]) == ("Batch size > 256?", "yes", f"set by {path}")
    later = advise_json(runner, "--params", "30e9", "--policy", "article", "--policy-file", str(path),
                        "--set", "zero3_min_global_batch=4096")
    assert later["trace"][3]["outcome"] == "no" and later["trace"][3]["source"] == "set by --set"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--set", "max_overhead=5"], "--set: unknown policy key 'max_overhead'"),
        (["--set", "max_gpus"], "expected key=value"),
        (["--set", "max_gpus=many"], "--set: max_gpus: Input should be a valid integer"),
        (["--policy-file", "missing.yaml"], "missing.yaml: no such file"),
        (["--global-batch", "12"], "global batch (12) must be a positive multiple of the data-parallel degree (8)"),
        (["--global-batch", "0"], "--global-batch '0' must be positive"),
        (["--topology", "multinode"], "topology multinode needs more than one node (nodes = 1)"),
        (["--hardware", "h100-pcie-80gb", "--topology", "nvlink"], "h100-pcie-80gb GPUs talk over PCIe"),
        (["--hardware", "none"], "advise needs a hardware profile"),
    ],
)
def test_advise_bad_input_is_one_line_exit_1(runner, args, needle):
    res = invoke(runner, "advise", "--params", "9e9", *args)
    assert_one_line_error(res, needle)
    assert res.stdout == ""


def test_bad_policy_file(runner, tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text("max_zero3_overhead_pct: [1, 2\n")
    assert_one_line_error(invoke(runner, "advise", "--params", "9e9", "--policy-file", str(path)), "invalid YAML")
    path.write_text("zero3_min_global_batch: 256\nbatch: 3\n")
    assert_one_line_error(invoke(runner, "advise", "--params", "9e9", "--policy-file", str(path)),
                          "unknown policy key 'batch'")


def test_usage_errors_exit_2(runner):
    assert invoke(runner, "advise", "--params", "9e9", "--policy", "zeroplan").exit_code == 2
    assert invoke(runner, "advise", "--params", "9e9", "--micro-batch", "4").exit_code == 2


def test_advise_table_key_lines(runner):
    res = invoke(runner, "advise", "--params", "30e9")
    assert res.exit_code == 0
    lines = res.stdout.splitlines()
    data = advise_json(runner, "--params", "30e9")["recommendation"]["plan"]
    free = (data["usable_bytes"] - data["peak_bytes"]) / 2**30
    assert lines[0].startswith(f"ZeRO-3: fits: {data['peak_bytes'] / 2**30:.2f} GiB of 79.65 GiB usable, {free:.2f} GiB "
                               "free")  # the verdict leads
    assert "recommendation (default policy): 30B params on 8 x h100-sxm-80gb, nvlink, global batch 512" in lines[1]
    assert any("ZeRO-3, micro-batch 64 x accumulation 1 x 8 GPUs, overlap_comm on" in line for line in lines)
    assert any("[fit.zero2] Does ZeRO-2 fit at micro-batch 1? no" in line for line in lines)
    assert any("[zero3.overhead]" in line for line in lines)
    assert any(line.startswith("alternatives that fit") for line in lines)
    assert any("correct.grad-accum" in line for line in lines)


def test_advise_yaml_is_the_json_data(runner):
    res = invoke(runner, "advise", "--params", "9e9", "-f", "yaml")
    assert yaml.safe_load(res.stdout) == advise_json(runner, "--params", "9e9")


# --- --emit-deepspeed ----------------------------------------------------------------------------------------


def test_emit_deepspeed_writes_a_config_that_passes_check(runner, tmp_path):
    path = tmp_path / "ds_config.json"
    res = invoke(runner, "advise", "--params", "30e9", "--emit-deepspeed", str(path), "-f", "json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["recommendation"]["stage"] == 3  # stdout stays machine output
    assert f"wrote {path}" in res.stderr
    config = json.loads(path.read_text())
    assert config["zero_optimization"]["stage"] == 3 and config["train_batch_size"] == 512
    run = RunContext(parallelism=Parallelism(gpus=8), hardware=load_hardware("h100-sxm-80gb"))
    assert [f for f in run_checks(parse_ds_config(config), run) if f.severity != "info"] == []
    assert [p.name for p in tmp_path.iterdir()] == ["ds_config.json"]  # no temp file left behind


def test_emit_refuses_to_overwrite_without_force(runner, tmp_path):
    path = tmp_path / "ds_config.json"
    path.write_text("{}\n")
    res = invoke(runner, "advise", "--params", "30e9", "--emit-deepspeed", str(path))
    assert_one_line_error(res, "already exists; pass --force to overwrite it", code=2)  # usage
    assert res.stdout == "" and path.read_text() == "{}\n"
    res = invoke(runner, "advise", "--params", "30e9", "--emit-deepspeed", str(path), "--force")
    assert res.exit_code == 0, res.output
    assert json.loads(path.read_text())["zero_optimization"]["stage"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds_config.json"]


def test_emit_when_nothing_fits_writes_nothing(runner, tmp_path):
    path = tmp_path / "ds_config.json"
    host = tmp_path / "host.yaml"  # without a host limit full ZeRO-3 offload fits any bare count
    host.write_text("host_memory_gib_per_node: 2048\n")
    res = invoke(runner, "advise", "--params", "500e9", "--emit-deepspeed", str(path), "--policy-file", str(host))
    assert_one_line_error(res, "nothing to emit: nothing fits on 8 GPUs; ZeRO-3 fits on 120 GPUs (15 nodes)")
    assert "nothing fits" in res.stdout and not path.exists()


def test_emit_into_a_missing_directory(runner, tmp_path):
    res = invoke(runner, "advise", "--params", "9e9", "--emit-deepspeed", str(tmp_path / "no" / "ds.json"))
    assert_one_line_error(res, "cannot write")


# --- throughput ----------------------------------------------------------------------------------------------


def test_throughput_per_stage(runner):
    res = invoke(runner, "throughput", "--params", "9e9", "--grad-accum", "8", "-f", "json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert [s["stage"] for s in data["stages"]] == [0, 1, 2, 3]
    assert data["stages"][0]["overhead_vs_zero0_pct"] == 0.0 and data["sweep"] is None
    for s in data["stages"]:
        assert {"step_time_s", "tokens_per_s_per_gpu", "mfu", "overhead_vs_zero0_pct"} <= set(s)
        assert s["tokens_per_step_per_gpu"] == 8 * 2048
    assert data["topology"] == "nvlink"


def test_throughput_sweep_zero3_overhead_falls_with_tokens_per_micro_step(runner):
    res = invoke(runner, "throughput", "--params", "9e9", "--sweep", "auto", "--no-overlap-comm", "-f", "json")
    sweep = json.loads(res.stdout)["sweep"]
    points = sweep["points"]
    assert [p["global_batch"] for p in points] == [8 * 2**k for k in range(10)]
    assert all(p["grad_accum"] == 1 for p in points)  # no activations modelled: memory does not cap it
    # ZeRO-3's difference from ZeRO-0 (its transfers, less the optimizer step it shards) shrinks as the micro-step grows
    zero3 = [abs(p["overhead_vs_zero0_pct"][3]) for p in points]
    assert zero3 == sorted(zero3, reverse=True) and zero3[0] > zero3[-1]
    assert sweep["threshold_pct"] == 11.0


def test_throughput_sweep_with_a_cap_accumulates(runner):
    res = invoke(runner, "throughput", "--params", "9e9", "--sweep", "64,512", "--max-micro-batch", "4", "-f", "json")
    points = json.loads(res.stdout)["sweep"]["points"]
    assert [(p["micro_batch"], p["grad_accum"]) for p in points] == [(4, 2), (4, 16)]


def test_throughput_table_and_errors(runner):
    res = invoke(runner, "throughput", "--params", "9e9", "--sweep", "auto")
    assert res.exit_code == 0 and "overhead vs ZeRO-0 by global batch" in res.stdout
    assert_one_line_error(invoke(runner, "throughput"), "give --model")
    assert_one_line_error(invoke(runner, "throughput", "--params", "9e9", "--mfu", "1.5"), "mfu (1.5) must be in (0, 1]")
    assert_one_line_error(invoke(runner, "throughput", "--params", "9e9", "--sweep", "12"),
                          "global batch (12) is not a multiple of the data-parallel degree (8)")


def test_emit_says_when_checkpointing_is_the_training_scripts(runner, tmp_path, monkeypatch):
    from types import SimpleNamespace

    from zeroplan.memory import estimate
    from zeroplan.memory.setup import Checkpointing
    from zeroplan.models.architecture import Architecture

    arch = Architecture(family="llama", hidden_size=4096, num_layers=32, num_attention_heads=32, num_key_value_heads=8,
                        head_dim=128, intermediate_size=14336, vocab_size=128256, gated_mlp=True, norm="rmsnorm",
                        tie_word_embeddings=False)
    per_seq = {Checkpointing.none: 90 * 2**30, Checkpointing.selective: 90 * 2**30, Checkpointing.full: 2**30}
    monkeypatch.setattr(scenario, "resolve_model", lambda *a: (ModelSummary(name="m", num_params=9 * 10**9), arch))
    monkeypatch.setattr(estimate, "activations_for", lambda arch, setup: SimpleNamespace(
        total_bytes=per_seq[setup.checkpointing] * setup.micro_batch, assumptions=()))
    path = tmp_path / "ds.json"
    res = invoke(runner, "advise", "--emit-deepspeed", str(path), "-f", "json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["recommendation"]["checkpointing"] == "full"
    assert "turn on full activation checkpointing in the training script" in res.stderr


@pytest.mark.parametrize("command", [["advise"], ["throughput", "--sweep", "auto"], ["capacity"]])
def test_markdown_views(runner, command):
    res = invoke(runner, *command, "--params", "9e9", "-f", "markdown")
    assert res.exit_code == 0, res.output
    assert "### " in res.stdout and "Traceback" not in res.output
    if command == ["advise"]:
        assert res.stdout.startswith("**recommendation**: ZeRO-1, micro-batch 64 x accumulation 1")


def test_throughput_needs_hardware_with_bf16(runner):
    assert_one_line_error(invoke(runner, "throughput", "--params", "9e9", "--hardware", "none"),
                          "throughput needs a hardware profile")
    assert_one_line_error(invoke(runner, "throughput", "--params", "9e9", "--hardware", "v100-sxm-32gb"),
                          "has no bf16")


# --- --engine -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("engine", "rules", "stage", "strategy", "settings"),
    [
        pytest.param("fsdp", ["fit.zero0", "fit.zero2", "fit.zero3", "batch.micro", "zero3.overhead"], 3,
                     "FSDP FULL_SHARD (ZeRO-3 equivalent)", {"sharding_strategy": "FULL_SHARD"}, id="fsdp"),
        pytest.param("fsdp2", ["fit.zero2", "fit.zero3", "batch.micro", "zero3.overhead"], 3,
                     "FSDP2 fully_shard(reshard_after_forward=True) (ZeRO-3 equivalent)",
                     {"reshard_after_forward": True}, id="fsdp2"),
    ],
)
def test_advise_engine_json(runner, engine, rules, stage, strategy, settings):
    data = advise_json(runner, "--params", "30e9", "--largest-layer", "3e8", "--engine", engine)
    rec = data["recommendation"]
    assert [s["rule"] for s in data["trace"]] == rules
    assert (rec["engine"], rec["stage"], rec["strategy"], rec["engine_settings"]) == (engine, stage, strategy, settings)
    assert rec["knobs"] is None and data["advisories"] == []
    assert strategy in data["trace"][-3]["question"]


def test_advise_engine_table_names_the_strategy(runner):
    res = invoke(runner, "advise", "--params", "4.5e9", "--largest-layer", "4.5e7", "--engine", "ddp")
    assert res.exit_code == 0, res.output
    assert "DDP + ZeroRedundancyOptimizer (ZeRO-1 equivalent)" in res.stdout
    assert "engine ddp:" in res.stdout and "zero_redundancy_optimizer=True" in res.stdout


def test_advise_deepspeed_json_is_unchanged_by_the_engine_keys(runner):
    rec = advise_json(runner, "--params", "30e9")["recommendation"]
    assert (rec["engine"], rec["strategy"], rec["engine_settings"]) == ("deepspeed", "ZeRO-3", {})
    assert rec["knobs"]["overlap_comm"] is True


def test_article_policy_with_a_pytorch_engine_is_a_usage_error(runner):
    res = invoke(runner, "advise", "--params", "1e9", "--engine", "fsdp2", "--policy", "article")
    assert res.exit_code == 2, res.output
    assert "article's tree of DeepSpeed ZeRO stages" in res.stderr and "Traceback" not in res.output


# --- --emit-accelerate ----------------------------------------------------------------------------------------


def test_emit_accelerate_fsdp_parses_back(runner, tmp_path):
    target = tmp_path / "accelerate.yaml"
    res = invoke(runner, "advise", "--model", "llama-3.1-8b", "--engine", "fsdp", "--gpus", "16", "--nodes", "2",
                 "--emit-accelerate", str(target), "-f", "json")
    assert res.exit_code == 0, res.output
    rec = json.loads(res.stdout)["recommendation"]
    config = yaml.safe_load(target.read_text())
    assert (config["distributed_type"], config["mixed_precision"]) == ("FSDP", "bf16")
    assert (config["num_processes"], config["num_machines"]) == (16, 2)
    fsdp = config["fsdp_config"]
    assert fsdp["fsdp_version"] == 1 and fsdp["fsdp_sharding_strategy"] == rec["engine_settings"]["sharding_strategy"]
    assert fsdp["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    assert fsdp["fsdp_transformer_layer_cls_to_wrap"] == "LlamaDecoderLayer"
    assert fsdp["fsdp_activation_checkpointing"] is (rec["checkpointing"] != "none")
    assert f"wrote {target}" in res.stderr and "machine_rank" in res.stderr


def test_emit_accelerate_fsdp2_and_ddp(runner, tmp_path):
    fsdp2, ddp = tmp_path / "fsdp2.yaml", tmp_path / "ddp.yaml"
    assert invoke(runner, "advise", "--model", "gemma2-2b", "--engine", "fsdp2", "--emit-accelerate", str(fsdp2)).exit_code == 0
    fsdp = yaml.safe_load(fsdp2.read_text())["fsdp_config"]
    assert fsdp["fsdp_version"] == 2 and isinstance(fsdp["fsdp_reshard_after_forward"], bool)
    assert fsdp["fsdp_transformer_layer_cls_to_wrap"] == "Gemma2DecoderLayer" and "fsdp_sharding_strategy" not in fsdp
    res = invoke(runner, "advise", "--model", "gpt2", "--engine", "ddp", "--emit-accelerate", str(ddp))
    assert res.exit_code == 0, res.output
    config = yaml.safe_load(ddp.read_text())
    assert config["distributed_type"] == "MULTI_GPU" and "fsdp_config" not in config
    assert "gradient_as_bucket_view" in ddp.read_text()  # the header note: the file has no key for it


def test_emit_accelerate_refuses_to_overwrite(runner, tmp_path):
    target = tmp_path / "accelerate.yaml"
    target.write_text("mine\n")
    res = invoke(runner, "advise", "--params", "1e9", "--engine", "fsdp", "--emit-accelerate", str(target))
    assert_one_line_error(res, "already exists; pass --force", code=2)
    assert target.read_text() == "mine\n"
    forced = invoke(runner, "advise", "--params", "1e9", "--engine", "fsdp", "--emit-accelerate", str(target), "--force")
    assert forced.exit_code == 0 and yaml.safe_load(target.read_text())["distributed_type"] == "FSDP"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        pytest.param(("--engine", "fsdp", "--emit-deepspeed"), "use --emit-accelerate PATH", id="deepspeed-on-fsdp"),
        pytest.param(("--engine", "ddp", "--emit-deepspeed"), "use --emit-accelerate PATH", id="deepspeed-on-ddp"),
        pytest.param(("--emit-accelerate",), "for DeepSpeed use --emit-deepspeed PATH", id="accelerate-on-deepspeed"),
    ],
)
def test_emit_option_for_the_wrong_engine_is_a_usage_error(runner, tmp_path, args, needle):
    target = tmp_path / "out"
    res = invoke(runner, "advise", "--params", "1e9", *args, str(target))
    assert res.exit_code == 2, res.output
    assert needle in res.stderr and "Traceback" not in res.output and not target.exists()
    assert res.stdout == ""  # refused before anything is computed


def test_advise_says_in_its_first_line_which_model_it_assumed(runner):
    first = runner.invoke(app, ["advise"]).stdout.splitlines()[0]
    assert "gemma2-9b (assumed)" in first
    assert json.loads(runner.invoke(app, ["advise", "-f", "json"]).stdout)["model_assumed"] is True
    given = runner.invoke(app, ["advise", "--model", "gemma2-9b", "-f", "json"])
    assert json.loads(given.stdout)["model_assumed"] is False
