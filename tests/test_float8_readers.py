"""--float8 read from the training files that ask for it: torchtitan's float8 converter, axolotl's fp8 and
Accelerate's mixed_precision fp8 with torchao (memory.float8; docs/float8.md "Readers"); what is not modelled is
refused in one line naming its key."""

import pytest

from zeroplan.errors import SpecError
from zeroplan.frameworks.accelerate import read_accelerate
from zeroplan.frameworks.axolotl import read_axolotl
from zeroplan.frameworks.torchtitan import read_torchtitan
from zeroplan.memory.setup import Float8Recipe, Precision

TITAN = {"job": {}, "model": {"name": "llama3", "flavor": "8B", "converters": ["quantize.linear.float8"]},
         "parallelism": {"data_parallel_shard_degree": -1},
         "quantize": {"linear": {"float8": {"filter_fqns": ["output"]}}}}


def _set(run) -> dict:
    return {t.option: t.value for t in run.taken if t.option}


def _titan(**float8) -> dict:
    return {**TITAN, "quantize": {"linear": {"float8": {"filter_fqns": ["output"], **float8}}}}


def test_torchtitan_float8_converter_is_tensorwise_without_a_recipe_and_gathers_in_float8_when_asked():
    assert _set(read_torchtitan(TITAN, "t.toml"))["float8"] is Float8Recipe.tensorwise
    taken = _set(read_torchtitan(_titan(enable_fsdp_float8_all_gather=True), "t.toml"))
    assert taken["float8_all_gather"] is True
    assert _set(read_torchtitan(_titan(recipe_name="rowwise"), "t.toml"))["float8"] is Float8Recipe.rowwise


def test_torchtitan_older_float8_section_and_converter_name_are_read():
    data = {"job": {}, "model": {"name": "llama3", "flavor": "8B", "converters": "float8"},
            "float8": {"recipe_name": "rowwise_with_gw_hp", "filter_fqns": ["output"]}}
    assert _set(read_torchtitan(data, "t.toml"))["float8"] is Float8Recipe.rowwise_with_gw_hp
    legacy = {"job": {}, "model": {"name": "llama3", "flavor": "8B"}, "float8": {"enable_float8_linear": True}}
    assert _set(read_torchtitan(legacy, "t.toml"))["float8"] is Float8Recipe.tensorwise  # 9dec370: head skipped


@pytest.mark.parametrize(("data", "words"), [
    (_titan(filter_fqns=[]), 'quantize.linear.float8.filter_fqns: [] (without "output" the output head is converted'),
    (_titan(filter_fqns=["output", "attention.wq"]), "filter_fqns: attention.wq (only some blocks' linears"),
    (_titan(recipe_name="rowwise", enable_fsdp_float8_all_gather=True), "enable_fsdp_float8_all_gather: true (beside a recipe_name"),
    (_titan(emulate=True), "emulate: true (emulated or delayed float8 scaling)"),
    ({**TITAN, "model": {**TITAN["model"], "converters": ["quantize.linear.mx"]}}, "model.converters: quantize.linear.mx"),
])  # fmt: skip
def test_torchtitan_float8_settings_not_modelled_are_refused_naming_the_key(data, words):
    with pytest.raises(SpecError, match="not modelled") as err:
        read_torchtitan(data, "t.toml")
    assert words in str(err.value)


def test_axolotl_fp8_is_tensorwise_float8_under_bf16_autocast_with_fsdp2_float8_all_gather():
    data = {"base_model": "meta-llama/Llama-3.1-8B", "fp8": True, "bf16": False, "fp8_enable_fsdp_float8_all_gather": True,
            "fsdp_version": 2, "fsdp_config": {"reshard_after_forward": True}}
    taken = _set(read_axolotl(data, "a.yaml"))
    assert taken["float8"] is Float8Recipe.tensorwise and taken["float8_all_gather"] is True
    assert taken["precision"] is Precision.bf16_mixed  # Accelerate's fp8 autocasts to bf16, whatever bf16 says


@pytest.mark.parametrize(("data", "words"), [
    ({"fp8": True, "adapter": "lora", "lora_r": 8, "lora_target_linear": True}, "fp8: true (FP8 training with adapter lora"),
    ({"fp8": True, "deepspeed": "ds.json"}, "fp8: true (torchao float8 training under DeepSpeed or FSDP1"),
])  # fmt: skip
def test_axolotl_fp8_beside_what_is_not_modelled_is_refused(data, words):
    with pytest.raises(SpecError) as err:
        read_axolotl({"base_model": "meta-llama/Llama-3.1-8B", **data}, "a.yaml")
    assert words in str(err.value)


def test_accelerate_fp8_with_torchao_reads_tensorwise_and_the_all_gather_default():
    fsdp2 = {"distributed_type": "FSDP", "mixed_precision": "fp8", "fsdp_config": {"fsdp_version": 2}}
    taken = _set(read_accelerate(fsdp2, "c.yaml"))
    assert taken["float8"] is Float8Recipe.tensorwise and taken["precision"] is Precision.bf16_mixed
    assert taken["float8_all_gather"] is True  # AORecipeKwargs' default
    off = {**fsdp2, "fp8_config": {"backend": "AO", "enable_fsdp_float8_all_gather": False}}
    assert _set(read_accelerate(off, "c.yaml"))["float8_all_gather"] is False
    one = _set(read_accelerate({"distributed_type": "NO", "mixed_precision": "fp8"}, "c.yaml"))
    assert one["float8"] is Float8Recipe.tensorwise and "float8_all_gather" not in one


def test_a_float8_file_estimates_with_its_transients_named(runner, tmp_path):
    import yaml

    from zeroplan.cli.app import app

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"distributed_type": "FSDP", "mixed_precision": "fp8", "num_processes": 8,
                                    "fsdp_config": {"fsdp_version": 2}}))
    res = runner.invoke(app, ["estimate", "--model", "llama-3.1-8b", "--from", str(path), "--seq-len", "2048"])
    assert res.exit_code == 0, res.output
    assert "Float8Linear tensorwise" in res.output and "float8 all-gather" in res.output


def test_a_plan_with_float8_all_gather_beside_rowwise_is_refused_in_one_line(runner, tmp_path):
    import yaml

    from zeroplan.cli.app import app

    plan = {"description": "f8", "model": "llama-3.1-8b", "gpus": 8, "hardware": "h100-sxm-80gb", "engine": "fsdp2",
            "fsdp": {"reshard_after_forward": True},
            "engine_options": {"float8_all_gather": True}, "training": {"seq_len": 2048, "float8": "rowwise"}}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(plan))
    res = runner.invoke(app, ["check", str(path)])
    assert res.exit_code == 1 and "--float8 tensorwise" in res.output and "Traceback" not in res.output
    path.write_text(yaml.safe_dump({**plan, "training": {"seq_len": 2048, "float8": "tensorwise"}}))
    assert runner.invoke(app, ["check", str(path)]).exit_code == 0
