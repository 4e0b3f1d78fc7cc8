"""Plan files -> the runs that `zeroplan check` checks (PlannedRun: Scenario and DeepSpeedConfig).

Reads through zeroplan.readers (size limit, UTF-8, safe YAML without duplicate keys); check/plan.py and
check/merge.py stay pure. A path inside a plan (model, hardware, deepspeed) is relative to the plan's folder.
Every problem is a ZeroplanError whose message starts with the file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from zeroplan.check.findings import RunContext
from zeroplan.check.merge import assumed_fields, merge_setup, settle_precision
from zeroplan.check.plan import Plan, PlanMesh
from zeroplan.check.rules import check_rule_ids
from zeroplan.deepspeed.parallel import config_mesh
from zeroplan.deepspeed.reader import DeepSpeedConfig
from zeroplan.deepspeed.source import DeepSpeedSource, read_deepspeed_config
from zeroplan.errors import SpecError, ZeroplanError
from zeroplan.hardware.presets import load_hardware
from zeroplan.hardware.spec import Topology
from zeroplan.memory.engines import check_stage
from zeroplan.memory.estimate import Scenario, overheads_for
from zeroplan.memory.summary import small_param_numel
from zeroplan.memory.setup import DeepSpeedKnobs, Engine
from zeroplan.models.hub import is_hub_id
from zeroplan.models.mesh import Mesh, mesh_problems
from zeroplan.readers import parse_yaml, read_text, yaml_key_lines
from zeroplan.registry import looks_like_path
from zeroplan.scenario import layout_of, resolve_model
from zeroplan.scenario.teacher import teacher_of
from zeroplan.validate import validated


@dataclass(frozen=True)
class PlannedRun:
    """One plan, resolved: what the calculators and the rules take."""

    origin: str  # the plan file; for a bare --deepspeed-config check, the config file
    plan: Plan
    scenario: Scenario
    config: DeepSpeedConfig
    topology: Topology
    mesh: Mesh | None = None  # the plan's `mesh:` or the config's AutoTP; None: data parallelism only
    mesh_problems: tuple[str, ...] = ()  # why the model does not lay out on it (no memory estimate then)

    @property
    def context(self) -> RunContext:
        scn = self.scenario
        return RunContext(parallelism=scn.parallelism, hardware=scn.hardware, min_headroom_pct=self.plan.min_headroom_pct,
                          data_parallel=max(1, self.mesh.dp) if self.mesh else None)


def load_plan(path: Path) -> PlannedRun:
    """Read, validate and resolve one plan file."""
    origin = str(path)
    text = read_text(path)
    plan = plan_from_data(parse_yaml(text, origin), origin)
    return resolve_plan(plan, origin, path.parent, yaml_key_lines(text))


def plan_from_data(data: object, origin: str) -> Plan:
    if not isinstance(data, dict):
        kind = "empty" if data is None else type(data).__name__
        raise SpecError(f"{origin}: expected a mapping of plan keys, got {kind}")
    return validated(Plan, data, origin)


def _near(ref: str, base: Path) -> str:
    """A file reference relative to the plan's folder; preset names, absolute paths and Hub ids
    (`meta-llama/Llama-3.1-8B`, when no such path is beside the plan) unchanged."""
    if not looks_like_path(ref) or os.path.isabs(ref):
        return ref
    near = os.path.normpath(base / ref)
    return ref if is_hub_id(ref) and not os.path.exists(near) else near


def _deepspeed_source(plan: Plan, origin: str, base: Path, plan_lines: Mapping[str, int]) -> DeepSpeedSource:
    if isinstance(plan.deepspeed, str):
        return read_deepspeed_config(Path(_near(plan.deepspeed, base)))
    inline = {key.removeprefix("deepspeed."): line for key, line in plan_lines.items() if key.startswith("deepspeed.")}
    if plan.engine is Engine.deepspeed:
        return DeepSpeedSource(plan.deepspeed, origin, key_lines=inline)
    for key in ("fsdp.sharding_strategy", "fsdp.reshard_after_forward"):  # the stage's line is the fsdp: setting's
        if key in plan_lines:
            inline["zero_optimization.stage"] = plan_lines[key]
    return DeepSpeedSource(plan.standin_config(), origin, key_lines=inline)


def resolve_plan(plan: Plan, origin: str, base: Path, plan_lines: Mapping[str, int] | None = None) -> PlannedRun:
    """Presets, the model and the DeepSpeed config of a validated plan, into a Scenario.

    Raises SpecError 'origin: ...' (a problem in a file the plan names keeps that file's name too).
    """
    try:
        return _resolve(plan, origin, base, plan_lines or {})
    except ZeroplanError as exc:
        if str(exc).startswith(f"{origin}: "):
            raise
        raise SpecError(f"{origin}: {exc}") from None


def _resolve(plan: Plan, origin: str, base: Path, plan_lines: Mapping[str, int]) -> PlannedRun:
    """The config is read twice: first without the plan's setup, to see what it states (a value the plan
    states differently is an error, as in Hugging Face); then with the merged setup, so its `"auto"`
    values resolve to what the run will use, and the precision that reading gives is the run's.
    """
    try:
        check_rule_ids(plan.ignore)
    except ZeroplanError as exc:
        raise SpecError(f"ignore: {exc}") from None
    hardware = load_hardware(_near(plan.hardware, base))
    par = plan.parallelism(hardware.gpus_per_node, hardware.name)
    model = _near(plan.model, base) if plan.model else None
    largest = str(plan.largest_layer) if plan.largest_layer else None
    summary, arch = resolve_model(model, str(plan.params) if plan.params else None, largest, DeepSpeedKnobs())
    ds = _deepspeed_source(plan, origin, base, plan_lines)
    mesh, plan = _mesh(plan, ds)
    hidden, dp = (arch.hidden_size if arch else None), plan.data_parallel  # gpus / (tp x pp x cp)
    stated = ds.parse(hidden_size=hidden, dp_world=dp)
    setup, problems = merge_setup(plan, stated)
    if problems:
        raise SpecError("; ".join(problems))
    config = ds.parse(hidden_size=hidden, dp_world=dp, setup=setup, assumed=assumed_fields(plan, stated))
    setup, problems = settle_precision(plan, setup, config)
    if problems:
        raise SpecError("; ".join(problems))
    if mesh is not None and mesh.pipe_partition:  # PipelineEngine: its checkpoint interval, its layer split
        from zeroplan.deepspeed.parallel import with_pipeline_checkpointing
        from zeroplan.scenario.meshed import partition_of

        setup = with_pipeline_checkpointing(ds.data, setup, frozenset(plan.training.model_fields_set))
        mesh = partition_of(mesh, model)
    tuning = _plan_tuning(plan, model, base)
    scenario = Scenario(
        model=replace(summary, small_param_numel=small_param_numel(arch, config.knobs)),
        arch=arch, setup=setup, parallelism=par, knobs=config.knobs, hardware=hardware,
        overheads=_plan_overheads(plan, hardware, base),
        engine=plan.engine, engine_options=plan.engine_options, layout=layout_of(model, plan.engine), tuning=tuning,
        teacher=teacher_of(_near(plan.training.teacher, base) if plan.training.teacher else None),
    )  # fmt: skip
    check_stage(plan.engine, config.stage)
    problems = tuple(mesh_problems(mesh, arch)) if mesh is not None and arch is not None else ()
    if mesh is not None and not problems:
        from zeroplan.scenario.meshed import with_mesh

        scenario = with_mesh(scenario, mesh, model)
    if tuning is not None:
        from zeroplan.hardware.kernels import check_bnb_kernels
        from zeroplan.memory.tuned import check_quant_engine

        try:
            check_quant_engine(tuning, scenario.recipe, plan.engine, config.stage)
            check_bnb_kernels(hardware, tuning.spec.quant.value)  # bitsandbytes' kernels on the plan's GPU
        except ZeroplanError as exc:
            raise SpecError(f"finetune: {exc}") from None
    return PlannedRun(origin, plan, scenario, config, plan.topology_for(par.nodes, hardware.intra_node_fabric), mesh,
                      problems)


def _mesh(plan: Plan, ds: DeepSpeedSource) -> tuple[Mesh | None, Plan]:
    """The plan's `mesh:` or the config's AutoTP mesh (not both), and the plan with that tensor-parallel degree, so
    its batch arithmetic counts data-parallel ranks."""
    stated = config_mesh(ds.data, ds.origin, plan.gpus)  # AutoTP, Ulysses or PipelineEngine
    if stated is not None and plan.mesh is not None:
        key = ("pipeline.stages" if stated.pp > 1 else "sequence_parallel_size" if stated.cp > 1
               else "tensor_parallel.autotp_size")
        raise SpecError(f"mesh: and {ds.origin}'s {key} both give a mesh; give it in one place")
    if stated is not None:
        update = PlanMesh(tp=stated.tp, pp=stated.pp, cp=stated.cp, cp_comm=stated.cp_comm)
        return stated, plan.model_copy(update={"mesh": update})
    return (plan.mesh.mesh(plan.gpus) if plan.mesh else None), plan


def _plan_overheads(plan: Plan, hardware, base: Path):
    """The profile's overheads with the plan's `overheads` overrides, then its `calibration` file under them."""
    extra = plan.overheads
    overheads = overheads_for(hardware, extra.fragmentation, extra.cuda_context_gib, extra.nccl_gib)
    if plan.calibration is None:
        return overheads
    from zeroplan.calibration.file import calibrated, load_calibration

    return calibrated(overheads, load_calibration(_near(plan.calibration, base)), hardware.name,
                      frozenset(extra.model_fields_set))


def _plan_tuning(plan: Plan, model: str | None, base: Path):
    """The plan's `finetune:` mapping as a Tuning (None: full training); its errors name the key."""
    from zeroplan.scenario.finetune import plan_tuning

    try:
        return plan_tuning(plan.finetune, model, base)
    except ZeroplanError as exc:
        message = str(exc)
        raise SpecError(message if message.startswith("finetune") else f"finetune: {message}") from None
