"""What the mesh step-time model assumed, in words, for the output (docs/throughput.md, "Mesh"). Pure: no I/O."""

from __future__ import annotations

from zeroplan.memory.setup import TrainingSetup, ZeroStage
from zeroplan.models.mesh import CpComm, Schedule


def mesh_assumptions(layout, setup: TrainingSetup, efficiency: float) -> tuple[str, ...]:
    """One line per assumption that applied to `layout` and `setup`."""
    mesh, groups = layout.mesh, layout.groups
    notes = [
        (f"mesh {mesh.describe()}; ranks in Megatron-LM's order tp-cp-ep-dp-pp (tp fastest); a group inside a node "
         "runs on its fabric, one spanning nodes at 0.92 x NIC per GPU x its ranks per node"),
        (f"compute at {efficiency:.0%} of dense peak on every rank whatever the split (smaller GEMMs under TP are "
         "not slowed); FLOPs as perf/flops.py counts them on the rank's share (/tp, /cp, its pipeline stage's layers)"),
        f"{setup.grad_accum} micro-batches per pipeline per step (--grad-accum); the slowest stage sets the pace",
    ]
    if mesh.tp > 1:
        kind = ("all-gather + reduce-scatter pairs (sequence parallel)" if mesh.sequence_parallel
                else "all-reduces")
        notes.append(f"TP: 2 {kind} of b x s/cp x h per layer forward, 2 backward, 2 more per recomputed layer, on "
                     f"{groups['tp'].link.label}; exposed, as Megatron without --tp-comm-overlap")
    if mesh.pp > 1:
        notes.append(_pipeline_note(mesh))
        notes.append("ZeRO-2/3 with pipeline stages: DeepSpeed's PipelineEngine runs ZeRO-1 at most; stages 2-3 are "
                     "timed with their per-micro-batch collectives, as FSDP with pipelining (torchtitan) runs them")
    if mesh.cp > 1 and mesh.cp_comm is CpComm.a2a:
        notes.append("CP: DeepSpeed-Ulysses, 4 all-to-alls per layer forward (q, k, v, output; k and v at max(kv "
                     "heads, cp) heads), 4 backward, 4 more per recomputed layer, each (cp - 1)/cp of the rank's "
                     f"tensor on the cp group ({groups['cp'].link.label}); exposed (Jacobs et al. 2023)")
    elif mesh.cp > 1:
        notes.append("CP: ring attention, cp - 1 K/V block sends per layer forward (K/V and dK/dV backward), each "
                     "hidden under one block of attention compute; what exceeds it is exposed")
    if mesh.ep > 1:
        notes.append("EP: 2 all-to-alls (dispatch, combine) of the routed tokens x top-k x h per MoE layer and pass, "
                     "exposed, perfectly balanced routing; off-node shares at 0.92 x the GPU's NIC")
    notes.append(f"ZeRO-{'/'.join(str(int(s)) for s in ZeroStage)} over the data-parallel group of dp x cp = "
                 f"{groups['dp'].ranks} ranks ({groups['dp'].link.label}) with the rank's shard sizes, experts over "
                 f"their own group of {groups['expert dp'].ranks}; the overlap rule of the data-parallel model")
    notes.append("optimizer step, data loading, kernel launch, the embedding's and loss's own TP collectives and "
                 "pipeline warm-up imbalance between stages are not modelled")
    return tuple(notes)


def _pipeline_note(mesh) -> str:
    v = mesh.chunks
    bubble = {Schedule.one_f_one_b: "(p - 1) micro-batch times (arXiv:2104.04473)",
              Schedule.gpipe: "(p - 1) micro-batch times (arXiv:2104.04473)",
              Schedule.interleaved: f"(p - 1)/v micro-batch times, v = {v} (arXiv:2104.04473)",
              Schedule.zbv: "0 with T_F = T_B = T_W (ZB-V, arXiv:2401.10241)"}[mesh.schedule]
    return (f"PP: bubble {bubble}; {v} activation send(s) forward and {v} gradient send(s) backward of b x s/cp x h"
            f"{' / tp' if mesh.sequence_parallel else ''} per micro-batch on a middle stage, exposed")
