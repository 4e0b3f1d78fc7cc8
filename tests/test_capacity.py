"""Capacity searches agree with direct evaluation at their answer and one step past it."""

from dataclasses import replace

import pytest

from zeroplan.errors import ZeroplanError
from zeroplan.hardware.presets import load_hardware
from zeroplan.memory.capacity import gpu_layouts, max_model, min_gpus
from zeroplan.memory.estimate import Scenario, evaluate, overheads_for
from zeroplan.memory.setup import Parallelism, ZeroStage
from zeroplan.memory.states import ModelSummary

H100 = load_hardware("h100-sxm-80gb")


def scn(num_params: int, gpus: int = 8, hw=H100) -> Scenario:
    return Scenario(model=ModelSummary(name="m", num_params=num_params, largest_layer_params=num_params // 100),
                    parallelism=Parallelism(gpus=gpus), hardware=hw, overheads=overheads_for(hw, None, None, None))


@pytest.mark.parametrize("stage", list(ZeroStage))
def test_min_gpus_is_the_first_layout_that_fits(stage):
    s = scn(3 * 10**9)
    found = min_gpus(s, stage)
    layouts = gpu_layouts(H100.gpus_per_node)
    assert found is not None
    i = layouts.index(found)
    assert evaluate(replace(s, parallelism=found), stage).fits
    assert all(not evaluate(replace(s, parallelism=p), stage).fits for p in layouts[:i])


def test_min_gpus_none_when_even_the_limit_does_not_fit():
    assert min_gpus(scn(10**14), ZeroStage.zero0) is None


def test_layouts_fill_one_node_then_whole_nodes():
    layouts = gpu_layouts(8, limit=32)
    assert [(p.gpus, p.nodes) for p in layouts] == [(g, 1) for g in range(1, 9)] + [(16, 2), (24, 3), (32, 4)]


@pytest.mark.parametrize("stage", list(ZeroStage))
def test_max_model_fits_and_the_next_step_does_not(stage):
    s = scn(10**9)
    best = max_model(s, stage)
    def fits_at(n: int) -> bool:
        return evaluate(replace(s, model=replace(s.model, num_params=n)), stage).fits

    assert fits_at(best.num_params)
    assert not fits_at(best.num_params + 10**9 // 1000)  # the search steps in 0.1 % of the given count


def test_zero3_trains_a_larger_model_than_zero0():
    s = scn(10**9)
    sizes = [max_model(s, stage).num_params for stage in ZeroStage]
    assert sizes == sorted(sizes)


def test_capacity_needs_hardware():
    with pytest.raises(ZeroplanError, match="hardware"):
        min_gpus(scn(10**9, hw=None), ZeroStage.zero3)
