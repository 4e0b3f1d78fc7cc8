"""Model states per ZeRO stage against public golden numbers (exact), and the engine buffers."""

import pytest

from zeroplan.memory.buffers import engine_buffers, stage3_live_params
from zeroplan.memory.recipes import make_recipe
from zeroplan.memory.setup import (
    DeepSpeedKnobs,
    OffloadDevice,
    Optimizer,
    Parallelism,
    Precision,
    ZeroStage,
)
from zeroplan.memory.stage import estimate_stage
from zeroplan.memory.states import ModelSummary, model_state_bytes
from zeroplan.memory.terms import Phase, shard_numel

BF16_TRUE = make_recipe(Precision.bf16_true, Optimizer.adamw)
MIXED = make_recipe(Precision.bf16_mixed, Optimizer.adamw)
GB = 10**9

# Source article (its sections 2.1-2.2, docs/advisor.md): 9e9 params, 8 GPUs, pure bf16 AdamW, decimal GB.
ARTICLE = {
    ZeroStage.zero0: (18, 18, 36, 72),
    ZeroStage.zero1: (18, 18, 4.5, 40.5),
    ZeroStage.zero2: (18, 2.25, 4.5, 24.75),
    ZeroStage.zero3: (2.25, 2.25, 4.5, 9),
}


@pytest.mark.parametrize("stage", list(ARTICLE), ids=lambda s: f"article-table-ZeRO-{int(s)}")
def test_article_table(stage):
    states = model_state_bytes(9_000_000_000, BF16_TRUE, stage, dp=8)
    assert (states.parameters, states.gradients, states.optimizer_states, states.total) == tuple(
        int(x * GB) for x in ARTICLE[stage]
    )


# ZeRO paper (arXiv:1910.02054) Figure 1: Psi = 7.5B, N_d = 64, K = 12 -> 120 / 31.4 / 16.6 / 1.875 GB.
ZERO_PAPER_FIG1 = {
    ZeroStage.zero0: 120_000_000_000,
    ZeroStage.zero1: 31_406_250_000,  # 4 Psi + K Psi / N_d
    ZeroStage.zero2: 16_640_625_000,  # 2 Psi + 14 Psi / N_d
    ZeroStage.zero3: 1_875_000_000,  # 16 Psi / N_d
}


@pytest.mark.parametrize("stage", list(ZERO_PAPER_FIG1), ids=lambda s: f"zero-paper-fig1-ZeRO-{int(s)}")
def test_zero_paper_figure1(stage):
    assert model_state_bytes(7_500_000_000, MIXED, stage, dp=64).total == ZERO_PAPER_FIG1[stage]


def test_zero_paper_rounding_as_printed():
    gb = [round(ZERO_PAPER_FIG1[s] / GB, 1) for s in ZeroStage]
    assert gb == [120.0, 31.4, 16.6, 1.9]


@pytest.mark.parametrize("num_params,dp", [(7, 3), (10**12 + 1, 1024), (124_439_808, 6)])
def test_shards_cover_the_whole_within_one_element_per_rank(num_params, dp):
    shard = shard_numel(num_params, dp)
    assert num_params <= shard * dp < num_params + dp


def test_offload_moves_states_to_cpu():
    on_gpu = model_state_bytes(10**9, MIXED, ZeroStage.zero3, 8)
    off = model_state_bytes(10**9, MIXED, ZeroStage.zero3, 8, OffloadDevice.cpu, OffloadDevice.cpu)
    # ZeRO-3 under optimizer offload keeps its gradient partitions on the CPU too (DeepSpeed 0.19.8 stage3.py:
    # self.device is the CPU, grad_partitions_flat_buffer lives there)
    assert (off.parameters, off.gradients, off.optimizer_states) == (0, 0, 0)
    assert off.cpu_bytes == on_gpu.parameters + on_gpu.gradients + on_gpu.optimizer_states
    zero2 = model_state_bytes(10**9, MIXED, ZeroStage.zero2, 8, OffloadDevice.cpu)
    assert zero2.gradients == model_state_bytes(10**9, MIXED, ZeroStage.zero2, 8).gradients  # stages 1-2: on the GPU


def test_nvme_offload_leaves_neither_gpu_nor_cpu_copy():
    off = model_state_bytes(10**9, MIXED, ZeroStage.zero3, 8, OffloadDevice.nvme, OffloadDevice.nvme)
    # the gradient partitions stay in (pinned) host memory: stage3.py's self.device is the CPU for any offload_optimizer
    assert (off.parameters, off.gradients, off.optimizer_states) == (0, 0, 0)
    assert off.cpu_bytes == shard_numel(10**9, 8) * MIXED.grad_bytes


def _names(terms):
    return [t.name for t in terms]


def test_buffers_stage2_default_knobs():
    terms = engine_buffers(num_params=8 * 10**9, largest_layer_params=0, small_param_numel=0, recipe=MIXED,
                           stage=ZeroStage.zero2, dp=8, knobs=DeepSpeedKnobs())
    by_name = {t.name: t for t in terms}
    # reduce_bucket_size 5e8 x 2 B, overlap_comm off by default below stage 3 (DeepSpeed v0.19.6 runtime/zero/config.py)
    assert by_name["reduce bucket"].bytes == 500_000_000 * 2
    # fp32 gradient partition at the step: Psi / N_d x 4 B
    assert by_name["fp32 grad partition (step)"].bytes == 10**9 * 4
    assert by_name["fp32 grad partition (step)"].phase is Phase.step


def test_overlap_comm_doubles_bucket_in_stages_1_2_only():
    knobs = DeepSpeedKnobs(overlap_comm=True)
    s2 = engine_buffers(num_params=10**9, largest_layer_params=0, small_param_numel=0, recipe=MIXED,
                        stage=ZeroStage.zero2, dp=8, knobs=knobs)
    s3 = engine_buffers(num_params=10**9, largest_layer_params=0, small_param_numel=0, recipe=MIXED,
                        stage=ZeroStage.zero3, dp=8, knobs=knobs)
    assert [t.bytes for t in s2 if t.name.startswith("reduce bucket")] == [2 * 10**9]
    assert [t.bytes for t in s3 if t.name.startswith("reduce bucket")] == [10**9]


def test_stage3_sub_group_scratch_capped_by_sub_group_size():
    knobs = DeepSpeedKnobs(sub_group_size=10**8)
    terms = engine_buffers(num_params=8 * 10**9, largest_layer_params=0, small_param_numel=0, recipe=MIXED,
                           stage=ZeroStage.zero3, dp=8, knobs=knobs)
    assert {t.name: t.bytes for t in terms}["fp32 grad sub-group (step)"] == 10**8 * 4


@pytest.mark.parametrize(
    ("sub_group_size", "expected"),
    [(0, 66_000_000), (1, 66_000_000), (10**8, 10**8), (10**9, 10**9)],
    ids=["zero-one-param-per-group", "one-still-one-param", "sub-group", "whole-shard"],
)
def test_stage3_sub_group_is_at_least_the_largest_parameter(sub_group_size, expected):
    # stage3.py _create_fp16_sub_groups closes a sub-group once it holds sub_group_size elements, so one holds
    # at least the largest parameter's partition: 528e6 / 8 = 66e6. sub_group_size 0 (ge=0) is one per parameter.
    terms = engine_buffers(num_params=8 * 10**9, largest_layer_params=528_000_000, small_param_numel=0, recipe=MIXED,
                           stage=ZeroStage.zero3, dp=8, knobs=DeepSpeedKnobs(sub_group_size=sub_group_size))  # fmt: skip
    (scratch,) = [t for t in terms if t.name == "fp32 grad sub-group (step)"]
    assert (scratch.bytes, scratch.knob, scratch.knob_bytes) == (expected * 4, "sub_group_size", (expected - 66_000_000) * 4)


@pytest.mark.parametrize(
    "largest,max_live,prefetch,expected",
    [
        (10**6, 10**9, 5 * 10**7, 10**6 + 5 * 10**7),  # defaults: current layer + prefetch bucket
        (10**6, 2 * 10**6, 5 * 10**7, 2 * 10**6),  # capped by max live
        (10**9, 10**6, 5 * 10**7, 10**9),  # the running layer is always whole
    ],
)
def test_stage3_live_params(largest, max_live, prefetch, expected):
    knobs = DeepSpeedKnobs(stage3_max_live_parameters=max_live, stage3_prefetch_bucket_size=prefetch)
    gathered, grad = stage3_live_params(largest, MIXED, knobs)
    assert gathered.bytes == expected * 2
    assert grad.bytes == largest * 2


def test_hpz_secondary_partition():
    knobs = DeepSpeedKnobs(zero_hpz_partition_size=8)
    terms = engine_buffers(num_params=8 * 10**9, largest_layer_params=0, small_param_numel=0, recipe=MIXED,
                           stage=ZeroStage.zero3, dp=64, knobs=knobs)
    assert {t.name: t.bytes for t in terms}["hpZ secondary partition"] == 10**9 * 2


def test_peak_is_the_larger_phase():
    model = ModelSummary(name="m", num_params=8 * 10**9)
    small_acts = estimate_stage(model, MIXED, ZeroStage.zero1, Parallelism(gpus=8), DeepSpeedKnobs(), activation_bytes=10)
    big_acts = estimate_stage(model, MIXED, ZeroStage.zero1, Parallelism(gpus=8), DeepSpeedKnobs(), activation_bytes=10**11)
    assert small_acts.peak_phase is Phase.step
    assert big_acts.peak_phase is Phase.backward
    for est in (small_acts, big_acts):
        view = est.gpu_bytes()
        assert sum(v for k, v in view.items() if k != "total") == view["total"] == est.total
