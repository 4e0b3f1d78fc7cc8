"""zeroplan's own model on a tensor x pipeline x context x data (x expert) mesh: --tp --pp --cp --ep
--sequence-parallel with the default method (docs/parallelism.md)."""

from __future__ import annotations

from zeroplan.errors import ZeroplanError
from zeroplan.memory.estimate import Estimate, estimate_memory
from zeroplan.scenario import ScenarioArgs, engine_stages, scenario_config_and_file
from zeroplan.scenario.meshed import with_mesh
from zeroplan.scenario.parallel import MeshArgs


def mesh_estimate(args: ScenarioArgs, mesh_args: MeshArgs, stage: int | None = None) -> Estimate:
    """answers.estimate on a mesh: the busiest rank of every requested ZeRO stage."""
    scn, config, found = scenario_config_and_file(args)
    if config is not None:
        raise ZeroplanError("--deepspeed-config with --tp/--pp/--cp/--ep: give the mesh in one place")
    scn = with_mesh(scn, mesh_args.mesh(scn.parallelism.gpus), args.model)
    chosen = stage if stage is not None else (found.stage if found else None)
    return estimate_memory(scn, stages=engine_stages(scn.engine, chosen), assumptions=found.notes if found else ())
