"""`--from FILE`: recognition by keys, --from-kind, what each kind sets, the command line over the file, the model's
resolution, the DeepSpeed path's, and every not-modelled and bad-input error as one line."""

import json
from pathlib import Path

import pytest
import yaml

from zeroplan.cli.app import app
from zeroplan.errors import SpecError
from zeroplan.frameworks.kinds import FromKind
from zeroplan.frameworks.source import recognise

FIELD = Path(__file__).resolve().parent / "data" / "field"
DS_Z3 = FIELD / "deepspeed" / "hiyouga__LLaMA-Factory__examples__deepspeed__ds_z3_config.json"
AUTOTP = FIELD / "deepspeed" / "hiyouga__LLaMA-Factory__examples__deepspeed__ds_z2_autotp_config.json"
AUTOSP = FIELD / "deepspeed" / "deepspeedai__DeepSpeedExamples__benchmarks__autosp__configs__autosp_config.json"
NOT_MODELLED = "is not modelled yet"


@pytest.fixture
def write(tmp_path, monkeypatch):
    """Write a YAML mapping to tmp_path/name and run from tmp_path."""
    monkeypatch.chdir(tmp_path)

    def write(name: str, data: dict) -> str:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(data))
        return name

    return write


def estimate(runner, *args: str) -> dict:
    res = runner.invoke(app, ["estimate", *args, "-f", "json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def error(runner, *args: str, command: str = "estimate", code: int = 1) -> str:
    res = runner.invoke(app, [command, *args])
    assert res.exit_code == code, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    return lines[0].removeprefix("error: ")


def notes_of(data: dict, name: str) -> list[str]:
    return [a for a in data["assumptions"] if a.startswith(f"{name}: ")]


LF = {"model_name_or_path": "meta-llama/Llama-3.1-8B", "finetuning_type": "full", "per_device_train_batch_size": 2,
      "gradient_accumulation_steps": 4, "cutoff_len": 1024, "bf16": True}  # fmt: skip
AXOLOTL = {"base_model": "meta-llama/Llama-3.1-8B", "micro_batch_size": 2, "sequence_len": 1024, "bf16": True}
ACCELERATE = {"distributed_type": "DEEPSPEED", "num_processes": 16, "num_machines": 2, "mixed_precision": "bf16",
              "deepspeed_config": {"zero_stage": 3, "offload_optimizer_device": "cpu"}}  # fmt: skip


# --- recognition and --from-kind -------------------------------------------------------------------------------


@pytest.mark.parametrize(("data", "kind"), [
    (ACCELERATE, FromKind.accelerate), ({"distributed_type": "MULTI_GPU"}, FromKind.accelerate),
    (LF, FromKind.llamafactory), ({"model": "Qwen/Qwen3-0.6B", "dist_config": {"name": "fsdp2"}}, FromKind.llamafactory),
    (AXOLOTL, FromKind.axolotl), ({"base_model": "x/y"}, FromKind.axolotl),
])  # fmt: skip
def test_a_kind_is_recognised_by_its_keys(data, kind):
    assert recognise(data, "f.yaml") is kind


def test_a_file_of_no_kind_asks_for_from_kind(runner, write):
    path = write("train.yaml", {"learning_rate": 1e-5, "model": "gpt2"})
    assert error(runner, "--from", path) == (
        "train.yaml: only keys several tools write (model, learning_rate), none that only one writes: LLaMA-Factory or "
        "ms-swift or TRL or axolotl? pass --from-kind llamafactory|swift|trl|axolotl")


def test_a_file_of_two_kinds_names_both_and_from_kind_settles_it(runner, write):
    path = write("mixed.yaml", {**LF, "sequence_len": 4096})
    assert error(runner, "--from", path) == (
        "mixed.yaml: has keys of LLaMA-Factory (finetuning_type, cutoff_len) and axolotl (sequence_len); "
        "pass --from-kind llamafactory|axolotl")
    data = estimate(runner, "--from", path, "--from-kind", "llamafactory")
    assert data["setup"]["seq_len"] == 1024


def test_from_kind_without_from_is_a_usage_error(runner):
    assert "give --from FILE" in error(runner, "--params", "7e9", "--from-kind", "axolotl", code=2)
    assert "give --from FILE" in error(runner, "--params", "7e9", "--from-kind", "axolotl", command="advise", code=2)


# --- what each kind sets -----------------------------------------------------------------------------------------


def test_llamafactory_keys_and_defaults_set_the_run(runner, write):
    data = estimate(runner, "--from", write("sft.yaml", LF))
    assert data["model"]["name"] == "llama-3.1-8b"  # the Hub id, resolved offline to the preset
    assert data["setup"] == {**data["setup"], "micro_batch": 2, "grad_accum": 4, "seq_len": 1024,
                             "precision": "bf16-mixed", "checkpointing": "full", "attention": "flash"}  # fmt: skip
    assert data["engine"] == "ddp" and [s["stage"] for s in data["stages"]] == [0]  # no deepspeed key: the Trainer's DDP
    notes = notes_of(data, "sft.yaml")
    assert "sft.yaml: per_device_train_batch_size: 2 -> --micro-batch 2" in notes
    assert ("sft.yaml: disable_gradient_checkpointing not set, LLaMA-Factory's default false -> --checkpointing full"
            in notes)


def test_axolotl_keys_and_defaults_set_the_run(runner, write):
    path = write("ax.yaml", {**AXOLOTL, "gradient_checkpointing": True, "optimizer": "adamw_bnb_8bit",
                             "attn_implementation": "eager", "activation_offloading": True})  # fmt: skip
    data = estimate(runner, "--from", path)
    assert data["setup"] == {**data["setup"], "micro_batch": 2, "grad_accum": 1, "seq_len": 1024, "checkpointing": "full",
                             "attention": "eager", "optimizer": "adamw-8bit"}  # fmt: skip
    assert any("not modelled, the estimate counts without them (an upper bound): activation_offloading: True" in a
               for a in data["assumptions"])  # fmt: skip
    assert estimate(runner, "--from", write("short.yaml", {"base_model": "gpt2"}))["setup"]["seq_len"] == 512  # axolotl's default


def test_accelerate_inline_deepspeed_keys_build_the_config_accelerate_builds(runner, write):
    data = estimate(runner, "--from", write("acc.yaml", ACCELERATE), "--model", "llama-3.1-8b")
    assert [s["stage"] for s in data["stages"]] == [3]
    assert data["parallelism"] == {**data["parallelism"], "gpus": 16, "nodes": 2}
    assert data["stages"][0]["offload_optimizer"] == "cpu"
    assert "acc.yaml: deepspeed_config.zero_stage: 3 -> ZeRO-3" in data["assumptions"]
    no_stage = {**ACCELERATE, "deepspeed_config": {}}
    data = estimate(runner, "--from", write("acc2.yaml", no_stage), "--model", "llama-3.1-8b")
    assert [s["stage"] for s in data["stages"]] == [2]  # DeepSpeedPlugin's default stage
    assert "acc2.yaml: deepspeed_config.zero_stage not set, Accelerate's default 2 -> ZeRO-2" in data["assumptions"]


@pytest.mark.parametrize(("fsdp", "engine", "stage"), [
    ({}, "fsdp", 3),
    ({"fsdp_sharding_strategy": "SHARD_GRAD_OP"}, "fsdp", 2),
    ({"fsdp_sharding_strategy": 3}, "fsdp", 0),  # ShardingStrategy.NO_SHARD
    ({"fsdp_version": 2}, "fsdp2", 3),
    ({"fsdp_version": 2, "fsdp_reshard_after_forward": False}, "fsdp2", 2),
])  # fmt: skip
def test_accelerate_fsdp_strategy_is_the_stage(runner, write, fsdp, engine, stage):
    data = estimate(runner, "--from", write("fsdp.yaml", {"distributed_type": "FSDP", "fsdp_config": fsdp}), "--params", "7e9")
    assert data["engine"] == engine and [s["stage"] for s in data["stages"]] == [stage]


def test_accelerate_fsdp_cpu_offload_is_read_as_offload(runner, write):
    cfg = {"distributed_type": "FSDP", "fsdp_config": {"fsdp_offload_params": True}}
    data = estimate(runner, "--from", write("fsdp.yaml", cfg), "--params", "7e9", "--gpus", "8")
    stage = data["stages"][0]
    assert (stage["offload_optimizer"], stage["offload_param"]) == ("cpu", "cpu")
    assert stage["gpu_bytes"]["parameters"] == stage["gpu_bytes"]["optimizer_states"] == 0
    assert stage["cpu_bytes_per_node"] > 0
    dp = {"distributed_type": "NO"}
    data = estimate(runner, "--from", write("one.yaml", dp), "--params", "1e9", "--gpus", "1")
    assert data["engine"] == "none" and [s["stage"] for s in data["stages"]] == [0]


# --- the command line over the file --------------------------------------------------------------------------------


def test_options_typed_override_the_file_and_say_so(runner, write):
    path = write("sft.yaml", LF)
    data = estimate(runner, "--from", path, "--micro-batch", "1", "--model", "gpt2", "--stage", "0")
    assert data["setup"]["micro_batch"] == 1 and data["model"]["name"] == "gpt2"
    notes = notes_of(data, "sft.yaml")
    assert "sft.yaml: per_device_train_batch_size: 2 -> --micro-batch 2 (overridden by --micro-batch)" in notes
    assert "sft.yaml: model_name_or_path: meta-llama/Llama-3.1-8B -> --model meta-llama/Llama-3.1-8B (overridden by --model)" in notes
    fsdp = write("fsdp.yaml", {"distributed_type": "FSDP", "fsdp_config": {}})
    assert [s["stage"] for s in estimate(runner, "--from", fsdp, "--params", "7e9", "--stage", "2")["stages"]] == [2]


def test_a_stated_key_overrides_the_deepspeed_config_and_a_default_fills_it(runner, write, tmp_path):
    ds = json.loads(DS_Z3.read_text())
    (tmp_path / "ds.json").write_text(json.dumps({**ds, "train_micro_batch_size_per_gpu": 3}))
    stated = estimate(runner, "--from", write("a.yaml", {**LF, "deepspeed": "ds.json"}))
    assert stated["setup"]["micro_batch"] == 2 and [s["stage"] for s in stated["stages"]] == [3]
    unstated = {k: v for k, v in LF.items() if k != "per_device_train_batch_size"}
    assert estimate(runner, "--from", write("b.yaml", {**unstated, "deepspeed": "ds.json"}))["setup"]["micro_batch"] == 3
    assert estimate(runner, "--from", write("c.yaml", unstated))["setup"]["micro_batch"] == 8  # the Trainer's default


def test_deepspeed_config_on_the_command_line_replaces_the_files(runner, write, tmp_path):
    path = write("a.yaml", {**LF, "deepspeed": "missing.json"})
    (tmp_path / "z3.json").write_text(DS_Z3.read_text())
    data = estimate(runner, "--from", path, "--deepspeed-config", "z3.json")
    assert [s["stage"] for s in data["stages"]] == [3]
    assert "a.yaml: deepspeed: missing.json -> --deepspeed-config (overridden by --deepspeed-config)" in data["assumptions"]


# --- the DeepSpeed path ---------------------------------------------------------------------------------------------


def test_the_deepspeed_path_is_found_beside_the_file_else_in_the_working_directory(runner, write, tmp_path):
    (tmp_path / "examples" / "deepspeed").mkdir(parents=True)
    (tmp_path / "examples" / "deepspeed" / "z3.json").write_text(DS_Z3.read_text())
    from_root = write("examples/train/sft.yaml", {**LF, "deepspeed": "examples/deepspeed/z3.json"})
    note = next(a for a in estimate(runner, "--from", from_root)["assumptions"] if "-> --deepspeed-config" in a)
    assert note.endswith("examples/deepspeed/z3.json (relative to the working directory; not beside the file)")
    beside = write("examples/deepspeed/sft.yaml", {**LF, "deepspeed": "z3.json"})
    note = next(a for a in estimate(runner, "--from", beside)["assumptions"] if "-> --deepspeed-config" in a)
    assert note.endswith("examples/deepspeed/z3.json (relative to the file's folder)")
    missing = write("x/sft.yaml", {**LF, "deepspeed": "nope.json"})
    assert error(runner, "--from", missing) == (
        "x/sft.yaml: deepspeed: nope.json: not found beside the file (x/nope.json), in the working directory nor in "
        "a folder above the file; run from the folder it is relative to, or give --deepspeed-config PATH")


def test_a_deepspeed_path_from_the_repository_root_is_found_above_the_file(runner, write, tmp_path):
    """LLaMA-Factory's examples name examples/deepspeed/ds_z3_config.json from the repository's root, where
    llamafactory-cli runs: zeroplan run from elsewhere finds it in a folder above the file, and says so."""
    (tmp_path / "repo" / "examples" / "deepspeed").mkdir(parents=True)
    (tmp_path / "repo" / "examples" / "deepspeed" / "z3r.json").write_text(DS_Z3.read_text())
    path = write("repo/examples/extras/asft/sft.yaml", {**LF, "deepspeed": "examples/deepspeed/z3r.json"})
    note = next(a for a in estimate(runner, "--from", path)["assumptions"] if "-> --deepspeed-config" in a)
    assert note.endswith(f"repo/examples/deepspeed/z3r.json (relative to {tmp_path / 'repo'}, a folder above the "
                         "file (where its tool runs from))")


# --- the model ------------------------------------------------------------------------------------------------------


def test_a_model_the_file_names_that_zeroplan_cannot_resolve_says_how_to_give_one(runner, write):
    path = write("sft.yaml", {**LF, "model_name_or_path": "Qwen/Qwen3-Coder-30B-A3B-Instruct"})
    assert error(runner, "--from", path) == (
        "sft.yaml: model_name_or_path: Qwen/Qwen3-Coder-30B-A3B-Instruct: no preset has this hf_id, and no local folder "
        "or file has this name (zeroplan never downloads); give --model PATH/config.json or a preset: run `zeroplan "
        "models`; did you mean qwen3-0.6b (Qwen/Qwen3-0.6B), qwen3-1.7b (Qwen/Qwen3-1.7B), qwen3-14b (Qwen/Qwen3-14B), "
        "qwen3-235b-a22b (Qwen/Qwen3-235B-A22B), qwen3-30b-a3b (Qwen/Qwen3-30B-A3B), qwen3-32b (Qwen/Qwen3-32B), "
        "qwen3-4b (Qwen/Qwen3-4B), qwen3-8b (Qwen/Qwen3-8B), qwen3-next-80b-a3b (Qwen/Qwen3-Next-80B-A3B-Thinking)?")
    assert estimate(runner, "--from", path, "--params", "4e9")["model"]["num_params"] == 4_000_000_000


def test_a_local_model_folder_the_file_names_is_read(runner, write, tmp_path):
    folder = tmp_path / "models" / "tiny"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 2}))
    data = estimate(runner, "--from", write("sft.yaml", {**LF, "model_name_or_path": "models/tiny"}))
    assert data["model"]["name"] == "tiny"


def test_an_accelerate_config_names_no_model(runner, write):
    assert error(runner, "--from", write("acc.yaml", ACCELERATE)) == (
        "acc.yaml: names no model; give --model NAME|PATH or --params N (e.g. --params 9e9)")


# --- what is not modelled, and bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(("data", "words"), [
    ({**LF, "finetuning_type": "oft"}, "finetuning_type: oft (OFT adapters)"),
    ({**LF, "finetuning_type": "lora", "quantization_bit": 4, "quantization_method": "hqq"},
     "quantization_method: hqq (a quantized base other than bitsandbytes)"),
    ({**LF, "stage": "kto"}, "stage: kto (LLaMA-Factory's own KTO trainer"),  # dpo is read (memory.reference)
    ({**LF, "use_galore": True}, "use_galore: true (the GaLore optimizer)"),
    ({**LF, "optim": "rmsprop_bnb"}, "optim: rmsprop_bnb (an optimizer;"),
    ({**AXOLOTL, "adapter": "lora", "lora_r": 16}, "adapter: lora (without lora_target_modules or lora_target_linear"),
    ({**AXOLOTL, "load_in_8bit": True}, "load_in_8bit: true (an 8-bit base without adapter lora)"),
    ({**AXOLOTL, "tensor_parallel_size": 2}, "tensor_parallel_size: 2 (tensor parallelism)"),
    ({**AXOLOTL, "rl": "grpo"}, "rl: grpo (preference or RL training"),  # dpo, ipo, orpo, kto are read
    ({**AXOLOTL, "optimizer": "muon"}, "optimizer: muon (an optimizer;"),
    ({**ACCELERATE, "mixed_precision": "fp8"}, "mixed_precision: fp8 (torchao float8 training under deepspeed"),
    ({"distributed_type": "NO", "mixed_precision": "fp8", "fp8_config": {"backend": "TE"}},
     "fp8_config.backend: TE (FP8 training with TransformerEngine or MS-AMP"),
    ({"distributed_type": "XLA"}, "distributed_type: XLA (zeroplan models DEEPSPEED, FSDP, MULTI_GPU (DDP) and NO (one GPU))"),
    ({"distributed_type": "FSDP", "fsdp_config": {"fsdp_sharding_strategy": "HYBRID_SHARD"}},
     "fsdp_config.fsdp_sharding_strategy: HYBRID_SHARD (hybrid sharding)"),
    ({**ACCELERATE, "parallelism_config": {"parallelism_config_tp_size": 2}},
     "parallelism_config.parallelism_config_tp_size: 2 (tensor parallelism)"),
])  # fmt: skip
def test_what_is_not_modelled_is_one_error_naming_the_key_and_value(runner, write, data, words):
    line = error(runner, "--from", write("f.yaml", data), "--params", "7e9")
    assert line.startswith("f.yaml: ") and words in line and line.endswith(NOT_MODELLED), line


@pytest.mark.parametrize(("config", "words"), [
    (AUTOSP, "sequence_parallel_size: 2 with compile.passes autosp (DeepCompile's AutoSP"),
])
def test_a_deepspeed_config_asking_for_compiled_sequence_parallelism_is_refused(runner, write, tmp_path, config, words):
    (tmp_path / "ds.json").write_text(config.read_text())
    for command in ("estimate", "check"):
        line = error(runner, "--from", write("sft.yaml", {**LF, "deepspeed": "ds.json"}), command=command)
        line = line.removeprefix("sft.yaml: ")  # check names the plan too
        assert line.startswith(f"ds.json: {words}") and line.endswith(NOT_MODELLED), line


def test_a_deepspeed_config_with_autotp_is_a_tensor_parallel_mesh(runner, write, tmp_path):
    import json

    (tmp_path / "ds.json").write_text(AUTOTP.read_text())
    res = runner.invoke(app, ["estimate", "--from", write("sft.yaml", {**LF, "deepspeed": "ds.json"}), "--gpus", "8",
                              "-f", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["mesh"]["describe"] == "tp 2 x pp 1 x cp 1 x dp 4 = 8 GPUs"


def test_accelerate_refuses_plugin_keys_beside_a_config_file(runner, write):
    data = {"distributed_type": "DEEPSPEED", "mixed_precision": "bf16",
            "deepspeed_config": {"deepspeed_config_file": "ds.json", "zero_stage": 2}}  # fmt: skip
    assert error(runner, "--from", write("acc.yaml", data), "--params", "7e9") == (
        "acc.yaml: deepspeed_config.zero_stage, mixed_precision: Accelerate refuses these beside "
        "deepspeed_config.deepspeed_config_file; set them in the DeepSpeed config")


@pytest.mark.parametrize(("data", "words"), [
    ({**LF, "cutoff_len": "2048"}, "f.yaml: cutoff_len: expected a whole number, got '2048'"),
    ({**AXOLOTL, "micro_batch_size": 0}, "f.yaml: micro_batch_size: must be >= 1, got 0"),
    ({**ACCELERATE, "deepspeed_config": {"zero_stage": 4}}, "f.yaml: deepspeed_config.zero_stage: expected 0 or 1 or 2 or 3, got 4"),
])  # fmt: skip
def test_the_keys_zeroplan_uses_are_typed_strictly(runner, write, data, words):
    assert error(runner, "--from", write("f.yaml", data), "--params", "7e9") == words


def test_a_file_that_is_not_a_mapping_or_not_there(runner, write):
    assert error(runner, "--from", write("list.yaml", ["a"])) == "list.yaml: expected a mapping of keys to values, got list"  # type: ignore[arg-type]
    assert error(runner, "--from", "nope.yaml") == "nope.yaml: no such file"


def test_the_readers_are_pure_functions_of_the_mapping():
    from zeroplan.frameworks.llamafactory import read_llamafactory

    run = read_llamafactory(LF, "sft.yaml")
    assert run.get("micro_batch").value == "2" and run.get("model").value == "meta-llama/Llama-3.1-8B"
    assert read_llamafactory({**LF, "finetuning_type": "lora"}, "sft.yaml").get("lora_rank").value == "8"
    with pytest.raises(SpecError, match="finetuning_type: oft"):
        read_llamafactory({**LF, "finetuning_type": "oft"}, "sft.yaml")


# --- check and advise ------------------------------------------------------------------------------------------------


def test_check_from_a_file_refuses_a_batch_its_deepspeed_config_contradicts(runner, write, tmp_path):
    ds = json.loads(DS_Z3.read_text())
    (tmp_path / "ds.json").write_text(json.dumps({**ds, "train_micro_batch_size_per_gpu": 3}))
    path = write("a.yaml", {**LF, "deepspeed": "ds.json"})
    assert error(runner, "--from", path, command="check") == "a.yaml: training.train_micro_batch_size_per_gpu is 2 but ds.json gives 3"


def test_check_takes_plans_or_a_from_file(runner, write):
    path = write("a.yaml", LF)
    assert error(runner, "plan.yaml", "--from", path, command="check", code=2) == "give plan files or --from, not both"


def test_advise_from_a_file_takes_its_global_batch(runner, write):
    res = runner.invoke(app, ["advise", "--from", write("a.yaml", LF), "--gpus", "4", "-f", "json"])
    assert res.exit_code == 0, res.output
    assumptions = json.loads(res.stdout)["assumptions"]
    assert ("global batch 32 = micro-batch 2 x accumulation 4 x 4 GPUs, from the file (--global-batch overrides it)"
            in assumptions)
