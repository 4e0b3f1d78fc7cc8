"""Hugging Face `"auto"` values in a DeepSpeed config, filled the way transformers fills them.

Source: `transformers/integrations/deepspeed.py`, `HfTrainerDeepSpeedConfig`:
`trainer_config_process` fills the batch keys and fp16/bf16.enabled from TrainingArguments;
`trainer_config_finalize` fills the hidden-size keys (the stage-3 ones only for ZeRO-3) from the
model config's `hidden_size` (or max of `hidden_sizes`). Any other `"auto"` is left in place, and
DeepSpeed's config models drop `"auto"` values before validating (`DeepSpeedConfigModel.__init__`,
non-strict), so the key takes DeepSpeed's default. Reference: huggingface/transformers
`src/transformers/integrations/deepspeed.py`; DeepSpeed v0.19.8 `deepspeed/runtime/config_utils.py`.

A config that leaves its precision to the trainer ("auto") and has no section for the precision the run
uses gets one from Accelerate, which HF Trainer runs on: `DeepSpeedPlugin.set_mixed_precision`
(accelerate/utils/dataclasses.py) adds `"bf16": {"enabled": true}` for mixed precision bf16 and
`"fp16": {"enabled": true, "auto_cast": true}` for fp16 when the section is missing (`added_section`).

The setup values an "auto" takes may be zeroplan's defaults rather than anything the user stated; the
caller names those (`assumed`), and the AutoValue says so.

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
    added: bool = Field(False, description="not in the file at all: the section Accelerate adds (added_section)")

    @property
    def message(self) -> str:
        """One line: the key, what zeroplan assumed for it and why."""
        value = "unset" if self.value is None else str(self.value).lower()
        if self.added:
            return f"{self.key} is not in the config: assumed {value} ({self.how})"
        state = "resolved" if self.resolved else "not resolved"
        return f'{self.key} is "auto", {state}: assumed {value} ({self.how})'


DEFAULT_NOTE = "zeroplan's default, as nothing states it"


def _from_setup(what: str, field: str, assumed: frozenset[str]) -> str:
    """'training setup micro_batch', marked when that setup value is zeroplan's default, not the user's."""
    return f"{what}: {DEFAULT_NOTE}" if field in assumed else what


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


def batch_auto(key: str, setup: TrainingSetup | None, dp_world: int | None,
               assumed: frozenset[str] = frozenset()) -> AutoValue:  # fmt: skip
    """train_micro_batch_size_per_gpu = per-device batch, gradient_accumulation_steps = accumulation, train_batch_size = world x both."""
    if setup is None or (key == "train_batch_size" and dp_world is None):
        how = "needs the training setup and data-parallel size; treated as not given"
        return AutoValue(key=key, value=None, resolved=False, how=how)
    if key == "train_micro_batch_size_per_gpu":
        how = _from_setup("training setup micro_batch", "micro_batch", assumed)
        return AutoValue(key=key, value=setup.micro_batch, resolved=True, how=how)
    if key == "gradient_accumulation_steps":
        how = _from_setup("training setup grad_accum", "grad_accum", assumed)
        return AutoValue(key=key, value=setup.grad_accum, resolved=True, how=how)
    value = dp_world * setup.micro_batch * setup.grad_accum
    how = f"dp_world * micro_batch * grad_accum = {dp_world} * {setup.micro_batch} * {setup.grad_accum}"
    if defaults := sorted(assumed & {"micro_batch", "grad_accum"}):
        how += f"; {' and '.join(defaults)}: {DEFAULT_NOTE}"
    return AutoValue(key=key, value=value, resolved=True, how=how)


# The section each training precision needs enabled: what Accelerate's mixed_precision means for DeepSpeed.
PRECISION_SECTION = {Precision.fp16_mixed: "fp16", Precision.bf16_mixed: "bf16", Precision.bf16_true: "bf16"}


def precision_auto(section: str, setup: TrainingSetup | None, assumed: frozenset[str] = frozenset()) -> AutoValue:
    """fp16.enabled = args.fp16, bf16.enabled = args.bf16: here, the training setup's precision."""
    key = f"{section}.enabled"
    if setup is None:
        how = "needs the training precision; DeepSpeed's default false assumed"
        return AutoValue(key=key, value=False, resolved=False, how=how)
    how = _from_setup(f"training precision {setup.precision.value}", "precision", assumed)
    return AutoValue(key=key, value=PRECISION_SECTION.get(setup.precision) == section, resolved=True, how=how)


def added_section(section: str, setup: TrainingSetup, assumed: frozenset[str] = frozenset()) -> AutoValue | None:
    """The `section` Accelerate adds when the run's precision needs it and the config has none; else None.

    Called only for a config that leaves its precision to the trainer (an fp16/bf16 "auto"): one that states
    it gets no section added that DeepSpeed would act on differently.
    """
    if PRECISION_SECTION.get(setup.precision) != section:
        return None
    how = _from_setup(f"training precision {setup.precision.value}", "precision", assumed)
    how += f"; Accelerate's DeepSpeedPlugin.set_mixed_precision adds {section} {{\"enabled\": true}} when it is missing"
    return AutoValue(key=f"{section}.enabled", value=True, resolved=True, how=how, added=True)
