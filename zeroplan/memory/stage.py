"""Per-GPU memory of one training step under each ZeRO stage: model states, engine buffers, overhead, peak.

Pure: no I/O. Bytes are Python ints throughout.
Model states follow the ZeRO paper (Rajbhandari et al. 2019, arXiv:1910.02054, section 5 and Figure 1);
engine buffers follow DeepSpeed v0.19.8 (deepspeed/runtime/zero/stage_1_and_2.py, stage3.py), see
docs/formulas.md.
"""

from dataclasses import dataclass
from dataclasses import field as dc_field

from zeroplan.memory.recipes import FP32_BYTES, Recipe
from zeroplan.memory.setup import DeepSpeedKnobs, OffloadDevice, Parallelism, ZeroStage
from zeroplan.memory.terms import Phase, Setting, Term, shard_numel
from zeroplan.record import Record, field, record


@dataclass(frozen=True, slots=True)
class ModelStates:
    """The ZeRO paper's three model-state terms on one GPU (and what offload moved to the CPU)."""

    parameters: int
    gradients: int
    optimizer_states: int
    cpu_bytes: int = 0  # this GPU's share of model states held in CPU memory

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer_states


def model_state_bytes(
    num_params: int,
    recipe: Recipe,
    stage: ZeroStage,
    dp: int,
    offload_optimizer: OffloadDevice = OffloadDevice.none,
    offload_param: OffloadDevice = OffloadDevice.none,
) -> ModelStates:
    """Parameters, gradients and optimizer states per GPU (ZeRO paper, section 5.1).

        stage 0: p Psi      + g Psi      + k Psi
        stage 1: p Psi      + g Psi      + k Psi / N_d
        stage 2: p Psi      + g Psi / N_d + k Psi / N_d
        stage 3: p Psi / N_d + g Psi / N_d + k Psi / N_d

    Psi = parameters, N_d = data-parallel degree, (p, g, k) = the recipe's bytes per parameter.
    Offloaded optimizer states (stages 1-3) and parameters (stage 3) move to `cpu_bytes` (NVMe: off both).
    """
    shard = shard_numel(num_params, dp)
    param_numel = shard if stage >= ZeroStage.zero3 else num_params
    grad_numel = shard if stage >= ZeroStage.zero2 else num_params
    opt_numel = shard if stage >= ZeroStage.zero1 else num_params
    params = param_numel * recipe.param_bytes
    optim = opt_numel * recipe.optimizer_bytes
    on_cpu = 0
    if offload_param is not OffloadDevice.none:
        on_cpu += params if offload_param is OffloadDevice.cpu else 0
        params = 0
    if offload_optimizer is not OffloadDevice.none:
        on_cpu += optim if offload_optimizer is OffloadDevice.cpu else 0
        optim = 0
    return ModelStates(
        parameters=params, gradients=grad_numel * recipe.grad_bytes, optimizer_states=optim, cpu_bytes=on_cpu
    )


# Per-process overheads outside PyTorch's allocator stats (docs/hardware.md, "Memory outside the model states").
FRAGMENTATION_FRACTION = 0.05  # caching-allocator margin on the allocated peak; a judgment call within 5-10 % (docs/hardware.md)


NVME_PARAM_BUFFER_COUNT = 5  # offload_param.buffer_count default (offload_config.py)


NVME_PARAM_BUFFER_SIZE = 100_000_000  # offload_param.buffer_size default, elements


@record
class ModelSummary(Record):
    """The counts the memory model needs from a model (or from a bare --params count)."""

    name: str
    num_params: int = field(gt=0)
    largest_layer_params: int = field(0, ge=0, description="0 = unknown (a bare count without --largest-layer)")
    num_embedding_params: int = field(0, ge=0)
    num_active_params: int = field(0, ge=0)
    small_param_numel: int = field(0, ge=0, description="elements in tensors under the ZeRO-3 persistence threshold")


@record
class Overheads(Record):
    """Per-GPU memory outside the model: CUDA context, NCCL, allocator fragmentation."""

    cuda_context_bytes: int = field(0, ge=0)
    nccl_bytes: int = field(0, ge=0)
    fragmentation_fraction: float = field(FRAGMENTATION_FRACTION, ge=0, le=1)


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


@dataclass(frozen=True, slots=True)
class StageEstimate:
    """One stage (with its offload choice) on one GPU: a StageBase plus activations and overhead.

    Build it with `estimate_stage` (or `stage_base` + `stage_peak`).
    """

    base: StageBase
    activations: int  # bytes of one micro-step's activations (alive in the backward phase)
    backward_bytes: int  # allocated at the end of forward / start of backward: base.backward_bytes + activations
    overheads: Overheads | None  # the per-process overhead inputs; None: not counted
    overhead_sizes: tuple[int, int, int]  # overhead_sizes(): CUDA context, NCCL, fragmentation
    usable_bytes: int | None = None  # GPU capacity as software sees it; None without hardware
    # Derived once at construction (a sweep reads them for every configuration):
    overhead_bytes: int = dc_field(init=False)
    total: int = dc_field(init=False)  # peak per GPU: max(backward phase, step phase) + overhead

    def __post_init__(self) -> None:
        context, nccl, fragmentation = self.overhead_sizes
        object.__setattr__(self, "overhead_bytes", context + nccl + fragmentation)
        object.__setattr__(self, "total", max(self.backward_bytes, self.base.step_bytes) + self.overhead_bytes)

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
        return Phase.backward if self.backward_bytes >= self.base.step_bytes else Phase.step

    @property
    def buffers_at_peak(self) -> int:
        """Buffers alive at the peak: the always-alive ones plus those of the peak's phase."""
        always, backward, step = self.base.buffer_bytes
        return always + (backward if self.backward_bytes >= self.base.step_bytes else step)

    @property
    def activations_at_peak(self) -> int:
        return self.activations if self.backward_bytes >= self.base.step_bytes else 0

    @property
    def cpu_bytes_per_node(self) -> int:
        return sum(t.bytes for t in self.base.cpu_terms) * self.base.gpus_per_node

    @property
    def fits(self) -> bool | None:
        return None if self.usable_bytes is None else self.total <= self.usable_bytes

    @property
    def headroom_bytes(self) -> int | None:
        return None if self.usable_bytes is None else self.usable_bytes - self.total

    def gpu_bytes(self) -> dict[str, int]:
        """The lines alive at the peak; they sum to `total`."""
        return {
            "parameters": self.states.parameters,
            "gradients": self.states.gradients,
            "optimizer_states": self.states.optimizer_states,
            "activations": self.activations_at_peak,
            "buffers": self.buffers_at_peak,
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
        fragmentation = int(allocated peak x fragmentation_fraction).
    """
    nccl = overheads.nccl_bytes if gpus > 1 else 0
    return overheads.cuda_context_bytes, nccl, int(allocated_peak * overheads.fragmentation_fraction)


def overhead_terms(sizes: tuple[int, int, int], overheads: Overheads) -> tuple[Term, ...]:
    """The non-zero overhead_sizes as named lines with their sources."""
    context, nccl, fragmentation = sizes
    terms = (Term(name="CUDA context", bytes=context, source=OVERHEAD_SOURCE),
             Term(name="NCCL buffers", bytes=nccl, source=OVERHEAD_SOURCE),
             Term(name=f"fragmentation {overheads.fragmentation_fraction:.0%}", bytes=fragmentation,
                  source=FRAGMENTATION_SOURCE))
    return tuple(t for t in terms if t.bytes > 0)


def cpu_offload_terms(states: ModelStates, num_params: int, recipe: Recipe, dp: int, knobs: DeepSpeedKnobs) -> tuple[Term, ...]:
    """Host memory one GPU's rank needs for offload: offloaded states, fp32 grads, NVMe swap buffers."""
    terms = []
    if states.cpu_bytes:
        terms.append(Term(name="offloaded model states", bytes=states.cpu_bytes, source="offload_optimizer/offload_param device=cpu"))
    if knobs.offload_optimizer is not OffloadDevice.none and recipe.has_master:
        terms.append(
            Term(name="fp32 grad partition (pinned)", bytes=shard_numel(num_params, dp) * FP32_BYTES, source="stage_1_and_2.py / stage3.py with offload")
        )
    if knobs.offload_param is OffloadDevice.nvme:
        terms.append(
            Term(
                name="NVMe param swap buffers",
                bytes=NVME_PARAM_BUFFER_COUNT * NVME_PARAM_BUFFER_SIZE * recipe.param_bytes,
                source="offload_param buffer_count x buffer_size",
            )
        )
    return tuple(terms)


def nvme_bytes(num_params: int, recipe: Recipe, stage: ZeroStage, dp: int, knobs: DeepSpeedKnobs) -> int:
    """Bytes one rank swaps to NVMe (ZeRO-Infinity, stage 3 only)."""
    shard = shard_numel(num_params, dp)
    total = 0
    if knobs.offload_optimizer is OffloadDevice.nvme:
        total += shard * recipe.optimizer_bytes
    if knobs.offload_param is OffloadDevice.nvme:
        total += shard * recipe.param_bytes
    return total


def stage_base(model: ModelSummary, recipe: Recipe, stage: ZeroStage, par: Parallelism, knobs: DeepSpeedKnobs) -> StageBase:
    """Model states + engine buffers of one GPU at one stage, with the host and NVMe bytes offload needs."""
    from zeroplan.memory.buffers import engine_buffers  # engine imports Term from here

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


def stage_peak(base: StageBase, activation_bytes: int = 0, overheads: Overheads | None = None,
               usable_bytes: int | None = None) -> StageEstimate:
    """`base` with one micro-step's activations (alive in the backward phase only) and the per-process overhead."""
    backward = base.backward_bytes + activation_bytes
    sizes = NO_OVERHEAD if overheads is None else overhead_sizes(max(backward, base.step_bytes), overheads, base.gpus)
    return StageEstimate(base, activation_bytes, backward, overheads, sizes, usable_bytes)


def estimate_stage(
    model: ModelSummary,
    recipe: Recipe,
    stage: ZeroStage,
    par: Parallelism,
    knobs: DeepSpeedKnobs,
    *,
    activation_bytes: int = 0,
    overheads: Overheads | None = None,
    usable_bytes: int | None = None,
) -> StageEstimate:
    """Peak memory of one GPU at one ZeRO stage: model states + engine buffers + activations + overhead."""
    return stage_peak(stage_base(model, recipe, stage, par, knobs), activation_bytes, overheads, usable_bytes)
