"""A plan: one planned training run, as `zeroplan check` reads it from a YAML file (configs/plans/*.yaml).

Key names follow DeepSpeed where it has one (train_batch_size, train_micro_batch_size_per_gpu,
gradient_accumulation_steps), Hugging Face where it has one (attn_implementation), and zeroplan's CLI
options otherwise (precision, optimizer, seq_len, checkpointing). Schema: docs/checks.md.

Pure: planfiles.py reads the file, resolves the presets and the DeepSpeed config, and builds the Scenario.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, PositiveInt, model_validator

from zeroplan.dsbatch import BATCH_KEYS
from zeroplan.dsconfig import DeepSpeedConfig
from zeroplan.errors import ZeroplanError
from zeroplan.spec import (
    Attention,
    Checkpointing,
    Frozen,
    Optimizer,
    Parallelism,
    Precision,
    Topology,
    TrainingSetup,
    parse_count,
)


def _count(value: Any) -> Any:
    """9e9 in YAML is the string '9e9' (YAML 1.1 wants 9.0e+9): read counts as --params does."""
    if isinstance(value, bool):
        raise ValueError(f"expected a whole number, got {str(value).lower()}")
    if isinstance(value, (str, float)):
        try:
            return parse_count(str(value) if isinstance(value, str) else repr(value), "count")
        except ZeroplanError as exc:
            raise ValueError(str(exc).removeprefix("count ")) from None
    return value


Count = Annotated[PositiveInt, BeforeValidator(_count)]

# Hugging Face `attn_implementation` values; all but eager keep no score matrices (zeroplan's `flash`).
AttnImplementation = Literal["eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention"]


class Training(Frozen):
    """What one step looks like: the plan's counterpart of Hugging Face TrainingArguments."""

    precision: Precision = Precision.bf16_mixed
    optimizer: Optimizer = Optimizer.adamw
    seq_len: Count = Field(2048, description="tokens per sequence")
    train_micro_batch_size_per_gpu: Count = Field(1, description="sequences per GPU per micro-step")
    gradient_accumulation_steps: Count | None = Field(None, description="micro-steps per optimizer step")
    train_batch_size: Count | None = Field(None, description="global batch: micro-batch x accumulation x GPUs")
    checkpointing: Checkpointing = Checkpointing.none
    attn_implementation: AttnImplementation = "sdpa"

    @property
    def attention(self) -> Attention:
        return Attention.eager if self.attn_implementation == "eager" else Attention.flash

    @property
    def states_batch(self) -> bool:
        """Whether the plan says anything about the batch (else the DeepSpeed config's values are taken)."""
        keys = {"train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size"}
        return bool(keys & self.model_fields_set)


class PlanOverheads(Frozen):
    """Overrides of the hardware profile's per-GPU overheads (as --cuda-context-gib, --nccl-gib, --fragmentation)."""

    cuda_context_gib: float | None = Field(None, ge=0, le=1024)
    nccl_gib: float | None = Field(None, ge=0, le=1024)
    fragmentation: float | None = Field(None, ge=0, le=1)


class Plan(Frozen):
    """One planned run: model, hardware, GPUs, training setup and the DeepSpeed config it will use."""

    description: str | None = None
    model: str | None = Field(None, description="preset name, YAML spec or HF config.json path (relative to the plan)")
    params: Count | None = Field(None, description="a bare parameter count instead of model")
    largest_layer: Count | None = Field(None, description="largest layer's parameters (DeepSpeed's definition)")
    hardware: str = Field(description="hardware preset name or YAML path (relative to the plan)")
    gpus: Count = Field(description="total GPUs, the data-parallel degree")
    nodes: Count = 1
    topology: Topology | None = Field(None, description="pcie: the GPUs talk over PCIe even if the preset has NVLink")
    training: Training = Field(default_factory=Training)
    deepspeed: str | dict[str, Any] = Field(description="ds_config.json path (relative to the plan) or an inline block")
    ignore: tuple[str, ...] = Field((), description="rule ids not checked for this plan")
    min_headroom_pct: float | None = Field(None, ge=0, lt=100, description="low-headroom threshold, % of capacity")
    overheads: PlanOverheads = Field(default_factory=PlanOverheads)

    @model_validator(mode="after")
    def _check(self) -> Plan:
        if (self.model is None) == (self.params is None):
            raise ValueError("give either model (a preset or file) or params (a count), not both or neither")
        if self.params is not None and self.largest_layer is not None and self.largest_layer > self.params:
            raise ValueError(f"largest_layer ({self.largest_layer:,}) is larger than params ({self.params:,})")
        Parallelism(gpus=self.gpus, nodes=self.nodes)  # gpus (12) is not a multiple of nodes (5)
        if self.topology is Topology.multinode and self.nodes == 1:
            raise ValueError("topology multinode needs nodes > 1")
        self.grad_accum  # noqa: B018 - raises on a global batch that does not divide
        return self

    @property
    def parallelism(self) -> Parallelism:
        return Parallelism(gpus=self.gpus, nodes=self.nodes)

    @property
    def grad_accum(self) -> int:
        """gradient_accumulation_steps, derived from train_batch_size / (micro-batch x GPUs) when only that is given.

        DeepSpeed's identity: train_batch_size = micro_batch x grad_accum x dp_world (runtime/config.py).
        """
        t = self.training
        micro, gas, total = t.train_micro_batch_size_per_gpu, t.gradient_accumulation_steps, t.train_batch_size
        if total is None:
            return gas or 1
        per_step = micro * self.gpus
        if gas is not None and total != per_step * gas:
            raise ValueError(f"train_batch_size ({total}) != train_micro_batch_size_per_gpu ({micro}) x "
                             f"gradient_accumulation_steps ({gas}) x gpus ({self.gpus}) = {per_step * gas}")  # fmt: skip
        if total % per_step:
            raise ValueError(f"train_batch_size ({total}) is not a whole multiple of train_micro_batch_size_per_gpu "
                             f"x gpus ({micro} x {self.gpus} = {per_step})")  # fmt: skip
        return total // per_step

    @property
    def train_batch_size(self) -> int:
        return self.training.train_micro_batch_size_per_gpu * self.grad_accum * self.gpus

    def setup(self) -> TrainingSetup:
        """The training setup the plan states, with defaults for what it does not."""
        t = self.training
        return TrainingSetup(
            precision=t.precision, optimizer=t.optimizer, seq_len=t.seq_len, micro_batch=t.train_micro_batch_size_per_gpu,
            grad_accum=self.grad_accum, checkpointing=t.checkpointing, attention=t.attention,
        )  # fmt: skip

    def topology_for(self, intra_node_fabric: str | None) -> Topology:
        """nodes > 1: multinode; else pcie when the plan or the hardware says so; else nvlink."""
        if self.nodes > 1:
            return Topology.multinode
        if self.topology is Topology.pcie or intra_node_fabric == "pcie":
            return Topology.pcie
        return Topology.nvlink


def conflicts(plan: Plan, config: DeepSpeedConfig) -> list[str]:
    """Values the plan states that the DeepSpeed config sets differently (Hugging Face refuses these too).

    `config` is read without the plan's setup, so its `"auto"` values are still open. A plan that states
    any batch key is compared on all three (its defaults and derived values included) with the batch
    DeepSpeed would run; a stated precision with the one fp16/bf16 give.
    """
    out: list[str] = []
    t = plan.training
    if t.states_batch:
        ours = dict(zip(BATCH_KEYS, (t.train_micro_batch_size_per_gpu, plan.grad_accum, plan.train_batch_size)))
        given = {key: getattr(config, key) for key in BATCH_KEYS}
        derived = config.batch(plan.gpus)
        theirs = dict(zip(BATCH_KEYS, (derived.micro_batch, derived.grad_acc, derived.train_batch))) if derived else given
        for key, value in ours.items():
            if theirs[key] is not None and theirs[key] != value:
                how = "" if given[key] is not None else " (derived by DeepSpeed)"
                out.append(f"training.{key} is {value}{_how(t, key)} but {config.origin} gives {theirs[key]}{how}")
    pinned = config.setup_fields().get("precision")
    if "precision" in t.model_fields_set and pinned is not None and pinned is not t.precision:
        out.append(f"training.precision is {t.precision.value} but {config.origin} makes DeepSpeed run {pinned.value}")
    return out


def _how(training: Training, key: str) -> str:
    """'' for a value the plan states, else ' (default)' or ' (derived)'."""
    if key in training.model_fields_set:
        return ""
    derived = key == "train_batch_size" or (key == "gradient_accumulation_steps" and training.train_batch_size)
    return " (derived)" if derived else " (default)"
