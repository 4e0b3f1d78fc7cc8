"""Hugging Face `"auto"` values in a DeepSpeed config, filled the way transformers fills them.

Source: `transformers/integrations/deepspeed.py`, `HfTrainerDeepSpeedConfig`:
`trainer_config_process` fills the batch keys and fp16/bf16.enabled from TrainingArguments;
`trainer_config_finalize` fills the hidden-size keys (the stage-3 ones only for ZeRO-3) from the
model config's `hidden_size` (or max of `hidden_sizes`). Any other `"auto"` is left in place, and
DeepSpeed's config models drop `"auto"` values before validating (`DeepSpeedConfigModel.__init__`,
non-strict), so the key takes DeepSpeed's default. Reference: huggingface/transformers
`src/transformers/integrations/deepspeed.py`; DeepSpeed v0.19.6 `deepspeed/runtime/config_utils.py`.

Pure: no I/O.
"""

from __future__ import annotations

from pydantic import Field

from zeroplan.frozen import Frozen
from zeroplan.memory.setup import Precision, TrainingSetup

HF_PREFETCH_FRACTION = 0.9  # stage3_prefetch_bucket_size = int(0.9 h^2); older transformers passed the float
HF_PERSISTENCE_PER_HIDDEN = 10  # stage3_param_persistence_threshold = 10 h
HIDDEN_SIZE_KEYS = ("reduce_bucket_size", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold")
STAGE3_ONLY_KEYS = ("stage3_prefetch_bucket_size", "stage3_param_persistence_threshold")


class AutoValue(Frozen):
    """One `"auto"` in the config and the value zeroplan assumed for it."""

    key: str = Field(description="dotted key path")
    value: int | bool | str | None = Field(description="value assumed (a device name for offload); None = treated as not given")
    resolved: bool = Field(description="filled as Hugging Face would; False = a fallback zeroplan chose")
    how: str = Field(description="where the value comes from, one line")


def deepspeed_default(key: str, default: int | bool | str | None) -> AutoValue:
    """A key Hugging Face does not fill: DeepSpeed drops the "auto" and uses its default."""
    how = "Hugging Face does not fill this key; DeepSpeed drops 'auto' and uses its default"
    return AutoValue(key=key, value=default, resolved=False, how=how)


def hidden_size_auto(key: str, hidden_size: int | None, zero3: bool, default: int) -> AutoValue:
    """reduce_bucket_size = h^2; with ZeRO-3 also stage3_prefetch_bucket_size = int(0.9 h^2), stage3_param_persistence_threshold = 10 h."""
    path = f"zero_optimization.{key}"
    if key in STAGE3_ONLY_KEYS and not zero3:
        return deepspeed_default(path, default)
    h = hidden_size
    if h is None:
        return AutoValue(key=path, value=default, resolved=False, how="needs the model's hidden size; DeepSpeed's default assumed")
    value, how = {
        "reduce_bucket_size": (h * h, f"transformers: hidden_size^2 = {h}^2"),
        "stage3_prefetch_bucket_size": (int(HF_PREFETCH_FRACTION * h * h), f"transformers: int(0.9 * {h}^2)"),
        "stage3_param_persistence_threshold": (HF_PERSISTENCE_PER_HIDDEN * h, f"transformers: 10 * {h}"),
    }[key]
    return AutoValue(key=path, value=value, resolved=True, how=how)


def batch_auto(key: str, setup: TrainingSetup | None, dp_world: int | None) -> AutoValue:
    """train_micro_batch_size_per_gpu = per-device batch, gradient_accumulation_steps = accumulation, train_batch_size = world x both."""
    if setup is None or (key == "train_batch_size" and dp_world is None):
        how = "needs the training setup and data-parallel size; treated as not given"
        return AutoValue(key=key, value=None, resolved=False, how=how)
    if key == "train_micro_batch_size_per_gpu":
        return AutoValue(key=key, value=setup.micro_batch, resolved=True, how="training setup micro_batch")
    if key == "gradient_accumulation_steps":
        return AutoValue(key=key, value=setup.grad_accum, resolved=True, how="training setup grad_accum")
    value = dp_world * setup.micro_batch * setup.grad_accum
    how = f"dp_world * micro_batch * grad_accum = {dp_world} * {setup.micro_batch} * {setup.grad_accum}"
    return AutoValue(key=key, value=value, resolved=True, how=how)


def precision_auto(section: str, setup: TrainingSetup | None) -> AutoValue:
    """fp16.enabled = args.fp16, bf16.enabled = args.bf16: here, the training setup's precision."""
    key = f"{section}.enabled"
    if setup is None:
        how = "needs the training precision; DeepSpeed's default false assumed"
        return AutoValue(key=key, value=False, resolved=False, how=how)
    wanted = (Precision.fp16_mixed,) if section == "fp16" else (Precision.bf16_mixed, Precision.bf16_true)
    return AutoValue(key=key, value=setup.precision in wanted, resolved=True, how=f"training precision {setup.precision.value}")
