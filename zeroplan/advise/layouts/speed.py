"""Predicted step time of one layout x stage x checkpointing x micro-batch: zeroplan.perf.mesh (docs/throughput.md,
"Mesh"), placed once per layout (mesh_layout) and stepped per configuration (mesh_step). Pure: no I/O."""

from __future__ import annotations

from zeroplan.memory.estimate import Scenario
from zeroplan.memory.summary import param_count
from zeroplan.memory.setup import ZeroStage


def placed(scn: Scenario, topology, cache: dict):
    """perf.mesh.mesh_layout of `scn`'s mesh, once per mesh (it does not depend on the setup)."""
    from zeroplan.perf.mesh import mesh_layout

    key = scn.mesh.mesh
    if key not in cache:
        cache[key] = mesh_layout(scn.mesh, scn.arch, param_count(scn.model), scn.hardware, scn.parallelism, topology)
    return cache[key]


def step(scn: Scenario, stage: ZeroStage, topology, mfu: float | None, cache: dict):
    """perf.mesh.MeshStep of `scn` (a scenario on a mesh) at `stage`."""
    from zeroplan.perf.mesh import mesh_step

    return mesh_step(placed(scn, topology, cache), scn.setup, stage, scn.knobs, mfu)
