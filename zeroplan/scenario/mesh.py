"""zeroplan's own model on a tensor x pipeline x context x data (x expert) mesh: --tp --pp --cp --ep
--sequence-parallel with the default method (docs/parallelism.md)."""

from __future__ import annotations

from dataclasses import replace

from zeroplan.errors import ZeroplanError
from zeroplan.memory.estimate import Estimate, Scenario, estimate_memory
from zeroplan.memory.mesh import MeshModel, stage_shares
from zeroplan.memory.setup import Engine
from zeroplan.models.mesh import Mesh, Schedule, check_mesh
from zeroplan.models.presets import load_model
from zeroplan.scenario import ScenarioArgs, engine_stages, scenario_config_and_file
from zeroplan.scenario.parallel import MeshArgs


def with_mesh(scn: Scenario, mesh: Mesh, model: str | None) -> Scenario:
    """`scn` laid out on `mesh`: refused, in one line, where zeroplan does not model it or the model does not divide."""
    if mesh.vpp and mesh.vpp > 1:
        raise ZeroplanError(f"--vpp {mesh.vpp}: zeroplan's own model has no interleaved schedule yet; "
                            "--method megatron computes Megatron-LM's formula for it")
    if mesh.schedule is not Schedule.one_f_one_b:
        raise ZeroplanError(f"--pp-schedule {mesh.schedule.value}: zeroplan's own model has the 1F1B schedule only "
                            "so far (--pp-schedule 1f1b)")
    if scn.engine is not Engine.deepspeed:
        raise ZeroplanError(f"--engine {scn.engine.value} with a tp/pp/cp/ep mesh: zeroplan models the mesh with "
                            "DeepSpeed's ZeRO so far (--engine deepspeed)")
    if getattr(scn, "tuning", None) is not None:
        raise ZeroplanError("fine-tuning (LoRA/QLoRA) on a tp/pp/cp/ep mesh is not modelled yet")
    if scn.arch is None or model is None:
        raise ZeroplanError("a tp/pp/cp/ep mesh needs the model's modules: give --model NAME|PATH, not --params")
    decoder = load_model(model).config.decoder()
    if decoder is None:
        raise ZeroplanError(f"{scn.arch.family}: no block description, so which tensors a mesh splits is unknown; "
                            "zeroplan lays out decoder-only families on a mesh")
    check_mesh(mesh, scn.arch)
    return replace(scn, mesh=MeshModel(mesh, stage_shares(decoder, mesh)))


def mesh_estimate(args: ScenarioArgs, mesh_args: MeshArgs, stage: int | None = None) -> Estimate:
    """answers.estimate on a mesh: the busiest rank of every requested ZeRO stage."""
    scn, config, found = scenario_config_and_file(args)
    if config is not None:
        raise ZeroplanError("--deepspeed-config with --tp/--pp/--cp/--ep: give the mesh in one place")
    scn = with_mesh(scn, mesh_args.mesh(scn.parallelism.gpus), args.model)
    chosen = stage if stage is not None else (found.stage if found else None)
    return estimate_memory(scn, stages=engine_stages(scn.engine, chosen), assumptions=found.notes if found else ())
