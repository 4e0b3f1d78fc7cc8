"""The kinds --from reads beyond Accelerate, LLaMA-Factory and axolotl (TRL, ms-swift, torchtune, torchtitan), two files
of one run, every key accounted for, and the issue-25 findings: each a reading or one line naming the key."""

import json

import pytest
import yaml

from zeroplan.cli.app import app
from zeroplan.errors import SpecError
from zeroplan.frameworks.kinds import FromKind
from zeroplan.frameworks.recognise import recognise

LLAMA = ("--model", "llama-3.1-8b")
TRL_SFT = {"model_name_or_path": "meta-llama/Llama-3.1-8B", "dataset_name": "trl-lib/Capybara", "max_length": 4096,
           "per_device_train_batch_size": 2, "learning_rate": 2e-5, "bf16": True}  # fmt: skip


@pytest.fixture
def write(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def write(name: str, data: dict | str) -> str:
        (tmp_path / name).write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
        return name

    return write


def run(runner, *args: str):
    res = runner.invoke(app, ["estimate", *args, "-f", "json"])
    assert "Traceback" not in res.output and (res.exception is None or isinstance(res.exception, SystemExit))
    return res


def reading(runner, *args: str) -> dict:
    res = run(runner, *args)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def refusal(runner, *args: str) -> str:
    res = run(runner, *args)
    lines = res.stderr.strip().splitlines()
    assert res.exit_code == 1 and len(lines) == 1, res.output
    return lines[0].removeprefix("error: ")


@pytest.mark.parametrize(("data", "kind"), [
    (TRL_SFT, FromKind.trl), ({"model": "Qwen/Qwen2.5-7B-Instruct", "tuner_type": "lora"}, FromKind.swift),
    ({"model": {"_component_": "torchtune.models.llama3_1.lora_llama3_1_8b"}}, FromKind.torchtune),
    ({"model_name_or_path": "x/y", "finetuning_type": "full"}, FromKind.llamafactory),
])  # fmt: skip
def test_a_kind_is_told_by_keys_only_its_tool_writes(data, kind):
    assert recognise(data, "f.yaml") is kind


def test_keys_tools_share_name_the_candidates():
    with pytest.raises(SpecError, match=r"f.yaml: only keys several tools write \(model_name_or_path, "
                                        r"per_device_train_batch_size, bf16\), none that only one writes: TRL or "
                                        r"LLaMA-Factory or ms-swift or axolotl\? pass --from-kind trl\|llamafactory\|swift\|axolotl"):
        recognise({"model_name_or_path": "x/y", "per_device_train_batch_size": 2, "bf16": True}, "f.yaml")


def test_a_trl_recipe_is_read_as_trl_not_llamafactory(runner, write):
    data = reading(runner, "--from", write("sft.yaml", TRL_SFT))
    assert data["setup"]["seq_len"] == 4096 and data["setup"]["micro_batch"] == 2
    assert data["finetune"] is None or data["finetune"]["mode"] == "full"  # no LLaMA-Factory default LoRA
    assert data["setup"]["checkpointing"] == "full"  # TRL's configs checkpoint by default
    assert data["setup"]["precision"] == "bf16-mixed"  # fp32 parameters (ModelConfig.dtype) under bf16 autocast


def test_trl_qlora_keys_are_taken(runner, write):
    qlora = {**TRL_SFT, "use_peft": True, "lora_r": 16, "load_in_4bit": True, "lora_target_modules": ["q_proj", "v_proj"],
             "torch_dtype": "bfloat16"}  # fmt: skip
    data = reading(runner, "--from", write("q.yaml", qlora))
    assert data["finetune"]["mode"] == "QLoRA" and data["finetune"]["lora_rank"] == 16
    assert data["setup"]["precision"] == "bf16-true"  # bf16-loaded parameters under DDP


def test_a_preference_recipe_that_does_not_name_its_trainer_asks_for_it_naming_its_key(runner, write):
    line = refusal(runner, "--from", write("dpo.yaml", {**TRL_SFT, "beta": 0.01}), *LLAMA)
    assert line.startswith("dpo.yaml: beta: 0.01: a key DPOConfig, ORPOConfig and CPOConfig share") and line.endswith(
        "give --post-training dpo|orpo|simpo")


@pytest.mark.parametrize("trainer", ["dpo", "orpo", "simpo"])
def test_the_command_line_names_the_trainer_a_shared_preference_key_leaves_open(runner, write, trainer):
    data = reading(runner, "--from", write("dpo.yaml", {**TRL_SFT, "beta": 0.01}), "--post-training", trainer, *LLAMA)
    assert data["setup"]["post_training"] == trainer


@pytest.mark.parametrize(("keys", "expected"), [
    ({"beta": 0.1, "ld_alpha": 0.5}, "dpo"),  # DPOConfig's own key
    ({"beta": 0.1, "loss_type": ["sigmoid", "apo_zero"]}, "dpo"),  # a loss only DPOConfig declares
    ({"beta": 0.1, "loss_type": "simpo", "cpo_alpha": 0.0}, "simpo"),  # CPOConfig: no reference model
    ({"beta": 0.1, "desirable_weight": 1.0}, "kto"),  # KTOConfig: unpaired rows, the KL batch (memory.reference)
])
def test_a_trl_preference_recipe_is_read_by_its_trainers_own_keys(runner, write, keys, expected):
    data = reading(runner, "--from", write("pref.yaml", {**TRL_SFT, **keys}), "--from-kind", "trl", *LLAMA)
    assert data["setup"]["post_training"] == expected


@pytest.mark.parametrize(("keys", "said"), [
    ({"beta": 0.1, "precompute_ref_log_probs": True}, "precompute_ref_log_probs: true (the reference log-probs"),
    ({"desirable_weight": 1.0, "precompute_ref_log_probs": True}, "precompute_ref_log_probs: true (the reference"),
    ({"ld_alpha": 0.5, "use_liger_kernel": True}, "use_liger_kernel: true (beside a preference or distillation"),
])
def test_what_a_trl_preference_recipe_asks_beyond_the_model_is_refused(runner, write, keys, said):
    assert said in refusal(runner, "--from", write("pref.yaml", {**TRL_SFT, **keys}), "--from-kind", "trl", *LLAMA)


LF_DPO = {"model_name_or_path": "meta-llama/Llama-3.1-8B", "stage": "dpo", "do_train": True, "finetuning_type": "full",
          "pref_beta": 0.1, "cutoff_len": 1024, "per_device_train_batch_size": 1, "bf16": True}


@pytest.mark.parametrize(("loss", "expected"), [("sigmoid", "dpo"), ("orpo", "orpo"), ("simpo", "simpo"), ("ipo", "dpo")])
def test_llamafactory_dpo_stage_is_read_with_its_pref_loss(runner, write, loss, expected):
    data = reading(runner, "--from", write("lf.yaml", {**LF_DPO, "pref_loss": loss}), *LLAMA)
    assert data["setup"]["post_training"] == expected


def test_llamafactory_reference_model_of_its_own_is_refused(runner, write):
    line = refusal(runner, "--from", write("lf.yaml", {**LF_DPO, "ref_model": "other/model"}), *LLAMA)
    assert "ref_model: other/model (a reference model other than the policy's base" in line


def test_ms_swift_reads_its_deepspeed_preset(runner, write):
    data = reading(runner, "--from", write("swift.yaml", {"model": "Qwen/Qwen2.5-7B-Instruct", "tuner_type": "lora",
                                                             "lora_rank": 8, "target_modules": "all-linear",
                                                             "max_length": 2048, "deepspeed": "zero2"}), *LLAMA)  # fmt: skip
    assert (data["engine"], data["stages"][0]["stage"], data["finetune"]["mode"]) == ("deepspeed", 2, "LoRA")


def test_a_length_the_file_leaves_to_the_dataset_asks_for_seq_len(runner, write):
    path = write("tt.yaml", {"model": {"_component_": "torchtune.models.llama3_1.llama3_1_8b"}, "tokenizer": {"max_seq_len": None}})
    assert refusal(runner, "--from", path) == ("tt.yaml: tokenizer.max_seq_len: null: the dataset's longest sequence; "
                                               "give --seq-len")
    assert reading(runner, "--from", path, "--seq-len", "2048")["setup"]["precision"] == "bf16-true"


def test_torchtitan_toml_is_read_not_called_invalid_yaml(runner, write):
    path = write("llama3_8b.toml", '[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 1\n'
                                   'seq_len = 8192\n[activation_checkpoint]\nmode = "full"\n')
    data = reading(runner, "--from", path)
    assert (data["model"]["name"], data["engine"], data["setup"]["seq_len"], data["setup"]["checkpointing"]) == (
        "llama-3.1-8b", "fsdp2", 8192, "full")
    mesh = write("tp.toml", '[model]\nname = "llama3"\nflavor = "8B"\n[parallelism]\ntensor_parallel_degree = 8\n')
    assert "parallelism.tensor_parallel_degree: 8 (tensor parallelism) is not modelled yet" in refusal(runner, "--from", mesh)


def test_a_training_file_and_its_launcher_together(runner, write):
    launcher = write("zero3.yaml", {"distributed_type": "DEEPSPEED", "num_processes": 16, "num_machines": 2,
                                    "deepspeed_config": {"zero_stage": 3}})  # fmt: skip
    data = reading(runner, "--from", write("sft.yaml", {**TRL_SFT, "torch_dtype": "bfloat16"}), "--from", launcher, *LLAMA)
    assert (data["engine"], data["stages"][0]["stage"], data["parallelism"]["gpus"]) == ("deepspeed", 3, 16)
    assert data["setup"]["precision"] == "bf16-mixed"  # DeepSpeed keeps fp32 masters of the bf16-loaded parameters
    assert any("(overridden by zero3.yaml: distributed_type)" in a for a in data["assumptions"])


def test_two_launchers_that_disagree_are_one_line(runner, write):
    a = write("a.yaml", {"distributed_type": "MULTI_GPU", "num_processes": 8})
    b = write("b.yaml", {"distributed_type": "MULTI_GPU", "num_processes": 4})
    assert refusal(runner, "--from", a, "--from", b, *LLAMA) == (
        "a.yaml: num_processes: 8 and b.yaml: num_processes: 4 disagree; give one, or the option on the command line")


def test_every_key_is_accounted_for(runner, write):
    data = reading(runner, "--from", write("sft.yaml", {**TRL_SFT, "warmup_ratio": 0.1, "my_flag": True}), *LLAMA)
    notes = data["assumptions"]
    assert any(n.startswith("sft.yaml: keys not used, no effect on the step's memory") and "learning_rate" in n
               and "warmup_ratio" in n for n in notes)  # fmt: skip
    assert any(n.startswith("sft.yaml: keys zeroplan does not know, not used") and n.endswith(": my_flag") for n in notes)


def test_accelerate_without_mixed_precision_is_fp32_and_says_so(runner, write):
    data = reading(runner, "--from", write("acc.yaml", {"distributed_type": "MULTI_GPU", "num_processes": 8}), *LLAMA)
    assert data["setup"]["precision"] == "fp32"
    assert any(a.startswith("acc.yaml: mixed_precision not set, Accelerate's default no -> --precision fp32") for a in data["assumptions"])


def test_accelerate_no_without_num_processes_runs_on_one_gpu(runner, write):
    data = reading(runner, "--from", write("one.yaml", {"distributed_type": "NO", "mixed_precision": "bf16"}), *LLAMA)
    assert data["parallelism"]["gpus"] == 1


def test_axolotl_top_level_fsdp_version_is_said_as_written(runner, write):
    path = write("ax.yaml", {"base_model": "meta-llama/Llama-3.1-8B", "fsdp_version": 2, "fsdp_config": {"reshard_after_forward": True}})
    data = reading(runner, "--from", path)
    assert any(a.startswith("ax.yaml: fsdp_version: 2 -> --engine fsdp2") for a in data["assumptions"])


@pytest.mark.parametrize(("data", "words"), [
    ({"base_model": "x/y", "expert_parallel_size": 4}, "expert_parallel_size: 4 (expert parallelism"),
    ({"model_name_or_path": "x/y", "finetuning_type": "lora", "use_asft_loss": True}, "use_asft_loss: true (under lora"),
    ({"model_name_or_path": "x/y", "finetuning_type": "full", "tensor_model_parallel_size": 4},
     "tensor_model_parallel_size: 4: LLaMA-Factory's Megatron-Core backend is not read from the file"),
])  # fmt: skip
def test_what_changes_memory_and_is_not_modelled_is_one_line(runner, write, data, words):
    assert words in refusal(runner, "--from", write("f.yaml", data), *LLAMA)


def test_llamafactory_v1_freeze_is_read_not_pointed_at_adapter_config(runner, write):
    path = write("v1.yaml", {"model": "meta-llama/Llama-3.1-8B", "peft_config": {"name": "freeze", "freeze_trainable_layers": 2},
                             "dist_config": {"name": "fsdp2"}})  # fmt: skip
    assert reading(runner, "--from", path)["finetune"]["mode"] == "frozen parts"


def test_a_quantized_checkpoint_is_refused_not_counted_as_bf16(runner, tmp_path):
    folder = tmp_path / "Qwen3-8B-GPTQ"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 100,
        "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128}}))  # fmt: skip
    line = refusal(runner, "--model", str(folder / "config.json"))
    assert line.endswith("config.json: quantization_config: quant_method gptq (GPTQ: int32-packed 4-bit qweight, qzeros, "
                         "fp16 scales, g_idx) is a pre-quantized checkpoint, whose stored bytes zeroplan does not count "
                         "here; it is not counted as bf16 either: give the unquantized model's config.json")


def test_toml_without_tomllib_is_one_line(runner, write, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tomllib", None)  # as on Python 3.10, whose standard library has no tomllib
    path = write("job.toml", '[model]\nname = "llama3"\n')
    assert refusal(runner, "--from", path) == "job.toml: reading TOML needs Python 3.11 or later (the standard library's tomllib)"


AX = {"base_model": "meta-llama/Llama-3.1-8B", "micro_batch_size": 1, "sequence_len": 1024, "bf16": True}


@pytest.mark.parametrize(("rl", "expected"), [("dpo", "dpo"), ("ipo", "dpo"), ("orpo", "orpo"), ("kto", "kto")])
def test_axolotl_rl_is_read_as_the_preference_trainer(runner, write, rl, expected):
    data = reading(runner, "--from", write("ax.yaml", {**AX, "rl": rl}), *LLAMA)
    assert data["setup"]["post_training"] == expected


@pytest.mark.parametrize(("keys", "said"), [
    ({"rl": "grpo"}, "rl: grpo (preference or RL training"),
    ({"rl": "dpo", "adapter": "lora", "lora_r": 8, "lora_target_linear": True, "rl_adapter_ref_model": True},
     "rl_adapter_ref_model: true (a reference model loaded beside the adapters)"),
])
def test_axolotl_rl_not_modelled_is_refused(runner, write, keys, said):
    assert said in refusal(runner, "--from", write("ax.yaml", {**AX, **keys}), *LLAMA)
