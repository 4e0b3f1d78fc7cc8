"""zeroplan's fine-tuning figures against what validation/measure_finetune.py measured with transformers, peft and
bitsandbytes (the committed validation/finetune_measured.json is the source of every expected number here)."""

import json
from pathlib import Path

import pytest

from zeroplan.errors import ZeroplanError

from zeroplan.memory.finetune import ALL_LINEAR, Finetune, tune
from zeroplan.memory.quant import Quant, QuantStorage, int8_weight_bytes, packed_4bit_bytes, quant_state_4bit_bytes
from zeroplan.memory.recipes import make_recipe
from zeroplan.memory.setup import DeepSpeedKnobs, Engine, EngineOptions, Optimizer, Parallelism, Precision, ZeroStage
from zeroplan.memory.states import ModelSummary
from zeroplan.memory.tuned import bnb_8bit_state_bytes, engine_tuned_base
from zeroplan.models.named import named_parameters
from zeroplan.models.params import count_params
from zeroplan.models.presets import model_from_data

DATA = json.loads((Path(__file__).resolve().parent.parent / "validation" / "finetune_measured.json").read_text())
COMMON = dict(hidden_size=64, intermediate_size=160, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
              vocab_size=512, max_position_embeddings=128)
CONFIGS = {  # the harness's CONFIGS, as HF config.json mappings
    "llama": {"model_type": "llama", **COMMON},
    "qwen2": {"model_type": "qwen2", **COMMON},
    "mistral": {"model_type": "mistral", **COMMON},
    "gemma2": {"model_type": "gemma2", **COMMON, "head_dim": 16},
    "phi3": {"model_type": "phi3", **COMMON, "num_key_value_heads": 4, "pad_token_id": 0},
    "mixtral": {"model_type": "mixtral", **COMMON, "num_local_experts": 4, "num_experts_per_tok": 2},
    "gpt2": {"model_type": "gpt2", "n_embd": 64, "n_layer": 4, "n_head": 4, "vocab_size": 512, "n_positions": 128},
}


def spec_of(family: str):
    return model_from_data(CONFIGS[family], f"tiny {family}", hf_name=f"tiny-{family}")


@pytest.mark.parametrize("family", sorted(DATA["names"]))
def test_named_parameters_are_transformers_own(family):
    ours = {p.name: list(p.shape) for p in named_parameters(spec_of(family))}
    assert ours == dict(DATA["names"][family])  # the same names and shapes (the order inside a layer may differ)


def finetune_of(row) -> Finetune:
    lora = row["lora"]
    if lora is None:
        return Finetune(freeze=tuple(row["freeze"]))
    targets = lora["target_modules"]
    return Finetune(lora_rank=lora["r"], lora_targets=(ALL_LINEAR,) if targets == ALL_LINEAR else tuple(targets),
                    lora_dropout=lora.get("lora_dropout", 0.0), dora=lora.get("use_dora", False),
                    modules_to_save=tuple(lora.get("modules_to_save", ())))


def precision_of(row) -> Precision:
    """fp32 runs are fp32; a bf16 base trains bf16 tensors in bf16 (bf16-true), but peft keeps adapters fp32 and
    PyTorch's mixed-precision storage is exactly that: fp32 trainable tensors, a 16-bit frozen base."""
    if row["dtype"] == "float32":
        return Precision.fp32
    return Precision.bf16_mixed if row["lora"] else Precision.bf16_true


@pytest.mark.parametrize("row", DATA["peft"], ids=lambda r: f"{r['case']} {r['dtype']}")
def test_trainable_counts_grads_and_adamw_states_are_exact(row):
    spec = spec_of(row["family"])
    tuning = tune(named_parameters(spec), finetune_of(row), row["family"])
    assert (tuning.num_trainable, tuning.num_params) == (row["trainable_params"], row["all_params"])
    summary = ModelSummary(name="tiny", num_params=count_params(spec).num_params)
    base = engine_tuned_base(Engine.ddp, summary, None, tuning, make_recipe(precision_of(row), Optimizer.adamw),
                             ZeroStage.zero0, Parallelism(gpus=1), DeepSpeedKnobs(), EngineOptions())
    states = base.states
    assert (states.parameters, states.gradients, states.optimizer_states) == (
        row["param_bytes"], row["grad_bytes"], row["adamw_state_bytes"])


@pytest.mark.parametrize("row", DATA["bnb"], ids=lambda r: f"{r['shape']} {r['quant']} {r.get('storage', '')} {r.get('double_quant', '')}")
def test_bitsandbytes_storage_is_exact(row):
    rows, cols = row["shape"]
    if row["quant"] == "int8":
        assert int8_weight_bytes(rows, cols) == (row["packed_bytes"], row["state_bytes"])
        return
    assert packed_4bit_bytes(rows * cols, QuantStorage(row["storage"])) == row["packed_bytes"]
    assert quant_state_4bit_bytes(rows * cols, row["double_quant"]) == row["state_bytes"]


@pytest.mark.parametrize("row", DATA["optim8"], ids=lambda r: str(r["numel"]))
def test_adamw8bit_states_are_exact(row):
    assert bnb_8bit_state_bytes([row["numel"]]) == row["state_bytes"]


def test_the_measurement_covers_the_issue_grid():
    cases = {r["case"] for r in DATA["peft"]}
    assert {"llama r8 q,v", "llama r64 all-linear", "qwen2 r8 all-linear", "qwen2 r64 q,v",
            "llama frozen embeddings", "llama frozen first half"} <= cases
    assert {r["dtype"] for r in DATA["peft"]} == {"float32", "bfloat16"}
    assert {r["quant"] for r in DATA["bnb"]} == {"nf4", "fp4", "int8"} and len(DATA["bnb"]) > 40
    assert Quant.nf4.four_bit


@pytest.mark.parametrize("row", DATA["presets"], ids=lambda r: f"{r['preset']} r{r['r']} {r['target_modules']}")
def test_preset_adapter_counts_are_peft_own(row):
    from zeroplan.models.presets import load_model

    spec = load_model(row["preset"])
    targets = (ALL_LINEAR,) if row["target_modules"] == ALL_LINEAR else tuple(row["target_modules"])
    tuning = tune(named_parameters(spec), Finetune(lora_rank=row["r"], lora_targets=targets), row["preset"])
    assert (tuning.num_trainable, tuning.num_params) == (row["trainable_params"], row["all_params"])


from validation.compare_finetune_activations import (  # noqa: E402
    ACTS,
    TRAINS,
    model_type,
    predicted as predicted_activations,
)
from validation.compare_finetune_activations import finetune_of as _row_finetune  # noqa: E402
from validation.compare_finetune_activations import spec_of as _acts_spec  # noqa: E402


def _case(r) -> str:
    return f"{r['family']} {r['dtype']} {r['checkpointing']} {r['mode']}"


@pytest.mark.parametrize("row", TRAINS, ids=_case)
def test_finetune_activations_within_2_percent_of_peft(row):
    assert abs(predicted_activations(row) - row["measured"]) <= 0.02 * row["measured"]


@pytest.mark.parametrize("row", [r for r in TRAINS if "trainable_params" in r], ids=_case)
def test_activation_cases_train_what_peft_trains(row):
    """peft's trainable count, the gradients and torch AdamW's m + v after one step (harness rows), exactly."""
    spec = _acts_spec(row)
    finetune = _row_finetune(row)
    tuning = tune(named_parameters(spec), finetune, model_type(row))
    assert tuning.num_trainable == row["trainable_params"]
    precision = Precision.fp32 if row["dtype"] == "fp32" else (
        Precision.bf16_mixed if finetune.lora_rank else Precision.bf16_true)
    summary = ModelSummary(name="tiny", num_params=count_params(spec).num_params)
    base = engine_tuned_base(Engine.ddp, summary, None, tuning, make_recipe(precision, Optimizer.adamw),
                             ZeroStage.zero0, Parallelism(gpus=1), DeepSpeedKnobs(), EngineOptions())
    unused = row.get("unused_grad_bytes", 0)  # gpt-oss sinks: the SDPA stand-in leaves them without a gradient
    assert (base.states.gradients, base.states.optimizer_states) == (
        row["grad_bytes"] + unused, row["adamw_state_bytes"] + 2 * unused)


@pytest.mark.parametrize("row", [r for r in ACTS["rows"] if r not in TRAINS], ids=_case)
def test_a_fine_tune_that_trains_nothing_is_refused(row):
    with pytest.raises(ZeroplanError, match="nothing would train"):
        tune(named_parameters(_acts_spec(row)), _row_finetune(row), model_type(row))


def test_the_activation_grid_is_the_issue_grid():
    rows = ACTS["rows"]
    assert {r["family"] for r in rows} == {"llama", "qwen2", "qwen3", "qwen3_moe", "gemma3_text", "deepseek_v3", "gpt_oss",
                                           "phi", "phi3", "gpt_neox", "gpt_neox-sequential", "falcon", "falcon-new"}
    assert {r["dtype"] for r in rows} == {"bf16", "fp32"} and {r["checkpointing"] for r in rows} == {"none", "full"}
    qwen3 = {r["mode"] for r in rows if r["family"] == "qwen3"}
    assert {f"lora r{r} {t} p{p}" for r in (8, 64) for t in ("q,v", "all-linear") for p in (0.0, 0.05)} <= qwen3
    assert {"frozen embeddings", "frozen first half", "qlora r8 q,v p0.0", "qlora r64 all-linear p0.05"} <= qwen3
    assert {"lora r8 all-linear p0.0", "frozen first half"} <= {r["mode"] for r in rows if r["family"] == "deepseek_v3"}


@pytest.mark.parametrize("family", sorted(ACTS.get("all_linear_moe", {})))
def test_all_linear_on_moe_is_what_peft_adapts(family):
    """peft 0.21.2's all-linear on transformers 5 MoE models (validation/measure_finetune_activations.py
    --all-linear-moe): the same modules and parameters, the same trainable and total counts."""
    case = ACTS["all_linear_moe"][family]
    spec = model_from_data({"model_type": family, **case["config"]}, "tiny", hf_name="tiny")
    tuning = tune(named_parameters(spec), Finetune(lora_rank=case["r"], lora_targets=(ALL_LINEAR,)), family)
    adapted = set(tuning.adapted) | {w.name.rsplit(".", 1)[0] for w in tuning.adapted_params}
    assert adapted == set(case["adapted"])
    assert (tuning.num_trainable, tuning.num_params) == (case["trainable_params"], case["all_params"])


def test_moe_all_linear_cases_cover_converted_and_plain_families():
    assert {"qwen3_moe", "deepseek_v3", "mixtral", "gpt_oss", "qwen2_moe"} <= set(ACTS["all_linear_moe"])
