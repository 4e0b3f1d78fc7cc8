"""Per-GPU memory of one training step under each ZeRO stage: model states, engine buffers, overhead, peak.

Pure: no I/O. Bytes are Python ints throughout.
Model states come from memory/states.py (the ZeRO paper, arXiv:1910.02054);
engine buffers follow DeepSpeed v0.19.8 (deepspeed/runtime/zero/stage_1_and_2.py, stage3.py), see
docs/formulas.md.
"""

from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Annotated

from pydantic import Field

from zeroplan.memory.recipes import Recipe
from zeroplan.memory.setup import DeepSpeedKnobs, Parallelism, ZeroStage
from zeroplan.memory.states import (
    ModelStates,
    ModelSummary,
    cpu_offload_terms,
    model_state_bytes,
    nvme_bytes,
)
from zeroplan.memory.terms import Phase, Setting, Term
from zeroplan.memory.timeline import (
    CATEGORIES,
    ActivationProfile,
    Timeline,
    _activations,
    build_timeline,
    peak_of,
    skeleton_of,
)
from zeroplan.units import GIB
from zeroplan.validate import INPUT_CONFIG, Real, Size

# Per-process overheads outside PyTorch's allocator stats (docs/hardware.md, "Memory outside the model states").
FRAGMENTATION_FRACTION = 0.05  # caching-allocator margin on the allocated peak; a judgment call within 5-10 % (docs/hardware.md)


@dataclass(frozen=True, slots=True, kw_only=True)
class Overheads:
    """Per-GPU memory outside the model: CUDA context, NCCL, allocator fragmentation."""

    __pydantic_config__ = INPUT_CONFIG
    cuda_context_bytes: Size = 0
    nccl_bytes: Size = 0
    fragmentation_fraction: Annotated[Real, Field(ge=0, le=1)] = FRAGMENTATION_FRACTION
    # From a calibration (zeroplan.calibration, docs/calibrate.md): a fixed part of the allocator's overhead, and
    # allocated bytes the model misses at the peak; the file they came from and what they changed, in words.
    allocator_constant_bytes: Size = 0
    residual_bytes: Size = 0
    calibration: str = ""
    calibration_changes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class StageBase:
    """What one GPU holds at one stage whatever the micro-step: model states, engine buffers, host and NVMe bytes.

    Nothing here depends on the micro-batch, sequence or checkpointing, so a sweep builds it once per
    (stage, cluster, offload) and completes it with `stage_peak` for each activation size.
    """

    stage: ZeroStage
    knobs: DeepSpeedKnobs  # as applied at this stage (estimate.stage_knobs)
    states: ModelStates
    buffers: tuple[Term, ...]
    buffer_bytes: tuple[int, int, int]  # buffers summed per phase: (always, backward, step)
    cpu_terms: tuple[Term, ...]
    gpus: int
    gpus_per_node: int
    backward_bytes: int  # allocated in the backward phase before activations (phase_totals)
    step_bytes: int  # allocated in the optimizer step (activations freed)
    nvme_bytes_per_node: int
    engine: str = "deepspeed"  # zeroplan.spec.Engine value
    settings: tuple[Setting, ...] = ()  # the engine's own terms for this stage (PyTorch engines)
    notes: tuple[str, ...] = ()  # per-stage remarks, e.g. that ranks hold different amounts
    moments: tuple = ()  # memory.timeline.Moment per event (PyTorch engines); () = DeepSpeed's, built per layer count
    moment_layers: int = 0  # the layers `moments` runs through


@dataclass(frozen=True, slots=True)
class StageEstimate:
    """One stage (with its offload choice) on one GPU: a StageBase plus activations and overhead.

    Build it with `estimate_stage` (or `stage_base` + `stage_peak`).
    """

    base: StageBase
    activations: int  # bytes of one micro-step's activations at the forward's peak (the profile's total)
    backward_bytes: int  # the most allocated at any event before the optimizer step (forward and backward)
    overheads: Overheads | None  # the per-process overhead inputs; None: not counted
    overhead_sizes: tuple[int, int, int]  # overhead_sizes(): CUDA context, NCCL, fragmentation
    usable_bytes: int | None = None  # GPU capacity as software sees it; None without hardware
    profile: ActivationProfile = ActivationProfile()  # the activations by part, for the timeline
    peak_bytes: int = 0  # allocated at the timeline's peak (its largest event)
    peak_index: int = 0  # that event's index in the timeline
    peak_lines: tuple[int, ...] = (0, 0, 0, 0, 0, 0)  # that event's bytes per memory.timeline.CATEGORIES
    # Derived once at construction (a sweep reads them for every configuration):
    overhead_bytes: int = dc_field(init=False)
    total: int = dc_field(init=False)  # peak per GPU: the timeline's largest event + overhead

    def __post_init__(self) -> None:
        context, nccl, fragmentation = self.overhead_sizes
        object.__setattr__(self, "overhead_bytes", context + nccl + fragmentation)
        object.__setattr__(self, "total", self.peak_bytes + self.overhead_bytes)

    @property
    def timeline(self) -> Timeline:
        """The step event by event (memory.timeline); its peak is `peak_bytes`."""
        moments, layers = skeleton_of(self.base, self.profile)
        return build_timeline(moments, layers, self.profile)

    @property
    def peak_moment(self) -> str:
        """Where the peak falls: 'end of forward', 'backward of layer 0', 'optimizer step'."""
        return self._peak_moment().name

    def _peak_moment(self):
        moments, _ = skeleton_of(self.base, self.profile)
        return moments[self.peak_index]

    def peak_event(self):
        return self.timeline.peak

    @property
    def reserved_beyond_peak(self) -> tuple[Term, ...]:
        """What the caching allocator also keeps reserved beyond the peak (memory.engines.streams): counted by
        max_memory_reserved and nvidia-smi, not in `total` (freed before an allocation would fail)."""
        from zeroplan.memory.engines.streams import reserved_terms

        moments, layers = skeleton_of(self.base, self.profile)
        return reserved_terms(moments, build_timeline(moments, layers, self.profile), self.profile, self.peak_bytes)

    @property
    def overhead(self) -> tuple[Term, ...]:
        """The overhead lines, named; built on demand (a sweep needs only their sum)."""
        return () if self.overheads is None else overhead_terms(self.overhead_sizes, self.overheads)

    # The micro-step-independent lines, read through from the base under their old names.
    stage = property(lambda self: self.base.stage)
    offload_optimizer = property(lambda self: self.base.knobs.offload_optimizer)
    offload_param = property(lambda self: self.base.knobs.offload_param)
    states = property(lambda self: self.base.states)
    buffers = property(lambda self: self.base.buffers)
    cpu_terms = property(lambda self: self.base.cpu_terms)
    gpus_per_node = property(lambda self: self.base.gpus_per_node)
    step_bytes = property(lambda self: self.base.step_bytes)
    nvme_bytes_per_node = property(lambda self: self.base.nvme_bytes_per_node)

    @property
    def peak_phase(self) -> Phase:
        return Phase.step if self._peak_moment().phase == "step" else Phase.backward

    def at_peak(self) -> dict[str, int]:
        """The timeline's categories at the peak (memory.timeline.CATEGORIES); they sum to `peak_bytes`."""
        return dict(zip(CATEGORIES, self.peak_lines))

    @property
    def states_at_peak(self) -> int:
        """Parameters, gradients and optimizer states alive at the peak (gradients not yet produced are not)."""
        lines = self.at_peak()
        return lines["parameters"] + lines["gradients"] + lines["optimizer_states"]

    @property
    def buffers_at_peak(self) -> int:
        """Engine buffers and temporaries alive at the peak (gathered parameters, unsharded gradients, buckets)."""
        lines = self.at_peak()
        return lines["buffers"] + lines["temporaries"]

    @property
    def activations_at_peak(self) -> int:
        return self.at_peak()["activations"]

    @property
    def cpu_bytes_per_node(self) -> int:
        return sum(t.bytes for t in self.base.cpu_terms) * self.base.gpus_per_node

    @property
    def fits(self) -> bool | None:
        return None if self.usable_bytes is None else self.total <= self.usable_bytes

    # GiB (2^30 B) views of the bytes, for notebooks: est.stage(3).total_gib
    total_gib = property(lambda self: self.total / GIB)
    usable_gib = property(lambda self: None if self.usable_bytes is None else self.usable_bytes / GIB)
    headroom_gib = property(lambda self: None if self.usable_bytes is None else self.headroom_bytes / GIB)

    @property
    def headroom_bytes(self) -> int | None:
        return None if self.usable_bytes is None else self.usable_bytes - self.total

    def gpu_bytes(self) -> dict[str, int]:
        """The lines alive at the peak (the timeline's peak event, temporaries with the buffers); they sum to `total`."""
        lines = self.at_peak()
        return {
            "parameters": lines["parameters"],
            "gradients": lines["gradients"],
            "optimizer_states": lines["optimizer_states"],
            "activations": lines["activations"],
            "buffers": lines["buffers"] + lines["temporaries"],
            "overhead": self.overhead_bytes,
            "total": self.total,
        }


def buffer_bytes_by_phase(buffers: tuple[Term, ...]) -> tuple[int, int, int]:
    """Bytes of the buffers alive always, in the backward phase, in the optimizer step."""
    by_phase = {Phase.always: 0, Phase.backward: 0, Phase.step: 0}
    for t in buffers:
        by_phase[t.phase] += t.bytes
    return by_phase[Phase.always], by_phase[Phase.backward], by_phase[Phase.step]


def phase_totals(states: ModelStates, buffers: tuple[Term, ...]) -> tuple[int, int]:
    """(backward, step) allocated bytes before activations:

        backward = model states + always-alive buffers + backward buffers   (+ activations, see stage_peak)
        step     = model states + always-alive buffers + step buffers
    """
    always, backward, step = buffer_bytes_by_phase(buffers)
    base = states.parameters + states.gradients + states.optimizer_states + always
    return base + backward, base + step


OVERHEAD_SOURCE = "hardware profile (docs/hardware.md)"


FRAGMENTATION_SOURCE = "caching-allocator margin on the allocated peak"


NO_OVERHEAD = (0, 0, 0)  # overhead_sizes without a hardware profile or overrides


def overhead_sizes(allocated_peak: int, overheads: Overheads, gpus: int) -> tuple[int, int, int]:
    """(CUDA context, NCCL, fragmentation) bytes of one process:

        CUDA context and NCCL buffers per hardware profile (NCCL only with more than one GPU),
        fragmentation = int(allocated peak x fragmentation_fraction) + allocator constant.
    A calibration's residual rides with the context (both fixed per process); overhead_terms names each part.
    """
    nccl = overheads.nccl_bytes if gpus > 1 else 0
    fragmentation = int(allocated_peak * overheads.fragmentation_fraction) + overheads.allocator_constant_bytes
    return overheads.cuda_context_bytes + overheads.residual_bytes, nccl, fragmentation


def overhead_terms(sizes: tuple[int, int, int], overheads: Overheads) -> tuple[Term, ...]:
    """The non-zero overhead_sizes as named lines with their sources."""
    context, nccl, fragmentation = sizes
    residual, constant = overheads.residual_bytes, overheads.allocator_constant_bytes
    source = f"calibration {overheads.calibration}" if overheads.calibration else OVERHEAD_SOURCE
    terms = (Term(name="CUDA context", bytes=context - residual, source=source),
             Term(name="NCCL buffers", bytes=nccl, source=OVERHEAD_SOURCE),
             Term(name=f"fragmentation {overheads.fragmentation_fraction:.0%}", bytes=fragmentation - constant,
                  source=f"calibration {overheads.calibration}" if overheads.calibration else FRAGMENTATION_SOURCE),
             Term(name="allocator constant", bytes=constant, source=source),
             Term(name="calibrated residual", bytes=residual, source=source))
    return tuple(t for t in terms if t.bytes > 0)


def stage_base(model: ModelSummary, recipe: Recipe, stage: ZeroStage, par: Parallelism, knobs: DeepSpeedKnobs) -> StageBase:
    """Model states + engine buffers of one GPU at one stage, with the host and NVMe bytes offload needs."""
    from zeroplan.memory.buffers import engine_buffers  # engine imports Term from here
    from zeroplan.memory.optimizer_step import deepspeed_temporary

    dp = par.dp
    states = model_state_bytes(model.num_params, recipe, stage, dp, knobs.offload_optimizer, knobs.offload_param)
    buffers = engine_buffers(
        num_params=model.num_params,
        largest_layer_params=model.largest_layer_params,
        small_param_numel=model.small_param_numel,
        recipe=recipe,
        stage=stage,
        dp=dp,
        knobs=knobs,
    )
    buffers += deepspeed_temporary(recipe, stage, model.num_params, dp, knobs)  # torch_adam only
    backward, step = phase_totals(states, buffers)
    return StageBase(
        stage=stage,
        knobs=knobs,
        states=states,
        buffers=buffers,
        buffer_bytes=buffer_bytes_by_phase(buffers),
        cpu_terms=cpu_offload_terms(states, model.num_params, recipe, dp, knobs),
        gpus=par.gpus,
        gpus_per_node=par.gpus_per_node,
        backward_bytes=backward,
        step_bytes=step,
        nvme_bytes_per_node=nvme_bytes(model.num_params, recipe, stage, dp, knobs) * par.gpus_per_node,
    )


def stage_peak(base: StageBase, activations: int | ActivationProfile = 0, overheads: Overheads | None = None,
               usable_bytes: int | None = None) -> StageEstimate:
    """`base` through one step's timeline with its activations, plus the per-process overhead.

    The peak is the timeline's largest event (memory.timeline); a bare activation total is alive from the
    first forward to the last backward (ActivationProfile.lump).
    """
    prof = activations if isinstance(activations, ActivationProfile) else ActivationProfile.lump(activations)
    moments, layers = skeleton_of(base, prof)
    index, peak, before_step = peak_of(moments, layers, prof)
    sizes = NO_OVERHEAD if overheads is None else overhead_sizes(peak, overheads, base.gpus)
    m = moments[index]
    lines = (m.parameters, m.grads_accumulated if prof.accumulating else m.gradients, m.optimizer_states, m.buffers,
             _activations(m, prof, layers), m.temporaries)
    return StageEstimate(base, prof.total_forward, before_step, overheads, sizes, usable_bytes, prof, peak, index, lines)


def busiest(bases: tuple[StageBase, ...], activations: tuple, overheads: Overheads | None = None,
            usable_bytes: int | None = None) -> StageEstimate:
    """The peak of one GPU of a run whose ranks hold `bases` (one per pipeline stage; one without a pipeline), each
    with its own activations: each rank's stage_peak, the largest reported (the first on a tie)."""
    found = [stage_peak(base, acts, overheads, usable_bytes) for base, acts in zip(bases, activations, strict=True)]
    return found[0] if len(found) == 1 else max(found, key=lambda e: e.total)


def estimate_stage(
    model: ModelSummary,
    recipe: Recipe,
    stage: ZeroStage,
    par: Parallelism,
    knobs: DeepSpeedKnobs,
    *,
    activation_bytes: int | ActivationProfile = 0,
    overheads: Overheads | None = None,
    usable_bytes: int | None = None,
) -> StageEstimate:
    """Peak memory of one GPU at one ZeRO stage: model states + engine buffers + activations + overhead."""
    return stage_peak(stage_base(model, recipe, stage, par, knobs), activation_bytes, overheads, usable_bytes)
