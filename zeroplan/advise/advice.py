"""What the advisor returns: the recommendation, the trace of its decision, the alternatives, the advisories.

Frozen pydantic models, so the JSON view is their dump. Bytes are integers; reasons are one line each.
Pure: imports neither rich, typer nor yaml and does no I/O.
"""

from __future__ import annotations

from typing import Literal, Union

from pydantic import Field

from zeroplan.advise.policy import AdvisorPolicy
from zeroplan.frozen import Frozen
from zeroplan.hardware.spec import Topology
from zeroplan.memory.estimate import Scenario
from zeroplan.memory.setup import (
    Checkpointing,
    DeepSpeedKnobs,
    Engine,
    OffloadDevice,
    ZeroStage,
)

StepUnit = Literal["bytes", "percent", "sequences", "tokens", "fraction", "gpus", "seconds", ""]
Value = Union[bool, int, float, str, None]


class Step(Frozen):
    """One question the advisor asked, what it saw, what it compared against and what it concluded."""

    rule: str = Field(description="stable rule id, e.g. fit.zero2 or article.nvlink (docs/advisor.md)")
    question: str
    observed: Value = Field(description="the value seen; bytes as an integer when unit is 'bytes'")
    threshold: Value = Field(None, description="what it was compared against, in the same unit")
    unit: StepUnit = ""
    source: str = Field(description="where the threshold (or the rule) comes from")
    outcome: str = Field(description="yes, no, ok, warn, skipped, chosen, change, none, applies, corrected")
    reason: str = Field(description="one line: why, or the article's leaf as written")


class Change(Frozen):
    """The smallest change that would make the plan fit, when nothing fits as given."""

    kind: Literal["gpus", "none"]
    description: str
    stage: ZeroStage | None = None
    gpus: int | None = None
    nodes: int | None = None
    checkpointing: Checkpointing | None = None


class Plan(Frozen):
    """One stage x offload x checkpointing, with the micro-batch it runs and what it costs."""

    stage: ZeroStage
    offload_optimizer: OffloadDevice
    offload_param: OffloadDevice
    checkpointing: Checkpointing
    overlap_comm: bool
    micro_batch: int
    grad_accum: int
    peak_bytes: int
    usable_bytes: int
    headroom_bytes: int
    cpu_bytes_per_node: int
    nvme_bytes_per_node: int
    step_time_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    overhead_vs_zero0_pct: float = Field(description="step time over ZeRO-0's at the same micro-batch, as if it fitted")

    @property
    def key(self) -> tuple[OffloadDevice, OffloadDevice, Checkpointing, ZeroStage]:
        return self.offload_optimizer, self.offload_param, self.checkpointing, self.stage


class Recommendation(Frozen):
    """The configuration to run, or (fits false) none, with the smallest change that would make one fit."""

    fits: bool
    engine: Engine = Engine.deepspeed
    stage: ZeroStage | None = None
    strategy: str | None = Field(None, description="the stage in the engine's words, 'FSDP FULL_SHARD (ZeRO-3 "
                                 "equivalent)'")
    engine_settings: dict[str, Union[bool, str]] = Field(
        default_factory=dict, description="the engine's own settings (zeroplan.engines.strategy_settings); {} for "
        "DeepSpeed, whose settings are `knobs`")
    offload_optimizer: OffloadDevice | None = None
    offload_param: OffloadDevice | None = None
    checkpointing: Checkpointing | None = None
    micro_batch: int | None = None
    grad_accum: int | None = None
    global_batch: int
    gpus: int
    nodes: int
    topology: Topology
    plan: Plan | None = Field(None, description="memory and speed of the recommended configuration")
    knobs: DeepSpeedKnobs | None = Field(None, description="the zero_optimization knobs planned with (DeepSpeed only)")
    change: Change | None = None
    summary: str = Field(description="one line: the configuration, or the article's leaf")


class Advice(Frozen):
    """The advisor's answer: deterministic for the same scenario, policy, topology and global batch."""

    policy: AdvisorPolicy
    scenario: Scenario = Field(description="the scenario planned: micro-batch 1, the precision the hardware runs")
    recommendation: Recommendation
    trace: tuple[Step, ...]
    advisories: tuple[Step, ...] = Field((), description="the article's other rules, applied and corrected")
    alternatives: tuple[Plan, ...] = Field((), description="every stage x offload that fits, recommendation first")
    assumptions: tuple[str, ...] = ()
    model_assumed: bool = Field(False, description="no model or count was given: DEFAULT_MODEL was planned")

    @property
    def rules(self) -> tuple[str, ...]:
        return tuple(step.rule for step in self.trace)
