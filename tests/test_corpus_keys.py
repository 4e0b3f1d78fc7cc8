"""Keys the fresh corpus (tests/data/corpus) found dropped or misread, each now modelled, said or refused by name:
LLaMA-Factory's memory-changing switches, its reweighted losses and v1 trainer, torchtune's QAT quantizer and its Llama
3.x builders, axolotl's QAT."""

import json

import pytest

from zeroplan.cli.app import app

LF = {"model_name_or_path": "meta-llama/Llama-3.1-8B", "stage": "sft", "finetuning_type": "full", "cutoff_len": 1024,
      "per_device_train_batch_size": 2, "bf16": True, "template": "llama3"}  # fmt: skip
V1 = {"model": "Qwen/Qwen3-8B", "micro_batch_size": 1, "cutoff_len": 2048, "dist_config": {"name": "fsdp2"}}


def run(runner, tmp_path, data: dict, *args: str):
    path = tmp_path / "train.yaml"
    path.write_text(json.dumps(data))  # JSON is YAML
    return runner.invoke(app, ["estimate", "--from", str(path), *args, "-f", "json"])


@pytest.mark.parametrize(("key", "value", "words"), [
    ("use_kt", True, "KTransformers"), ("use_unsloth_gc", True, "offloaded to the CPU"),
    ("mixture_of_depths", "convert", "Mixture-of-Depths"), ("upcast_lmhead_output", True, "fp32"),
    ("use_mca", True, "Megatron-Core"),
])  # fmt: skip
def test_a_llamafactory_switch_that_changes_memory_is_refused_by_name(runner, tmp_path, key, value, words):
    res = run(runner, tmp_path, {**LF, key: value})
    line = res.stderr.strip()
    assert res.exit_code == 1 and len(line.splitlines()) == 1
    assert f"{key}: {str(value).lower()} (" in line and words in line and line.endswith("is not modelled yet")


def test_a_switch_left_false_is_no_unknown_key(runner, tmp_path):
    res = run(runner, tmp_path, {**LF, "use_kt": False, "use_unsloth": False})
    unknown = [a for a in json.loads(res.stdout)["assumptions"] if "does not know" in a]
    assert not any("use_kt" in a or "use_unsloth" in a for a in unknown)


@pytest.mark.parametrize("key", ["use_dft_loss", "use_eaft_loss"])
def test_a_reweighted_cross_entropy_is_read_as_the_trainers_loss_and_said(runner, tmp_path, key):
    data = json.loads(run(runner, tmp_path, {**LF, key: True}).stdout)
    assert data["setup"]["loss"] == "hf"
    assert any(f"{key}: true -> " in a and "--loss hf" in a for a in data["assumptions"])


def test_llamafactory_v1_kernels_are_savings_not_counted(runner, tmp_path):
    data = json.loads(run(runner, tmp_path, {**LF, "use_v1_kernels": True}).stdout)
    assert any("use_v1_kernels: true" in a for a in data["assumptions"] if "not modelled" in a or "upper bound" in a)


@pytest.mark.parametrize(("keys", "expected"), [({"pref_beta": 0.1}, "dpo"), ({"pref_loss": "simpo"}, "simpo"),
                                                ({"train_dataset": "data/v1_sft_demo.yaml"}, "sft")])
def test_llamafactory_v1_reads_the_dpo_trainer_by_its_keys(runner, tmp_path, keys, expected):
    data = json.loads(run(runner, tmp_path, {**V1, **keys}, "--model", "qwen3-8b").stdout)
    assert data["setup"]["post_training"] == expected


def test_llamafactory_v1_preference_data_without_its_keys_asks_for_the_trainer(runner, tmp_path):
    res = run(runner, tmp_path, {**V1, "train_dataset": "data/v1_dpo_demo.yaml"}, "--model", "qwen3-8b")
    assert res.exit_code == 1 and "train_dataset: data/v1_dpo_demo.yaml: the trainer is the command's" in res.stderr
    data = json.loads(run(runner, tmp_path, {**V1, "train_dataset": "data/v1_dpo_demo.yaml"}, "--model", "qwen3-8b",
                          "--post-training", "dpo").stdout)
    assert data["setup"]["post_training"] == "dpo"


def test_torchtune_qat_and_axolotl_qat_are_refused_by_name(runner, tmp_path):
    tune = {"model": {"_component_": "torchtune.models.llama3_3.llama3_3_70b"}, "tokenizer": {"max_seq_len": 2048},
            "quantizer": {"_component_": "torchtune.training.quantization.Int8DynActInt4WeightQATQuantizer"}}
    line = run(runner, tmp_path, tune).stderr
    assert "quantizer._component_: torchtune.training.quantization.Int8DynActInt4WeightQATQuantizer (quantization" in line
    axo = {"base_model": "meta-llama/Llama-3.1-8B", "sequence_len": 1024, "qat": {"group_size": 256}}
    assert "qat: (set) (quantization-aware training" in run(runner, tmp_path, axo).stderr


@pytest.mark.parametrize(("builder", "preset"), [("llama3_3_70b", "llama-3.1-70b"), ("lora_llama3_8b", "llama-3.1-8b")])
def test_torchtune_llama3_builders_of_llama31_shapes(runner, tmp_path, builder, preset):
    tune = {"model": {"_component_": f"torchtune.models.llama3.{builder}", "lora_attn_modules": ["q_proj"], "lora_rank": 8},
            "tokenizer": {"max_seq_len": 2048}}
    if not builder.startswith("lora_"):
        del tune["model"]["lora_attn_modules"]
    assert json.loads(run(runner, tmp_path, tune).stdout)["model"]["name"] == preset


def _ds(tmp_path, data: dict, name: str = "ds_config.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2}, **data}))
    return str(path)


@pytest.mark.parametrize(("optimizer", "recipe"), [
    ({"type": "AdamW"}, "adamw"), ({"type": "Lion", "params": {"lr": 1e-4}}, "lion"),
    ({"type": "SGD", "params": {"momentum": 0.9}}, "sgd-momentum"), ({"type": "SGD"}, "sgd"),
])  # fmt: skip
def test_a_deepspeed_optimizer_block_sets_the_recipe(runner, tmp_path, optimizer, recipe):
    res = runner.invoke(app, ["estimate", "--deepspeed-config", _ds(tmp_path, {"optimizer": optimizer}),
                              "--model", "llama-3.1-8b", "-f", "json"])
    assert json.loads(res.stdout)["setup"]["optimizer"] == recipe


def test_a_deepspeed_optimizer_without_a_recipe_is_refused_unless_one_is_typed(runner, tmp_path):
    path = _ds(tmp_path, {"optimizer": {"type": "OneBitAdam"}})
    res = runner.invoke(app, ["estimate", "--deepspeed-config", path, "--model", "llama-3.1-8b"])
    assert res.exit_code == 1 and "optimizer.type: OneBitAdam (1-bit Adam" in res.stderr
    typed = runner.invoke(app, ["estimate", "--deepspeed-config", path, "--model", "llama-3.1-8b", "--optimizer",
                                "adamw", "-f", "json"])
    assert typed.exit_code == 0 and json.loads(typed.stdout)["setup"]["optimizer"] == "adamw"


def test_zenflow_is_refused_by_name(runner, tmp_path):
    zero = {"stage": 2, "offload_optimizer": {"device": "cpu"}, "zenflow": {"topk_ratio": 0.1}}
    res = runner.invoke(app, ["estimate", "--deepspeed-config", _ds(tmp_path, {"zero_optimization": zero}),
                              "--model", "llama-3.1-8b"])
    assert res.exit_code == 1 and "zero_optimization.zenflow: (set) (ZenFlow" in res.stderr


def test_a_ds_config_given_as_from_is_read_as_deepspeed_config(runner, tmp_path):
    path = _ds(tmp_path, {"bf16": {"enabled": True}})
    by_from = runner.invoke(app, ["estimate", "--from", path, "--model", "llama-3.1-8b", "-f", "json"])
    by_option = runner.invoke(app, ["estimate", "--deepspeed-config", path, "--model", "llama-3.1-8b", "-f", "json"])
    assert by_from.exit_code == 0 and json.loads(by_from.stdout)["stages"] == json.loads(by_option.stdout)["stages"]
    two = runner.invoke(app, ["estimate", "--from", path, "--deepspeed-config", _ds(tmp_path, {}, "other.json"),
                              "--model", "llama-3.1-8b"])
    assert two.exit_code == 2 and "one DeepSpeed config per run" in two.stderr


LIT = {"checkpoint_dir": "checkpoints/meta-llama/Meta-Llama-3.1-8B", "precision": "bf16-true", "devices": 1,
       "lora_r": 16, "lora_mlp": True, "train": {"global_batch_size": 16, "micro_batch_size": 2, "max_seq_length": 1024}}


def test_a_litgpt_finetune_config_is_read_by_its_own_keys(runner, tmp_path):
    data = json.loads(run(runner, tmp_path, LIT).stdout)
    assert (data["model"]["name"], data["engine"], data["setup"]["micro_batch"], data["setup"]["grad_accum"],
            data["setup"]["seq_len"], data["setup"]["training_loop"]) == ("llama-3.1-8b", "none", 2, 8, 1024, "litgpt")
    assert data["finetune"]["mode"] == "LoRA" and data["finetune"]["lora_rank"] == 16


@pytest.mark.parametrize(("keys", "words"), [
    ({"devices": 2, "quantize": "bnb.nf4"}, "quantize: bnb.nf4 (with more than one GPU"),
    ({"precision": "16-true"}, "precision: 16-true (litgpt precisions read"),
    ({"model_name": "tiny-llama-1.1b"}, "model_name: tiny-llama-1.1b (a litgpt pretrain config)"),
    ({"train": {"global_batch_size": 2, "micro_batch_size": 4, "max_seq_length": 512}}, "train.global_batch_size: 2"),
])  # fmt: skip
def test_what_litgpt_refuses_or_zeroplan_does_not_model_is_one_line(runner, tmp_path, keys, words):
    res = run(runner, tmp_path, {**LIT, **keys})
    assert res.exit_code == 1 and len(res.stderr.strip().splitlines()) == 1 and words in res.stderr


def test_litgpt_on_several_gpus_shards_as_its_scripts_do(runner, tmp_path):
    lora = json.loads(run(runner, tmp_path, {**LIT, "devices": 4}).stdout)
    full = {k: v for k, v in LIT.items() if not k.startswith("lora_")}
    full = json.loads(run(runner, tmp_path, {**full, "devices": 4, "num_nodes": 2}).stdout)
    assert (lora["engine"], lora["setup"]["checkpointing"], lora["setup"]["grad_accum"]) == ("fsdp2", "full", 2)
    assert (full["engine"], full["parallelism"]["gpus"], full["setup"]["grad_accum"]) == ("fsdp", 8, 1)


def test_a_verl_config_is_named_in_its_refusal(runner, tmp_path):
    res = run(runner, tmp_path, {"actor_rollout_ref": {"model": {"path": "Qwen/Qwen3-8B"}}, "data": {}})
    assert res.exit_code == 1 and "a verl config (actor_rollout_ref): zeroplan does not read its files" in res.stderr


def test_an_open_instruct_config_is_named_not_taken_for_trl_or_llamafactory(runner, tmp_path):
    data = {"model_name_or_path": "meta-llama/Llama-2-7b-hf", "use_qlora": True, "use_lora": True, "lora_rank": 64,
            "max_seq_length": 4096, "preprocessing_num_workers": 16, "dataset_name": "allenai/tulu-v2-sft-mixture"}
    res = run(runner, tmp_path, data)
    assert res.exit_code == 1 and "an open-instruct config (use_qlora, use_lora)" in res.stderr


def test_a_ds_config_is_told_by_its_keys_whatever_its_suffix(runner, tmp_path):
    path = tmp_path / "stage3.conf"
    path.write_text(json.dumps({"zero_optimization": {"stage": 3}, "bf16": {"enabled": True}}))
    data = json.loads(runner.invoke(app, ["estimate", "--from", str(path), "--model", "llama-3.1-8b", "-f", "json"]).stdout)
    assert (data["engine"], data["stages"][0]["stage"]) == ("deepspeed", 3)


@pytest.mark.parametrize(("pattern", "count"), [
    (r"model.language_model.layers.[\d]+.(mlp|self_attn).(up|down|gate|q|k|v|o)_proj", 224),  # a VLM's naming
    (r"model.layers.[\d]+.self_attn.(q|v)_proj", 64),  # the causal LM's
    (r".*\.layers\.(3|7)\.self_attn\.(q|k|v|o)_proj", 8),  # some layers only
])  # fmt: skip
def test_an_axolotl_regex_target_adapts_the_linears_it_fullmatches(runner, tmp_path, pattern, count):
    axo = {"base_model": "meta-llama/Llama-3.1-8B", "sequence_len": 1024, "adapter": "lora", "lora_r": 8,
           "lora_target_modules": pattern}
    res = run(runner, tmp_path, axo)
    assert res.exit_code == 0, res.output
    assert any(f"on {count} linears" in a for a in json.loads(res.stdout)["assumptions"])


def test_an_axolotl_regex_that_matches_nothing_is_one_line(runner, tmp_path):
    axo = {"base_model": "meta-llama/Llama-3.1-8B", "sequence_len": 1024, "adapter": "lora", "lora_r": 8,
           "lora_target_modules": r"model.text_model.layers.[\d]+.self_attn.q_proj"}
    res = run(runner, tmp_path, axo)
    assert res.exit_code == 1 and "matches no linear of the model (peft's re.fullmatch" in res.stderr


def test_axolotl_dp_shard_size_is_the_world_and_torch_compile_is_refused(runner, tmp_path):
    axo = {"base_model": "meta-llama/Llama-3.1-8B", "sequence_len": 1024, "fsdp_version": 2,
           "fsdp_config": {"reshard_after_forward": True}, "dp_shard_size": 16}
    assert json.loads(run(runner, tmp_path, axo).stdout)["parallelism"]["gpus"] == 16
    res = run(runner, tmp_path, {**axo, "torch_compile": True})
    assert res.exit_code == 1 and "torch_compile: true (torch.compile's activation memory)" in res.stderr


def test_axolotl_unfrozen_parameters_of_a_vlm_name_the_language_model(runner, tmp_path):
    axo = {"base_model": "meta-llama/Llama-3.1-8B", "sequence_len": 1024,
           "unfrozen_parameters": ["model.language_model.embed_tokens.*"]}
    data = json.loads(run(runner, tmp_path, axo).stdout)
    assert data["model"]["num_trainable_params"] == 128256 * 4096  # Llama-3.1-8B's input embedding


@pytest.mark.parametrize(("keys", "words"), [
    ({"tensor_parallel_dim": 2}, "tensor_parallel_dim: 2 (tensor parallelism)"),
    ({"reward_functions": [{"_component_": "x"}]}, "reward_functions: (set) (GRPO"),
    ({"ac_mode": "selective", "ac_option": "op"}, "ac_mode: selective (with ac_option op"),
])  # fmt: skip
def test_torchtune_keys_that_change_the_step_are_refused(runner, tmp_path, keys, words):
    tune = {"model": {"_component_": "torchtune.models.llama3_1.llama3_1_8b"}, "tokenizer": {"max_seq_len": 2048}}
    res = run(runner, tmp_path, {**tune, **keys})
    assert res.exit_code == 1 and words in res.stderr


def test_torchtune_dev_selective_checkpointing_every_nth_layer(runner, tmp_path):
    tune = {"model": {"_component_": "torchtune.models.llama3_1.llama3_1_8b"}, "tokenizer": {"max_seq_len": 2048},
            "enable_activation_checkpointing": False, "ac_mode": "selective", "ac_option": 2}
    setup = json.loads(run(runner, tmp_path, tune).stdout)["setup"]
    assert (setup["checkpointing"], setup["checkpoint_every"]) == ("full", 2)


def test_litgpt_never_ties_its_head_so_a_tied_model_is_refused(runner, tmp_path):
    res = run(runner, tmp_path, {**LIT, "checkpoint_dir": "checkpoints/google/gemma-2-9b"})
    assert res.exit_code == 1 and "ties its output head to the embedding, which litgpt does not" in res.stderr


def test_torchtune_and_torchtitan_compile_each_block(runner, tmp_path):
    tune = {"model": {"_component_": "torchtune.models.llama3_1.llama3_1_8b"}, "tokenizer": {"max_seq_len": 2048},
            "enable_activation_checkpointing": True, "compile": True}
    assert json.loads(run(runner, tmp_path, tune).stdout)["setup"]["compile"] is True
    res = run(runner, tmp_path, {**tune, "compile": {"model": True, "optimizer_step": True}})
    assert res.exit_code == 1 and "compile.optimizer_step: true (a compiled optimizer step)" in res.stderr
