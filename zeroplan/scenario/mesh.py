"""zeroplan's own model on a tensor x pipeline x context x data (x expert) mesh: --tp --pp --cp --ep
--sequence-parallel with the default method (docs/parallelism.md)."""

from __future__ import annotations

from zeroplan.errors import ZeroplanError
from zeroplan.memory.activations.mesh import ZERO_BUBBLE_CAVEAT
from zeroplan.memory.estimate import Estimate, estimate_memory
from zeroplan.memory.setup import TrainingLoop
from zeroplan.models.mesh import Schedule
from zeroplan.scenario import ScenarioArgs, engine_stages, scenario_config_and_file
from zeroplan.scenario.meshed import with_mesh
from zeroplan.scenario.parallel import MeshArgs


def mesh_estimate(args: ScenarioArgs, mesh_args: MeshArgs, stage: int | None = None) -> Estimate:
    """answers.estimate on a mesh: the busiest rank of every requested ZeRO stage."""
    if args.compile:
        raise ZeroplanError("--compile: modelled on data parallelism only (measured on one whole block), not with "
                            "--tp/--pp/--cp/--ep")
    if getattr(args.float8, "value", args.float8) != "none":
        raise ZeroplanError("--float8: modelled on data parallelism only (whole linears per rank), not with "
                            "--tp/--pp/--cp/--ep")
    if (loop := TrainingLoop.of(args.training_loop, args.qlora, args.qlora_stack)) is not TrainingLoop.trainer:
        raise ZeroplanError(f"--training-loop {loop.value}: modelled on data parallelism only (litgpt's "
                            "finetune scripts), not with --tp/--pp/--cp/--ep")
    scn, config, found = scenario_config_and_file(args)
    if config is not None or scn.mesh is not None:
        raise ZeroplanError("--tp/--pp/--cp/--ep with a --deepspeed-config or a --from file's mesh: give the mesh "
                            "in one place")
    scn = with_mesh(scn, mesh_args.mesh(scn.parallelism.gpus), args.model)
    chosen = stage if stage is not None else (found.stage if found else None)
    warnings = ()
    if scn.mesh.mesh.pp > 1 and scn.mesh.mesh.schedule in (Schedule.interleaved_zero_bubble, Schedule.zbv):
        warnings = (f"--pp-schedule {scn.mesh.mesh.schedule.value}: activations follow the schedule's action list; "
                    f"{ZERO_BUBBLE_CAVEAT}",)
    return estimate_memory(scn, stages=engine_stages(scn.engine, chosen), assumptions=found.notes if found else (),
                           warnings=warnings)
