"""A --from file's fine-tuning keys become the fine-tuning spec the options build (docs/inputs.md, docs/finetune.md).

Rules from each tool's code: LLaMA-Factory@ff6d4d1 src/llamafactory/hparams/finetuning_args.py, model_args.py,
model/adapter.py, model/model_utils/misc.py and quantization.py; axolotl@067b021 src/axolotl/utils/schemas/peft.py,
loaders/adapter.py, loaders/model.py, utils/freeze.py. The expected sets below are the rules applied by hand to
the named parameters (zeroplan.models.named, checked against transformers by validation/measure_finetune.py).
"""

import json
from pathlib import Path
from dataclasses import replace

import pytest
import yaml

from zeroplan.cli.app import app
from zeroplan.errors import SpecError
from zeroplan.frameworks.axolotl import read_axolotl
from zeroplan.frameworks.llamafactory import read_llamafactory
from zeroplan.frameworks.tuning import TrainOnly, frozen_globs
from zeroplan.memory.finetune import ALL_LINEAR
from zeroplan.memory.quant import Quant, QuantStorage
from zeroplan.models.named import named_parameters
from zeroplan.models.presets import load_model
from zeroplan.scenario import ScenarioArgs, from_framework, scenario

LLAMA = "llama-3.1-8b"  # 32 layers, untied head


def _file(tmp_path, data: dict, name: str = "run.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return str(path)


def _tuning(tmp_path, data: dict, **typed):
    args = ScenarioArgs(from_file=_file(tmp_path, data), model=LLAMA, given=frozenset({"model", *typed}), **typed)
    return scenario(args).tuning


def _names(model: str = LLAMA) -> list[str]:
    return [p.name for p in named_parameters(load_model(model))]


LF_LORA = {"model_name_or_path": LLAMA, "stage": "sft", "finetuning_type": "lora", "bf16": True}
AX_LORA = {"base_model": LLAMA, "adapter": "lora", "lora_r": 16, "sequence_len": 2048, "bf16": True}


def test_llamafactory_all_is_every_linear_but_the_head_as_all_linear_counts_it(tmp_path):
    """lora_target all (the default), rank 8 (the default): find_all_linear_modules' names, lm_head left out."""
    tuning = _tuning(tmp_path, LF_LORA)
    assert tuning.spec.lora_rank == 8
    assert tuning.spec.lora_targets == ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    typed = scenario(ScenarioArgs(model=LLAMA, lora_rank="8", lora_targets=ALL_LINEAR)).tuning
    assert tuning.num_trainable == typed.num_trainable == 8 * 32 * (
        2 * 4096 * 2 + (4096 + 1024) * 2 + 3 * (4096 + 14336))  # r (in + out) over q, o; k, v; gate, up, down


def test_llamafactory_lora_keys(tmp_path):
    spec = _tuning(tmp_path, {**LF_LORA, "lora_rank": 64, "lora_target": "q_proj, v_proj", "lora_dropout": 0.05,
                              "use_dora": True, "additional_target": "lm_head", "lora_alpha": 16,
                              "use_rslora": True}).spec  # fmt: skip
    assert (spec.lora_rank, spec.lora_targets, spec.lora_dropout, spec.dora, spec.modules_to_save) == (
        64, ("q_proj", "v_proj"), 0.05, True, ("lm_head",))


@pytest.mark.parametrize(("flags", "storage"), [({"bf16": True}, QuantStorage.bfloat16), ({"pure_bf16": True}, QuantStorage.bfloat16),
                                                ({"fp16": True}, QuantStorage.float16), ({}, QuantStorage.uint8)])  # fmt: skip
def test_llamafactory_quantization_bit_4_is_qlora_stored_in_the_compute_dtype(tmp_path, flags, storage):
    data = {**{k: v for k, v in LF_LORA.items() if k != "bf16"}, **flags, "quantization_bit": 4}
    spec = _tuning(tmp_path, data).spec
    assert (spec.quant, spec.double_quant, spec.quant_storage) == (Quant.nf4, True, storage)  # model_args.py defaults
    spec = _tuning(tmp_path, {**data, "quantization_type": "fp4", "double_quantization": False}).spec
    assert (spec.quant, spec.double_quant) == (Quant.fp4, False)


def test_llamafactory_quantization_bit_8_is_llm_int8(tmp_path):
    assert _tuning(tmp_path, {**LF_LORA, "quantization_bit": 8}).spec.quant is Quant.int8


def _trainable(tuning) -> set[str]:
    from fnmatch import fnmatchcase

    return {n for n in _names() if not any(fnmatchcase(n, g) for g in tuning.spec.freeze)}


def _layer(i: int) -> set[str]:
    return {n for n in _names() if n.startswith(f"model.layers.{i}.")}


def test_llamafactory_freeze_trains_the_last_two_layers_by_default(tmp_path):
    tuning = _tuning(tmp_path, {**LF_LORA, "finetuning_type": "freeze"})
    assert _trainable(tuning) == _layer(30) | _layer(31)
    assert tuning.num_trainable == sum(p.numel for p in named_parameters(load_model(LLAMA))
                                       if p.name.startswith(("model.layers.30.", "model.layers.31.")))


def test_llamafactory_freeze_first_layers_modules_and_extras(tmp_path):
    data = {**LF_LORA, "finetuning_type": "freeze", "freeze_trainable_layers": -3, "freeze_trainable_modules": "mlp",
            "freeze_extra_modules": "embed_tokens,norm"}
    expected = {n for i in range(3) for n in _layer(i) if ".mlp." in n}
    # substrings: "norm" also matches every layer's input_layernorm / post_attention_layernorm, as in LLaMA-Factory
    expected |= {n for n in _names() if "embed_tokens" in n or "norm" in n}
    assert _trainable(_tuning(tmp_path, data)) == expected


def test_llamafactory_freeze_module_that_is_not_there_lists_the_modules(tmp_path):
    with pytest.raises(SpecError, match="freeze_trainable_modules: attn is not a module of the model's layers "
                                        r"\(LLaMA-Factory takes input_layernorm, mlp, post_attention_layernorm, self_attn or all\)"):  # fmt: skip
        _tuning(tmp_path, {**LF_LORA, "finetuning_type": "freeze", "freeze_trainable_modules": "attn"})


def test_axolotl_lora_target_linear_unites_the_linears_and_the_listed_modules(tmp_path):
    spec = _tuning(tmp_path, {**AX_LORA, "lora_target_linear": True, "lora_target_modules": ["lm_head"],
                              "lora_modules_to_save": ["embed_tokens"], "peft_use_dora": True}).spec  # fmt: skip
    assert spec.lora_targets == ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")
    assert (spec.lora_rank, spec.lora_dropout, spec.modules_to_save, spec.dora) == (16, 0.0, ("embed_tokens",), True)


def test_axolotl_qlora_defaults_and_bnb_config_kwargs(tmp_path):
    data = {**AX_LORA, "adapter": "qlora", "load_in_4bit": True, "lora_target_modules": ["q_proj", "v_proj"]}
    spec = _tuning(tmp_path, data).spec
    assert (spec.quant, spec.double_quant, spec.quant_storage) == (Quant.nf4, True, QuantStorage.bfloat16)
    kwargs = {"bnb_4bit_quant_type": "fp4", "bnb_4bit_use_double_quant": False, "bnb_4bit_quant_storage": "uint8"}
    spec = _tuning(tmp_path, {**data, "bnb_config_kwargs": kwargs}).spec
    assert (spec.quant, spec.double_quant, spec.quant_storage) == (Quant.fp4, False, QuantStorage.uint8)


def test_axolotl_load_in_8bit_with_lora(tmp_path):
    data = {**AX_LORA, "load_in_8bit": True, "lora_target_linear": True}
    assert _tuning(tmp_path, data).spec.quant is Quant.int8


def test_axolotl_unfrozen_parameters_match_from_the_start_whole_tensors(tmp_path):
    patterns = ["^model.embed_tokens.weight$[:32000]", "model.layers.3[01].mlp", "lm_head"]
    tuning = _tuning(tmp_path, {**{k: v for k, v in AX_LORA.items() if k not in ("adapter", "lora_r")},
                                "unfrozen_parameters": patterns})  # fmt: skip
    expected = {n for n in _names() if n == "model.embed_tokens.weight" or n == "lm_head.weight"}
    expected |= {n for i in (30, 31) for n in _layer(i) if ".mlp." in n}
    assert _trainable(tuning) == expected
    # re.match anchors at the start: "layers.3" alone matches nothing
    with pytest.raises(SpecError, match=r"unfrozen_parameters: layers\.3 matches no parameter of the model"):
        _tuning(tmp_path, {"base_model": LLAMA, "unfrozen_parameters": ["layers.3"]})


def test_frozen_globs_name_whole_layers_once():
    names = _names()
    trainable = _layer(31) | {"lm_head.weight"}
    globs = frozen_globs(names, trainable)
    assert "model.layers.0.*" in globs and "model.embed_tokens.weight" in globs and "model.layers.31.*" not in globs
    assert len(globs) == 31 + 2  # layers 0-30, embeddings, final norm


def test_options_typed_override_the_file(runner, tmp_path):
    path = _file(tmp_path, LF_LORA)
    res = runner.invoke(app, ["estimate", "--from", path, "--model", LLAMA, "--lora-rank", "32", "--lora-targets",
                              "q_proj", "-f", "json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["finetune"]["lora_rank"], out["finetune"]["lora_targets"]) == (32, ["q_proj"])
    assert any("lora_rank: 8" not in a and "(overridden by --lora-rank)" in a for a in out["assumptions"])
    assert any("lora_target not set" in a and "(overridden by --lora-targets)" in a for a in out["assumptions"])
    # a typed --freeze replaces a freeze rule; --lora-rank replaces it by LoRA
    path = _file(tmp_path, {**LF_LORA, "finetuning_type": "freeze"})
    for extra, mode in ((["--freeze", "model.embed_tokens.*"], "frozen parts"), (["--lora-rank", "4"], "LoRA")):
        res = runner.invoke(app, ["estimate", "--from", path, "--model", LLAMA, *extra, "-f", "json"])
        assert res.exit_code == 0, res.output
        assert json.loads(res.stdout)["finetune"]["mode"] == mode


def test_check_checks_the_file_s_fine_tune(runner, tmp_path):
    """check --from estimates the file's LoRA run, not full training: the same peak as estimate --from."""
    path = _file(tmp_path, {**LF_LORA, "per_device_train_batch_size": 1})
    est = json.loads(runner.invoke(app, ["estimate", "--from", path, "--model", LLAMA, "-f", "json"]).stdout)
    checked = runner.invoke(app, ["check", "--from", path, "--model", LLAMA, "-f", "json"])
    report = json.loads(checked.stdout)
    assert checked.exit_code == 0, checked.output
    memory = report["plans"][0]["memory"]
    assert memory["gpu_bytes"] == est["stages"][0]["gpu_bytes"]  # DDP, stage 0: the same LoRA run
    assert memory["gpu_bytes"]["gradients"] == est["model"]["num_trainable_params"] * 4 < 30e6 * 4  # fp32 adapters


@pytest.mark.parametrize(("data", "words"), [
    ({**LF_LORA, "finetuning_type": "oft"}, "finetuning_type: oft (OFT adapters)"),
    ({**LF_LORA, "quantization_bit": 4, "quantization_method": "hqq"}, "quantization_method: hqq (a quantized base other than bitsandbytes)"),
    ({**LF_LORA, "quantization_bit": 2}, "quantization_bit: 2 (bitsandbytes quantizes to 4 or 8 bits only)"),
    ({**LF_LORA, "finetuning_type": "freeze", "quantization_bit": 4}, "quantization_bit: 4 (a quantized base under finetuning_type freeze"),
    ({**LF_LORA, "finetuning_type": "freeze", "use_llama_pro": True}, "use_llama_pro: true (LLaMA Pro: expanded blocks)"),
    ({**LF_LORA, "adapter_name_or_path": "saves/lora"}, "adapter_name_or_path: saves/lora (an existing adapter"),
])  # fmt: skip
def test_llamafactory_refuses_what_is_not_modelled_in_one_line(data, words):
    with pytest.raises(SpecError, match="is not modelled yet") as err:
        read_llamafactory(data, "run.yaml")
    assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("data", "words"), [
    ({**AX_LORA, "lora_target_linear": True, "load_in_4bit": True}, "load_in_4bit: true (with adapter lora, which axolotl loads unquantized"),
    ({**AX_LORA}, "adapter: lora (without lora_target_modules or lora_target_linear"),
    ({**AX_LORA, "lora_r": None, "lora_target_linear": True}, "adapter: lora (without lora_r"),
    ({**AX_LORA, "lora_target_linear": True, "lora_target_parameters": ["mlp.experts.gate_up_proj"]}, "lora_target_parameters: (set) (LoRA on expert parameters"),
    ({**AX_LORA, "lora_target_linear": True, "peft_layers_to_transform": [0, 1]}, "peft_layers_to_transform: (set) (adapters on some layers only)"),
    ({**AX_LORA, "adapter": "qlora", "load_in_4bit": True, "lora_target_linear": True, "bnb_config_kwargs": {"llm_int8_skip_modules": ["mlp"]}},
     "bnb_config_kwargs.llm_int8_skip_modules: [mlp] (a bitsandbytes option)"),
    ({**AX_LORA, "adapter": "llama-adapter"}, "adapter: llama-adapter (an adapter other than lora and qlora)"),
])  # fmt: skip
def test_axolotl_refuses_what_is_not_modelled_in_one_line(data, words):
    with pytest.raises(SpecError, match="is not modelled yet") as err:
        read_axolotl(data, "run.yml")
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_fine_tuning_key_of_the_wrong_type_names_it():
    with pytest.raises(SpecError, match="lora_rank"):
        read_llamafactory({**LF_LORA, "lora_rank": "8"}, "run.yaml")
    with pytest.raises(SpecError, match="lora_r"):
        read_axolotl({**AX_LORA, "lora_r": 0, "lora_target_linear": True}, "run.yml")


def test_train_only_rules_are_plain_values():
    rule = TrainOnly("freeze_trainable_modules", 2)
    assert replace(rule, layers=-1).trainable(_names(), 32) == _layer(0)


def test_from_framework_sets_the_options_the_cli_has(tmp_path):
    args, found = from_framework(ScenarioArgs(from_file=_file(tmp_path, {**AX_LORA, "lora_target_modules": ["q_proj"]})))
    assert (args.lora_rank, args.lora_targets, args.lora_dropout) == ("16", "q_proj", 0.0)
    assert {"lora_rank", "lora_targets"} <= found.stated


@pytest.mark.parametrize("engine", ["ddp", "fsdp2"])
def test_adamw_foreach_temporary_is_sized_on_the_trainable_states(engine):
    """torch's foreach AdamW makes sqrt(exp_avg_sq) per trainable tensor: half the fine-tune's optimizer states,
    not the full model's (memory.engines.adamw_foreach_temporary)."""
    from zeroplan.memory.estimate import evaluate
    from zeroplan.memory.setup import Engine, ZeroStage

    scn = scenario(ScenarioArgs(model=LLAMA, lora_rank="8", lora_targets=ALL_LINEAR, engine=Engine(engine)))
    est = evaluate(scn, ZeroStage.zero0 if engine == "ddp" else ZeroStage.zero3)
    temp = next(t.bytes for t in est.base.buffers if t.name.startswith("AdamW foreach"))
    assert temp == est.base.states.optimizer_states // 2


# --- bitsandbytes' kernels per GPU (zeroplan.hardware.kernels) -------------------------------------------------


def test_every_preset_states_its_gpu_arch():
    from zeroplan.hardware.presets import all_hardware

    assert {hw.name: hw.gpu_arch for hw in all_hardware()} == {
        "a100-pcie-80gb": "sm80", "a100-sxm-40gb": "sm80", "a100-sxm-80gb": "sm80", "b200-180gb": "sm100",
        "h100-nvl-94gb": "sm90", "h100-pcie-80gb": "sm90", "h100-sxm-80gb": "sm90", "h200-141gb": "sm90",
        "l4-24gb": "sm89", "l40s-48gb": "sm89", "mi300x-192gb": "gfx942", "rtx4090-24gb": "sm89",
        "v100-sxm-32gb": "sm70"}  # fmt: skip


def _hardware(tmp_path, arch):
    from zeroplan.hardware.presets import load_hardware

    text = Path("configs/hardware/v100-sxm-32gb.yaml").read_text(encoding="utf-8").replace("name: v100-sxm-32gb",
                                                                                           "name: custom")
    lines = [line for line in text.splitlines() if not line.startswith("gpu_arch")]
    if arch:
        lines.append(f"gpu_arch: {arch}")
    path = tmp_path / "custom.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path), load_hardware(str(path))


@pytest.mark.parametrize(("arch", "flag", "words"), [
    ("sm52", "--qlora", "--hardware custom (compute capability 5.2): bitsandbytes runs on NVIDIA compute capability 6.0+ only"),
    ("sm52", "--load-in-8bit", "so LLM.int8 (--load-in-8bit) does not run there"),
    ("sm70", "--load-in-8bit", "--load-in-8bit on --hardware custom (compute capability 7.0): bitsandbytes' LLM.int8 requires compute capability 7.5+"),
])  # fmt: skip
def test_a_quantized_base_where_bitsandbytes_does_not_run_is_refused_in_one_line(runner, tmp_path, arch, flag, words):
    path, _ = _hardware(tmp_path, arch)
    res = runner.invoke(app, ["estimate", "-m", LLAMA, "-g", "1", "--hardware", path, flag, "--lora-rank", "8", "-s", "2"])
    assert res.exit_code == 1 and words in res.stderr and len(res.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("arch", "quant", "words"), [
    (None, "nf4", "support unknown (the profile states no gpu_arch); assumed to run"),
    ("gfx942", "int8", "(gfx942): a ROCm wheel target"),
    ("gfx906", "nf4", "(gfx906): not among the ROCm wheels' targets; support unknown"),
    ("sm70", "nf4", "(compute capability 7.0): supported"),
    ("sm89", "int8", "(compute capability 8.9): supported"),
])  # fmt: skip
def test_where_bitsandbytes_runs_or_is_unknown_the_assumptions_say_so(tmp_path, arch, quant, words):
    from zeroplan.hardware.kernels import check_bnb_kernels

    _, hw = _hardware(tmp_path, arch)
    notes = check_bnb_kernels(hw, quant)
    assert any(words in note for note in notes)
    assert any("sm75 and up" in note for note in notes) == (arch == "sm70")


def test_a_plan_with_a_quantized_base_on_such_a_gpu_is_refused(runner, tmp_path):
    path, _ = _hardware(tmp_path, "sm70")
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"model": LLAMA, "hardware": path, "gpus": 1, "deepspeed": {"zero_optimization": {"stage": 2}},
                                    "finetune": {"lora_rank": 8, "quant": "int8"}}), encoding="utf-8")  # fmt: skip
    res = runner.invoke(app, ["check", str(plan), "-f", "json"])
    findings = [f for p in json.loads(res.stdout)["plans"] for f in p["findings"]]
    assert res.exit_code == 1 and any("LLM.int8 requires compute capability 7.5+" in f["message"] for f in findings)


def test_a_fine_tune_file_with_a_bare_count_asks_for_the_model(runner, tmp_path):
    """LLaMA-Factory's default is LoRA on `all` linears: their names come from the model, not from --params."""
    path = _file(tmp_path, {k: v for k, v in LF_LORA.items() if k != "finetuning_type"})
    res = runner.invoke(app, ["estimate", "--from", path, "--from-kind", "llamafactory", "--params", "7e9"])
    assert res.exit_code == 1
    assert res.stderr.strip() == "error: fine-tuning modes need --model (the named parameters an adapter or glob selects)"


def test_axolotl_peft_autocast_adapter_dtype_false_keeps_the_adapters_in_the_base_dtype():
    """peft_autocast_adapter_dtype: false is get_peft_model(..., autocast_adapter_dtype=False): --adapter-dtype base."""
    run = read_axolotl({**AX_LORA, "lora_target_linear": True, "peft_autocast_adapter_dtype": False}, "run.yml")
    taken = run.get("adapter_dtype")
    assert taken is not None and taken.value == "base" and taken.key == "peft_autocast_adapter_dtype"
