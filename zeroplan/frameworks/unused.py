"""The keys of a `--from` file that zeroplan did not use, each with why: none is dropped without a word.

A key that changes the training step's memory is either taken (frameworks/<kind>.py) or refused there in one line;
what is left here is the data, schedule, logging, saving, evaluation and hub keys (no effect on the step's memory),
and keys zeroplan does not know, listed apart as read by no rule of zeroplan's (the output says so). Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from zeroplan.frameworks.run import FrameworkRun

# Keys that set what data is read, when the learning rate moves, what is logged, saved or evaluated, where the run
# is published: none of them changes a tensor the training step holds (an upper bound for packing: every sequence
# is sized at the maximum length already).
NO_MEMORY = re.compile(
    r"^(dataset|datasets|data|max_samples|train_dataset|eval_dataset|val_|validation|test_|template|chat_template|system|eos_token|"
    r"pad_token|tokenizer|tokenizer_type|special_tokens|max_prompt|max_new_tokens|packing|pad_to|sample_packing|"
    r"padding|truncation|streaming|shuffle|seed|data_seed|learning_rate|lr|min_lr|lr_|warmup|weight_decay|adam_|"
    r"max_grad_norm|clip_grad|num_train_epochs|epochs|max_steps|steps|logging|log_|report_to|wandb|run_name|metric|"
    r"save|output_dir|overwrite_output_dir|checkpoint|resume|push_to_hub|hub_|eval|do_eval|do_train|do_predict|"
    r"per_device_eval_batch_size|batch_size_val|profil|job|comm|metrics|ddp_timeout|dataloader|preprocessing|"
    r"overwrite_cache|cache_dir|model_revision|trust_remote_code|model_author|model_name|split_dataset_ratio|"
    r"load_from_cache_file|plot_loss|trainer|strict|device$|seed|max_steps_per_epoch|gradient_checkpointing_kwargs|"
    r"use_reentrant|include_|remove_unused_columns|label_names|average_tokens|torch_empty_cache|ENV|experimental|"
    r"fault_tolerance|debug|lr_scheduler|validation|optimizer|memory_estimation|float8|mx|ft|dump_folder|description|"
    r"hf_assets_path|output|bf16_full_eval|fp16_full_eval|tf32|max_seq_length|compute_environment|machine_rank|"
    r"main_training_function|rdzv_backend|same_network|tpu_|gpu_ids|main_process|enable_cpu_affinity|debug|"
    r"downcast_bf16|dynamo_config|image_|video_|audio_|freeze_vision|freeze_multi_modal|"
    # a preference loss's coefficients and variant, once the trainer is read (frameworks/trl.py, llamafactory.py)
    r"beta$|pref_beta|pref_ftx|pref_bco_weight|loss_type|loss_weights|label_smoothing|dpo_label_smoothing|ld_alpha|"
    r"rpo_alpha|simpo_gamma|cpo_alpha|f_divergence_type|f_alpha_divergence_coef|use_weighting|discopop_tau|"
    r"sync_ref_model|ref_model_mixup_alpha|ref_model_sync_steps)",
    re.IGNORECASE,
)


def unused_keys(run: FrameworkRun, data: Mapping, known: frozenset[str] = frozenset()) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the keys with no effect on memory, the keys zeroplan does not know) of `data` that `run` did not take; `known`:
    the keys the reader checks (a key it checks and does not take changes nothing in this run: a feature off, a
    value that matters only beside another key)."""
    used = {taken.key.split(".", 1)[0] for taken in run.taken}
    names = []
    for key, value in data.items():
        if key in used:
            continue
        if isinstance(value, Mapping) and run.kind.value == "torchtitan":  # a TOML section: its own keys
            names += [f"{key}.{sub}" for sub in value if f"{key}.{sub}" not in {t.key for t in run.taken}]
        else:
            names.append(str(key))
    harmless = tuple(n for n in names if n in known or NO_MEMORY.match(n) or NO_MEMORY.match(n.split(".", 1)[-1]))
    return harmless, tuple(n for n in names if n not in harmless)
