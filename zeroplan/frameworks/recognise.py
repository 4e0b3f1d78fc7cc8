"""Which tool wrote a `--from` file, told by keys only that tool writes; never guessed from keys tools share.

Keys several tools write (`model_name_or_path`, `per_device_train_batch_size`, `bf16`, `lora_r`, `max_length`,
`deepspeed`, `load_in_4bit`, `mixed_precision`...) mark no kind: TRL's TrainingArguments YAML, LLaMA-Factory and
ms-swift all write the Trainer's keys, axolotl and TRL both write `lora_r` and `load_in_4bit`, LLaMA-Factory's
Megatron Bridge example writes `mixed_precision`. A file is read as a kind when keys of that kind alone are there;
with none, or with keys of two kinds, one line names the candidates and `--from-kind`. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from zeroplan.errors import SpecError
from zeroplan.frameworks.kinds import TOOL_NAMES, FromKind

# Keys each tool's own argument classes declare and no other kind's (checked against each tool's source at the
# commits docs/inputs.md names; tests/test_recognise.py holds every corpus file to one kind).
MARKERS: dict[FromKind, tuple[str, ...]] = {
    FromKind.accelerate: ("distributed_type", "compute_environment", "main_training_function", "num_processes",
                          "num_machines", "machine_rank", "rdzv_backend", "same_network", "downcast_bf16",
                          "main_process_ip", "main_process_port", "tpu_env", "tpu_use_cluster", "parallelism_config",
                          "deepspeed_config"),
    FromKind.llamafactory: ("finetuning_type", "cutoff_len", "lora_target", "template", "dataset_dir",
                            "quantization_bit", "disable_gradient_checkpointing", "preprocessing_num_workers",
                            "flash_attn", "use_asft_loss", "pref_beta", "pref_loss", "freeze_trainable_layers",
                            "additional_target", "use_llama_pro", "dist_config", "model_class", "infer_backend",
                            "train_dataset", "kernel_config", "sample_backend"),
    FromKind.axolotl: ("base_model", "sequence_len", "adapter", "lora_target_linear", "datasets", "unfrozen_parameters",
                       "sample_packing", "val_set_size", "wandb_project", "special_tokens", "lora_model_dir",
                       "pad_to_sequence_len", "base_model_config", "tokenizer_type", "micro_batch_size_per_gpu"),
    FromKind.trl: ("use_peft", "dataset_name", "dataset_mixture", "dataset_mixer", "dataset_splits",
                   "dataset_train_split", "dataset_test_split", "dataset_config", "dataset_text_field",
                   "assistant_only_loss", "completion_only_loss", "lora_task_type", "use_bnb_nested_quant",
                   "max_seq_length", "precompute_ref_log_probs", "model_init_kwargs", "dataset_kwargs"),
    FromKind.litgpt: ("checkpoint_dir", "lora_query", "lora_key", "lora_value", "lora_projection", "lora_mlp",
                      "lora_head", "logger_name"),
    FromKind.swift: ("tuner_type", "train_type", "rlhf_type", "split_dataset_ratio", "model_author", "attn_impl",
                     "target_modules", "load_from_cache_file", "external_plugins", "sft_type", "quant_method"),
}  # fmt: skip
_TRAINERS = (FromKind.trl, FromKind.llamafactory, FromKind.swift)
# Keys several tools write: they name the candidates when no key only one tool writes is there.
SHARED: dict[str, tuple[FromKind, ...]] = {
    "model_name_or_path": (FromKind.trl, FromKind.llamafactory), "per_device_train_batch_size": _TRAINERS,
    "gradient_accumulation_steps": (*_TRAINERS, FromKind.axolotl, FromKind.torchtune), "bf16": (*_TRAINERS, FromKind.axolotl),
    "deepspeed": (*_TRAINERS, FromKind.axolotl), "model": (FromKind.llamafactory, FromKind.swift), "lora_r": (FromKind.trl, FromKind.axolotl, FromKind.litgpt),
    "lora_rank": (FromKind.llamafactory, FromKind.swift), "max_length": (FromKind.trl, FromKind.swift),
    "load_in_4bit": (FromKind.trl, FromKind.axolotl), "lora_target_modules": (FromKind.trl, FromKind.axolotl),
    "micro_batch_size": (FromKind.axolotl, FromKind.llamafactory, FromKind.swift), "mixed_precision": (FromKind.accelerate, FromKind.llamafactory),
    "fsdp_config": (FromKind.accelerate, FromKind.trl, FromKind.axolotl), "learning_rate": (*_TRAINERS, FromKind.axolotl),
}  # fmt: skip
# Top-level keys of a DeepSpeed config (deepspeed/keys.py TOP_LEVEL_KEYS) that no training file kind writes: a
# `--from` file holding one is a ds_config.json, read as --deepspeed-config (scenario.from_framework).
DEEPSPEED_ONLY = ("zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size",
                  "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "steps_per_print",
                  "wall_clock_breakdown", "gradient_clipping", "communication_data_type", "prescale_gradients")
COMPONENT = "_component_"  # torchtune's config instantiation key (torchtune/config/_instantiate.py)
FORCE = "pass --from-kind " + "|".join(kind.value for kind in FromKind)


def markers_found(data: Mapping) -> dict[FromKind, list[str]]:
    """Each kind whose own keys the file has, with those keys."""
    found = {kind: [key for key in keys if key in data] for kind, keys in MARKERS.items()}
    components = [key for key, value in data.items() if isinstance(value, Mapping) and COMPONENT in value]
    if components:
        found[FromKind.torchtune] = [f"{key}._component_" for key in components]
    if "deepspeed_config" in found[FromKind.accelerate] and not isinstance(data.get("deepspeed_config"), Mapping):
        found[FromKind.accelerate].remove("deepspeed_config")  # a path is not Accelerate's section
    return {kind: keys for kind, keys in found.items() if keys}


def unread_tool(data: Mapping) -> str | None:
    """The tool a file is for when it is one zeroplan does not read, named by its own keys: verl's trainer configs
    (volcengine/verl@b178a3c: verl/trainer/config/ppo_trainer.yaml actor_rollout_ref, algorithm; sft_trainer_engine.yaml
    trainer.n_gpus_per_node) and any other Hydra config (a `defaults` list); None otherwise."""
    trainer = data.get("trainer")
    if any(k in data for k in ("actor_rollout_ref", "algorithm", "custom_reward_function")) or (
            isinstance(trainer, Mapping) and "n_gpus_per_node" in trainer):
        keys = [k for k in ("actor_rollout_ref", "algorithm", "trainer") if k in data]
        return f"a verl config ({', '.join(keys)})"
    if isinstance(data.get("defaults"), list):
        return "a Hydra config (defaults)"
    # allenai/open-instruct@e6c3044: open_instruct/finetune.py FlatArguments and dpo_tune_cache.py (use_lora, use_qlora,
    # with_tracking, checkpointing_steps...), which share model_name_or_path, max_seq_length and dataset_mixer with
    # TRL's and preprocessing_num_workers with LLaMA-Factory's: named, never read as either
    if own := [k for k in ("use_qlora", "use_lora", "with_tracking", "checkpointing_steps", "use_slow_tokenizer",
                           "dataset_mix_dir", "dataset_mixer_list", "clean_checkpoints_at_end") if k in data]:
        return f"an open-instruct config ({', '.join(own[:3])})"
    return None


def is_deepspeed_config(data: object) -> bool:
    """A mapping with a key only DeepSpeed's config has, and none of a training file kind's own."""
    return isinstance(data, Mapping) and any(k in data for k in DEEPSPEED_ONLY) and not markers_found(data)


def recognise(data: Mapping, origin: str) -> FromKind:
    """The one kind whose own keys the file has; SpecError naming the candidates otherwise."""
    found = markers_found(data)
    if len(found) == 1:
        return next(iter(found))
    if len(found) != 1 and (tool := unread_tool(data)):
        raise SpecError(f"{origin}: {tool}: zeroplan does not read its files; give --model, --gpus, --engine and the "
                        "run's options yourself")
    if not found:
        shared = [key for key in SHARED if key in data]
        kinds = list(dict.fromkeys(kind for key in shared for kind in SHARED[key])) or list(FromKind)
        names = " or ".join(TOOL_NAMES[kind] for kind in kinds)
        keys = f"only keys several tools write ({', '.join(shared[:4])})" if shared else "no key a tool zeroplan reads writes"
        raise SpecError(f"{origin}: {keys}, none that only one writes: {names}? pass --from-kind "
                        + "|".join(kind.value for kind in kinds))
    both = " and ".join(f"{TOOL_NAMES[k]} ({', '.join(keys[:3])})" for k, keys in found.items())
    raise SpecError(f"{origin}: has keys of {both}; pass --from-kind {'|'.join(kind.value for kind in found)}")
