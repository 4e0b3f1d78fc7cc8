"""The configs the parallelism search writes: the DeepSpeed AutoTP ds_config reads back as the plan (zeroplan's
reader and check), the torchtitan sections parse as TOML with torchtitan's key names and degrees (docs/advisor.md)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from zeroplan.advise.layouts.configs import (
    TORCHTITAN_KEYS,
    autotp_config,
    torchtitan_sections,
    torchtitan_toml,
)
from zeroplan.advise.layouts.fit import Fitter
from zeroplan.advise.layouts.search import search_parallelism
from zeroplan.advise.layouts.space import Layout, Stack, torchtitan_layers_per_stage, virtual_stages
from zeroplan.check.findings import RunContext
from zeroplan.check.rules import run_checks
from zeroplan.deepspeed.reader import parse_ds_config
from zeroplan.errors import UsageError, ZeroplanError
from zeroplan.memory.setup import ZeroStage
from zeroplan.models.mesh import Schedule
from zeroplan.scenario import ScenarioArgs, scenario

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

H100 = "h100-sxm-80gb"
# torchtitan's Parallelism / Training / ActivationCheckpoint fields at pytorch/torchtitan@238fa9953e4a
# torchtitan/config/job_config.py (read from the source; the keys the emitter may write must be among them).
TORCHTITAN_FIELDS = {
    "training": {"dataset", "dataset_path", "local_batch_size", "global_batch_size", "seq_len", "max_norm", "steps",
                 "enable_cpu_offload", "dtype", "mixed_precision_param", "mixed_precision_reduce", "gc_freq",
                 "gc_debug", "dataloader"},
    "parallelism": {"data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
                    "tensor_parallel_degree", "disable_loss_parallel", "enable_async_tensor_parallel",
                    "pipeline_parallel_degree", "module_fqns_per_model_part",
                    "pipeline_parallel_first_stage_less_layers", "pipeline_parallel_last_stage_less_layers",
                    "pipeline_parallel_layers_per_stage", "pipeline_parallel_schedule",
                    "pipeline_parallel_schedule_csv", "pipeline_parallel_microbatch_size",
                    "pipeline_parallel_expert_parallel_overlap", "context_parallel_degree",
                    "context_parallel_load_balancer", "context_parallel_rotate_method", "expert_parallel_degree",
                    "expert_tensor_parallel_degree", "expert_parallel_comm_backend"},
    "activation_checkpoint": {"mode", "selective_ac_option", "per_op_sac_force_recompute_mm_shapes_by_fqns",
                              "early_stop", "memory_budget"},
}


def _advice(model, gpus, batch, seq=2048, stack=Stack.auto):
    scn = scenario(ScenarioArgs(model=model, gpus=str(gpus), hardware=H100, seq_len=str(seq)))
    return search_parallelism(scn, model, global_batch=batch, stack=stack)


def test_written_keys_are_torchtitans():
    for section, keys in TORCHTITAN_KEYS.items():
        assert set(keys) <= TORCHTITAN_FIELDS[section]


@pytest.mark.parametrize("model,gpus,batch,seq", [("llama-3.1-70b", 64, 256, 4096), ("llama-3.1-8b", 16, 64, 8192),
                                                  ("qwen3-30b-a3b", 32, 256, 2048)])
def test_torchtitan_sections_parse_and_lay_out_the_plan(model, gpus, batch, seq):
    advice = _advice(model, gpus, batch, seq, Stack.torchtitan)
    plan = advice.recommendation
    doc = tomllib.loads(torchtitan_toml(advice))
    assert doc == torchtitan_sections(advice)
    par, train = doc["parallelism"], doc["training"]
    # torchtitan's ParallelDims: dp_replicate x dp_shard x cp x tp x pp = world size
    degrees = (par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"] * par["context_parallel_degree"]
               * par["tensor_parallel_degree"] * par["pipeline_parallel_degree"])
    assert degrees == gpus
    dp = par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"]
    accumulation = train["global_batch_size"] // (train["local_batch_size"] * dp)
    micro = par.get("pipeline_parallel_microbatch_size", train["local_batch_size"])
    assert (train["global_batch_size"], train["seq_len"]) == (batch, seq)
    assert train["local_batch_size"] * dp * accumulation == batch
    assert micro == plan.micro_batch and (plan.grad_accum == accumulation if plan.pp == 1 else
                                          train["local_batch_size"] == plan.micro_batch * plan.grad_accum)
    assert par["fsdp_reshard_after_forward"] == ("always" if plan.stage is ZeroStage.zero3 else "never")
    assert doc["activation_checkpoint"]["mode"] == ("full" if plan.checkpointing.value == "full" else "none")


def test_autotp_config_reads_back_as_the_plan():
    advice = _advice("llama-3.1-70b", 32, 64, 4096, Stack.deepspeed)
    plan = advice.recommendation
    config = json.loads(json.dumps(autotp_config(advice)))
    assert config.get("tensor_parallel", {}).get("autotp_size", 1) == plan.tp
    assert ("train_batch_size" in config) is (plan.tp == 1)
    parsed = parse_ds_config(config)
    assert (parsed.stage, parsed.train_micro_batch_size_per_gpu, parsed.gradient_accumulation_steps) == (
        plan.stage, plan.micro_batch, plan.grad_accum)
    assert parsed.precision is advice.scenario.setup.precision
    findings = run_checks(parsed, RunContext(parallelism=advice.scenario.parallelism, hardware=advice.scenario.hardware))
    assert [f for f in findings if f.severity == "error"] == []
    # the config's knobs on the plan's mesh give the plan's peak
    fitter = Fitter.of(advice.scenario, "llama-3.1-70b", advice.scenario.usable_bytes, 64)
    layout = Layout(tp=plan.tp, pp=1, cp=1, ep=1, dp=plan.dp, stack=Stack.deepspeed)
    scn = fitter.scenario(layout, plan.stage, plan.checkpointing, plan.micro_batch)
    again = replace(scn, knobs=parsed.knobs)
    from zeroplan.memory.estimate import evaluate

    assert evaluate(again, plan.stage).total == plan.peak_bytes


def test_tensor_parallel_section_when_the_choice_has_tp():
    advice = _advice("llama-3.1-70b", 32, 64, 4096, Stack.deepspeed)
    plans = [p for p in (advice.recommendation, *advice.alternatives) if p.tp > 1]
    assert plans
    chosen = advice.model_copy(update={"recommendation": plans[0]})
    config = autotp_config(chosen)
    assert config["tensor_parallel"] == {"autotp_size": plans[0].tp} and "train_batch_size" not in config
    assert config["zero_optimization"]["stage"] == int(plans[0].stage)


def test_emitting_the_other_stack_is_a_usage_error():
    advice = _advice("llama-3.1-70b", 64, 256, 4096, Stack.torchtitan)
    with pytest.raises(UsageError, match="--emit-torchtitan"):
        autotp_config(advice)


# --- the pipeline schedule --------------------------------------------------------------------------------------
# torchtitan@238fa99 pipeline_llm: with pipeline_parallel_layers_per_stage, ceil((L + first_less + last_less) /
# layers_per_stage) virtual stages; without it 2 per rank under a multi-stage schedule (Interleaved1F1B), 1 under
# 1F1B. The expected keys below are worked by hand from that rule and zeroplan's split (weights 0 where L divides
# into pp x vpp stages, else 1).

def _torchtitan_stages(par: dict, num_layers: int) -> int:
    per = par.get("pipeline_parallel_layers_per_stage")
    weights = par["pipeline_parallel_first_stage_less_layers"] + par["pipeline_parallel_last_stage_less_layers"]
    if per is not None:
        return -(-(num_layers + weights) // per)
    return par["pipeline_parallel_degree"] * (2 if par["pipeline_parallel_schedule"] == "Interleaved1F1B" else 1)


@pytest.mark.parametrize("pp,vpp,schedule,less,per", [
    (4, 1, "1F1B", 0, None),  # 8 layers per stage
    (4, 2, "Interleaved1F1B", 0, None),  # torchtitan's default 2 stages per rank: 8 of 4 layers
    (4, 8, "Interleaved1F1B", 0, 1),  # 32 stages of 1 layer
    (4, 3, "Interleaved1F1B", 1, 3),  # E 34 over 12 stages: ceil(34 / 3) = 12
    (2, 3, "Interleaved1F1B", 1, 6),  # E 34 over 6 stages: ceil(34 / 6) = 6
])
def test_torchtitan_builds_the_stages_the_plan_split(pp, vpp, schedule, less, per):
    advice = _advice("llama-3.1-8b", 16, 64, 2048, Stack.torchtitan)
    plan = advice.recommendation.model_copy(update={"pp": pp, "vpp": vpp, "dp": 16 // (pp * advice.recommendation.tp
                                                                                         * advice.recommendation.cp),
                                                    "schedule": Schedule.interleaved if vpp > 1 else
                                                    Schedule.one_f_one_b})
    par = torchtitan_sections(advice.model_copy(update={"recommendation": plan}))["parallelism"]
    assert par["pipeline_parallel_schedule"] == schedule
    assert par["pipeline_parallel_first_stage_less_layers"] == par["pipeline_parallel_last_stage_less_layers"] == less
    assert par.get("pipeline_parallel_layers_per_stage") == per
    assert _torchtitan_stages(par, 32) == pp * vpp


@pytest.mark.parametrize("layers,pp,vpp,per", [(126, 8, 2, 8), (126, 8, 4, 4), (126, 4, 16, 2), (80, 4, 10, 2),
                                               (80, 16, 3, None)])  # E 82 over 48: 2 gives 41 stages, 1 gives 82
def test_layers_per_stage_for_torchtitan(layers, pp, vpp, per):
    assert torchtitan_layers_per_stage(layers, pp, vpp) == per


def test_virtual_stages_are_2_and_the_largest_torchtitan_can_be_told():
    assert virtual_stages(126, 8) == (2, 4, 8)  # 8: 64 stages of 2 effective layers (E 128); 9..15 leave one empty
    assert virtual_stages(32, 4) == (2, 4, 8)  # 8: one layer per chunk
    assert virtual_stages(80, 16) == (2, 5)  # 5 divides 80 / 16; 3 and 4 leave a stage empty (E 82 over 48 or 64)
    assert virtual_stages(80, 1) == ()


def test_an_interleaved_choice_emits_its_schedule():
    # global batch 128 (64 chose tp 2 x pp 4 x vpp 10 until PyTorch's pipelining counted its per-micro-batch receive
    # buffers, 2 x 10 chunks x m of them per rank: memory/pipelining.py)
    advice = _advice("llama-3.1-70b", 32, 128, 2048)
    plan = advice.recommendation
    assert (plan.tp, plan.pp, plan.schedule, plan.vpp) == (4, 8, Schedule.interleaved, 5)
    par = tomllib.loads(torchtitan_toml(advice))["parallelism"]
    assert (par["pipeline_parallel_schedule"], par["pipeline_parallel_layers_per_stage"]) == ("Interleaved1F1B", 2)
    assert _torchtitan_stages(par, 80) == 40
    step = next(s for s in advice.trace if s.rule == "search.schedule")
    assert step.outcome == "interleaved" and step.observed == 5 and "bubble" in step.reason


def test_a_count_torchtitan_cannot_be_told_is_refused():
    advice = _advice("llama-3.1-8b", 16, 64, 2048, Stack.torchtitan)
    plan = advice.recommendation.model_copy(update={"pp": 8, "vpp": 3, "schedule": Schedule.interleaved})
    assert torchtitan_layers_per_stage(32, 8, 3) is None  # E 34 over 24: 2 gives 17 stages, 1 gives 34
    with pytest.raises(ZeroplanError, match="cannot be told 8 x 3 virtual stages"):
        torchtitan_sections(advice.model_copy(update={"recommendation": plan}))


def test_deepspeed_plans_have_no_pipeline():
    advice = _advice("llama-3.1-70b", 32, 64, 4096, Stack.deepspeed)
    assert {(p.pp, p.schedule, p.vpp) for p in (advice.recommendation, *advice.alternatives)} == {
        (1, Schedule.one_f_one_b, 1)}
