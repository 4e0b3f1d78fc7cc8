"""The pipeline bubble per schedule, in micro-batch times, and how many stage boundaries a micro-batch crosses.

Sources: Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM" (arXiv:2104.04473) section 2.2: GPipe and 1F1B idle (p - 1) micro-batch times per step, bubble
fraction (p - 1) / m; interleaved with v model chunks per rank, (p - 1) / (v m), at v times the point-to-point
traffic. Qi et al. 2023, "Zero Bubble Pipeline Parallelism" (arXiv:2401.10241) and its authors' repository
(sail-sg/zero-bubble-pipeline-parallelism README, "Comparison assuming T_F=T_B=T_W"): ZB-V, two chunks per rank
in a V, bubble 0 at 1F1B's activation memory and twice its pipeline traffic. Pure: no I/O.
"""

from __future__ import annotations

from zeroplan.errors import ZeroplanError
from zeroplan.models.mesh import Mesh, Schedule

def bubble_micro_batches(mesh: Mesh, micro_batches: int | None = None) -> float:
    """Idle time per optimizer step, in micro-batch (forward + backward) times of one stage.

    1F1B, GPipe: p - 1; interleaved 1F1B: (p - 1) / v (arXiv:2104.04473 2.2) for m >= p micro-batches; with
    m < p the ring cannot fill: max(p - m, 0) + (min(m, p) - 1) / v. ZB-V: 0 with T_F = T_B = T_W
    (arXiv:2401.10241). The interleaved zero-bubble schedule has no stated bubble: refused.

    The m < p form, worked in chunk-steps of t_mb / v: ScheduleInterleaved1F1B runs one round of g = m micro-batches
    per chunk, so rank 0 takes chunk k + 1 of micro-batch 0 only when it comes back from rank p - 1, p steps after
    chunk k; the forward ends at (v - 1) p + m + (p - 1) steps against m v busy, an idle
    (p - m) v + m - 1 chunk-steps = (p - m) + (m - 1) / v micro-batch times, the backward alike; at m = p it is
    Narayanan's (p - 1) / v, at m = 1 1F1B's p - 1. None: m >= p assumed.
    """
    p = mesh.pp
    if p == 1:
        return 0.0
    if mesh.schedule in (Schedule.one_f_one_b, Schedule.gpipe):
        return float(p - 1)
    if mesh.schedule is Schedule.interleaved:
        m = p if micro_batches is None else micro_batches
        return max(p - m, 0) + (min(m, p) - 1) / mesh.chunks
    if mesh.schedule is Schedule.zbv:
        return 0.0
    raise ZeroplanError(f"--pp-schedule {mesh.schedule.value}: the zero-bubble paper (arXiv:2401.10241) states no "
                        "bubble for the interleaved zero-bubble schedule; zeroplan times 1f1b, gpipe, "
                        "interleaved-1f1b and zbv")


def boundaries_per_micro_batch(mesh: Mesh) -> int:
    """Stage boundaries one rank sends across per micro-batch and direction: one per model chunk it holds (the
    last rank's last chunk sends nothing; the busiest rank is counted)."""
    return mesh.chunks if mesh.pp > 1 else 0
