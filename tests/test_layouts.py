"""The parallelism search (zeroplan.advise.layouts): its space, its fit against `zeroplan estimate --tp ..`, its
pruning against a brute-force search, the invariants of its answer and its trace (docs/advisor.md)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from zeroplan.advise.advisor import planned_scenario
from zeroplan.advise.layouts.fit import Fitter
from zeroplan.advise.layouts.search import rank_key, search_parallelism
from zeroplan.advise.layouts.space import Layout, Stack, enumerate_layouts, virtual_stages
from zeroplan.cli.app import app
from zeroplan.errors import ZeroplanError
from zeroplan.memory.activations.pipeline import rounds_divide
from zeroplan.memory.setup import Attention, Checkpointing, ZeroStage
from zeroplan.models.presets import load_model
from zeroplan.scenario import ScenarioArgs, scenario
from zeroplan.units import GIB

H100 = "h100-sxm-80gb"


def _scn(model: str, gpus: int, seq: int = 2048, **kw):
    return scenario(ScenarioArgs(model=model, gpus=str(gpus), hardware=H100, seq_len=str(seq), **kw))


def _fitter(model: str, gpus: int, batch: int, seq: int = 2048) -> Fitter:
    planned = planned_scenario(_scn(model, gpus, seq))[1]
    return Fitter.of(planned, model, planned.usable_bytes, batch)


# --- the space ------------------------------------------------------------------------------------------------------

def test_space_follows_the_divisibility_rules():
    arch = load_model("llama-3.1-405b").config.architecture()  # 128 heads, 8 kv heads, 126 layers
    space = enumerate_layouts(arch, 1024, 8, 8192, Attention.flash, 512)
    assert space.degrees["tp"] == (1, 2, 4, 8)  # powers of two dividing 8 kv heads, within a node of 8
    # 126 = 2 x 63: pp 2 even; 4, 8, 16 torchtitan's uneven split (space.UNEVEN_PP_MAX); 32 and up not searched
    assert space.degrees["pp"] == (1, 2, 4, 8, 16)
    for lay in space.layouts:
        assert lay.tp * lay.pp * lay.cp * lay.dp == 1024 and 512 % lay.dp == 0
        assert lay.stack is (Stack.deepspeed if (lay.pp, lay.cp) == (1, 1) else Stack.torchtitan)
    assert dict(space.left_out) == {"dp does not divide the global batch 512": 1}  # tp = pp = cp = 1: dp 1024


def test_space_without_flash_has_no_context_parallelism_and_tp_may_leave_the_node():
    arch = load_model("llama-3.1-8b").config.architecture()
    space = enumerate_layouts(arch, 32, 8, 2048, Attention.eager, 64, tp_within_node=False)
    assert space.degrees["cp"] == (1,) and space.degrees["tp"] == (1, 2, 4, 8)  # 8 kv heads cap it, not the node
    assert any("flash attention" in why for why, _ in space.left_out)


def test_loss_other_than_hf_keeps_torchtitan_at_tp_1():
    from zeroplan.memory.setup import Loss

    arch = load_model("llama-3.1-8b").config.architecture()
    space = enumerate_layouts(arch, 16, 8, 2048, Attention.flash, 64, loss=Loss.chunked)
    assert {lay.stack for lay in space.layouts if lay.tp > 1} == {Stack.deepspeed}  # AutoTP's logits are whole
    assert any("--loss chunked" in why for why, _ in space.left_out)


def test_moe_expert_degrees_divide_experts_and_the_expert_group():
    arch = load_model("qwen3-30b-a3b").config.architecture()
    space = enumerate_layouts(arch, 32, 8, 2048, Attention.flash, 256)
    assert {lay.ep for lay in space.layouts} > {1}
    for lay in space.layouts:
        assert arch.num_experts % lay.ep == 0 and (lay.dp * lay.cp) % lay.ep == 0
        assert lay.stack is Stack.torchtitan or lay.ep == 1


def test_deepspeed_stack_keeps_tp_x_dp_only():
    arch = load_model("llama-3.1-70b").config.architecture()
    space = enumerate_layouts(arch, 64, 8, 4096, Attention.flash, 256, Stack.deepspeed)
    assert {(lay.pp, lay.cp, lay.stack) for lay in space.layouts} == {(1, 1, Stack.deepspeed)}


# --- the fit is what `zeroplan estimate --tp ..` prints ---------------------------------------------------------------

@pytest.mark.parametrize("model,tp,pp,cp,ep,stack,stage,ckpt,micro,batch,vpp", [(*row, 1)[:11] for row in [
    ("llama-3.1-8b", 2, 2, 2, 1, Stack.torchtitan, ZeroStage.zero3, Checkpointing.full, 2, 32),
    ("llama-3.1-8b", 4, 1, 1, 1, Stack.deepspeed, ZeroStage.zero1, Checkpointing.none, 1, 16),
    ("llama-3.1-8b", 1, 4, 1, 1, Stack.torchtitan, ZeroStage.zero2, Checkpointing.selective, 4, 64),
    ("llama-3.1-8b", 8, 2, 1, 1, Stack.torchtitan, ZeroStage.zero0, Checkpointing.none, 1, 8),
    ("qwen3-30b-a3b", 2, 1, 2, 4, Stack.torchtitan, ZeroStage.zero3, Checkpointing.full, 2, 32),
    ("llama-3.1-8b", 2, 4, 1, 1, Stack.torchtitan, ZeroStage.zero3, Checkpointing.none, 1, 48, 3),  # uneven chunks
    ("llama-3.1-8b", 1, 4, 1, 1, Stack.torchtitan, ZeroStage.zero2, Checkpointing.full, 2, 64, 8),
]])
def test_fit_equals_estimate_cli(runner, tmp_path, model, tp, pp, cp, ep, stack, stage, ckpt, micro, batch, vpp):
    """torchtitan layouts against `estimate --tp ..`; DeepSpeed ones against `estimate --deepspeed-config` with the
    AutoTP config (the embedding and logits whole, as zeroplan reads tensor_parallel.autotp_size)."""
    from zeroplan.deepspeed.emit import ds_config

    gpus = 16
    fitter = _fitter(model, gpus, batch)
    layout = Layout(tp=tp, pp=pp, cp=cp, ep=ep, dp=gpus // (tp * pp * cp), stack=stack, vpp=vpp)
    ga = batch // layout.dp // micro
    cached, exact = fitter.peak(layout, stage, ckpt, micro), fitter.exact(layout, stage, ckpt, micro)
    args = ["estimate", "--model", model, "--gpus", str(gpus), "--hardware", H100, "--checkpointing", ckpt.value,
            "-f", "json"]
    if stack is Stack.deepspeed:
        knobs = fitter.scenario(layout, stage, ckpt, micro).knobs
        config = ds_config(stage, knobs, fitter.scn.setup.precision, micro_batch=micro, grad_accum=ga, dp=layout.dp)
        del config["train_batch_size"]
        path = tmp_path / "autotp.json"
        path.write_text(json.dumps({**config, "tensor_parallel": {"autotp_size": tp}}))
        args += ["--deepspeed-config", str(path)]
    else:
        args += ["--tp", str(tp), "--pp", str(pp), "--cp", str(cp), "--ep", str(ep), "--stage", str(int(stage)),
                 "--micro-batch", str(micro), "--grad-accum", str(ga)] + ["--vpp", str(vpp)] * (vpp > 1)
    res = runner.invoke(app, args + ["--sequence-parallel"] * layout.sequence_parallel)
    assert res.exit_code == 0, res.output
    printed = json.loads(res.stdout)["stages"][0]["gpu_bytes"]["total"]
    assert cached.total == exact.total == printed


# --- the search ---------------------------------------------------------------------------------------------------

def _brute_best(model: str, gpus: int, batch: int, seq: int):
    """Every layout x stage x checkpointing x micro-batch that fits, timed: no pruning at all."""
    from zeroplan.advise.layouts import speed
    from zeroplan.advise.layouts.search import Timed, _plan
    from zeroplan.perf.collectives import default_topology

    fitter = _fitter(model, gpus, batch, seq)
    scn = fitter.scn
    topology, timed, timing = default_topology(scn.hardware, scn.parallelism), [], {}
    space = enumerate_layouts(scn.arch, gpus, 8, seq, scn.setup.attention, batch)
    variants = [replace(lay, vpp=v) for lay in space.layouts if lay.stack is Stack.torchtitan
                for v in virtual_stages(scn.arch.num_layers, lay.pp)]
    for lay in space.layouts + tuple(variants):
        for stage in lay.stages():
            for ckpt in lay.levels((Checkpointing.none, Checkpointing.selective, Checkpointing.full)):
                for m in fitter.micro_batches(lay):
                    if lay.vpp > 1 and not rounds_divide(lay.pp, fitter.per_rank(lay) // m):
                        continue
                    est = fitter.peak(lay, stage, ckpt, m)
                    if fitter.fits(est):
                        step = speed.step(fitter.scenario(lay, stage, ckpt, m), stage, topology, None, timing)
                        timed.append(Timed(lay, stage, ckpt, m, step, est))
    return _plan(fitter, min(timed, key=Timed.key))


@pytest.mark.parametrize("model,gpus,batch,seq", [("llama-3.1-8b", 16, 64, 4096), ("llama-3.1-70b", 32, 64, 2048)])
def test_pruning_keeps_the_brute_force_choice(model, gpus, batch, seq):
    advice = search_parallelism(_scn(model, gpus, seq), model, global_batch=batch)
    assert advice.recommendation == _brute_best(model, gpus, batch, seq)


def test_answer_keeps_what_the_user_trains_and_fits():
    scn = _scn("llama-3.1-70b", 64, 4096)
    advice = search_parallelism(scn, "llama-3.1-70b", global_batch=256)
    plans = (advice.recommendation, *advice.alternatives)
    assert advice.scenario.setup.seq_len == 4096 and advice.scenario.setup.precision == scn.setup.precision
    assert advice.scenario.model == scn.model
    fitter = _fitter("llama-3.1-70b", 64, 256, 4096)
    for p in plans:
        assert p.micro_batch * p.grad_accum * p.dp == 256 and p.tp * p.pp * p.cp * p.dp == 64
        assert p.peak_bytes <= advice.scenario.usable_bytes
        lay = Layout(tp=p.tp, pp=p.pp, cp=p.cp, ep=p.ep, dp=p.dp, stack=p.stack, vpp=p.vpp)
        assert fitter.exact(lay, p.stage, p.checkpointing, p.micro_batch).total == p.peak_bytes
    assert [rank_key(p) for p in plans] == sorted(rank_key(p) for p in plans)
    assert len({p.mesh_key for p in plans}) == len(plans)  # one row per mesh
    assert [s.rule for s in advice.trace] == [
        "search.space", "search.fit", "search.pruned", "search.best", "search.schedule", "search.runner-up"]
    assert advice.trace[-1].threshold == round(advice.alternatives[0].step_time_s, 6)
    schedule = advice.trace[-2]  # the choice has no pipeline: 1F1B, with what interleaving was weighed
    assert (schedule.outcome, schedule.observed) == ("1f1b", 1) and "no pipeline in the chosen layout" in schedule.reason
    assert advice.counts.interleaved > 0 and "zero-bubble schedules (zbv, interleaved-zb) not searched" in schedule.reason


def test_nothing_fits_is_an_answer_with_the_closest_miss():
    advice = search_parallelism(_scn("llama-3.1-405b", 8, 8192), "llama-3.1-405b", global_batch=64)
    assert advice.recommendation is None and advice.alternatives == ()
    assert [s.rule for s in advice.trace][-1] == "search.none"
    assert "closest" in advice.trace[-1].reason and advice.counts.fitting == 0


def test_heaviest_checkpointing_decides_the_lighter_levels():
    advice = search_parallelism(_scn("llama-3.1-405b", 64, 8192), "llama-3.1-405b", global_batch=64)
    pruned = next(s for s in advice.trace if s.rule == "search.pruned")
    assert "the most recompute does not fit" in pruned.reason and advice.counts.pruned == pruned.observed


def test_search_refuses_a_bare_parameter_count():
    with pytest.raises(ZeroplanError, match="--model"):
        search_parallelism(scenario(ScenarioArgs(params="7e9", hardware=H100)), None)


def test_checkpointing_given_is_the_least_tried():
    advice = search_parallelism(_scn("llama-3.1-8b", 8, 2048, checkpointing=Checkpointing.full), "llama-3.1-8b",
                                global_batch=64)
    assert {p.checkpointing for p in (advice.recommendation, *advice.alternatives)} == {Checkpointing.full}
    assert advice.recommendation.peak_bytes < 80 * GIB
    assert advice.scenario.setup.checkpointing is Checkpointing.full  # the planned scenario keeps what was given
