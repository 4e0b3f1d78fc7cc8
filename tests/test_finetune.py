"""Fine-tuning modes through the CLI: model states by the formulas of docs/finetune.md, and bad input as one line."""

import json

import pytest

from zeroplan.cli.app import app
from zeroplan.errors import ZeroplanError
from zeroplan.memory.finetune import ALL_LINEAR, Finetune, tune
from zeroplan.memory.quant import Quant
from zeroplan.memory.terms import shard_numel
from zeroplan.models.named import named_parameters
from zeroplan.models.presets import load_model

MODEL = "llama-3.1-8b"


def run(runner, *args):
    return runner.invoke(app, ["estimate", "-m", MODEL, "-g", "8", "--hardware", "none", *args, "-f", "json"])


def stages(runner, *args) -> dict:
    res = run(runner, *args)
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    return data, {s["stage"]: s["gpu_bytes"] for s in data["stages"]}


def test_full_training_reports_every_parameter_trainable(runner):
    data, _ = stages(runner)
    assert data["model"]["num_trainable_params"] == data["model"]["num_params"] and data["finetune"] is None


def test_lora_model_states_follow_the_stage_formulas(runner):
    """T trainable at (2, 2, 12) sharded as the stage shards, F frozen at 2 B, partitioned at ZeRO-3 only."""
    data, by_stage = stages(runner, "--lora-rank", "16", "--lora-targets", "all-linear")
    tuning = tune(named_parameters(load_model(MODEL)), Finetune(lora_rank=16, lora_targets=("all-linear",)), "llama")
    t, f = tuning.num_trainable, tuning.frozen_float_numel
    assert data["model"]["num_trainable_params"] == t and data["finetune"]["mode"] == "LoRA"
    assert (by_stage[0]["parameters"], by_stage[0]["gradients"], by_stage[0]["optimizer_states"]) == (2 * (t + f), 2 * t, 12 * t)
    assert (by_stage[2]["gradients"], by_stage[2]["optimizer_states"]) == (2 * shard_numel(t, 8), 12 * shard_numel(t, 8))
    assert by_stage[3]["parameters"] == 2 * shard_numel(t, 8) + shard_numel(2 * f, 8)


def test_qlora_stores_packed_weights_and_keeps_the_quant_state_whole(runner):
    args = ("--lora-rank", "64", "--lora-targets", "all-linear", "--qlora", "--double-quant", "--quant-storage", "bfloat16")
    data, by_stage = stages(runner, *args)
    tuning = tune(named_parameters(load_model(MODEL)),
                  Finetune(lora_rank=64, lora_targets=("all-linear",), quant=Quant.nf4, double_quant=True), "llama")
    assert data["finetune"]["packed_weight_bytes"] == tuning.quantized_numel // 2 == tuning.packed_bytes
    frozen = 2 * tuning.frozen_float_numel + tuning.packed_bytes
    t = tuning.num_trainable
    assert by_stage[1]["parameters"] == 2 * t + frozen + tuning.quant_state_bytes
    assert by_stage[3]["parameters"] == 2 * shard_numel(t, 8) + shard_numel(frozen, 8) + tuning.quant_state_bytes


def test_frozen_globs_drop_gradients_and_states_of_what_they_match(runner):
    _, full = stages(runner)
    _, frozen = stages(runner, "--freeze", "model.embed_tokens.*,model.layers.0.*")
    spec = load_model(MODEL)
    dropped = sum(p.numel for p in named_parameters(spec) if p.name.startswith(("model.embed_tokens.", "model.layers.0.")))
    assert full[0]["gradients"] - frozen[0]["gradients"] == 2 * dropped
    assert full[0]["optimizer_states"] - frozen[0]["optimizer_states"] == 12 * dropped
    assert full[0]["parameters"] == frozen[0]["parameters"]


def test_qlora_left_out_of_zero3_with_uint8_storage_with_a_warning(runner):
    res = run(runner, "--lora-rank", "8", "--qlora")
    assert res.exit_code == 0, res.output
    assert [s["stage"] for s in json.loads(res.stdout)["stages"]] == [0, 1, 2]
    assert "stage 3 left out: --quant-storage uint8 under ZeRO-3" in res.stderr


def test_peft_adapter_config_is_the_lora_spec(runner, tmp_path):
    path = tmp_path / "adapter_config.json"
    path.write_text(json.dumps({"peft_type": "LORA", "r": 16, "target_modules": "all-linear", "lora_alpha": 32,
                                "lora_dropout": 0.05, "use_rslora": True}))
    data, _ = stages(runner, "--adapter-config", str(path))
    direct, _ = stages(runner, "--lora-rank", "16", "--lora-targets", "all-linear", "--lora-dropout", "0.05")
    # 41,943,040: peft's count for this model, r 16, all-linear (validation/finetune_measured.json "presets")
    assert data["model"]["num_trainable_params"] == direct["model"]["num_trainable_params"] == 41_943_040
    assert data["stages"] == direct["stages"]


BAD = [
    (("--lora-rank", "0"), "--lora-rank (0) must be a positive integer"),
    (("--lora-rank", "-4"), "--lora-rank (-4) must be a positive integer"),
    (("--lora-rank", "eight"), "--lora-rank 'eight' is not an integer"),
    (("--lora-rank", "8", "--lora-targets", "qkv_proj"), "--lora-targets qkv_proj match no linear of the model (linears: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, lm_head, or all-linear)"),
    (("--lora-rank", "8", "--qlora", "--stage", "3"), "--quant-storage uint8 under ZeRO-3: QLoRA there needs the packed weights stored in the compute dtype, --quant-storage bfloat16"),
    (("--lora-rank", "8", "--qlora", "--engine", "fsdp2", "--quant-storage", "float16"), "--quant-storage float16 under --engine fsdp2: QLoRA there needs the packed weights stored in the compute dtype, --quant-storage bfloat16"),
    (("--lora-rank", "8", "--load-in-8bit", "--stage", "3"), "an 8-bit (LLM.int8) base under ZeRO-3 is not modelled"),
    (("--qlora",), "a nf4 base cannot be trained: give --lora-rank R for adapters on it"),
    (("--freeze", "model.embed.*"), "--freeze model.embed.* matches no parameter"),
    (("--freeze", "lm_head.*", "--lora-rank", "8"), "--freeze is for full fine-tuning"),
    (("--lora-rank", "8", "--modules-to-save", "score"), "--modules-to-save score matches no module of the model"),
    (("--lora-dropout", "1.5", "--lora-rank", "8"), "lora_dropout"),
]


# An option that means something only beside another: a usage error naming both (zeroplan/scenario/requires.py).
ALONE = [
    (("--double-quant",), "--double-quant needs --qlora"),
    (("--quant-type", "fp4", "--lora-rank", "8"), "--quant-type needs --qlora"),
    (("--quant-type", "nf4"), "--quant-type needs --qlora"),
    (("--lora-dropout", "0.1"), "--lora-dropout needs LoRA (--lora-rank or --adapter-config)"),
    (("--dora",), "--dora needs LoRA"),
]


@pytest.mark.parametrize("args,message", BAD + ALONE, ids=[" ".join(a) for a, _ in BAD + ALONE])
def test_bad_finetune_input_is_one_line(runner, args, message):
    res = run(runner, *args)
    assert res.exit_code == (2 if (args, message) in ALONE else 1), res.output
    assert message in res.stderr and "Traceback" not in res.stderr
    assert len([line for line in res.stderr.splitlines() if line.startswith("error:")]) == 1


def test_a_bare_count_cannot_carry_adapters(runner):
    res = runner.invoke(app, ["estimate", "--params", "7e9", "--lora-rank", "8"])
    assert res.exit_code == 1 and "fine-tuning modes need --model" in res.stderr


def test_capacity_answers_the_largest_rank_and_preset(runner):
    res = runner.invoke(app, ["capacity", "-m", MODEL, "-g", "1", "--hardware", "rtx4090-24gb", "--qlora",
                              "--lora-rank", "16", "--checkpointing", "full", "-f", "json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)["stages"]
    assert [r["stage"] for r in rows] == [0, 1, 2]
    assert all(r["max_lora_rank"] >= 16 and r["largest_preset_params"] >= 8_030_261_248 for r in rows)


@pytest.mark.parametrize("engine", ["deepspeed", "fsdp", "fsdp2", "ddp"])
def test_full_training_through_the_finetune_path_is_the_plain_estimate(engine):
    """A Tuning where everything trains gives the plain estimate's figures at every stage the engine has."""
    from dataclasses import replace

    from zeroplan.memory.estimate import evaluate
    from zeroplan.memory.setup import Engine
    from zeroplan.scenario import ScenarioArgs, engine_stages, scenario

    scn = scenario(ScenarioArgs(model=MODEL, gpus="8", engine=Engine(engine)))
    tuned = replace(scn, tuning=tune(named_parameters(load_model(MODEL)), Finetune(), "llama"))
    for stage in engine_stages(scn.engine, None):
        assert evaluate(tuned, stage).gpu_bytes() == evaluate(scn, stage).gpu_bytes()


def test_optimizer_in_backward_keeps_one_gradient(runner):
    res = runner.invoke(app, ["estimate", "-m", MODEL, "-g", "8", "--engine", "fsdp2", "-s", "3",
                              "--optimizer-in-backward", "-f", "json"])
    assert res.exit_code == 0, res.output
    largest = max(p.numel for p in named_parameters(load_model(MODEL)))
    assert json.loads(res.stdout)["stages"][0]["gpu_bytes"]["gradients"] == 4 * shard_numel(largest, 8)
    refused = runner.invoke(app, ["estimate", "-m", MODEL, "--optimizer-in-backward", "--engine", "fsdp2",
                                  "--grad-accum", "4"])
    assert refused.exit_code == 1 and "--optimizer-in-backward with --grad-accum 4" in refused.stderr


def test_zero3_parameter_offload_moves_the_frozen_partitions_too(runner):
    """Offloaded to CPU, the frozen base's partition joins the offloaded states on the host, not the GPU."""
    _, on_gpu = stages(runner, "--lora-rank", "8", "-s", "3")
    res = run(runner, "--lora-rank", "8", "-s", "3", "--offload-param", "cpu")
    assert res.exit_code == 0, res.output
    stage = json.loads(res.stdout)["stages"][0]
    tuning = tune(named_parameters(load_model(MODEL)), Finetune(lora_rank=8), "llama")
    frozen = shard_numel(2 * tuning.frozen_float_numel, 8)
    assert on_gpu[3]["parameters"] - stage["gpu_bytes"]["parameters"] == frozen + 2 * shard_numel(tuning.num_trainable, 8)
    offloaded = next(t["bytes"] for t in stage["cpu_terms_per_gpu"] if t["name"] == "offloaded model states")
    assert offloaded == frozen + 2 * shard_numel(tuning.num_trainable, 8)


def test_fsdp_gathers_a_frozen_run_at_the_compute_dtype(runner):
    """--freeze under FSDP: the gathered units are every parameter at 2 B, as in full training."""
    full = runner.invoke(app, ["estimate", "-m", MODEL, "-g", "8", "--engine", "fsdp", "-s", "3", "-f", "json"])
    frozen = runner.invoke(app, ["estimate", "-m", MODEL, "-g", "8", "--engine", "fsdp", "-s", "3", "-f", "json",
                                 "--freeze", "model.embed_tokens.*"])
    gathered = [next(b["bytes"] for b in json.loads(r.stdout)["stages"][0]["buffers"] if b["name"].startswith("gathered"))
                for r in (full, frozen)]
    assert gathered[0] == gathered[1]


def test_fsdp1_keeps_a_gradient_for_a_mixed_unit_and_fsdp2_does_not(runner):
    """use_orig_params=True: a unit with one trainable parameter keeps a flat gradient for all of it (FSDP docs)."""
    def grads(engine, *freeze):
        res = runner.invoke(app, ["estimate", "-m", MODEL, "-g", "8", "--engine", engine, "-s", "3", "-f", "json", *freeze])
        assert res.exit_code == 0, res.output
        # every gradient is held at the optimizer step (gpu_bytes has the peak event's, maybe before any exists)
        return json.loads(res.stdout)["stages"][0]["timeline"]["events"][-1]["bytes"]["gradients"]

    q_proj = ("--freeze", "model.layers.0.self_attn.q_proj.*")
    assert grads("fsdp", *q_proj) == grads("fsdp")
    q_numel = 4096 * 4096  # Llama-3.1-8B q_proj: hidden x hidden (the preset's config)
    assert grads("fsdp2") - grads("fsdp2", *q_proj) == 4 * shard_numel(q_numel, 8)


def _moe(family: str, **extra):
    from zeroplan.models.presets import model_from_data

    config = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=1000, num_experts=4, num_experts_per_tok=2,
                  moe_intermediate_size=32, **extra)
    return named_parameters(model_from_data({"model_type": family, **config}, "tiny", hf_name="tiny"))


@pytest.mark.parametrize("spec, message", [
    (Finetune(lora_rank=8, lora_targets=("gate_proj",)), "without up_proj"),  # peft: fused into gate_up_proj
    (Finetune(lora_rank=8, lora_targets=(ALL_LINEAR,), lora_dropout=0.05), "lora_dropout > 0"),
    (Finetune(lora_rank=8, lora_targets=(ALL_LINEAR,), dora=True), "DoRA"),
])
def test_peft_refusals_on_wrapped_experts_are_one_line(spec, message):
    """peft 0.21.2 refuses these on transformers 5's fused experts (transformers_weight_conversion.py; lora/layer.py
    ParamWrapper.update_layer): zeroplan says so instead of estimating a run that cannot start."""
    with pytest.raises(ZeroplanError, match=message):
        tune(_moe("qwen3_moe"), spec, "qwen3_moe")


def test_named_attention_targets_on_moe_leave_the_experts_alone():
    tuning = tune(_moe("qwen3_moe"), Finetune(lora_rank=8, lora_targets=("q_proj", "v_proj")), "qwen3_moe")
    assert not tuning.adapted_params and len(tuning.adapted) == 4  # q and v in 2 layers
