"""`zeroplan throughput --tp ... --pp ...`: the mesh step-time model (perf/mesh.py) per ZeRO stage, as plain data
(docs/throughput.md, "Mesh"; docs/json.md for the fields)."""

from __future__ import annotations

from zeroplan.errors import ZeroplanError
from zeroplan.hardware.spec import Topology
from zeroplan.memory.summary import param_count
from zeroplan.memory.mesh import MeshModel
from zeroplan.memory.setup import DeepSpeedKnobs, ZeroStage
from zeroplan.models.mesh import Mesh
from zeroplan.perf.collectives import check_topology, default_topology
from zeroplan.perf.mesh import MeshLayout, MeshStep, mesh_layout, mesh_step
from zeroplan.perf.mesh_notes import mesh_assumptions
from zeroplan.scenario import ScenarioArgs, needs_hardware, scenario
from zeroplan.scenario.mesh import with_mesh
from zeroplan.scenario.parallel import MeshArgs
from zeroplan.validate import as_json


def mesh_model(scn, mesh: Mesh, model: str | None) -> MeshModel:
    """`scn`'s model laid out on `mesh`: the memory model's stage shares, the schedule's chunk placement included
    (interleaved: rank r holds chunks r, r + pp, ...; zbv: r and 2 pp - 1 - r, the head on rank 0). The mesh is
    checked once, by with_mesh, with the same lines `estimate` prints."""
    return with_mesh(scn, mesh, model).mesh


def _zero0(knobs: DeepSpeedKnobs) -> DeepSpeedKnobs:
    return DeepSpeedKnobs(overlap_comm=knobs.overlap_comm, reduce_bucket_size=knobs.reduce_bucket_size)


def _row(stage: ZeroStage, step: MeshStep, base: MeshStep, m: int, tokens: float) -> dict:
    cost = step.cost
    zero_bytes = sum(t.wire_bytes_per_gpu * (m if t.every_micro_step else 1) for t in step.zero_terms)
    terms = {
        "tp": {"seconds": step.tp_s, "wire_bytes": m * cost.tp_bytes},
        "cp": {"seconds": step.cp_exposed_s, "comm_seconds": m * cost.cp_comm_s, "wire_bytes": m * cost.cp_bytes},
        "ep": {"seconds": step.ep_s, "wire_bytes": m * cost.ep_bytes},
        "p2p": {"seconds": step.p2p_s, "wire_bytes": m * cost.p2p_bytes},
        "bubble": {"seconds": step.bubble_s},
        "zero": {"seconds": step.zero_exposed_s, "comm_seconds": step.zero_comm_s, "wire_bytes": zero_bytes},
    }
    comm = step.tp_s + m * cost.cp_comm_s + step.ep_s + step.p2p_s + step.zero_comm_s
    return {
        "stage": int(stage), "step_time_s": step.step_time_s, "compute_s": step.compute_s, "comm_s": comm,
        "exposed_comm_s": step.step_time_s - step.compute_s, "tokens_per_step_per_gpu": tokens,
        "tokens_per_s_per_gpu": step.tokens_per_s_per_gpu, "mfu": step.mfu, "achieved_tflops": step.achieved_tflops,
        "overhead_vs_zero0_pct": 100 * (step.step_time_s / base.step_time_s - 1),
        "wire_bytes_per_gpu": sum(t.get("wire_bytes", 0.0) for t in terms.values()),
        "slowest_pipeline_stage": step.slowest_stage, "terms": terms,
    }


def _groups(layout: MeshLayout) -> list[dict]:
    return [{"name": g.name, "ranks": g.ranks, "stride": g.stride, "link": g.link.label,
             "busbw_gbps": g.link.busbw_gbps, "alpha_us": g.link.alpha_us} for g in layout.groups.values()]


def mesh_throughput_report(args: ScenarioArgs, mesh_args: MeshArgs, topology: Topology | None, mfu: float | None,
                           *, sweep: str | None = None) -> dict:
    """Per ZeRO stage on the mesh: step time, each term's seconds and wire bytes, tokens/s/GPU, MFU. Plain data."""
    if sweep:
        raise ZeroplanError(f"--sweep with {', '.join(mesh_args.given)}: the sweep over global batch is data-parallel "
                            "only so far")
    scn = needs_hardware(scenario(args), "throughput")
    mesh = mesh_args.mesh(scn.parallelism.gpus)
    model = mesh_model(scn, mesh, args.model)
    topology = topology or default_topology(scn.hardware, scn.parallelism)
    check_topology(scn.hardware, scn.parallelism, topology)
    layout = mesh_layout(model, scn.arch, param_count(scn.model), scn.hardware, scn.parallelism, topology)
    steps = [mesh_step(layout, scn.setup, stage, scn.knobs, mfu) for stage in ZeroStage]
    base = mesh_step(layout, scn.setup, ZeroStage.zero0, _zero0(scn.knobs), mfu)
    m = scn.setup.grad_accum
    tokens = scn.setup.tokens_per_micro_step * m * mesh.dp / mesh.gpus
    efficiency = scn.hardware.default_mfu if mfu is None else mfu
    return {
        "model": as_json(scn.model), "hardware": scn.hardware.name,
        "gpus": scn.parallelism.gpus, "nodes": scn.parallelism.nodes, "topology": topology.value,
        "mesh": {"tp": mesh.tp, "pp": mesh.pp, "cp": mesh.cp, "ep": mesh.ep, "dp": mesh.dp, "vpp": mesh.vpp,
                 "schedule": mesh.schedule.value, "sequence_parallel": mesh.sequence_parallel,
                 "cp_comm": mesh.cp_comm.value, "description": mesh.describe()},
        "groups": _groups(layout),
        "setup": as_json(scn.setup), "compute_efficiency": efficiency,
        "stages": [_row(stage, step, base, m, tokens) for stage, step in zip(ZeroStage, steps)],
        "sweep": None,
        "warnings": list(layout.warnings),
        "assumptions": list(mesh_assumptions(layout, scn.setup, efficiency)),
    }
