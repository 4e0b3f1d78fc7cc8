"""The schedule side of the parallelism search: interleaving's bubble when the micro-batches cannot fill the ring,
and what the search then chooses (docs/advisor.md, "Schedules"; docs/throughput.md, "Mesh")."""

from __future__ import annotations

import pytest

from zeroplan.advise.layouts.search import search_parallelism
from zeroplan.models.mesh import Mesh, Schedule
from zeroplan.perf.pipeline import bubble_micro_batches
from zeroplan.scenario import ScenarioArgs, scenario


@pytest.mark.parametrize(("mesh", "m", "bubble"), [
    # worked by hand in chunk-steps (perf/pipeline.py): idle (p - m) v + m - 1 when m < p, (p - 1) when m >= p
    (Mesh(gpus=4, pp=4, vpp=2), 8, 1.5),  # Narayanan's (p - 1) / v
    (Mesh(gpus=4, pp=4, vpp=2), 4, 1.5),
    (Mesh(gpus=4, pp=4, vpp=2), 2, 2.5),  # (4 - 2) + (2 - 1) / 2
    (Mesh(gpus=4, pp=4, vpp=2), 1, 3.0),  # one micro-batch: the pipeline runs in sequence, as under 1F1B
    (Mesh(gpus=2, pp=2, vpp=63), 1, 1.0),
    (Mesh(gpus=4, pp=4), 2, 3.0),  # 1F1B: p - 1 whatever m
    (Mesh(gpus=4, pp=4, schedule=Schedule.interleaved, vpp=4), None, 0.75),  # no m given: m >= p
])
def test_interleaved_bubble_when_the_ring_cannot_fill(mesh, m, bubble):
    assert bubble_micro_batches(mesh, m) == pytest.approx(bubble)


def test_one_micro_batch_gains_nothing_from_interleaving():
    """With accumulation 1 interleaving saves no bubble and adds v x the sends: every variant is slower than 1F1B."""
    from dataclasses import replace

    from zeroplan.advise.advisor import planned_scenario
    from zeroplan.advise.layouts import speed
    from zeroplan.advise.layouts.fit import Fitter
    from zeroplan.advise.layouts.space import Layout, Stack, virtual_stages
    from zeroplan.memory.setup import Checkpointing, ZeroStage
    from zeroplan.perf.collectives import default_topology

    scn = scenario(ScenarioArgs(model="llama-3.1-405b", gpus="256", hardware="h100-sxm-80gb", seq_len="8192"))
    planned = planned_scenario(scn)[1]
    fitter = Fitter.of(planned, "llama-3.1-405b", planned.usable_bytes, 64)
    flat = Layout(tp=1, pp=2, cp=2, ep=1, dp=64, stack=Stack.torchtitan)
    topology, timing = default_topology(planned.hardware, planned.parallelism), {}

    def step(layout):
        run = fitter.scenario(layout, ZeroStage.zero3, Checkpointing.full, 1)
        assert run.setup.grad_accum == 1
        return speed.step(run, ZeroStage.zero3, topology, None, timing)

    one = step(flat)
    assert virtual_stages(126, 2) == (2, 32, 63)
    for v in virtual_stages(126, 2):
        inter = step(replace(flat, vpp=v))
        # the same p - 1 = 1 micro-batch times idle (each micro-batch a little longer: v x the sends)
        assert inter.bubble_s == pytest.approx(inter.cost.micro_batch_s) and one.bubble_s == pytest.approx(
            one.cost.micro_batch_s)
        assert inter.p2p_s > one.p2p_s and inter.step_time_s > one.step_time_s
