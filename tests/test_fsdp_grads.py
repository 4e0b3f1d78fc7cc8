"""FSDP's gradient bytes beyond the shard: no_sync under gradient accumulation, FSDP1 adapters inside their block's
unit (--adapter-wrap block), FSDP2's reduce dtype (--reduce-dtype); and their refusals (torch-free but the last)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zeroplan.cli.app import app
from zeroplan.memory.engines import engine_stage_base, layout_for
from zeroplan.memory.engines.grads import NO_SYNC
from zeroplan.memory.recipes import make_recipe
from zeroplan.memory.setup import (
    DeepSpeedKnobs,
    Engine,
    EngineOptions,
    Optimizer,
    Parallelism,
    Precision,
    ReduceDtype,
    ZeroStage,
)
from zeroplan.memory.terms import shard_numel
from zeroplan.models.presets import load_model

MODEL = "llama-2-7b"
MIXED = make_recipe(Precision.bf16_mixed, Optimizer.adamw)
LAYOUT = layout_for(load_model(MODEL))


NO_SYNC_ON = EngineOptions(no_sync=True)


def base(engine, dp=4, options=NO_SYNC_ON, accumulating=True, stage=ZeroStage.zero3):
    return engine_stage_base(engine, None, LAYOUT, MIXED, stage, Parallelism(gpus=dp),
                             DeepSpeedKnobs(), options, accumulating)


def kept(b) -> int:
    return sum(t.bytes for t in b.buffers if t.name == NO_SYNC)


def test_no_sync_keeps_fsdp1s_padded_units_whole_in_the_param_dtype():
    units = LAYOUT.unit_numels
    assert kept(base(Engine.fsdp, dp=3)) == sum(shard_numel(u, 3) * 3 for u in units) * 2  # bf16 gathered dtype


def test_fsdp2_keeps_its_parameters_whole_in_reduce_dtype():
    total = sum(LAYOUT.unit_numels)
    assert kept(base(Engine.fsdp2)) == total * 2
    assert kept(base(Engine.fsdp2, options=EngineOptions(no_sync=True, reduce_dtype=ReduceDtype.fp32))) == total * 4


@pytest.mark.parametrize("why", ["one micro-step", "a reduce-scatter every micro-step", "one rank", "NO_SHARD"])
def test_no_whole_gradients_where_nothing_is_skipped(why):
    b = {"one micro-step": lambda: base(Engine.fsdp, accumulating=False),
         "a reduce-scatter every micro-step": lambda: base(Engine.fsdp, options=EngineOptions()),
         "one rank": lambda: base(Engine.fsdp2, dp=1),
         "NO_SHARD": lambda: base(Engine.fsdp, stage=ZeroStage.zero0)}[why]()
    assert kept(b) == 0


def test_no_sync_replaces_the_accumulated_shards_before_the_step():
    """Under no_sync no shard exists beside the whole gradients until the last backward (U bounds both)."""
    b = base(Engine.fsdp2)
    assert all(m.grads_accumulated == 0 and m.buffers >= kept(b) for m in b.moments if m.phase in ("forward",))
    assert b.moments[-1].grads_accumulated == b.states.gradients


def test_fp32_reduce_doubles_the_kept_reduce_scatter_input():
    """The backward of a middle block holds the previous unit's reduce-scatter input: c bytes -> 4 bytes."""
    plain = base(Engine.fsdp2, accumulating=False)
    fp32 = base(Engine.fsdp2, accumulating=False, options=EngineOptions(reduce_dtype=ReduceDtype.fp32))
    block = sum(shard_numel(s[0], 4) * (s[1] if len(s) > 1 else 1) for s in LAYOUT.block) * 4
    diffs = {b.name: b2.buffers - b.buffers for b, b2 in zip(plain.moments, fp32.moments) if b.phase == "backward"}
    assert max(diffs.values()) == block * (4 - 2)


def _gib(runner, *args):
    res = runner.invoke(app, ["estimate", "-m", MODEL, "-g", "2", "--engine", "fsdp", "-s", "3", "--precision",
                              "bf16-true", "--lora-rank", "8", "--grad-accum", "64", "--no-sync", "-f", "json", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["stages"][0]


def test_adapters_in_their_block_give_every_block_a_whole_gradient(runner):
    """litgpt's FSDPStrategy(auto_wrap_policy={Block}) with use_orig_params=True: each block's FlatParameter
    requires grad, so no_sync keeps all of it (2 B, bf16-true) where peft's own units keep only the adapters."""
    own, block = _gib(runner), _gib(runner, "--adapter-wrap", "block")
    whole = next(b["bytes"] for b in block["buffers"] if b["name"] == NO_SYNC)
    adapters = 8 * (4096 + 4096)  # rank 8: lora_A 8 x 4096 + lora_B 4096 x 8, on q_proj and v_proj (peft's default)
    blocks = [u + 2 * adapters for u in LAYOUT.unit_numels[1:]]  # the root (embeddings, head) trains nothing
    assert whole == sum(shard_numel(u, 2) * 2 for u in blocks) * 2
    assert next(b["bytes"] for b in own["buffers"] if b["name"] == NO_SYNC) < whole / 1000


@pytest.mark.parametrize("args,words", [
    (["--engine", "fsdp", "--reduce-dtype", "fp32"], "--reduce-dtype fp32 is modelled for --engine fsdp2"),
    (["--engine", "deepspeed", "--no-sync"], "--no-sync is FSDP's"),
    (["--engine", "fsdp2", "--adapter-wrap", "block"], "--adapter-wrap block is FSDP1's"),
    (["--engine", "fsdp", "--adapter-wrap", "block"], "give --lora-rank R or --adapter-config"),
])
def test_an_engine_option_the_engine_lacks_is_refused_in_one_line(runner, args, words):
    res = runner.invoke(app, ["estimate", "-m", MODEL, "-g", "2", *args])
    assert res.exit_code == 1 and words in res.stderr and len(res.stderr.strip().splitlines()) == 1


@pytest.mark.torch
def test_the_measured_table_is_what_zeroplan_predicts_now():
    """validation/fsdp_grads_measured.json (measure_fsdp_grads.py on gloo): every term exact, and each prediction
    recomputed from today's code equals the recorded one."""
    pytest.importorskip("torch")
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "validation"))
    from measure_fsdp_grads import predicted

    rows = json.loads((Path(__file__).resolve().parent.parent / "validation" / "fsdp_grads_measured.json").read_text())
    assert len(rows) == 24 and all(r["measured"] == r["predicted"] for r in rows)
    assert all(predicted(r["inputs"])[r["term"]] == r["predicted"] for r in rows)


def test_no_sync_s_whole_gradients_stay_on_the_gpu_under_cpu_offload(runner):
    """FSDP1 no_sync docstring: inside the context the gradients are not offloaded; only after the eventual sync."""
    args = ["estimate", "-m", MODEL, "-g", "4", "--engine", "fsdp", "-s", "3", "--offload-optimizer", "cpu",
            "--offload-param", "cpu", "-f", "json"]
    stage = lambda *more: json.loads(runner.invoke(app, args + list(more)).stdout)["stages"][0]  # noqa: E731
    accumulating = stage("--grad-accum", "4", "--no-sync")
    assert any(b["name"] == NO_SYNC and b["bytes"] > 0 for b in accumulating["buffers"])
    assert accumulating["gpu_bytes"]["total"] > stage()["gpu_bytes"]["total"]
    synced = stage("--grad-accum", "4")
    assert not any(b["name"] == NO_SYNC for b in synced["buffers"])
    assert any("--no-sync" in n for n in synced["notes"])
