"""Tabulate the micro-batch chunks each pipeline rank keeps in flight under PyTorch's pipeline schedules, from the
schedules' own order generators (torch 2.13, torch/distributed/pipelining/schedules.py), no model and no process
group needed; zeroplan's closed forms (zeroplan/memory/activations/pipeline.py) are tested against the table
(tests/test_mesh_schedules.py).

    /work/venv-hf/bin/python validation/pp_schedules.py      # writes validation/pp_schedules.json

Each rank runs its own action list in order (the runtime blocks on its receives, so the order, not the timing,
decides what is alive). A chunk (one local stage, one micro-batch) is alive from its forward F until:
- its full backward B (ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B): the stage pops fwd_cache and the
  graph is freed (stage.py backward_one_chunk);
- its weight backward W (ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble): the input backward I runs
  torch.autograd.grad(..., retain_graph=True) and keeps the param groups' intermediates in backward_state until
  backward_weight_one_chunk (_backward.py stage_backward_input), so the saved tensors stay alive until W.
Recorded per rank: `peak`, the most chunks alive at once, and per local chunk `chunk_peaks`, the most of that
chunk's micro-batches alive at once (the head's chunk sets how many logits are alive).

The generators are private methods; the objects are made without __init__ (which needs stages and a process
group) and given the attributes __init__ would set. This is a validation script, not zeroplan.
"""

from __future__ import annotations

import json
from pathlib import Path

from torch.distributed.pipelining import schedules as S

HERE = Path(__file__).resolve().parent
PPS, VPPS, MICRO = (2, 3, 4, 8), (1, 2, 3, 4), (1, 2, 3, 4, 5, 6, 8, 12, 16)


def _single(cls, pp: int, m: int) -> dict[int, list]:
    sched = object.__new__(cls)
    sched._num_stages, sched._n_microbatches = pp, m
    return sched._get_pipeline_order()


def _one_f_one_b(pp: int, m: int) -> dict[int, list]:
    """Schedule1F1B as its runtime (_step_microbatches) runs it: warmup_chunks = min(m, num_stages - stage_index)
    forwards, then 1B1F (a backward before each forward), then the remaining backwards. Its display IR
    (_get_pipeline_order) starts the last rank's steady phase at micro-batch 1, so it is not used here."""
    order = {}
    for rank in range(pp):
        warmup = min(m, pp - rank)
        actions = [S._Action(rank, S.FORWARD, i) for i in range(warmup)]
        for i in range(m):
            actions.append(S._Action(rank, S.FULL_BACKWARD, i))
            if warmup + i < m:
                actions.append(S._Action(rank, S.FORWARD, warmup + i))
        order[rank] = actions
    return order


def _multi(cls, pp: int, vpp: int, m: int, rounds_rule: bool = True) -> dict[int, list] | None:
    sched = object.__new__(cls)
    sched.pp_group_size, sched.n_local_stages, sched._n_microbatches = pp, vpp, m
    sched.num_stages = pp * vpp
    rounds = max(1, m // pp)
    if rounds_rule and m % rounds:
        return None  # the schedule refuses it (ValueError in __init__)
    sched.number_of_rounds, sched.microbatches_per_round = rounds, m // rounds
    return {rank: sched._calculate_single_rank_operations(rank) for rank in range(pp)}


def alive(actions: list, frees: str) -> tuple[int, dict[int, int]]:
    """(most chunks alive at once, most alive per stage index) walking one rank's actions in order."""
    live: set[tuple[int, int]] = set()
    peak, per = 0, {}
    for a in actions:
        if a is None:
            continue
        kind = a.computation_type.value
        if kind == "F":
            live.add((a.stage_index, a.microbatch_index))
            peak = max(peak, len(live))
            for stage in {s for s, _ in live}:
                per[stage] = max(per.get(stage, 0), sum(1 for s, _ in live if s == stage))
        elif kind == frees:
            live.discard((a.stage_index, a.microbatch_index))
    return peak, per


def _row(schedule: str, pp: int, vpp: int, m: int, rank: int, peak: int, stages: list[int], per: dict) -> dict:
    return {"schedule": schedule, "pp": pp, "vpp": vpp, "m": m, "rank": rank, "peak": peak, "stages": stages,
            "chunk_peaks": [per.get(s, 0) for s in stages]}


def rows() -> list[dict]:
    found = []
    for pp in PPS:
        for m in MICRO:
            for name, order in (("gpipe", _single(S.ScheduleGPipe, pp, m)), ("1f1b", _one_f_one_b(pp, m))):
                for rank, actions in order.items():
                    peak, per = alive(actions, "B")
                    found.append(_row(name, pp, 1, m, rank, peak, [rank], per))
            for vpp in VPPS:
                for name, cls, frees in (("interleaved-1f1b", S.ScheduleInterleaved1F1B, "B"),
                                         ("interleaved-zb", S.ScheduleInterleavedZeroBubble, "W")):
                    order = _multi(cls, pp, vpp, m)
                    if order is None:
                        continue
                    for rank, actions in order.items():
                        peak, per = alive(actions, frees)
                        stages = [rank + k * pp for k in range(vpp)]
                        found.append(_row(name, pp, vpp, m, rank, peak, stages, per))
            order = _multi(S.ScheduleZBVZeroBubble, pp, 2, m, rounds_rule=False)
            for rank, actions in order.items():
                peak, per = alive(actions, "W")
                stages = [rank, 2 * pp - 1 - rank]  # the V: chunk 0 going down, chunk 1 coming back
                found.append(_row("zbv", pp, 2, m, rank, peak, stages, per))
    return found


if __name__ == "__main__":
    import torch

    table = {"source": f"torch {torch.__version__} torch/distributed/pipelining/schedules.py order generators "
                       "(validation/pp_schedules.py)", "rows": rows()}
    lines = [json.dumps(row, separators=(",", ":")) for row in table["rows"]]
    (HERE / "pp_schedules.json").write_text(f'{{"source": {json.dumps(table["source"])},\n"rows": [\n'
                                            + ",\n".join(lines) + "\n]}\n")
    print(len(table["rows"]), "rows")
