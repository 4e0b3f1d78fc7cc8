"""Global-batch sweep and the 11% crossing for the article's setup (its section 3, docs/advisor.md)."""

from __future__ import annotations

import pytest
from presetmodels import GEMMA2_9B as preset_gemma2
from presetmodels import GEMMA2_9B_ARCH as preset_gemma2_arch

from zeroplan.errors import ZeroplanError
from zeroplan.hardware.presets import load_hardware
from zeroplan.hardware.spec import Topology
from zeroplan.memory.setup import DeepSpeedKnobs, Parallelism, TrainingSetup, ZeroStage
from zeroplan.perf.sweep import (
    find_overhead_crossing,
    split_global_batch,
    sweep_global_batch,
)

PSI = 9_241_705_984  # gemma2-9b's published count (SPEC section 7)
GEMMA2_9B, ARCH = preset_gemma2, preset_gemma2_arch
assert GEMMA2_9B.num_params == PSI
BATCHES = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
NO_OVERLAP = DeepSpeedKnobs(overlap_comm=False, stage3_prefetch_bucket_size=0)


def article_sweep(knobs: DeepSpeedKnobs, max_micro_batch: int | None):
    return sweep_global_batch(
        GEMMA2_9B,
        ARCH,
        load_hardware("h100-sxm-80gb"),
        TrainingSetup(),
        Parallelism(gpus=8),
        knobs,
        BATCHES,
        Topology.nvlink,
        max_micro_batch=max_micro_batch,
    )


@pytest.mark.parametrize(
    ("global_batch", "cap", "expected"),
    [(512, None, (64, 1)), (512, 4, (4, 16)), (48, 4, (3, 2)), (8, 4, (1, 1))],
    ids=["no-cap", "cap-4", "largest-divisor", "one-per-gpu"],
)
def test_split_global_batch(global_batch: int, cap: int | None, expected: tuple[int, int]) -> None:
    assert split_global_batch(global_batch, 8, cap) == expected


def test_global_batch_must_divide_over_ranks() -> None:
    with pytest.raises(ZeroplanError, match=r"global batch \(12\) is not a multiple of the data-parallel degree \(8\)"):
        split_global_batch(12, 8, None)


def test_overhead_falls_while_the_micro_batch_grows_then_stays_with_accumulation() -> None:
    points = article_sweep(NO_OVERLAP, max_micro_batch=4)
    growing = [p.overhead_pct() for p in points if p.grad_accum == 1]
    accumulating = [p.overhead_pct() for p in points if p.micro_batch == 4]
    assert growing == sorted(growing, reverse=True) and len(growing) == 3
    assert max(accumulating) - min(accumulating) < 2.5, "accumulation leaves ZeRO-3's per-token comm unchanged"


def test_article_setup_crossing_needs_tokens_per_micro_step_not_global_batch() -> None:
    """Without overlap the 11% line is crossed at 4 x 2048 -> 8 x 2048 tokens per micro-step (global batch 32 with
    no accumulation); capped at 4 sequences per micro-step it is never crossed, however large the global batch."""
    crossing = find_overhead_crossing(article_sweep(NO_OVERLAP, None), 11.0)
    assert (crossing.global_batch, crossing.tokens_per_micro_step) == (32, 8192)
    assert find_overhead_crossing(article_sweep(NO_OVERLAP, 4), 11.0) is None


def test_with_deepspeed_defaults_zero3_stays_under_11_percent_everywhere() -> None:
    points = article_sweep(DeepSpeedKnobs(), 1)
    assert find_overhead_crossing(points, 11.0) is points[0]
    assert max(p.overhead_pct() for p in points) < 11.0


def test_crossing_is_the_point_after_the_last_exceedance() -> None:
    points = article_sweep(NO_OVERLAP, None)
    over = [p.global_batch for p in points if p.overhead_pct() > 11.0]
    assert find_overhead_crossing(points, 11.0).global_batch == BATCHES[BATCHES.index(max(over)) + 1]
    assert find_overhead_crossing(points, 11.0, ZeroStage.zero0) is points[0]
    assert find_overhead_crossing(points, -1.0) is None
