"""Hugging Face "auto" values, filled as transformers' HfTrainerDeepSpeedConfig fills them."""

import pytest

from zeroplan.deepspeed.auto import batch_auto, hidden_size_auto, precision_auto
from zeroplan.memory.setup import Precision, TrainingSetup


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        # transformers' rules (integrations/deepspeed.py) at h = 4096: h^2, int(0.9 h^2), 10 h
        ("reduce_bucket_size", 16_777_216),
        ("stage3_prefetch_bucket_size", 15_099_494),
        ("stage3_param_persistence_threshold", 40_960),
    ],
    ids=["h2", "int-0.9h2", "10h"],
)
def test_hidden_size_vector_h4096(key, expected):
    auto = hidden_size_auto(key, 4096, zero3=True, default=1)
    assert (auto.value, auto.resolved, auto.key) == (expected, True, f"zero_optimization.{key}")


def test_stage3_keys_not_filled_below_stage3():
    auto = hidden_size_auto("stage3_prefetch_bucket_size", 4096, zero3=False, default=50_000_000)
    assert (auto.value, auto.resolved) == (50_000_000, False)
    assert hidden_size_auto("reduce_bucket_size", 4096, zero3=False, default=1).value == 16_777_216


def test_hidden_size_unknown_falls_back_to_default():
    auto = hidden_size_auto("reduce_bucket_size", None, zero3=True, default=500_000_000)
    assert (auto.value, auto.resolved) == (500_000_000, False)
    assert "hidden size" in auto.how


def test_batch_autos_from_setup():
    setup = TrainingSetup(micro_batch=2, grad_accum=4)
    assert batch_auto("train_micro_batch_size_per_gpu", setup, 8).value == 2
    assert batch_auto("gradient_accumulation_steps", setup, None).value == 4
    total = batch_auto("train_batch_size", setup, 8)
    assert (total.value, total.how) == (64, "dp_world * micro_batch * grad_accum = 8 * 2 * 4")


@pytest.mark.parametrize(("setup", "dp"), [(None, 8), (TrainingSetup(), None)], ids=["no-setup", "no-dp"])
def test_train_batch_auto_unresolved(setup, dp):
    auto = batch_auto("train_batch_size", setup, dp)
    assert (auto.value, auto.resolved) == (None, False)


@pytest.mark.parametrize(
    ("precision", "fp16", "bf16"),
    [(Precision.bf16_mixed, False, True), (Precision.fp16_mixed, True, False), (Precision.fp32, False, False),
     (Precision.bf16_true, False, True)],
)  # fmt: skip
def test_precision_autos(precision, fp16, bf16):
    setup = TrainingSetup(precision=precision)
    assert precision_auto("fp16", setup).value is fp16
    assert precision_auto("bf16", setup).value is bf16
