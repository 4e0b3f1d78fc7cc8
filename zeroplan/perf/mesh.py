"""Step time of one rank of a tensor x pipeline x context x data (x expert) mesh: compute, TP, CP, EP, the pipeline
bubble and point-to-point traffic, and ZeRO's collectives over the data-parallel group.

t_step = (m + B) x max_stage t_mb + max_stage ZeRO_exposed, with
t_mb = t_fwd + t_bwd + t_TP + t_CP,exposed + t_EP + t_p2p for one micro-batch on one rank of a stage, m micro-batches
(gradient accumulation steps), B the bubble in micro-batch times (perf/pipeline.py), ZeRO_exposed the overlap rule
of perf/throughput.py over the stage's compute windows. Every formula and source: docs/throughput.md, "Mesh".
The pure data-parallel path (perf/throughput.py) is not this one. Pure: no I/O.

Use: `layout = mesh_layout(model, arch, params, hw, par)` once per model, hardware and mesh (it places the groups and
counts each stage's work), then `mesh_step(layout, setup, stage, knobs)` per setup: a slotted MeshStep, no pydantic.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from zeroplan.errors import ZeroplanError
from zeroplan.hardware.spec import HardwareSpec, Topology
from zeroplan.memory.activations.checkpointing import op_sac_recomputed_params
from zeroplan.memory.mesh import MeshModel, StageShare
from zeroplan.memory.setup import (
    Attention,
    Checkpointing,
    DeepSpeedKnobs,
    Parallelism,
    TrainingSetup,
    ZeroStage,
)
from zeroplan.models.architecture import Architecture, ParamCount
from zeroplan.models.mesh import Mesh
from zeroplan.perf.collectives import default_topology
from zeroplan.perf.flops import (
    ATTN_FWD_FLOPS,
    BWD_PER_FWD,
    CAUSAL_FRACTION,
    FWD_FLOPS_PER_PARAM,
    TFLOPS,
    model_flops_per_token,
    peak_tflops,
)
from zeroplan.perf.mesh_comm import StageCost, stage_cost, wrapped_share
from zeroplan.perf.pipeline import bubble_micro_batches
from zeroplan.perf.placement import Group, mesh_groups
from zeroplan.perf.schedule import CommTerm
from zeroplan.perf.throughput import exposed_per_step
from zeroplan.perf.zero_mesh import optimizer_step_s, zero_terms


@dataclass(frozen=True, slots=True)
class StageWork:
    """What one rank of one pipeline stage runs per token and holds (from memory.mesh.StageShare)."""

    index: int
    count: int  # pipeline stages with this same work (the middle stages are alike)
    layers: int
    moe_layers: int
    matmul_params: float  # per rank: weights a token multiplies (experts: the top-k share), embedding included
    dense: int  # elements ZeRO shards over the dense data-parallel group
    experts: int  # elements ZeRO shards over the expert data-parallel group


@dataclass(frozen=True, slots=True, eq=False)
class MeshLayout:
    """A model on a mesh on hardware: the placed groups and each distinct stage's work. Independent of the setup."""

    mesh: Mesh
    arch: Architecture
    params: ParamCount
    hw: HardwareSpec
    topology: Topology
    gpus_per_node: int
    groups: dict[str, Group]
    stages: tuple[StageWork, ...]
    warnings: tuple[str, ...]
    cache: dict = field(default_factory=dict)  # ZeRO terms per (stage, knobs, bytes): they do not depend on the batch


@dataclass(frozen=True, slots=True)
class MeshStep:
    """One optimizer step on the mesh, per GPU; seconds and bytes per step unless named per micro-batch."""

    step_time_s: float
    compute_s: float  # m x (t_fwd + t_bwd) of the slowest stage, recompute included
    tp_s: float
    cp_exposed_s: float
    ep_s: float
    p2p_s: float
    bubble_s: float
    zero_exposed_s: float
    zero_comm_s: float  # ZeRO's transfers end to end, as if nothing overlapped
    tokens_per_s_per_gpu: float
    mfu: float
    achieved_tflops: float  # FLOPs run per GPU per second, recompute included, averaged over the stages
    slowest_stage: int
    cost: StageCost  # the slowest stage's per-micro-batch terms (seconds and wire bytes)
    zero_terms: tuple[CommTerm, ...]  # the slowest stage's ZeRO transfers
    optimizer_step_s: float = 0.0  # the longest stage's optimizer step (perf.optimizer_step), in step_time_s


def _active_experts(share: StageShare, arch: Architecture, mesh: Mesh) -> float:
    """Expert weights one token multiplies on this rank: the rank's experts x ep x top-k / experts."""
    if not share.experts:
        return 0.0
    return share.experts * mesh.ep * arch.num_experts_per_tok / arch.num_experts


def _stage_work(share: StageShare, arch: Architecture, mesh: Mesh) -> StageWork:
    """Weights per token of one rank, counted as perf/flops.py counts a model (2 FLOPs per parameter per token,
    the embedding table included, the 6N convention): the stage's dense elements plus its active experts."""
    ids = [i for first, last in share.chunks for i in range(first, last + 1)]  # interleaved ranks hold several chunks
    kinds = tuple(arch.mlp_types[i] for i in ids) if arch.mlp_types else ()
    layers = len(ids)
    moe = kinds.count("moe") if kinds else (layers if arch.is_moe else 0)
    return StageWork(index=share.index, count=1, layers=layers, moe_layers=moe,
                     matmul_params=share.dense + _active_experts(share, arch, mesh), dense=share.dense,
                     experts=share.experts)


def _distinct(works: list[StageWork]) -> tuple[StageWork, ...]:
    """One StageWork per distinct stage, `count` saying how many stages are alike."""
    first: dict[tuple, StageWork] = {}
    counts: dict[tuple, int] = {}
    for w in works:
        key = (w.layers, w.moe_layers, w.matmul_params, w.dense, w.experts)
        first.setdefault(key, w)
        counts[key] = counts.get(key, 0) + 1
    return tuple(w if counts[k] == 1 else replace(w, count=counts[k]) for k, w in first.items())


def mesh_layout(model: MeshModel, arch: Architecture, params: ParamCount, hw: HardwareSpec, par: Parallelism,
                topology: Topology | None = None) -> MeshLayout:
    """Place the mesh's groups on `par`'s nodes (tp-cp-ep-dp-pp) and count each pipeline stage's work, once."""
    mesh = model.mesh
    if mesh.gpus != par.gpus:
        raise ZeroplanError(f"the mesh has {mesh.gpus} GPUs and the run {par.gpus}")
    topology = topology or default_topology(hw, par)
    groups = mesh_groups(mesh, hw, par.gpus_per_node, topology)
    warnings = ()
    if groups["tp"].spans_nodes:
        warnings = ((f"tensor parallel {mesh.tp} spans nodes ({par.gpus_per_node} GPUs per node): its per-layer "
                     "all-reduces cross the NICs; keep tp within a node"),)
    works = _distinct([_stage_work(s, arch, mesh) for s in model.shares])
    return MeshLayout(mesh=mesh, arch=arch, params=params, hw=hw, topology=topology,
                      gpus_per_node=par.gpus_per_node, groups=groups, stages=works, warnings=warnings)


def stage_flops(w: StageWork, layout: MeshLayout, setup: TrainingSetup) -> tuple[float, float]:
    """(forward, backward) FLOPs of one rank of stage `w` per micro-step, recompute included: perf/flops.py's
    counting on the rank's share. T = b s / cp tokens; forward T (2 W + A), W the rank's weights,
    A = 4 l (H/t) d_h s (x 1/2 causal with flash/SDPA); backward 2 x forward + recompute (full: the forward, times
    the share of layers wrapped; selective: A; selective-op: 2 T l W_op / t)."""
    arch, mesh = layout.arch, layout.mesh
    tokens = setup.tokens_per_micro_step / mesh.cp
    attn = ATTN_FWD_FLOPS * w.layers * (arch.num_attention_heads // mesh.tp) * arch.head_dim * setup.seq_len
    attn *= CAUSAL_FRACTION if setup.attention is Attention.flash else 1.0
    forward = tokens * (FWD_FLOPS_PER_PARAM * w.matmul_params + attn)
    if setup.checkpointing is Checkpointing.full:
        recompute = forward * wrapped_share(w.layers, setup)
    elif setup.checkpointing is Checkpointing.selective_op:
        recompute = tokens * FWD_FLOPS_PER_PARAM * w.layers * op_sac_recomputed_params(arch) / mesh.tp
    else:
        recompute = tokens * attn if setup.checkpointing is Checkpointing.selective else 0.0
    return forward, BWD_PER_FWD * forward + recompute


def mesh_step(layout: MeshLayout, setup: TrainingSetup, stage: ZeroStage, knobs: DeepSpeedKnobs,
              mfu: float | None = None) -> MeshStep:
    """Step time, tokens/s/GPU and MFU of one optimizer step on `layout`'s mesh at ZeRO `stage`.

    t_step = (m + B) max_s t_mb(s) + max_s ZeRO_exposed(s); m = setup.grad_accum micro-batches per pipeline,
    B = bubble_micro_batches(mesh, m); t_mb per perf/mesh_comm.stage_cost. docs/throughput.md, "Mesh".
    """
    eta = layout.hw.default_mfu if mfu is None else mfu
    if not 0 < eta <= 1:
        raise ZeroplanError(f"mfu ({eta}) must be in (0, 1]")
    peak = peak_tflops(layout.hw, setup.precision) * TFLOPS
    per_s, m, mesh = peak * eta, setup.grad_accum, layout.mesh
    costs, flops_run = [], 0.0
    for w in layout.stages:
        fwd, bwd = stage_flops(w, layout, setup)
        costs.append(stage_cost(layout, w, setup, fwd / per_s, bwd / per_s, per_s))
        flops_run += (fwd + bwd) * w.count
    slow = max(range(len(costs)), key=lambda i: costs[i].micro_batch_s)
    cost = costs[slow]
    bubble_s = bubble_micro_batches(mesh, m) * cost.micro_batch_s
    exposed, zero_s, terms, steps = [], 0.0, (), []
    for w, c in zip(layout.stages, costs):
        found = zero_terms(layout, w, stage, knobs, setup.precision.compute_bytes)
        steps.append(optimizer_step_s(layout, w, stage, knobs, setup))
        exposed.append(exposed_per_step(list(found), c.forward_s, c.backward_s, m))
        if w is layout.stages[slow]:
            terms = found
            zero_s = sum(t.time_s * (m if t.every_micro_step else 1) for t in found)
    after = max(e + s for e, s in zip(exposed, steps))  # ZeRO's exposed transfers and the optimizer step, per stage
    step_s = m * cost.micro_batch_s + bubble_s + after
    tokens = setup.tokens_per_micro_step * m * mesh.dp / mesh.gpus
    model = model_flops_per_token(layout.params, layout.arch, setup.seq_len) * tokens
    return MeshStep(
        step_time_s=step_s, compute_s=m * (cost.forward_s + cost.backward_s), tp_s=m * cost.tp_s,
        cp_exposed_s=m * cost.cp_exposed_s, ep_s=m * cost.ep_s, p2p_s=m * cost.p2p_s, bubble_s=bubble_s,
        zero_exposed_s=max(exposed), zero_comm_s=zero_s, tokens_per_s_per_gpu=tokens / step_s,
        mfu=model / (step_s * peak), achieved_tflops=m * flops_run / mesh.pp / step_s / TFLOPS,
        slowest_stage=layout.stages[slow].index, cost=cost, zero_terms=terms, optimizer_step_s=max(steps))

