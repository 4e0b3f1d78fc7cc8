"""peft's fp32 adapters on a 16-bit base and prepare_model_for_kbit_training, against what
validation/measure_finetune_gpu_terms.py measured on CPU (validation/finetune_gpu_terms.json is the source of every
expected number here), and the terms a GPU adds that CPU cannot show (issue 23, items 2 and 3)."""

import json
from pathlib import Path

import pytest

import zeroplan
from zeroplan.memory.activations import activation_bytes
from zeroplan.memory.activations.tuning import tuned_activations
from zeroplan.memory.finetune import ALL_LINEAR, Finetune, tune
from zeroplan.memory.quant import QloraStack, Quant
from zeroplan.memory.recipes import make_recipe
from zeroplan.memory.setup import (
    DeepSpeedKnobs,
    Engine,
    EngineOptions,
    Optimizer,
    Parallelism,
    Precision,
    TrainingSetup,
    ZeroStage,
)
from zeroplan.memory.states import ModelSummary
from zeroplan.memory.tuned import engine_tuned_base
from zeroplan.models.named import named_parameters
from zeroplan.models.params import count_params
from zeroplan.models.presets import model_from_data

ROOT = Path(__file__).resolve().parent.parent / "validation"
DATA = json.loads((ROOT / "finetune_gpu_terms.json").read_text())
ACTS = json.loads((ROOT / "finetune_activations.json").read_text())
SPEC = model_from_data({"model_type": DATA["family"], **ACTS["config"][DATA["family"]]}, "tiny", hf_name="tiny")


def _base(finetune: Finetune, engine: Engine = Engine.none):
    tuning = tune(named_parameters(SPEC), finetune, DATA["family"])
    summary = ModelSummary(name="tiny", num_params=count_params(SPEC).num_params)
    base = engine_tuned_base(engine, summary, None, tuning, make_recipe(Precision.bf16_true, Optimizer.adamw),
                             ZeroStage.zero0, Parallelism(gpus=1), DeepSpeedKnobs(), EngineOptions())
    return tuning, base.states


@pytest.mark.parametrize("row", DATA["autocast"], ids=lambda r: f"autocast_adapter_dtype={r['autocast_adapter_dtype']}")
def test_adapters_gradients_and_adamw_follow_peft_autocast_adapter_dtype(row):
    """A pure-bf16 base on one GPU (--engine none --precision bf16-true): fp32 adapters by default, bf16 when off."""
    spec = Finetune(lora_rank=DATA["lora"]["r"], lora_targets=(ALL_LINEAR,), adapter_fp32=row["autocast_adapter_dtype"])
    tuning, states = _base(spec)
    assert tuning.num_trainable == row["trainable_params"]
    frozen = 2 * tuning.frozen_float_numel
    assert (states.parameters - frozen, states.gradients, states.optimizer_states) == (
        row["trainable_bytes"], row["grad_bytes"], row["adamw_state_bytes"])


@pytest.mark.parametrize("row", DATA["autocast"], ids=lambda r: f"autocast_adapter_dtype={r['autocast_adapter_dtype']}")
def test_saved_activations_follow_the_adapter_dtype(row):
    """The lora_A path computes and saves in the adapter dtype: a = 4 with autocast, the base's 2 without."""
    tuning = tune(named_parameters(SPEC), Finetune(lora_rank=DATA["lora"]["r"], lora_targets=(ALL_LINEAR,)), "llama")
    setup = TrainingSetup(precision=Precision.bf16_true, seq_len=DATA["seq_len"], micro_batch=DATA["micro_batch"])
    arch = SPEC.architecture()
    a = 4 if row["autocast_adapter_dtype"] else 2
    predicted = tuned_activations(activation_bytes(arch, setup), arch, setup, tuning, a).total_bytes
    assert 0 <= row["activation_bytes"] - predicted <= 4  # the 4-byte residual of every llama row (docs/finetune.md)


def test_prepare_model_for_kbit_training_makes_every_float_parameter_fp32():
    """QLoRA on one GPU: the embedding, norms and head become fp32 (measured), the packed weights stay as stored."""
    before, after = DATA["kbit"]
    assert before["frozen_float_dtypes"] == ["torch.bfloat16"] and after["frozen_float_dtypes"] == ["torch.float32"]
    spec = Finetune(lora_rank=DATA["lora"]["r"], lora_targets=(ALL_LINEAR,), quant=Quant.nf4, double_quant=True)
    tuning, states = _base(spec)
    assert tuning.frozen_float_numel == after["frozen_float_params"]
    adapters = tuning.num_trainable * 4
    assert states.parameters - adapters - tuning.packed_bytes - tuning.quant_state_bytes == after["frozen_float_bytes"]
    assert (states.gradients, states.optimizer_states) == (after["grad_bytes"], after["adamw_state_bytes"])


def test_bitsandbytes_matmul4bit_saves_the_packed_weight_only():
    """bitsandbytes 0.50.2 (since 0.43.2, commit 9e75374 'delete useless buffered activation'): not the input."""
    m = DATA["matmul4bit"]
    assert m["hook_saved_bytes"] == 0 and not m["ctx_holds_input"]
    assert m["ctx_tensors"] == [[[m["packed_bytes"], 1], "torch.uint8"]]


def test_the_output_names_the_adapter_dtype_and_the_qlora_path():
    lora = zeroplan.estimate(model="llama-3.1-8b", gpus=1, stage=0, engine="none", precision="bf16-true", lora_rank=16)
    off = zeroplan.estimate(model="llama-3.1-8b", gpus=1, stage=0, engine="none", precision="bf16-true", lora_rank=16,
                            adapter_dtype="base")
    assert any("peft autocast_adapter_dtype: adapters fp32" in a for a in lora.assumptions)
    assert any("autocast_adapter_dtype=False" in a for a in off.assumptions)
    assert lora.stages[0].gpu_bytes()["gradients"] == 2 * off.stages[0].gpu_bytes()["gradients"]
    qlora = zeroplan.estimate(model="llama-3.1-8b", gpus=1, stage=0, engine="none", lora_rank=16, qlora=True)
    assert any("QLoRA path: transformers + peft prepare_model_for_kbit_training" in a for a in qlora.assumptions)
    ds = zeroplan.estimate(model="llama-3.1-8b", gpus=1, stage=0, lora_rank=16, qlora=True)
    assert any("no prepare_model_for_kbit_training cast is kept" in a for a in ds.assumptions)
    assert qlora.stages[0].gpu_bytes()["parameters"] > ds.stages[0].gpu_bytes()["parameters"]


def test_adapter_dtype_is_refused_where_nothing_is_adapted(runner):
    from zeroplan.cli.app import app

    res = runner.invoke(app, ["estimate", "-m", "llama-3.1-8b", "-g", "1", "--adapter-dtype", "base"])
    assert res.exit_code == 1 and "--lora-rank" in res.output
    res = runner.invoke(app, ["estimate", "-m", "llama-3.1-8b", "-g", "1", "--lora-rank", "8", "--adapter-dtype", "bf"])
    assert res.exit_code == 1 and "--adapter-dtype bf" in res.output


def _tiny_qlora(**extra):
    from zeroplan.memory.setup import Checkpointing

    tuning = tune(named_parameters(SPEC), Finetune(lora_rank=8, quant=Quant.nf4, **extra), "llama")
    setup = TrainingSetup(precision=Precision.bf16_true, seq_len=DATA["seq_len"], micro_batch=DATA["micro_batch"],
                          checkpointing=Checkpointing.none)
    arch = SPEC.architecture()
    return tuned_activations(activation_bytes(arch, setup), arch, setup, tuning, 4), arch


def test_bitsandbytes_before_0_43_2_keeps_each_4bit_matmuls_input():
    """ctx.tensors = (A, B) before bitsandbytes commit 9e75374 (0.43.2): q/k/v's and gate/up's input (e T h each)
    and down_proj's (e T f) are kept wherever a gradient flows through them; o_proj's is SDPA's saved output. Layer
    0's q/k/v read the frozen embeddings' output, which needs no gradient: MatMul4Bit keeps nothing there."""
    now, arch = _tiny_qlora()
    old, _ = _tiny_qlora(bnb_version="0.42.0")
    t, e, h, f = DATA["micro_batch"] * DATA["seq_len"], 2, arch.hidden_size, arch.intermediate_size
    per_layer = [e * t * h + e * t * f] + [2 * e * t * h + e * t * f] * (arch.num_layers - 1)
    assert [b - a for a, b in zip(now.layer_bytes, old.layer_bytes)] == per_layer
    assert old.total_bytes - now.total_bytes == sum(per_layer)
    assert _tiny_qlora(bnb_version="0.43.2")[0].total_bytes == now.total_bytes


def test_prepared_qlora_without_autocast_saves_what_fp32_training_saves():
    """Measured: the prepared bf16 QLoRA model saves exactly the bytes of the same LoRA in fp32 (the 4-bit matmuls
    keep nothing, everything around them is fp32, the logits too): zeroplan's --engine none --precision bf16-true."""
    prepared = DATA["kbit"][1]
    fp32_lora = next(r for r in ACTS["rows"] if (r["family"], r["dtype"], r["checkpointing"], r["mode"]) == (
        "llama", "fp32", "none", "lora r8 all-linear p0.0"))
    assert prepared["activation_bytes"] == fp32_lora["measured"]
    tuning = tune(named_parameters(SPEC), Finetune(lora_rank=8, lora_targets=(ALL_LINEAR,)), "llama")
    setup = TrainingSetup(precision=Precision.fp32, seq_len=DATA["seq_len"], micro_batch=DATA["micro_batch"])
    arch = SPEC.architecture()
    predicted = tuned_activations(activation_bytes(arch, setup), arch, setup, tuning, 4).total_bytes
    assert 0 <= prepared["activation_bytes"] - predicted <= 4


def test_the_estimate_takes_fp32_activations_for_a_prepared_bf16_true_qlora():
    kw = dict(model="llama-3.1-8b", gpus=1, stage=0, engine="none", lora_rank=16, seq_len=1024)
    q = zeroplan.estimate(precision="bf16-true", qlora=True, **kw)
    lora32 = zeroplan.estimate(precision="fp32", **kw)
    assert q.activations.total_bytes == lora32.activations.total_bytes
    assert q.activations.dequant_bytes == 2 * 14336 * 4096  # bitsandbytes' bf16 compute dtype, not fp32


def test_litgpt_quantizes_the_head_and_casts_nothing_to_fp32():
    from zeroplan.models.presets import load_model

    params = named_parameters(load_model("llama-3.1-8b"))  # an untied head, 128256 x 4096
    peft = tune(params, Finetune(lora_rank=8, quant=Quant.nf4), "llama")
    lit = tune(params, Finetune(lora_rank=8, quant=Quant.nf4, qlora_stack=QloraStack.litgpt), "llama")
    head = 128256 * 4096
    assert lit.quantized_numel - peft.quantized_numel == head == peft.frozen_float_numel - lit.frozen_float_numel
    kw = dict(model="llama-3.1-8b", gpus=1, stage=0, engine="none", lora_rank=16, qlora=True)
    lit, peft_run = zeroplan.estimate(qlora_stack="litgpt", **kw), zeroplan.estimate(**kw)
    assert lit.stages[0].gpu_bytes()["parameters"] < peft_run.stages[0].gpu_bytes()["parameters"]
    # no prepare_model_for_kbit_training: bf16 activations, as the same LoRA's (litgpt's adapters: the model dtype)
    lora = zeroplan.estimate(model="llama-3.1-8b", gpus=1, stage=0, engine="none", lora_rank=16, adapter_dtype="base",
                             training_loop="litgpt")  # the loop --qlora-stack litgpt implies (memory.activations.loop)
    assert lit.activations.total_bytes == lora.activations.total_bytes < peft_run.activations.total_bytes
    assert any("litgpt's LoRA: adapters" in a for a in lit.assumptions)


def test_torchtune_quantizes_the_layers_only_and_keeps_what_bitsandbytes_0_50_keeps(runner):
    """torchtune's qlora builders: the output projection stays 16-bit, nothing is cast to fp32, the adapters take the
    model's dtype, and torchao 0.18.0's LinearNF4 saves the weight only (no input kept, no --bnb-version)."""
    from zeroplan.cli.app import app

    kw = dict(model="llama-3.1-8b", gpus=1, stage=0, engine="none", precision="bf16-true", lora_rank=16, qlora=True)
    tt, peft_run = zeroplan.estimate(qlora_stack="torchtune", **kw), zeroplan.estimate(**kw)
    lora = zeroplan.estimate(model="llama-3.1-8b", gpus=1, stage=0, engine="none", precision="bf16-true", lora_rank=16,
                             adapter_dtype="base")
    assert tt.activations.total_bytes == lora.activations.total_bytes < peft_run.activations.total_bytes
    assert tt.stages[0].gpu_bytes()["parameters"] < peft_run.stages[0].gpu_bytes()["parameters"]
    assert any("QLoRA path: torchtune" in a for a in tt.assumptions)
    res = runner.invoke(app, ["estimate", "-m", "llama-3.1-8b", "-g", "1", "--qlora", "--lora-rank", "8",
                              "--qlora-stack", "torchtune", "--bnb-version", "0.41.0"])
    assert res.exit_code == 1 and "torchao" in res.output


@pytest.mark.parametrize("stack, fp32_floats, fp32_adapters", [
    ("peft", True, True), ("trl", False, False), ("axolotl", False, True), ("llamafactory", False, True),
    ("litgpt", False, False),
    ("torchtune", False, False)])
def test_each_stack_keeps_its_own_dtypes(stack, fp32_floats, fp32_adapters):
    """Which stack quantized the base decides the frozen floats' and the adapters' bytes (docs/finetune.md)."""
    kw = dict(model="llama-3.1-8b", gpus=1, stage=0, engine="none", precision="bf16-true", lora_rank=16, qlora=True)
    est = zeroplan.estimate(qlora_stack=stack, **kw)
    tuning = est.scenario.tuning
    adapters = tuning.num_trainable
    grads = est.stages[0].gpu_bytes()["gradients"]
    assert grads == (4 if fp32_adapters else 2) * adapters
    floats = est.stages[0].gpu_bytes()["parameters"] - grads - tuning.packed_bytes - tuning.quant_state_bytes
    assert floats == (4 if fp32_floats else 2) * tuning.frozen_float_numel
    assert any(a.startswith("QLoRA path:") for a in est.assumptions)


AXOLOTL_QLORA = """base_model: Qwen/Qwen3-8B
adapter: qlora
load_in_4bit: true
lora_r: 8
lora_target_linear: true
sequence_len: 1024
micro_batch_size: 1
"""


@pytest.mark.parametrize("kind", ["llamafactory", "axolotl"])
def test_a_from_file_names_its_qlora_stack(runner, tmp_path, kind):
    import json as _json

    from zeroplan.cli.app import app

    root = Path(__file__).resolve().parent.parent / "tests" / "data" / "field" / "llamafactory"
    path = root / "hiyouga__LLaMA-Factory__examples__train_qlora__qwen3_lora_sft_otfq.yaml"
    if kind == "axolotl":
        path = tmp_path / "qlora.yaml"
        path.write_text(AXOLOTL_QLORA)
    res = runner.invoke(app, ["estimate", "--from", str(path), "--model", "qwen3-8b", "-g", "1", "-f", "json"])
    assert res.exit_code == 0, res.output
    stack = {"llamafactory": "LLaMA-Factory", "axolotl": "axolotl"}[kind]
    assert any(a.startswith(f"QLoRA path: {stack}") for a in _json.loads(res.stdout)["assumptions"])
