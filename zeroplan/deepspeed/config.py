"""What a DeepSpeed config says, as data: `DeepSpeedConfig` (built by dsconfig.parse_ds_config) and its derived views.

Pure: no I/O, no rich/typer/yaml.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from zeroplan.deepspeed.auto import AutoValue
from zeroplan.deepspeed.batch import BATCH_KEYS, BatchTriple, derive_batch
from zeroplan.deepspeed.keys import DeprecatedKey, UnknownKey
from zeroplan.deepspeed.removed import RemovedKey
from zeroplan.frozen import Frozen
from zeroplan.memory.setup import DeepSpeedKnobs, Precision, ZeroStage

DType = Literal["fp16", "bf16", "fp32"]


class DeepSpeedConfig(Frozen):
    """What a DeepSpeed config says, after `"auto"` resolution. Batch values are None when not given."""

    origin: str
    stage: ZeroStage
    fp16_enabled: bool
    bf16_enabled: bool
    bf16_section: Literal["bf16", "bfloat16"] = "bf16"
    bf16_master_weights_and_grads: bool = False
    bf16_optimizer_states: bool = False
    train_batch_size: int | None = None
    train_micro_batch_size_per_gpu: int | None = None
    gradient_accumulation_steps: int | None = None
    optimizer_type: str | None = Field(None, description="optimizer.type as written (None: client optimizer)")
    communication_data_type: DType | None = None
    grad_accum_dtype: DType | None = None
    knobs: DeepSpeedKnobs
    knob_keys: dict[str, str] = Field(default_factory=dict, description=(
        "DeepSpeedKnobs field -> the zero_optimization key that gives it, as spelled (a number, or an \"auto\" "
        "in `autos`); absent: DeepSpeed's default"))  # fmt: skip
    offload_optimizer_ratio: float = Field(1.0, ge=0.0, le=1.0)
    autos: tuple[AutoValue, ...] = ()
    unknown_keys: tuple[UnknownKey, ...] = ()
    removed_keys: tuple[RemovedKey, ...] = ()
    deprecated_keys: tuple[DeprecatedKey, ...] = ()
    duplicate_keys: tuple[tuple[str, int], ...] = ()
    has_comments: bool = False
    key_lines: dict[str, int] = Field(default_factory=dict)
    pipeline_stages: int = Field(1, ge=1, description="pipeline.stages read as PipelineEngine's stages (1: none)")
    pipeline_notes: tuple[str, ...] = ()  # what reading the pipeline block assumed (deepspeed.parallel)

    @property
    def model_dtype(self) -> DType:
        """16-bit dtype of parameters and gradients; DeepSpeed defaults to fp32 when neither is enabled."""
        return "fp16" if self.fp16_enabled else "bf16" if self.bf16_enabled else "fp32"

    @property
    def precision(self) -> Precision:
        """The byte recipe's precision. bf16 master weights plus bf16 optimizer states is pure bf16."""
        if self.fp16_enabled:
            return Precision.fp16_mixed
        if self.bf16_enabled:
            pure = self.bf16_master_weights_and_grads and self.bf16_optimizer_states
            return Precision.bf16_true if pure else Precision.bf16_mixed
        return Precision.fp32

    @property
    def effective_communication_data_type(self) -> DType:
        """engine.py communication_data_type: the configured one, else fp16, bf16 or fp32 as enabled."""
        return self.communication_data_type or self.model_dtype

    @property
    def effective_grad_accum_dtype(self) -> DType:
        return self.grad_accum_dtype or self.model_dtype

    def line_of(self, key: str | None) -> int | None:
        return self.key_lines.get(key) if key else None

    def batch(self, dp_world: int) -> BatchTriple | None:
        """The batch DeepSpeed runs on dp_world ranks, missing values derived by its rule (dsbatch.derive_batch).

        None while a batch `"auto"` is still open, or when neither train_batch_size nor the micro-batch is given.
        """
        if any(auto.key in BATCH_KEYS and auto.value is None for auto in self.autos):
            return None
        return derive_batch(self.train_batch_size, self.train_micro_batch_size_per_gpu,
                            self.gradient_accumulation_steps, dp_world)  # fmt: skip

    @property
    def precision_left_open(self) -> bool:
        """Whether the trainer chooses the precision: an fp16/bf16 "auto" not resolved yet, and no section
        enabled as written (an unresolved "auto" reads as false, so an enabled section is the file's)."""
        keys = {f"{section}.enabled" for section in ("fp16", "bf16", "bfloat16")}
        unresolved = any(auto.key in keys and not auto.resolved for auto in self.autos)
        return unresolved and not (self.fp16_enabled or self.bf16_enabled)

    def setup_fields(self, dp_world: int | None = None) -> dict[str, object]:
        """The TrainingSetup fields this config pins; precision unless the trainer chooses it (precision_left_open).

        No fp16/bf16 section pins fp32, DeepSpeed's default. With dp_world, the micro-batch and accumulation
        DeepSpeed derives count as pinned too (unless they floor to 0: the batch-identity rule reports that).
        """
        fields: dict[str, object] = {}
        if not self.precision_left_open:
            fields["precision"] = self.precision
        derived = self.batch(dp_world) if dp_world else None
        if derived is not None and derived.micro_batch > 0 and derived.grad_acc > 0:
            fields.update(micro_batch=derived.micro_batch, grad_accum=derived.grad_acc)
        if self.train_micro_batch_size_per_gpu is not None:
            fields.setdefault("micro_batch", self.train_micro_batch_size_per_gpu)
        if self.gradient_accumulation_steps is not None:
            fields.setdefault("grad_accum", self.gradient_accumulation_steps)
        fields["fp32_grad_accum"] = self.effective_grad_accum_dtype == "fp32" and self.model_dtype != "fp32"
        return fields
