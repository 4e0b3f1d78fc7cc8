"""Issue 25 item 2's readers: torchtune's qlora_* builders, ms-swift's rlhf_type, TRL's KTO config and
LLaMA-Factory's use_asft_loss, each read as the options it means or refused in one line naming the value."""

import json

import pytest
import yaml

from zeroplan.cli.app import app

LLAMA = ("--model", "llama-3.1-8b")


@pytest.fixture
def write(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def write(name: str, data: dict) -> str:
        (tmp_path / name).write_text(yaml.safe_dump(data), encoding="utf-8")
        return name

    return write


def estimate(runner, *args: str):
    res = runner.invoke(app, ["estimate", *args, "-f", "json"])
    assert "Traceback" not in res.output and (res.exception is None or isinstance(res.exception, SystemExit))
    return res


def peak(runner, *args: str) -> int:
    res = estimate(runner, *args)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["stages"][0]["gpu_bytes"]["total"]


def test_torchtune_qlora_builder_is_the_lora_builder_on_a_torchao_nf4_base(runner, write):
    model = {"lora_attn_modules": ["q_proj", "v_proj", "output_proj"], "apply_lora_to_mlp": True, "lora_rank": 8}
    tt = {"tokenizer": {"max_seq_len": 2048}, "batch_size": 2, "dtype": "bf16"}
    qlora = write("q.yaml", {**tt, "model": {"_component_": "torchtune.models.llama3_1.qlora_llama3_1_8b", **model}})
    lora = write("l.yaml", {**tt, "model": {"_component_": "torchtune.models.llama3_1.lora_llama3_1_8b", **model}})
    read = json.loads(estimate(runner, "--from", qlora).stdout)
    assert read["finetune"]["mode"] == "QLoRA"
    # the same run as the lora file with the options the reader names
    assert peak(runner, "--from", qlora) == peak(runner, "--from", lora, "--qlora", "--qlora-stack", "torchtune")
    assert peak(runner, "--from", qlora) < peak(runner, "--from", lora)


SWIFT = {"model": "Qwen/Qwen2.5-7B-Instruct", "tuner_type": "full", "per_device_train_batch_size": 2,
         "max_length": 2048, "deepspeed": "zero3"}


@pytest.mark.parametrize(("rlhf", "expected"), [("dpo", "dpo"), ("kto", "kto"), ("orpo", "orpo"), ("simpo", "simpo"),
                                                ("cpo", "simpo")])
def test_ms_swift_rlhf_type_is_read_as_the_post_training(runner, write, rlhf, expected):
    res = estimate(runner, "--from", write("s.yaml", {**SWIFT, "rlhf_type": rlhf}), "--model", "qwen2.5-7b")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["setup"]["post_training"] == expected


@pytest.mark.parametrize(("keys", "said"), [
    ({"rlhf_type": "gkd"}, "rlhf_type: gkd (ms-swift's GKDTrainer"),
    ({"rlhf_type": "grpo"}, "rlhf_type: grpo (GRPO"),
    ({"rlhf_type": "rm"}, "rlhf_type: rm (reward-model training"),
    ({"rlhf_type": "dpo", "ref_model": "Qwen/Qwen2.5-7B"}, "ref_model: Qwen/Qwen2.5-7B (a reference model other"),
])
def test_ms_swift_rlhf_not_modelled_is_one_line_naming_the_value(runner, write, keys, said):
    res = estimate(runner, "--from", write("s.yaml", {**SWIFT, **keys}), "--model", "qwen2.5-7b")
    assert res.exit_code == 1 and len(res.stderr.strip().splitlines()) == 1 and said in res.stderr


def test_ms_swift_precomputed_reference_log_probs_are_refused(runner, write):
    """TRL's DPOConfig field, which ms-swift passes on (a TRL marker too: the kind is named)."""
    path = write("s.yaml", {**SWIFT, "rlhf_type": "dpo", "precompute_ref_log_probs": True})
    res = estimate(runner, "--from", path, "--from-kind", "swift", "--model", "qwen2.5-7b")
    assert res.exit_code == 1 and "precompute_ref_log_probs: true (the reference log-probs" in res.stderr


TRL_GKD = {"model_name_or_path": "meta-llama/Llama-3.1-8B", "teacher_model_name_or_path": "meta-llama/Llama-3.1-70B",
           "per_device_train_batch_size": 1, "max_length": 1024, "lmbda": 0.0, "beta": 0.5}


def test_trl_gkd_off_policy_is_kd_with_the_files_teacher(runner, write):
    res = estimate(runner, "--from", write("g.yaml", TRL_GKD), "--model", "llama-3.1-8b", "--from-kind", "trl")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["setup"]["post_training"] == "kd"
    assert any("teacher llama-3.1-70b" in a for a in data["assumptions"])


@pytest.mark.parametrize(("keys", "said"), [
    ({"lmbda": 0.5}, "lmbda: 0.5 (GKD's on-policy generation"),
    ({"lmbda": None}, "lmbda: 0.5 (GKD's on-policy generation"),  # left out: GKDConfig's default
    ({"seq_kd": True}, "seq_kd: true (GKD's sequence-level"),
    ({"beta": 0.0}, "beta: 0.0 (GKD with a plain KL"),
    ({"teacher_model_name_or_path": None}, "GKD without a teacher named in the file"),
])
def test_trl_gkd_not_modelled_is_one_line(runner, write, keys, said):
    data = {k: v for k, v in {**TRL_GKD, **keys}.items() if v is not None}
    res = estimate(runner, "--from", write("g.yaml", data), "--model", "llama-3.1-8b", "--from-kind", "trl")
    assert res.exit_code == 1 and len(res.stderr.strip().splitlines()) == 1 and said in res.stderr


LF_ASFT = {"model_name_or_path": "meta-llama/Llama-3.1-8B", "stage": "sft", "do_train": True, "finetuning_type": "full",
           "use_asft_loss": True, "cutoff_len": 1024, "per_device_train_batch_size": 2, "bf16": True}


def test_llamafactory_asft_is_the_asft_post_training(runner, write):
    res = estimate(runner, "--from", write("lf.yaml", LF_ASFT), *LLAMA)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["setup"]["post_training"] == "asft"
    assert peak(runner, "--from", write("lf2.yaml", LF_ASFT), *LLAMA) == peak(
        runner, "--from", write("sft.yaml", {**LF_ASFT, "use_asft_loss": False}), *LLAMA, "--post-training", "asft")


@pytest.mark.parametrize(("keys", "said"), [
    ({"finetuning_type": "lora"}, "use_asft_loss: true (under lora: create_ref_model makes no reference"),
    ({"ref_model": "other/model"}, "ref_model: other/model (ASFT's reference model other"),
])
def test_llamafactory_asft_not_modelled_is_one_line(runner, write, keys, said):
    res = estimate(runner, "--from", write("lf.yaml", {**LF_ASFT, **keys}), *LLAMA)
    assert res.exit_code == 1 and said in res.stderr


def test_axolotl_kto_is_read_as_kto(runner, write):
    data = {"base_model": "meta-llama/Llama-3.1-8B", "rl": "kto", "sequence_len": 1024, "micro_batch_size": 2,
            "bf16": True, "datasets": [{"path": "x", "type": "llama3.ultra"}]}
    res = estimate(runner, "--from", write("ax.yaml", data), *LLAMA)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["setup"]["post_training"] == "kto"
