"""The micro-batches each pipeline rank keeps in flight at its peak, per schedule, and which model chunks it holds.

A rank holds `vpp` model chunks of L / (pp x vpp) layers (one chunk, its stage, without interleaving; a layer count
that does not divide, or given first / last stage counts, splits as stage_layer_counts says). A chunk's
saved activations for one micro-batch are alive from its forward until its backward frees them; the counts below
are the most chunk-micro-batches alive at once on rank r (0 = first) with m micro-batches, read from the schedules'
own source (torch 2.13 torch/distributed/pipelining/schedules.py, and Megatron-LM's
megatron/core/pipeline_parallel/schedules.py) and checked against the table validation/pp_schedules.py makes by
running PyTorch's order generators (tests/test_mesh_schedules.py):

- gpipe (ScheduleGPipe): every forward, then every backward: m.
- 1f1b (Schedule1F1B, Megatron's forward_backward_pipelining_without_interleaving): warmup_chunks =
  min(m, pp - r) forwards, then one backward before each forward: min(pp - r, m).
- interleaved-1f1b (ScheduleInterleaved1F1B, Narayanan et al. 2021 arXiv:2104.04473): _get_warmup_ops gives
  W = min((vpp - 1) g + 2 (pp - 1 - r), m vpp) warm-up forwards, g = m / max(1, m // pp) micro-batches per round;
  the steady phase runs a forward before each backward: min(W + 1, m vpp). Megatron-LM's interleaving (current
  main: (pp - r - 1) x 2 + (vpp - 1) x microbatch_group_size_per_vp_stage, default pp) gives the same where m is a
  multiple of pp.
- interleaved-zb (ScheduleInterleavedZeroBubble, Qi et al. 2023 arXiv:2401.10241, ZB-1P): W = min((vpp - 1) g +
  (pp - 1 - r), m vpp) and the weight backward W of rank r runs r backwards late; the input backward keeps the
  graph (autograd.grad(retain_graph=True), _backward.py stage_backward_input) until the weight backward, so a
  chunk stays alive until W: min((vpp - 1) g + pp, m vpp), the same on every rank.
- zbv (ScheduleZBVZeroBubble, the V of Qi et al. section 6; exactly 2 chunks per rank, rank r holding stages r
  and 2 pp - 1 - r): min(2 pp - r - 1, m) + min(r + 1, m).
The head (final norm, logits, loss) sits on the chunk of the last stage: on rank pp - 1, or rank 0 under zbv; that
chunk keeps 1 micro-batch in flight (m under gpipe, min(pp, m) under interleaved-zb). Pure: no I/O.
"""

from __future__ import annotations

from zeroplan.errors import ZeroplanError
from zeroplan.models.mesh import Mesh, Schedule, layer_counts, stage_layer_counts  # noqa: F401 (re-exported)


def rank_stages(mesh: Mesh, rank: int) -> tuple[int, ...]:
    """The global stage indices rank `rank` holds: r, r + pp, ... (looped), or r and 2 pp - 1 - r (zbv's V)."""
    if mesh.schedule is Schedule.zbv:
        return rank, 2 * mesh.pp - 1 - rank
    return tuple(rank + k * mesh.pp for k in range(mesh.chunks))


def rank_layers(num_layers: int, mesh: Mesh) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Per pipeline rank, the (first, last) layers of each of its model chunks: pp x chunks contiguous stages
    (stage_layer_counts), rank r holding the stages rank_stages names."""
    counts = layer_counts(mesh, num_layers)
    starts = [sum(counts[:g]) for g in range(len(counts))]
    return tuple(tuple((starts[g], starts[g] + counts[g] - 1) for g in rank_stages(mesh, r)) for r in range(mesh.pp))


def head_rank(mesh: Mesh) -> int:
    """The rank holding the last stage (final norm, head, loss): 0 under zbv, pp - 1 otherwise."""
    return 0 if mesh.schedule is Schedule.zbv else mesh.pp - 1


def rounds_divide(pp: int, m: int) -> bool:
    """Whether m micro-batches split into PyTorch's rounds of pp: m a multiple of max(1, m // pp), which
    ScheduleInterleaved1F1B and ScheduleInterleavedZeroBubble require (torch 2.13 schedules.py __init__)."""
    return m % max(1, m // pp) == 0


def _per_round(mesh: Mesh, m: int) -> int:
    rounds = max(1, m // mesh.pp)
    if not rounds_divide(mesh.pp, m):
        raise ZeroplanError(f"--pp-schedule {mesh.schedule.value}: {m} micro-batches (gradient accumulation) is not "
                            f"a multiple of the {rounds} rounds of {mesh.pp} (PyTorch's ScheduleInterleaved1F1B / "
                            "ScheduleInterleavedZeroBubble refuse it)")
    return m // rounds


def chunks_in_flight(mesh: Mesh, m: int, rank: int) -> int:
    """The most chunk-micro-batches rank `rank` keeps alive at once with m micro-batches (module docstring)."""
    pp, v, r = mesh.pp, mesh.chunks, rank
    match mesh.schedule:
        case Schedule.gpipe:
            return m
        case Schedule.one_f_one_b:
            return min(pp - r, m)
        case Schedule.interleaved:
            warmup = min((v - 1) * _per_round(mesh, m) + 2 * (pp - 1 - r), m * v)
            return min(warmup + 1, m * v)
        case Schedule.interleaved_zero_bubble:
            return min((v - 1) * _per_round(mesh, m) + pp, m * v)
        case Schedule.zbv:
            return min(2 * pp - r - 1, m) + min(r + 1, m)
    raise ZeroplanError(f"--pp-schedule {mesh.schedule.value} is not modelled")


def head_in_flight(mesh: Mesh, m: int) -> int:
    """Micro-batches the last stage's chunk keeps alive at once: its logits and loss are counted this many times."""
    if mesh.schedule is Schedule.gpipe:
        return m
    if mesh.schedule is Schedule.interleaved_zero_bubble:
        return min(mesh.pp, m)
    return 1


def chunk_counts(mesh: Mesh, m: int, rank: int) -> tuple[int, ...]:
    """chunks_in_flight split over the rank's chunks (rank_stages order) at the rank's first peak, the end of its
    warm-up: one chunk holds them all; zbv's V holds min(2 pp - r - 1, m) on stage r and min(r + 1, m) on 2 pp - 1 - r;
    the looped schedules run their forwards in rounds of g micro-batches per chunk (chunk 0's g, chunk 1's g, ...),
    so the n forwards split in blocks of g (validation/pp_measured.json's in_flight_by_stage)."""
    n = chunks_in_flight(mesh, m, rank)
    if mesh.chunks == 1:
        return (n,)
    if mesh.schedule is Schedule.zbv:
        return min(2 * mesh.pp - rank - 1, m), min(rank + 1, m)
    g = _per_round(mesh, m)
    counts = [0] * mesh.chunks
    for i in range(n):
        counts[(i // g) % mesh.chunks] += 1
    return tuple(counts)
