"""Memory rules: does-not-fit, low-headroom, buffers-exceed-states, each fired and quiet, on estimates from the calculator."""

from dataclasses import replace

import pytest

from zeroplan.check.findings import RunContext
from zeroplan.check.rules import run_checks
from zeroplan.check.rules.memory import LOW_HEADROOM_PCT, buffers_alive
from zeroplan.deepspeed.reader import parse_ds_config
from zeroplan.hardware.presets import load_hardware
from zeroplan.memory.estimate import Scenario, evaluate, overheads_for
from zeroplan.memory.setup import DeepSpeedKnobs, OffloadDevice, Parallelism, ZeroStage
from zeroplan.memory.states import ModelSummary
from zeroplan.units import GIB

H100 = load_hardware("h100-sxm-80gb")


def scenario(num_params: float, gpus: int = 8, hardware=H100, **knobs) -> Scenario:
    return Scenario(model=ModelSummary(name="m", num_params=int(num_params)), parallelism=Parallelism(gpus=gpus),
                    knobs=DeepSpeedKnobs(**knobs), hardware=hardware, overheads=overheads_for(hardware, None, None, None))  # fmt: skip


def fired(rule, scn, stage, *, min_headroom_pct=None, **zero):
    config = parse_ds_config({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                              "zero_optimization": {"stage": int(stage), **zero}}, origin="ds.json")  # fmt: skip
    run = RunContext(parallelism=scn.parallelism, hardware=scn.hardware, min_headroom_pct=min_headroom_pct)
    found = run_checks(config, run, evidence={"memory": evaluate(scn, stage)})
    return [f for f in found if f.rule == rule]


# --- does-not-fit ----------------------------------------------------------------------------------------


def test_does_not_fit_gives_peak_usable_and_the_term_that_breaks_it():
    # 9e9 x 16 B = 144 GB of model states at ZeRO-0: optimizer states alone are 108 GB, over the GPU by themselves.
    (finding,) = fired("does-not-fit", scenario(9e9), ZeroStage.zero0)
    est = evaluate(scenario(9e9), ZeroStage.zero0)
    assert finding.severity == "error" and finding.key == "zero_optimization.stage"
    assert finding.message.startswith(f"does not fit at ZeRO-0: peak {est.total / GIB:,.2f} GiB per GPU at optimizer "
                                      "step > usable 79.65 GiB on h100-sxm-80gb")  # fmt: skip
    assert (f"{-est.headroom_bytes / GIB:,.2f} GiB over; what is alive all step already exceeds it, the largest: "
            "optimizer states 100.58 GiB") in finding.message
    assert (finding.file, finding.line) == ("ds.json", None)


def test_fits_is_quiet_and_no_hardware_says_nothing():
    assert fired("does-not-fit", scenario(9e9), ZeroStage.zero3) == []
    assert fired("does-not-fit", scenario(9e9, hardware=None), ZeroStage.zero0) == []


def test_the_lines_at_the_peak_moment_sum_to_the_peak():
    from zeroplan.memory.verdict import peak_lines

    for stage in ZeroStage:
        always, own = peak_lines(evaluate(scenario(9e9), stage))
        assert sum(size for _, size in always + own) == evaluate(scenario(9e9), stage).total


# --- low-headroom ------------------------------------------------------------------------------------------


def tight(free_fraction: float):
    """H100 shrunk so that ZeRO-3 of 7e9 leaves free_fraction of it free."""
    need = evaluate(scenario(7e9), ZeroStage.zero3).total
    return replace(H100, memory_gib=need / (1 - free_fraction) / GIB)


def test_low_headroom_fires_under_the_default_threshold():
    (finding,) = fired("low-headroom", scenario(7e9, hardware=tight(0.02)), ZeroStage.zero3)
    assert finding.severity == "warning"
    assert "with only" in finding.message and "(2.0% of" in finding.message
    assert f"under the {LOW_HEADROOM_PCT:g}% headroom threshold" in finding.message
    assert fired("low-headroom", scenario(7e9, hardware=tight(0.08)), ZeroStage.zero3) == []


def test_low_headroom_threshold_from_the_plan():
    scn = scenario(7e9)  # about 75 % free on a real H100
    assert fired("low-headroom", scn, ZeroStage.zero3) == []
    (finding,) = fired("low-headroom", scn, ZeroStage.zero3, min_headroom_pct=90)
    assert "under the 90% headroom threshold" in finding.message
    assert fired("low-headroom", scn, ZeroStage.zero3, min_headroom_pct=0) == []


def test_low_headroom_is_quiet_when_it_does_not_fit():
    assert fired("low-headroom", scenario(9e9), ZeroStage.zero0) == []  # does-not-fit says it


# --- buffers-exceed-states ----------------------------------------------------------------------------------


def test_buffers_exceed_states_names_the_knob_left_at_deepspeeds_default():
    # 125M params, ZeRO-2 on 8 GPUs: states 2 + 2/8 + 12/8 B/param = 0.44 GiB; the default 5e8-element bucket is 0.93 GiB.
    (finding,) = fired("buffers-exceed-states", scenario(125e6), ZeroStage.zero2)
    assert finding.severity == "warning" and finding.key == "zero_optimization.reduce_bucket_size"
    assert "exceed the model states (0.44 GiB) per GPU at ZeRO-2 because of reduce_bucket_size 500,000,000 " \
           "(DeepSpeed's default; the config does not set it): it sizes the reduce bucket (0.93 GiB)" in finding.message


def test_a_knob_the_config_gives_is_named_as_written():
    scn = scenario(100e6, reduce_bucket_size=10**6, stage3_prefetch_bucket_size=10**8)
    (finding,) = fired("buffers-exceed-states", scn, ZeroStage.zero3, reduce_bucket_size=10**6,
                       prefetch_bucket_size=10**8)  # fmt: skip
    assert finding.key == "zero_optimization.prefetch_bucket_size"  # the spelling in the file, not the alias
    assert "because of zero_optimization.prefetch_bucket_size 100,000,000 (as the config gives it): it sizes the " \
           "gathered params (live + prefetch)" in finding.message


def test_buffers_quiet_on_a_big_model_or_with_small_buckets():
    assert fired("buffers-exceed-states", scenario(9e9), ZeroStage.zero2) == []
    assert fired("buffers-exceed-states", scenario(125e6, reduce_bucket_size=10**7), ZeroStage.zero2,
                 reduce_bucket_size=10**7) == []  # fmt: skip


def test_a_knob_given_as_auto_is_never_blamed():
    # "auto" leaves the size to Hugging Face (hidden_size^2); with no hidden size zeroplan assumes DeepSpeed's
    # default for it, which is zeroplan's assumption, not something the user wrote.
    assert fired("buffers-exceed-states", scenario(125e6), ZeroStage.zero2, reduce_bucket_size="auto") == []


def test_what_the_model_itself_gathers_is_not_blamed_on_a_knob():
    # transformers' own ZeRO-3 offload config on Llama-3.1-8B, 8 GPUs: the states left on the GPU (0.9 GiB) are
    # smaller than the gathered embedding and its gradient (0.98 GiB each), which no knob shrinks.
    model = ModelSummary(name="llama", num_params=8_030_261_248, largest_layer_params=525_336_576)
    knobs = {"offload_optimizer": OffloadDevice.cpu, "offload_param": OffloadDevice.cpu, "stage3_prefetch_bucket_size": 10**8}
    scn = Scenario(model=model, parallelism=Parallelism(gpus=8), knobs=DeepSpeedKnobs(**knobs), hardware=H100,
                   overheads=overheads_for(H100, None, None, None))  # fmt: skip
    est = evaluate(scn, ZeroStage.zero3)
    assert buffers_alive(est) > est.states.total
    offload = {"offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}
    assert fired("buffers-exceed-states", scn, ZeroStage.zero3, reduce_bucket_size="auto",
                 stage3_prefetch_bucket_size=10**8, **offload) == []  # fmt: skip


def test_stage0_allreduce_bucket_is_no_knob_and_no_larger_than_the_gradients():
    # engine.py all-reduces MEMORY_OPT_ALLREDUCE_SIZE (5e8) elements at a time; no config key sets it.
    est = evaluate(scenario(50e6, allgather_bucket_size=0), ZeroStage.zero0)
    (bucket,) = [t for t in est.buffers if t.name == "all-reduce bucket"]
    assert (bucket.bytes, bucket.knob) == (50_000_000 * 2, "")
    assert fired("buffers-exceed-states", scenario(50e6), ZeroStage.zero0) == []


def test_hpz_secondary_copy_is_not_counted_as_a_buffer():
    # 70e9 on 64 GPUs with hpZ 8: the secondary partition (2 Psi / 8) alone equals the model states (16 Psi / 64).
    scn = scenario(70e9, gpus=64, zero_hpz_partition_size=8)
    est = evaluate(scn, ZeroStage.zero3)
    assert sum(t.bytes for t in est.buffers) > est.states.total > buffers_alive(est)
    assert fired("buffers-exceed-states", scn, ZeroStage.zero3, zero_hpz_partition_size=8) == []


@pytest.mark.parametrize("rule", ["does-not-fit", "low-headroom", "buffers-exceed-states"])
def test_memory_rules_need_the_estimate(rule):
    config = parse_ds_config({"train_micro_batch_size_per_gpu": 1})
    assert [f for f in run_checks(config, RunContext()) if f.rule == rule] == []
