"""Hugging Face "auto" values, filled as transformers' HfTrainerDeepSpeedConfig fills them."""

import pytest

from zeroplan.deepspeed.auto import batch_auto, hidden_size_auto, precision_auto
from zeroplan.deepspeed.reader import parse_ds_config
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


# --- the precision a config leaves to the trainer ------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "precision", "expected", "added"),
    [
        ({"fp16": {"enabled": "auto"}}, Precision.bf16_mixed, Precision.bf16_mixed, "bf16.enabled"),
        ({"bf16": {"enabled": "auto"}}, Precision.fp16_mixed, Precision.fp16_mixed, "fp16.enabled"),
        ({"fp16": {"enabled": "auto"}}, Precision.fp32, Precision.fp32, None),
        ({"fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}}, Precision.bf16_mixed, Precision.bf16_mixed, None),
        ({"fp16": {"enabled": False}, "bf16": {"enabled": "auto"}}, Precision.fp16_mixed, Precision.fp32, None),
    ],
    ids=["fp16-auto-bf16-run", "bf16-auto-fp16-run", "fp32-run", "both-auto", "fp16-off-as-written"],
)  # fmt: skip
def test_a_missing_section_is_the_one_accelerate_adds(data, precision, expected, added):
    # accelerate DeepSpeedPlugin.set_mixed_precision: adds {"enabled": true} for the run's mixed precision when the
    # section is missing; an "auto" takes the run's precision; a section written false stays false.
    config = parse_ds_config(data, setup=TrainingSetup(precision=precision))
    assert config.precision is expected
    assert [a.key for a in config.autos if a.added] == ([added] if added else [])


def test_a_section_enabled_as_written_pins_the_precision_beside_an_auto():
    config = parse_ds_config({"fp16": {"enabled": True}, "bf16": {"enabled": "auto"}})
    assert not config.precision_left_open and config.setup_fields()["precision"] is Precision.fp16_mixed
    assert parse_ds_config({"fp16": {"enabled": "auto"}}).precision_left_open


def test_an_assumed_setup_value_says_it_is_zeroplans_default():
    config = parse_ds_config({"fp16": {"enabled": "auto"}, "train_micro_batch_size_per_gpu": "auto"},
                             setup=TrainingSetup(), assumed=frozenset({"precision", "micro_batch"}))  # fmt: skip
    messages = [a.message for a in config.autos]
    assert messages[0] == ('fp16.enabled is "auto", resolved: assumed false (training precision bf16-mixed: '
                           "zeroplan's default, as nothing states it)")  # fmt: skip
    assert messages[1].startswith("bf16.enabled is not in the config: assumed true (training precision bf16-mixed")
    assert "micro_batch: zeroplan's default" in messages[2]
