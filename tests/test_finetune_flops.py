"""Throughput under a fine-tune (perf/flops.py, docs/throughput.md 1.1): FLOPs against what torch's FlopCounterMode
counted for peft models (validation/measure_finetune_flops.py wrote validation/finetune_flops.json, the source of
every measured number here), the dequantization time of a 4-bit base, and MFU's definition."""

import json
from pathlib import Path

import pytest

from zeroplan.memory.summary import param_count
from zeroplan.memory.finetune import ALL_LINEAR, Finetune, tune
from zeroplan.memory.setup import Attention, Checkpointing, TrainingSetup, ZeroStage
from zeroplan.models.named import named_parameters
from zeroplan.models.params import count_params
from zeroplan.models.presets import model_from_data
from zeroplan.perf.flops import dequant_seconds, hardware_flops_per_micro_step, model_flops_per_micro_step
from zeroplan.perf.throughput import estimate_throughput
from zeroplan.scenario import ScenarioArgs, scenario

DATA = json.loads((Path(__file__).resolve().parent.parent / "validation" / "finetune_flops.json").read_text())
SPEC = model_from_data(DATA["config"], "tiny llama", hf_name="tiny-llama")
SETUP = TrainingSetup(seq_len=DATA["seq"], micro_batch=DATA["batch"], attention=Attention.eager,
                      checkpointing=Checkpointing.none)
EMBEDDING = DATA["config"]["vocab_size"] * DATA["config"]["hidden_size"]


def tuning_of(row):
    lora = row.get("lora")
    if lora:
        targets = lora["target_modules"]
        spec = Finetune(lora_rank=lora["r"], lora_targets=(ALL_LINEAR,) if targets == ALL_LINEAR else tuple(targets),
                        lora_dropout=lora.get("lora_dropout", 0.0), dora=lora.get("use_dora", False))
    elif row.get("freeze"):
        spec = Finetune(freeze=tuple(row["freeze"]))
    else:
        return None
    return tune(named_parameters(SPEC), spec, "llama")


@pytest.mark.parametrize("row", DATA["rows"], ids=lambda r: r["case"])
def test_fine_tune_flops_match_what_torch_counts(row):
    """Within 0.3 % (the norms' parameters, which 6N counts and no matmul runs), and 2 % for DoRA (0.5 % and 1.7 %).
    FlopCounterMode counts no embedding lookup: 6N's embedding term (2 forward, 2 or 4 backward) is taken out."""
    tuning = tuning_of(row)
    forward, backward = hardware_flops_per_micro_step(count_params(SPEC), SPEC.architecture(), SETUP, tuning)
    frozen_embedding = tuning is not None and (row.get("lora") or "model.embed_tokens.*" in row.get("freeze", ()))
    forward -= 2 * EMBEDDING * row["tokens"]
    backward -= (2 if frozen_embedding else 4) * EMBEDDING * row["tokens"]
    tolerance = 0.02 if row.get("lora", {}).get("use_dora") else 0.003
    assert forward == pytest.approx(row["forward_flops"], rel=tolerance)
    assert backward == pytest.approx(row["backward_flops"], rel=tolerance)


def test_lora_needs_two_thirds_of_full_training_per_linear():
    """Per frozen weight 4 FLOPs per token against 6 (LoRA Without Regret: 2N^2 + 6NR against 3N^2 multiply-adds)."""
    full = hardware_flops_per_micro_step(count_params(SPEC), SPEC.architecture(), SETUP)
    row = DATA["rows"][1]  # lora r8 q,v: the measured ratio of backward to forward is 1.05 against full's 2
    assert row["backward_flops"] / row["forward_flops"] == pytest.approx(1.054, abs=1e-3)
    assert full[1] / full[0] == 2


def _llama(**options):
    return scenario(ScenarioArgs(model="llama-3.1-8b", gpus="1", micro_batch="4", checkpointing="none", **options))


def _throughput(scn):
    return estimate_throughput(param_count(scn.model), scn.arch, scn.hardware, scn.setup, scn.parallelism,
                               ZeroStage.zero0, scn.knobs, tuning=scn.tuning)


def test_mfu_counts_the_flops_a_fine_tune_needs():
    """One GPU, nothing exposed: MFU is the preset's utilisation for full training and for LoRA alike, because its
    numerator is the FLOPs the fine-tune runs without recomputation (4 per frozen weight), not 6N."""
    full, lora = _throughput(_llama()), _throughput(_llama(lora_rank="16", lora_targets="all-linear"))
    for t in (full, lora):  # the optimizer step (perf.optimizer_step) is the only other time in the step
        assert t.mfu == pytest.approx(0.40 * t.compute_s / (t.compute_s + t.optimizer_step_s))
    compute = (full.step_time_s - full.optimizer_step_s) / (lora.step_time_s - lora.optimizer_step_s)
    assert 1.3 < compute < 1.5  # FLOPs alone; the adapters' optimizer step is tiny next to full training's
    assert lora.tokens_per_s_per_gpu / full.tokens_per_s_per_gpu > compute
    scn = _llama(lora_rank="16", lora_targets="all-linear")
    needed = model_flops_per_micro_step(param_count(scn.model), scn.arch, scn.setup, scn.tuning)
    assert needed < model_flops_per_micro_step(param_count(scn.model), scn.arch, scn.setup)


def test_a_4bit_base_adds_its_dequantization_at_hbm_speed():
    scn = _llama(qlora=True, quant_storage="bfloat16", lora_rank="16", lora_targets="all-linear")
    t = scn.tuning
    per_pass = (t.packed_bytes + t.quant_state_bytes + t.quantized_numel * 2) / (scn.hardware.hbm_bandwidth_tbps * 1e12)
    assert dequant_seconds(t, scn.setup, scn.arch, scn.hardware.hbm_bandwidth_tbps) == (per_pass, per_pass)
    from dataclasses import replace

    recompute = replace(scn.setup, checkpointing=Checkpointing.full)
    assert dequant_seconds(t, recompute, scn.arch, 3.35)[1] == pytest.approx(
        2 * (t.packed_bytes + t.quant_state_bytes + t.quantized_numel * 2) / 3.35e12)
    lora = _throughput(_llama(lora_rank="16", lora_targets="all-linear"))
    qlora = _throughput(scn)
    assert qlora.compute_s == pytest.approx(lora.compute_s + 2 * per_pass, rel=1e-3)  # same FLOPs, plus dequant
    assert any("4-bit base: dequantized" in a for a in qlora.assumptions)


def test_a_frozen_prefix_runs_no_backward():
    """Frozen embeddings and the first half: nothing below layer 2 needs a gradient (measured: backward
    32,505,856 against full's 56,623,104 FLOPs)."""
    rows = {r["case"]: r for r in DATA["rows"]}
    half, full = rows["frozen embeddings and first half"], rows["full"]
    assert half["backward_flops"] < 0.6 * full["backward_flops"]
    tuning = tuning_of(half)
    _, backward = hardware_flops_per_micro_step(count_params(SPEC), SPEC.architecture(), SETUP, tuning)
    assert backward - 2 * EMBEDDING * half["tokens"] == pytest.approx(half["backward_flops"], rel=0.003)


def test_the_throughput_command_takes_the_fine_tuning_options(runner):
    from zeroplan.cli.app import app

    def run(*extra):
        res = runner.invoke(app, ["throughput", "-m", "llama-3.1-8b", "-g", "1", "--micro-batch", "4",
                                  "--checkpointing", "none", "-f", "json", *extra])  # fmt: skip
        assert res.exit_code == 0, res.output
        return json.loads(res.stdout)

    full, lora = run(), run("--lora-rank", "16", "--lora-targets", "all-linear", "--sweep", "8,16")
    assert full["finetune"] is None and lora["finetune"]["mode"] == "LoRA"
    assert lora["stages"][0]["tokens_per_s_per_gpu"] == pytest.approx(
        _throughput(_llama(lora_rank="16", lora_targets="all-linear")).tokens_per_s_per_gpu)
    assert lora["stages"][0]["tokens_per_s_per_gpu"] > 1.3 * full["stages"][0]["tokens_per_s_per_gpu"]
    assert any(a.startswith("fine-tune FLOPs per token") for a in lora["assumptions"])
    assert len(lora["sweep"]["points"]) == 2


@pytest.mark.parametrize("stage", [ZeroStage.zero0, ZeroStage.zero2, ZeroStage.zero3])
def test_a_fine_tune_reduces_its_trainable_gradients_and_zero3_still_gathers_every_parameter(stage):
    """DeepSpeed's ZeRO-1/2 flat groups hold requires_grad parameters only (stage_1_and_2.py); ZeRO-3 partitions and
    gathers every parameter (stage3.py), frozen ones too (docs/finetune.md "Model states per stage and engine")."""
    scn = scenario(ScenarioArgs(model="llama-3.1-8b", gpus="8", lora_rank="16", lora_targets="all-linear"))
    t = estimate_throughput(param_count(scn.model), scn.arch, scn.hardware, scn.setup, scn.parallelism, stage,
                            scn.knobs, tuning=scn.tuning)
    payload = {term.name: term.payload_bytes for term in t.terms}
    grads = payload["gradient all-reduce" if stage is ZeroStage.zero0 else "gradient reduce-scatter"]
    assert grads == scn.tuning.num_trainable * 2  # bf16 communication
    if stage is ZeroStage.zero2:
        assert payload["parameter all-gather after the step"] == scn.tuning.num_trainable * 2
    if stage is ZeroStage.zero3:
        assert payload["forward parameter all-gather"] == scn.model.num_params * 2
