"""What the parallelism search returns: the chosen layout, the top alternatives, the trace and the counts.

Frozen pydantic models, so the JSON view is their dump (docs/json.md, "advise --search-parallelism"). Bytes are
integers, times seconds. Pure: no rich, typer or yaml, no I/O.
"""

from __future__ import annotations

from pydantic import Field

from zeroplan.advise.advice import Step
from zeroplan.advise.layouts.space import Stack
from zeroplan.advise.policy import AdvisorPolicy
from zeroplan.frozen import Frozen
from zeroplan.hardware.spec import Topology
from zeroplan.memory.estimate import Scenario
from zeroplan.memory.setup import Checkpointing, ZeroStage
from zeroplan.models.mesh import Schedule


class LayoutPlan(Frozen):
    """One fitting configuration: the mesh, its stack, ZeRO stage, checkpointing and micro-batch, its memory and speed."""

    tp: int
    pp: int
    cp: int
    ep: int
    dp: int
    sequence_parallel: bool
    stack: Stack
    schedule: Schedule = Field(Schedule.one_f_one_b, description="the pipeline schedule: 1f1b, or interleaved-1f1b "
                               "with vpp model chunks per rank (the search's schedule step says why)")
    vpp: int = Field(1, description="model chunks (virtual stages) per pipeline rank; 1 under 1f1b")
    stage: ZeroStage
    checkpointing: Checkpointing
    micro_batch: int
    grad_accum: int = Field(description="micro-batches per optimizer step (the pipeline's micro-batches when pp > 1)")
    peak_bytes: int = Field(description="the busiest rank's peak, as `zeroplan estimate --tp .. --pp ..` prints it")
    usable_bytes: int
    headroom_bytes: int
    busiest: str = Field(description="which rank is the busiest: its pipeline stage and parameters")
    step_time_s: float
    compute_s: float
    tp_s: float
    cp_exposed_s: float
    ep_s: float
    p2p_s: float
    bubble_s: float
    zero_exposed_s: float
    tokens_per_s_per_gpu: float
    mfu: float

    @property
    def mesh_key(self) -> tuple[int, int, int, int]:
        return self.tp, self.pp, self.cp, self.ep

    def describe(self) -> str:
        mesh = " x ".join([f"tp {self.tp}", f"pp {self.pp}", f"cp {self.cp}"] + [f"ep {self.ep}"] * (self.ep > 1))
        sp = ", SP" if self.sequence_parallel else ""
        sp += f", {self.schedule.value} vpp {self.vpp}" if self.vpp > 1 else ""
        ckpt = "" if self.checkpointing is Checkpointing.none else f", {self.checkpointing.value} checkpointing"
        return (f"{mesh} x dp {self.dp} ({self.stack.value}{sp}), ZeRO-{int(self.stage)}{ckpt}, micro-batch "
                f"{self.micro_batch} x accumulation {self.grad_accum}")


class SearchCounts(Frozen):
    """How much the search weighed."""

    layouts: int = Field(description="tp x pp x cp (x ep) meshes that lay the model out")
    configurations: int = Field(description="layout x stage x checkpointing combinations weighed")
    evaluations: int = Field(description="peak-memory evaluations (each a full mesh estimate)")
    fitting: int = Field(description="layout x stage x checkpointing combinations that fit at some micro-batch")
    timed: int = Field(description="configurations (with their micro-batch) whose step time was predicted")
    interleaved: int = Field(0, description="interleaved-1f1b configurations (virtual stages x micro-batch) weighed "
                                            "for the pipelined 1F1B ones that could still win")
    pruned: int = Field(description="combinations skipped because a cheaper one answers for them (the trace says why)")


class LayoutAdvice(Frozen):
    """The search's answer: deterministic for the same scenario, policy, topology, global batch and stack."""

    policy: AdvisorPolicy
    scenario: Scenario = Field(description="the scenario planned: the precision the hardware runs")
    stack: Stack = Field(description="the stack asked for (auto: DeepSpeed where pp = cp = ep = 1)")
    gpus: int
    nodes: int
    topology: Topology
    global_batch: int
    recommendation: LayoutPlan | None = Field(description="the fastest fitting configuration; null when none fits")
    alternatives: tuple[LayoutPlan, ...] = Field((), description="the next fastest, one per mesh")
    trace: tuple[Step, ...]
    counts: SearchCounts
    assumptions: tuple[str, ...] = ()
    model_assumed: bool = False
