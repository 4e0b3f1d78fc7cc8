"""Property tests over the calculator's input space (hypothesis)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from zeroplan.memory.estimate import Scenario, evaluate
from zeroplan.memory.recipes import make_recipe
from zeroplan.memory.setup import (
    DeepSpeedKnobs,
    OffloadDevice,
    Optimizer,
    Parallelism,
    Precision,
    ZeroStage,
)
from zeroplan.memory.states import ModelSummary, model_state_bytes
from zeroplan.memory.terms import shard_numel

params = st.integers(min_value=1, max_value=10**15)
gpus = st.integers(min_value=1, max_value=10**6)
recipes = st.builds(make_recipe, st.sampled_from(list(Precision)), st.sampled_from(list(Optimizer)), st.booleans())
offloads = st.sampled_from(list(OffloadDevice))


@given(params, gpus, recipes)
def test_model_states_never_grow_from_stage_0_to_3(num, dp, recipe):
    totals = [model_state_bytes(num, recipe, s, dp).total for s in ZeroStage]
    assert totals == sorted(totals, reverse=True)
    assert all(type(t) is int for t in totals)


@given(params, recipes)
def test_one_gpu_all_stages_equal(num, recipe):
    assert len({model_state_bytes(num, recipe, s, 1).total for s in ZeroStage}) == 1


@given(params, gpus, recipes)
def test_shards_times_dp_give_back_the_whole(num, dp, recipe):
    whole = model_state_bytes(num, recipe, ZeroStage.zero0, 1)
    part = model_state_bytes(num, recipe, ZeroStage.zero3, dp)
    pad = (shard_numel(num, dp) * dp - num)  # DeepSpeed pads partitions; fewer than dp elements
    assert 0 <= pad < dp
    assert part.total * dp == whole.total + pad * recipe.total_bytes


@given(params, gpus, gpus, recipes, st.sampled_from(list(ZeroStage)))
def test_more_gpus_never_need_more_model_state_memory(num, a, b, recipe, stage):
    lo, hi = sorted((a, b))
    assert model_state_bytes(num, recipe, stage, hi).total <= model_state_bytes(num, recipe, stage, lo).total


@given(params, params, gpus, recipes, st.sampled_from(list(ZeroStage)))
def test_monotone_in_parameter_count(a, b, dp, recipe, stage):
    lo, hi = sorted((a, b))
    assert model_state_bytes(lo, recipe, stage, dp).total <= model_state_bytes(hi, recipe, stage, dp).total


@given(params, st.integers(1, 64), st.sampled_from(list(ZeroStage)), offloads, offloads,
       st.integers(0, 10**12), st.integers(0, 10**9))
@settings(max_examples=200)
def test_peak_lines_sum_to_total_and_are_integers(num, dp, stage, opt, par, acts, largest):
    scn = Scenario(model=ModelSummary(name="m", num_params=num, largest_layer_params=min(largest, num)),
                   parallelism=Parallelism(gpus=dp), knobs=DeepSpeedKnobs(offload_optimizer=opt, offload_param=par))
    est = evaluate(scn, stage, activation_bytes=acts)
    view = est.gpu_bytes()
    assert all(type(v) is int and v >= 0 for v in view.values())
    assert sum(v for k, v in view.items() if k != "total") == view["total"]
    assert type(est.cpu_bytes_per_node) is int


@given(params, st.integers(1, 64), st.sampled_from(list(ZeroStage)), st.integers(0, 10**12), st.integers(0, 10**12))
def test_peak_monotone_in_activations(num, dp, stage, a, b):
    scn = Scenario(model=ModelSummary(name="m", num_params=num), parallelism=Parallelism(gpus=dp))
    lo, hi = sorted((a, b))
    assert evaluate(scn, stage, activation_bytes=lo).total <= evaluate(scn, stage, activation_bytes=hi).total
