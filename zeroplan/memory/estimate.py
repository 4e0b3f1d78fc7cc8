"""Compose the calculators into one estimate for every requested ZeRO stage.

Pure: takes loaded specs, returns a frozen Estimate. The CLI, the advisor and the checks all call this.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from zeroplan.hardware.spec import HardwareSpec
from zeroplan.memory.assumptions import scenario_notes
from zeroplan.memory.float8 import check_float8_all_gather
from zeroplan.memory.recipes import Recipe, make_recipe
from zeroplan.memory.setup import (
    Checkpointing,
    PostTraining,
    DeepSpeedKnobs,
    Engine,
    EngineOptions,
    OffloadDevice,
    Parallelism,
    Precision,
    TrainingSetup,
    ZeroStage,
)
from zeroplan.memory.stage import Overheads, StageBase, StageEstimate, busiest, stage_base
from zeroplan.memory.posttrain import check_posttraining, frozen_model_bytes, posttrain_note, posttrain_profile
from zeroplan.memory.reference import forwarded_setup, with_reference
from zeroplan.memory.states import ModelSummary
from zeroplan.memory.timeline import ActivationProfile, profile_from
from zeroplan.models.architecture import Architecture
from zeroplan.units import GIB

def stage_knobs(knobs: DeepSpeedKnobs, stage: ZeroStage) -> DeepSpeedKnobs:
    """The knobs as DeepSpeed applies them at `stage`: offload only where the stage allows it.

    Optimizer offload needs stage >= 1 (CPU) or stage 3 (NVMe); parameter offload needs stage 3.
    """
    opt, par = knobs.offload_optimizer, knobs.offload_param
    if stage < ZeroStage.zero3:
        par = OffloadDevice.none
        if opt is OffloadDevice.nvme or stage is ZeroStage.zero0:
            opt = OffloadDevice.none
    if (opt, par) == (knobs.offload_optimizer, knobs.offload_param):
        return knobs
    return replace(knobs, offload_optimizer=opt, offload_param=par)


def overheads_for(hardware: HardwareSpec | None, fragmentation_fraction: float | None,
                  cuda_context_gib: float | None, nccl_gib: float | None) -> Overheads | None:
    """Overhead terms from the hardware profile, each overridable; None without hardware and overrides."""
    if hardware is None and cuda_context_gib is None and nccl_gib is None and fragmentation_fraction is None:
        return None
    ctx = cuda_context_gib if cuda_context_gib is not None else (hardware.cuda_context_gib if hardware else 0.0)
    nccl = nccl_gib if nccl_gib is not None else (hardware.nccl_gib if hardware else 0.0)
    extra = {} if fragmentation_fraction is None else {"fragmentation_fraction": fragmentation_fraction}
    return Overheads(cuda_context_bytes=int(ctx * GIB), nccl_bytes=int(nccl * GIB), **extra)


# Scenario and Estimate are frozen dataclasses of already-validated parts, not pydantic models: building a
# pydantic schema over every nested spec cost ~50 ms of each command's start-up and validated nothing new.
@dataclass(frozen=True, slots=True)
class Scenario:
    """One planned run: the model, the setup, the cluster, DeepSpeed's knobs. The stage is chosen per evaluation."""

    model: ModelSummary
    arch: Architecture | None = None
    setup: TrainingSetup = field(default_factory=TrainingSetup)
    parallelism: Parallelism = field(default_factory=Parallelism)
    knobs: DeepSpeedKnobs = field(default_factory=DeepSpeedKnobs)
    hardware: HardwareSpec | None = None
    overheads: Overheads | None = None
    engine: Engine = Engine.deepspeed
    engine_options: EngineOptions = field(default_factory=EngineOptions)
    layout: object | None = None  # zeroplan.engines.ModelLayout: wrapping units and tensor shapes
    tuning: object | None = None  # zeroplan.memory.finetune.Tuning; None: full training (every parameter trains)
    mesh: object | None = None  # zeroplan.memory.mesh.MeshModel: tp x pp x cp x dp (x ep); None = data parallel only
    teacher: object | None = None  # zeroplan.memory.teacher.Teacher: knowledge distillation's teacher model

    @property
    def usable_bytes(self) -> int | None:
        return int(self.hardware.memory_gib * GIB) if self.hardware else None

    @property
    def recipe(self) -> Recipe:
        return make_recipe(self.setup.precision, self.setup.optimizer, self.setup.fp32_grad_accum,
                           self.setup.optimizer_impl)


def activations_for(arch: Architecture | None, setup: TrainingSetup, mesh=None):
    """The activation breakdown (zeroplan.activations), or None when the architecture is unknown; on a mesh, the
    pipeline stage's that holds the most."""
    if arch is None:
        return None
    setup = forwarded_setup(setup)  # a preference pair's chosen and rejected rows (memory.reference)
    if arch.hf_config_json is not None:  # counted by transformers: activations measured, not by formula
        from zeroplan.memory.measured import measured_activation_bytes

        return measured_activation_bytes(arch, setup)
    if mesh is not None:
        from zeroplan.memory.mesh import mesh_activations

        return max(mesh_activations(mesh, arch, setup), key=lambda a: a.total_bytes)
    from zeroplan.memory.activations import activation_bytes

    return activation_bytes(arch, setup)


def tuned_activations_for(acts, scn: Scenario, setup: TrainingSetup | None = None):
    """`acts` with a fine-tune's changes (zeroplan.memory.activations.tuning); unchanged for full training.

    Adapters are the compute dtype under DeepSpeed, which casts them, and fp32 (peft's autocast_adapter_dtype)
    under the PyTorch engines."""
    if acts is None or scn.tuning is None:
        return acts
    from zeroplan.memory.activations.tuning import tuned_activations

    from zeroplan.memory.adapters import kbit_prepared

    setup = forwarded_setup(setup or scn.setup)
    cast = Engine(scn.engine) is Engine.deepspeed or not scn.tuning.spec.adapter_fp32
    adapter = setup.precision.compute_bytes if cast else 4
    if kbit_prepared(scn.tuning, Engine(scn.engine)) and setup.precision is not Precision.fp32:
        # prepare_model_for_kbit_training leaves fp32 embeddings, norms and head: the residual stream is fp32, and
        # without autocast (bf16-true) every tensor outside the 4-bit matmuls is, as in fp32 training; under
        # autocast (bf16/fp16-mixed) the adapters, the attention core and the head run on 16-bit casts
        # (measured: validation/finetune_gpu_terms.json, validation/kbit_autocast.json); bitsandbytes still
        # dequantizes to its 16-bit compute dtype
        e = setup.precision.compute_bytes
        fp32 = replace(setup, precision=Precision.fp32)
        autocast = 0 if setup.precision is Precision.bf16_true else e
        out = tuned_activations(activations_for(scn.arch, fp32), scn.arch, fp32, scn.tuning, 4, autocast)
        return replace(out, dequant_bytes=e * scn.tuning.largest_quantized, head_dequant_bytes=e * scn.tuning.head_quantized)
    return tuned_activations(acts, scn.arch, setup, scn.tuning, adapter)


def activation_profile(scn: Scenario, acts=None) -> ActivationProfile:
    """One micro-step's activations by part for the timeline (memory.timeline), computed (and tuned) unless given."""
    acts = tuned_activations_for(activations_for(scn.arch, scn.setup), scn) if acts is None else acts
    prof = profile_from(acts, scn.arch, scn.setup)
    pt = scn.setup.post_training
    if not (pt.reference or pt is PostTraining.kd) or acts is None or not hasattr(acts, "layer_bytes"):
        return prof
    # a reference or teacher forward runs without checkpointing (TRL disables it): its largest layer or its logits
    plain_setup = replace(scn.setup, checkpointing=Checkpointing.none, checkpoint_every=1)
    plain = activations_for(scn.arch, plain_setup)
    teacher = scn.teacher.arch if scn.teacher is not None else None
    return posttrain_profile(prof, plain, forwarded_setup(scn.setup), scn.arch.hidden_size,
                             activations_for(teacher, plain_setup), teacher.hidden_size if teacher else 0)


def evaluate(scn: Scenario, stage: ZeroStage, *, activation_bytes: int | ActivationProfile | None = None,
             recipe: Recipe | None = None) -> StageEstimate:
    """Peak memory of one GPU of `scn` at `stage`: the largest event of its step's timeline (activations
    computed unless given; a bare byte count is alive through the whole forward and backward).

    Every command's number is this one: `rank_bases` (what each rank holds whatever the micro-step) through
    memory.stage.busiest (the timeline's peak of each rank, the largest reported). The sweep's grid and the
    parallelism search call the same two functions on pieces they cache (tests/test_one_peak.py)."""
    return busiest(rank_bases(scn, stage, recipe), rank_activations(scn, activation_bytes), scn.overheads,
                   scn.usable_bytes)


def rank_activations(scn: Scenario, activation_bytes: int | ActivationProfile | None = None) -> tuple:
    """One micro-step's activations of each rank `rank_bases` returns: each pipeline stage's on a mesh (an
    `activation_bytes` given is then ignored), else the given ones or the scenario's profile."""
    if scn.mesh is not None:
        from zeroplan.memory.mesh import mesh_activation_bytes

        return mesh_activation_bytes(scn.mesh, scn.arch, scn.setup)
    return (activation_profile(scn) if activation_bytes is None else activation_bytes,)


def rank_bases(scn: Scenario, stage: ZeroStage, recipe: Recipe | None = None) -> tuple[StageBase, ...]:
    """What one GPU of each distinct rank holds at `stage` whatever the micro-step (memory.stage.StageBase): one per
    pipeline stage on a mesh (DeepSpeed's shares, or FSDP2's layout on a (dp, tp) mesh), else the one every rank
    holds: a fine-tune's (memory.tuned), a PyTorch engine's (memory.engines) or DeepSpeed's, a paged optimizer's
    states moved to unified memory (memory.paged)."""
    recipe = recipe or scn.recipe
    check_posttraining(scn)
    check_float8_all_gather(scn.engine_options, scn.setup.float8)  # plans reach here without the CLI's checks
    if scn.mesh is not None:
        from zeroplan.memory.mesh import mesh_bases

        return mesh_bases(scn.mesh, recipe, stage, scn.parallelism, stage_knobs(scn.knobs, stage), scn.arch.hidden_size)
    base = tuned_base(scn, stage, recipe) if scn.tuning is not None else None
    if base is None and scn.engine is not Engine.deepspeed:
        from zeroplan.memory.engines import engine_stage_base

        base = engine_stage_base(scn.engine, scn.model, scn.layout, recipe, stage, scn.parallelism, scn.knobs,
                                 scn.engine_options, scn.setup.grad_accum > 1)
    elif base is None:
        base = stage_base(scn.model, recipe, stage, scn.parallelism, stage_knobs(scn.knobs, stage))
    if scn.tuning is not None or recipe.optimizer.paged:
        from zeroplan.memory.paged import paged_base

        base = paged_base(base, recipe)
    return (with_reference(base, frozen_model_bytes(scn, stage)),)  # a reference copy or a teacher


def tuned_base(scn: Scenario, stage: ZeroStage, recipe: Recipe):
    """The StageBase of a fine-tune (memory.tuned): frozen parameters hold no gradients or optimizer states."""
    from zeroplan.memory.tuned import (
        check_optimizer_in_backward,
        check_quant_engine,
        deepspeed_tuned_base,
        engine_tuned_base,
    )

    check_quant_engine(scn.tuning, recipe, scn.engine, stage)
    check_optimizer_in_backward(scn.tuning, scn.engine, scn.parallelism.dp, scn.setup.grad_accum)
    if scn.engine is Engine.deepspeed:
        return deepspeed_tuned_base(scn.model, scn.tuning, recipe, stage, scn.parallelism, stage_knobs(scn.knobs, stage))
    return engine_tuned_base(scn.engine, scn.model, scn.layout, scn.tuning, recipe, stage, scn.parallelism,
                             scn.knobs, scn.engine_options, scn.setup.grad_accum > 1)


def refused_stages(scn: Scenario, stages: tuple[ZeroStage, ...]) -> tuple[tuple[ZeroStage, ...], tuple[str, ...]]:
    """The stages the run can use, and one warning per stage the stacks refuse it at (a fine-tune's base; DeepSpeed's
    PipelineEngine above ZeRO-1); none left: the first refusal as a ZeroplanError."""
    from zeroplan.errors import ZeroplanError

    kept, why = [], []
    for stage in stages:
        if problem := stage_refusal(scn, stage):
            why.append(f"stage {int(stage)} left out: {problem}")
        else:
            kept.append(stage)
    if not kept:
        raise ZeroplanError(why[0].split(": ", 1)[1])
    return tuple(kept), tuple(why)


def stage_refusal(scn: Scenario, stage: ZeroStage) -> str | None:
    """Why the stacks will not run `scn` at `stage` (None: they run it)."""
    mesh = scn.mesh.mesh if scn.mesh is not None else None
    if mesh is not None and mesh.pipe_partition:
        from zeroplan.memory.pipeengine import pipe_zero_refusal

        if problem := pipe_zero_refusal(int(stage), mesh.pp):
            return problem
    if scn.tuning is None:
        return None
    from zeroplan.errors import ZeroplanError
    from zeroplan.memory.tuned import check_quant_engine

    try:
        check_quant_engine(scn.tuning, scn.recipe, scn.engine, stage)
    except ZeroplanError as exc:
        return str(exc)
    return None


@dataclass(frozen=True, slots=True)
class Estimate:
    """Everything `zeroplan estimate` reports: the scenario, one StageEstimate per stage, assumptions."""

    scenario: Scenario
    recipe: Recipe
    stages: tuple[StageEstimate, ...]
    activations: object | None = None  # the ActivationEstimate breakdown, when modelled
    assumptions: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()  # problems in the inputs that did not stop the estimate (the CLI prints them to stderr)

    def stage(self, number: int) -> StageEstimate:
        """The stage numbered `number` (`est.stage(3)`): `stages` holds only the stages estimated (FSDP2 has no
        ZeRO-0, --stage keeps one), so `stages[3]` is not ZeRO-3 in general. ZeroplanError names the ones there."""
        for s in self.stages:
            if int(s.stage) == number:
                return s
        from zeroplan.errors import ZeroplanError

        there = ", ".join(f"ZeRO-{int(s.stage)}" for s in self.stages)
        raise ZeroplanError(f"no ZeRO-{number!r} in this estimate; it has {there}")

    @property
    def model(self) -> ModelSummary:
        return self.scenario.model

    @property
    def setup(self) -> TrainingSetup:
        return self.scenario.setup

    @property
    def parallelism(self) -> Parallelism:
        return self.scenario.parallelism

    @property
    def knobs(self) -> DeepSpeedKnobs:
        return self.scenario.knobs

    @property
    def hardware(self) -> HardwareSpec | None:
        return self.scenario.hardware


def estimate_memory(scn: Scenario, *, stages: tuple[ZeroStage, ...] = tuple(ZeroStage),
                    assumptions: tuple[str, ...] = (), warnings: tuple[str, ...] = ()) -> Estimate:
    """Per-GPU peak memory of `scn` for each requested stage (see memory.estimate_stage)."""
    check_posttraining(scn)
    recipe = scn.recipe
    stages, left_out = refused_stages(scn, stages)
    warnings = warnings + left_out
    acts = tuned_activations_for(activations_for(scn.arch, scn.setup), scn)
    if scn.mesh is not None:  # one rank of each pipeline stage, its own activations (memory.mesh)
        acts = activations_for(scn.arch, scn.setup, scn.mesh)
        results = tuple(evaluate(scn, stage, recipe=recipe) for stage in stages)
    else:
        prof = activation_profile(scn, acts) if acts is not None else profile_from(None, scn.arch, scn.setup)
        results = tuple(evaluate(scn, stage, activation_bytes=prof, recipe=recipe) for stage in stages)
    notes = scenario_notes(scn, recipe)
    if scn.mesh is None and acts is not None and (line := posttrain_note(scn.setup.post_training, prof)):
        notes.append(line)
    if acts is not None:
        notes += list(acts.assumptions)
    return Estimate(scenario=scn, recipe=recipe, activations=acts, stages=results,
                    assumptions=tuple(notes) + assumptions, warnings=warnings)
