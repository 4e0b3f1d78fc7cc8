"""The step's timeline: events in order, the peak and its moment, checked against the op-by-op CPU measurement."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from test_engines import MIXED, base

from zeroplan.errors import ZeroplanError
from zeroplan.memory.estimate import Scenario, estimate_memory
from zeroplan.memory.recipes import make_recipe
from zeroplan.memory.setup import (
    Checkpointing,
    DeepSpeedKnobs,
    Engine,
    OffloadDevice,
    Optimizer,
    Parallelism,
    Precision,
    TrainingSetup,
    ZeroStage,
)
from zeroplan.memory.stage import stage_base, stage_peak
from zeroplan.memory.states import ModelSummary
from zeroplan.memory.timeline import CATEGORIES, ActivationProfile
from zeroplan.memory.view import stage_view

MEASURED = Path(__file__).resolve().parent.parent / "validation" / "engines_measured.json"
# validation/measure_engines.py's CONFIGS: (name, engine, stage, options)
CONFIGS = {"ddp": ("ddp", 0, {}), "ddp bucket-view": ("ddp", 0, {"gradient_as_bucket_view": True}),
           "ddp+zero": ("ddp", 1, {}), "fsdp SHARD_GRAD_OP": ("fsdp", 2, {}), "fsdp FULL_SHARD": ("fsdp", 3, {}),
           "fsdp2 reshard=False": ("fsdp2", 2, {}), "fsdp2 reshard=True": ("fsdp2", 3, {})}


def _measured_cases():
    groups: dict[tuple, list[dict]] = {}
    for row in json.loads(MEASURED.read_text()):
        groups.setdefault((row["name"], row["precision"], row["world"]), []).append(row)
    return sorted(groups.items())


@pytest.mark.parametrize(("key", "ranks"), _measured_cases(), ids=lambda v: " ".join(map(str, v)) if isinstance(v, tuple) else "")
def test_the_peak_and_its_moment_match_the_busiest_rank(key, ranks):
    """Source: validation/measure_engines.py (torch 2.13 CPU, gloo), each rank op by op; data committed."""
    name, precision, world = key
    engine, stage, options = CONFIGS[name]
    recipe = make_recipe(Precision(precision), Optimizer.adamw)
    events = stage_peak(base(engine, stage, world, recipe, **options)).timeline.events  # no activations counted
    held = [e.total - e.by_category()["temporaries"] for e in events]  # the tracker's four categories
    busiest = max(ranks, key=lambda r: r["peak"]["total"])
    assert abs(max(held) - busiest["peak"]["total"]) <= 0.03 * busiest["peak"]["total"]
    assert events[held.index(max(held))].name == busiest["peak"]["moment"]
    # the optimizer step with AdamW's foreach temporaries, measured as the tensors its ops made and still held
    measured_step = max(r["step_with_temporaries"] for r in ranks)
    assert abs(events[-1].total - measured_step) <= 0.03 * measured_step


def test_measured_moments_are_not_all_the_same():
    moments = {r["peak"]["moment"] for r in json.loads(MEASURED.read_text())}
    assert {"backward of layer 1", "backward of layer 3", "backward of the embedding"} <= moments


def test_events_run_forward_loss_backward_step():
    tl = stage_peak(base("fsdp", 3, 4)).timeline
    names = [e.name for e in tl.events]
    assert names[:2] == ["start of step", "forward of layer 0"] and names[-1] == "optimizer step"
    assert names.index("end of forward") < names.index("backward of the loss") < names.index("backward of layer 3")
    assert names.index("backward of layer 0") < names.index("backward of the embedding")
    assert all(e.total == sum(e.bytes) for e in tl.events)
    assert tl.peak.total == max(e.total for e in tl.events)


def test_no_gradient_exists_before_the_backward_unless_accumulating():
    b = base("ddp", 0, 2)
    fresh = stage_peak(b, ActivationProfile()).timeline.events
    accumulating = stage_peak(b, ActivationProfile(accumulating=True)).timeline.events
    assert fresh[0].by_category()["gradients"] == 0
    assert accumulating[0].by_category()["gradients"] == b.states.gradients


def test_activations_shrink_through_the_backward_and_the_peak_moves():
    b = base("ddp", 0, 2)
    big = stage_peak(b, ActivationProfile(layers_bytes=10**9, head=10**8, num_layers=4))
    assert big.peak_moment == "end of forward"  # activations outweigh the gradients: the forward's end
    acts = [e.by_category()["activations"] for e in big.timeline.events if e.phase == "backward" and e.layer is not None]
    assert acts == sorted(acts, reverse=True)
    small = stage_peak(b, ActivationProfile(layers_bytes=1000, num_layers=4))
    assert small.peak_moment == "optimizer step"  # every gradient, and AdamW's foreach temporary
    assert small.at_peak()["temporaries"] == b.states.optimizer_states // 2


def test_estimate_total_is_the_timeline_peak_plus_overhead_and_lines_sum():
    model = ModelSummary(name="m", num_params=10**9, largest_layer_params=10**7)
    est = estimate_memory(Scenario(model=model))
    for s in est.stages:
        view = s.gpu_bytes()
        assert s.total == s.peak_bytes + s.overhead_bytes == view["total"]
        assert sum(v for k, v in view.items() if k != "total") == view["total"]
        assert s.timeline.peak.total == s.peak_bytes


def test_zero3_full_gradient_only_in_the_backward():
    """ZeRO-3's largest-layer gradient exists only while a layer's backward runs, not at the forward's end."""
    model = ModelSummary(name="m", num_params=10**9, largest_layer_params=10**8)
    b = stage_base(model, MIXED, ZeroStage.zero3, Parallelism(gpus=8), DeepSpeedKnobs())
    full = next(t.bytes for t in b.buffers if t.name == "largest layer full gradient")
    tl = stage_peak(b, ActivationProfile(layers_bytes=10**9, head=10**9, num_layers=4)).timeline
    end = next(e for e in tl.events if e.name == "end of forward")
    last = next(e for e in tl.events if e.name == "backward of layer 3")
    assert last.by_category()["buffers"] - end.by_category()["buffers"] == full


def test_json_timeline_shape():
    model = ModelSummary(name="m", num_params=10**9, largest_layer_params=10**7)
    view = stage_view(estimate_memory(Scenario(model=model), stages=(ZeroStage.zero2,)).stages[0])
    tl = view["timeline"]
    assert tl["categories"] == list(CATEGORIES) and view["peak_moment"] == tl["peak_moment"]
    assert tl["events"][tl["peak_index"]]["name"] == tl["peak_moment"]
    assert tl["events"][tl["peak_index"]]["total"] == tl["peak_bytes"]
    assert all(set(e["bytes"]) == set(CATEGORIES) for e in tl["events"])


def test_full_checkpointing_recompute_is_alive_only_in_a_backward():
    from zeroplan.models.families.rmsnorm import LlamaConfig

    cfg = LlamaConfig(model_type="llama", hidden_size=512, intermediate_size=1024, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=8, vocab_size=1000)
    model = ModelSummary(name="m", num_params=10**8, largest_layer_params=10**6)
    setup = TrainingSetup(checkpointing=Checkpointing.full, seq_len=512)
    est = estimate_memory(Scenario(model=model, arch=cfg.architecture(), setup=setup), stages=(ZeroStage.zero1,))
    events = est.stages[0].timeline.events
    assert est.activations.recompute_bytes > 0
    forward_end = next(e for e in events if e.name == "end of forward").by_category()["activations"]
    assert forward_end == est.activations.total_bytes - est.activations.recompute_bytes


def test_engine_none_is_one_gpu_without_buckets():
    plain, ddp = base("none", 0, 1), base("ddp", 0, 1)
    assert [t.name for t in plain.buffers] == ["AdamW foreach temporary (sqrt of exp_avg_sq)"]
    assert plain.states == ddp.states
    assert stage_peak(ddp).peak_bytes - stage_peak(plain).peak_bytes == ddp.states.gradients  # DDP's bucket
    with pytest.raises(ZeroplanError, match="--engine none is one GPU"):
        base("none", 0, 2)
    with pytest.raises(ZeroplanError, match="shards nothing"):
        base("none", 3, 1)


def test_engine_none_in_a_scenario():
    model = ModelSummary(name="m", num_params=10**9, largest_layer_params=10**7)
    scn = replace(Scenario(model=model, parallelism=Parallelism(gpus=1)), engine=Engine.none)
    est = estimate_memory(scn, stages=(ZeroStage.zero0,))
    view = est.stages[0].gpu_bytes()  # no bucket: at the step only AdamW's foreach temporary, half its states
    assert est.stages[0].peak_moment == "optimizer step" and view["buffers"] == view["optimizer_states"] // 2


@pytest.mark.parametrize("engine", ["fsdp", "fsdp2"])
def test_fsdp_cpu_offload_moves_every_state_to_the_host(engine):
    knobs = DeepSpeedKnobs(offload_optimizer=OffloadDevice.cpu, offload_param=OffloadDevice.cpu)
    on_gpu = base(engine, 3, 4, MIXED)
    off = offloaded(engine, 3, 4, knobs)
    assert (off.states.parameters, off.states.gradients, off.states.optimizer_states) == (0, 0, 0)
    assert sum(t.bytes for t in off.cpu_terms) == on_gpu.states.total  # the rank's sharded p + g + k in host memory
    est, est_gpu = stage_peak(off), stage_peak(on_gpu)
    assert est.peak_bytes < est_gpu.peak_bytes
    gathered = [t for t in off.buffers if t.name.startswith("gathered parameters")]
    assert gathered and gathered == [t for t in on_gpu.buffers if t.name.startswith("gathered parameters")]


@pytest.mark.parametrize(("engine", "offload", "words"), [
    ("fsdp", (OffloadDevice.cpu, OffloadDevice.none), "together"),
    ("fsdp2", (OffloadDevice.none, OffloadDevice.cpu), "together"),
    ("fsdp", (OffloadDevice.nvme, OffloadDevice.nvme), "no NVMe offload"),
    ("ddp", (OffloadDevice.cpu, OffloadDevice.none), "--engine ddp has no offload"),
    ("none", (OffloadDevice.cpu, OffloadDevice.none), "--engine none has no offload"),
])
def test_offload_no_engine_option_does_is_an_error(engine, offload, words):
    knobs = DeepSpeedKnobs(offload_optimizer=offload[0], offload_param=offload[1])
    with pytest.raises(ZeroplanError, match=words):
        offloaded(engine, 0 if engine in ("ddp", "none") else 3, 1 if engine == "none" else 4, knobs)


def offloaded(engine, stage, gpus, knobs):
    from test_engines import CONFIG

    from zeroplan.memory.engines import EngineOptions, engine_stage_base, layout_for
    from zeroplan.memory.summary import summarize_model
    from zeroplan.models.params import count_params

    summary = summarize_model("tiny", count_params(CONFIG), CONFIG.architecture(), DeepSpeedKnobs())
    return engine_stage_base(engine, summary, layout_for(CONFIG), MIXED, ZeroStage(stage), Parallelism(gpus=gpus),
                             knobs, EngineOptions())
