"""DeepSpeed's config key vocabulary: which keys exist, which are deprecated, close matches for typos.

Key sets are DeepSpeed v0.19.8's (the PyPI release; docs/deepspeed.md says what changed): the
pydantic models of `zero_optimization` (`deepspeed/runtime/zero/config.py`, field names and their
`stage3_*` aliases, both accepted since `populate_by_name=True`), the offload sections
(`runtime/zero/offload_config.py`), the precision sections (`runtime/precision_config.py`) and `compile`
(`deepspeed/compile/config.py`). Those models set `extra="forbid"`, so an unknown key in them is a
validation error. The top level is a plain dict read with `.get`: an unknown top-level key is silently
ignored. The top-level set is every key `DeepSpeedConfig._initialize_params` (`runtime/config.py`) and
the section readers it calls look up. The blocks 0.19.8 removed and refuses are in deepspeed/removed.py,
not here.

Pure: no I/O.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from pydantic import Field

from zeroplan.deepspeed.removed import REMOVED_TOP_LEVEL_KEYS, REMOVED_ZERO_KEYS
from zeroplan.frozen import Frozen

TOP_LEVEL_KEYS = frozenset({
    # batch (config.py get_train_batch_size & co.)
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
    "managed_gradient_accumulation",
    # optimizer, scheduler, clipping
    "optimizer", "scheduler", "gradient_clipping", "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer",
    # precision
    "fp16", "bf16", "bfloat16", "torch_autocast", "data_types",
    # communication
    "communication_data_type", "seq_parallel_communication_data_type", "gradient_allreduce_op",
    "prescale_gradients", "gradient_predivide_factor", "disable_allgather",
    # ZeRO and memory
    "zero_optimization", "aio", "activation_checkpointing", "memory_breakdown",
    # parallelism
    "pipeline", "tensor_parallel", "expert_parallel", "hybrid_engine", "sequence_parallel_size",
    "data_parallel_size", "use_data_before_expert_parallelism",
    # logging, monitoring, profiling
    "steps_per_print", "wall_clock_breakdown", "dump_state", "log_level", "flops_profiler", "comms_logger",
    "tensorboard", "wandb", "csv_monitor", "comet", "timers",
    # tuning, checkpointing
    "autotuning", "checkpoint", "datastates_ckpt",
    # data efficiency, quantization, compiler, misc
    "data_efficiency", "weight_quantization", "compile", "dataloader_drop_last", "disable_python_gc",
    "vocabulary_size",
    # legacy: read only with the boolean zero_optimization format
    "allgather_size",
})  # fmt: skip

# DeepSpeedZeroConfig field names, then the aliases they accept.
ZERO_KEYS = frozenset({
    "stage", "contiguous_gradients", "reduce_scatter", "reduce_bucket_size", "use_multi_rank_bucket_allreduce",
    "allgather_partitions", "allgather_bucket_size", "overlap_comm", "load_from_fp32_weights",
    "compute_grad_norm", "elastic_checkpoint", "offload_param", "offload_optimizer", "zenflow", "sub_group_size",
    "cpu_offload_param", "cpu_offload_use_pin_memory", "cpu_offload",
    "prefetch_bucket_size", "param_persistence_threshold", "model_persistence_threshold",
    "max_live_parameters", "max_reuse_distance", "gather_16bit_weights_on_model_save",
    "module_granularity_threshold", "use_all_reduce_for_fetch_params", "allgather_sequential",
    "stage3_gather_fp16_weights_on_model_save", "ignore_unused_parameters", "legacy_stage1",
    "round_robin_gradients", "parameter_alignment", "zero_hpz_partition_size", "zero_quantized_weights",
    "zero_quantized_nontrainable_weights", "zero_quantized_gradients", "memory_efficient_linear",
    "pipeline_loading_checkpoint", "override_module_apply", "log_trace_cache_warnings",
    "enable_sanity_checks", "save_muon_momentum_buffer_in_memory", "leaf_module",
    # aliases
    "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold", "stage3_model_persistence_threshold",
    "stage3_max_live_parameters", "stage3_max_reuse_distance", "stage3_gather_16bit_weights_on_model_save",
    "stage3_module_granularity_threshold", "stage3_use_all_reduce_for_fetch_params", "stage3_allgather_sequential",
})  # fmt: skip

OFFLOAD_PARAM_KEYS = frozenset({"device", "nvme_path", "buffer_count", "buffer_size", "max_in_cpu", "pin_memory"})
OFFLOAD_OPTIMIZER_KEYS = frozenset({
    "device", "nvme_path", "buffer_count", "pin_memory", "pipeline_read", "pipeline_write", "fast_init",
    "ratio", "super_offload", "cpuadam_cores_perc",
})  # fmt: skip
FP16_KEYS = frozenset({
    "enabled", "auto_cast", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
    "consecutive_hysteresis", "min_loss_scale", "fp16_master_weights_and_grads",
})  # fmt: skip
BF16_KEYS = frozenset({
    "enabled", "immediate_grad_update", "check_grad_overflow", "bf16_master_weights_and_grads", "bf16_optimizer_states",
})  # fmt: skip
# CompileConfig (deepspeed/compile/config.py); `enabled`, `backend`, `kwargs` (and never `disable`) were the
# pre-0.15 schema's, refused now.
COMPILE_KEYS = frozenset({
    "deepcompile", "autoep_non_moe", "free_activation", "free_activation_threshold", "offload_activation",
    "offload_activation_pin_memory", "offload_opt_states", "double_buffer", "symmetric_memory", "debug_log",
    "offload_parameters", "sync_before_reduce", "sync_after_reduce", "sync_before_allgather",
    "sync_after_allgather", "keep_int_input_tensors", "keep_all_input_tensors", "passes",
})  # fmt: skip

# Sections DeepSpeed validates with extra="forbid": dotted path -> the keys it accepts.
FORBID_SECTIONS: dict[str, frozenset[str]] = {
    "zero_optimization": ZERO_KEYS,
    "zero_optimization.offload_param": OFFLOAD_PARAM_KEYS,
    "zero_optimization.offload_optimizer": OFFLOAD_OPTIMIZER_KEYS,
    "fp16": FP16_KEYS,
    "bf16": BF16_KEYS,
    "bfloat16": BF16_KEYS,
    "compile": COMPILE_KEYS,
}

# Deprecated zero_optimization keys (json_schema_extra deprecated=True in zero/config.py) -> replacement.
ZERO_DEPRECATED = {
    "cpu_offload": "offload_optimizer",
    "cpu_offload_param": "offload_param",
    "cpu_offload_use_pin_memory": "offload_optimizer.pin_memory / offload_param.pin_memory",
    "stage3_gather_fp16_weights_on_model_save": "stage3_gather_16bit_weights_on_model_save",
}
# The replacement's spellings: giving the deprecated key with one of these fails DeepSpeed's assert
# "Cannot provide deprecated parameter '...' and replacing parameter '...' together".
ZERO_REPLACEMENT_SPELLINGS = {
    "cpu_offload": ("offload_optimizer",),
    "cpu_offload_param": ("offload_param",),
    "stage3_gather_fp16_weights_on_model_save": (
        "gather_16bit_weights_on_model_save",
        "stage3_gather_16bit_weights_on_model_save",
    ),
}


class UnknownKey(Frozen):
    """A key DeepSpeed does not know, with a close match when there is one."""

    key: str = Field(description="dotted path, e.g. zero_optimization.stage3_max_live_params")
    suggestion: str | None = Field(None, description="dotted path of the likely intended key")
    forbidden: bool = Field(description="inside a section DeepSpeed validates with extra='forbid': a hard error")
    value_is_auto: bool = Field(False, description="DeepSpeed drops 'auto' values before validating")

    @property
    def message(self) -> str:
        """What DeepSpeed does with it, in one line: the same words in `check` and in `estimate`'s warnings."""
        hint = f"; did you mean {self.suggestion}?" if self.suggestion else ""
        if not self.forbidden:
            return f"unknown top-level key {self.key}: DeepSpeed ignores it silently{hint}"
        section = self.key.rsplit(".", 1)[0]
        if self.value_is_auto:
            return (f"unknown key {self.key}: {section} forbids extra keys, but DeepSpeed drops \"auto\" values "
                    f"before validating, so this one passes and does nothing{hint}")  # fmt: skip
        return f"unknown key {self.key}: DeepSpeed validates {section} with extra keys forbidden and fails{hint}"


def duplicate_key_message(key: str, first_line: int | None) -> str:
    """A key given twice in one object: DeepSpeed's loader refuses it, json.load keeps the last value."""
    first = f" (first on line {first_line})" if first_line else ""
    return (f"duplicate key {key}{first}: DeepSpeed raises 'Duplicate keys in DeepSpeed config'; "
            "json.load (Hugging Face) silently keeps the last one")  # fmt: skip


class DeprecatedKey(Frozen):
    """A deprecated spelling DeepSpeed still maps, warns about, or refuses next to its replacement."""

    key: str
    replacement: str
    conflict: bool = Field(False, description="given together with its replacement: DeepSpeed asserts")
    note: str | None = Field(None, description="what DeepSpeed does with it, when that is not plain mapping")


def suggest(key: str, known: frozenset[str]) -> str | None:
    """The closest known key (difflib ratio >= 0.6), or None."""
    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
    return close[0] if close else None


def is_comment_key(key: str) -> bool:
    """`_comment`, `_note`, `comments`: a note for the reader, which no known key is meant by."""
    return key.startswith("_") or "comment" in key.lower()


def _suggestion(key: str, section: str, known: frozenset[str]) -> str | None:
    prefix = f"{section}." if section else ""
    if is_comment_key(key):
        return None
    if not section and key in ZERO_KEYS:
        return f"zero_optimization.{key}"  # a ZeRO knob written at the top level
    if section == "zero_optimization" and key in TOP_LEVEL_KEYS:
        return key  # a top-level key written inside zero_optimization
    close = suggest(key, known)
    return f"{prefix}{close}" if close else None


def find_unknown_keys(data: Mapping) -> tuple[UnknownKey, ...]:
    """Unknown keys at the top level (ignored by DeepSpeed) and inside the sections it validates (errors).

    The removed blocks (deepspeed/removed.py) are not unknown: DeepSpeed names them when it refuses them.
    """
    found = [
        UnknownKey(key=key, suggestion=_suggestion(key, "", TOP_LEVEL_KEYS), forbidden=False)
        for key in data
        if key not in TOP_LEVEL_KEYS and key not in REMOVED_TOP_LEVEL_KEYS
    ]
    for section, known in FORBID_SECTIONS.items():
        body = _section(data, section)
        removed = REMOVED_ZERO_KEYS if section == "zero_optimization" else {}
        for key, value in body.items():
            if key not in known and key not in removed:
                found.append(
                    UnknownKey(
                        key=f"{section}.{key}",
                        suggestion=_suggestion(key, section, known),
                        forbidden=True,
                        value_is_auto=value == "auto",
                    )
                )
    return tuple(found)


def _section(data: Mapping, dotted: str) -> Mapping:
    node: object = data
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else {}


def find_deprecated_keys(data: Mapping) -> tuple[DeprecatedKey, ...]:
    """Deprecated spellings (zero/config.py deprecated fields, the boolean ZeRO format, 'bfloat16')."""
    found = []
    zero = data.get("zero_optimization")
    if isinstance(zero, bool):
        found.append(DeprecatedKey(key="zero_optimization", replacement='"zero_optimization": {"stage": N}',
                                   note=f"read as stage {int(zero)}"))  # fmt: skip
    if "allgather_size" in data:
        note = None if isinstance(zero, bool) else "read only with the boolean zero_optimization format; ignored here"
        found.append(DeprecatedKey(key="allgather_size", replacement="zero_optimization.allgather_bucket_size", note=note))
    if "bfloat16" in data:
        ignored = "bf16 is also given, so DeepSpeed ignores this section" if data.get("bf16") is not None else None
        found.append(DeprecatedKey(key="bfloat16", replacement="bf16", note=ignored))
    if isinstance(zero, Mapping):
        for old, new in ZERO_DEPRECATED.items():
            if old in zero:
                conflict = any(spelling in zero for spelling in ZERO_REPLACEMENT_SPELLINGS.get(old, ()))
                found.append(DeprecatedKey(key=f"zero_optimization.{old}", replacement=f"zero_optimization.{new}",
                                           conflict=conflict))  # fmt: skip
        if zero.get("elastic_checkpoint") is True and zero.get("stage") == 3:
            found.append(DeprecatedKey(key="zero_optimization.elastic_checkpoint",
                                       replacement="Universal Checkpointing (checkpoint.load_universal)",
                                       note="ZeRO-3 elastic checkpointing is no longer supported"))  # fmt: skip
    return tuple(found)
