"""The calculators' inputs: plain frozen dataclasses, validated from outside by pydantic (zeroplan.validate).

Every check the old hand-written records made, now made by pydantic from the annotations, with the house's
one-line messages: strict types, bounds, unknown keys with a did-you-mean, cross-field rules naming every value.
"""

import dataclasses

import pytest
from pydantic import BaseModel, ValidationError

from zeroplan.errors import SpecError
from zeroplan.hardware.spec import HardwareSpec
from zeroplan.memory.setup import (
    Checkpointing,
    DeepSpeedKnobs,
    EngineOptions,
    OffloadDevice,
    Parallelism,
    Precision,
    TrainingSetup,
)
from zeroplan.memory.stage import Overheads
from zeroplan.memory.states import ModelSummary
from zeroplan.models.architecture import Architecture
from zeroplan.scenario import ScenarioArgs, scenario
from zeroplan.validate import as_json, validated, validation_message

H100 = dict(
    name="h100", source="datasheet", memory_gib=79.65, bf16_tflops=989, fp16_tflops=989, fp32_tflops=67,
    hbm_bandwidth_tbps=3.35, supports_bf16=True, gpus_per_node=8, intra_node_fabric="nvlink",
    intra_node_busbw_gbps=360, intra_node_alpha_us=10, pcie_busbw_gbps=20, pcie_alpha_us=20, nic_gbps_per_gpu=50,
    inter_node_alpha_us=20, host_link_gbps=25, default_mfu=0.4, cuda_context_gib=0.5, nccl_gib=1.0,
)


def escaped(message: str) -> str:
    return "^" + message.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?").replace("|", r"\|") + "$"


def test_validated_raises_one_spec_error_line_and_cross_field_rules_raise_value_error():
    # SpecError: the CLI prints it as one line. ValueError in __post_init__: pydantic reports it in place.
    with pytest.raises(SpecError, match=escaped("gpus (12) is not a multiple of nodes (5)")):
        validated(Parallelism, {"gpus": 12, "nodes": 5})
    with pytest.raises(ValueError, match="is not a multiple"):
        Parallelism(gpus=12, nodes=5)
    with pytest.raises(SpecError, match=escaped("my.yaml: gpus: must be > 0, got 0")):
        validated(Parallelism, {"gpus": 0}, "my.yaml")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"gpus": 0}, "gpus: must be > 0, got 0"),
        ({"gpus": True}, "gpus: expected a whole number, got True"),
        ({"gpus": "8"}, "gpus: expected a whole number, got '8'"),
        ({"gpus": 8.0}, "gpus: expected a whole number, got 8.0"),
        ({"gpus": 12, "nodes": 5}, "gpus (12) is not a multiple of nodes (5)"),
    ],
)
def test_parallelism_is_strict_like_pydantic_strict_ints(data, message):
    with pytest.raises(SpecError, match=escaped(message)):
        validated(Parallelism, data)


def test_enum_fields_take_their_values_and_reject_others():
    setup = validated(TrainingSetup, {"precision": "bf16-true", "checkpointing": "full"})
    assert setup.precision is Precision.bf16_true and setup.checkpointing is Checkpointing.full
    with pytest.raises(SpecError, match=escaped("precision: expected 'bf16-mixed' or 'fp16-mixed' or 'bf16-true' "
                                                "or 'fp32', got 'bf17'")):
        validated(TrainingSetup, {"precision": "bf17"})


def test_float_fields_take_ints_as_floats_and_check_bounds():
    hw = validated(HardwareSpec, H100)
    assert isinstance(hw.bf16_tflops, float) and hw.bf16_tflops == 989.0
    cases = {
        "default_mfu": (1.5, "default_mfu: must be <= 1, got 1.5"),
        "memory_gib": (0, "memory_gib: must be > 0, got 0.0"),  # shown as the float the field holds
        "intra_node_fabric": ("infiniband", "intra_node_fabric: expected 'nvlink' or 'pcie' or 'xgmi', got 'infiniband'"),
        "supports_bf16": ("yes", "supports_bf16: expected true or false, got 'yes'"),
        "name": (5, "name: expected a string, got 5"),
    }
    for key, (value, message) in cases.items():
        with pytest.raises(SpecError, match=escaped(message)):
            validated(HardwareSpec, {**H100, key: value})
    with pytest.raises(SpecError, match=r"^memory_gib: expected a number, got '80'$"):  # "80" is not a number
        validated(HardwareSpec, {**H100, "memory_gib": "80"})
    for value in (float("inf"), float("nan")):  # YAML's .inf would overflow int(memory_gib * GiB)
        with pytest.raises(SpecError, match=rf"^memory_gib: expected a finite number, got {value}$"):
            validated(HardwareSpec, {**H100, "memory_gib": value})
    with pytest.raises(SpecError, match=r"^supports_bf16 \(True\) disagrees with bf16_tflops \(0\.0\)"):
        validated(HardwareSpec, {**H100, "bf16_tflops": 0})


def test_optional_fields_take_none():
    assert validated(DeepSpeedKnobs, {"overlap_comm": None}).overlap_comm is None
    with pytest.raises(SpecError, match="^overlap_comm: expected true or false, got 'yes'$"):
        validated(DeepSpeedKnobs, {"overlap_comm": "yes"})


def test_unknown_and_missing_keys_are_named():
    with pytest.raises(SpecError, match=r"^memory_gb: unknown key; did you mean memory_gib\?$"):
        validated(HardwareSpec, {**H100, "memory_gb": 80})
    with pytest.raises(SpecError, match="^vram: unknown key; expected one of name, source, memory_gib"):
        validated(HardwareSpec, {**H100, "vram": 80})
    without = {k: v for k, v in H100.items() if k != "nccl_gib"}
    with pytest.raises(SpecError, match="^nccl_gib: missing$"):
        validated(HardwareSpec, without)
    # A key missing beside an unknown one is that key misspelt: reported once, as the unknown key.
    renamed = {**without, "nccl_gb": 1.0}
    with pytest.raises(SpecError, match=r"^nccl_gb: unknown key; did you mean nccl_gib\?$"):
        validated(HardwareSpec, renamed)
    with pytest.raises(SpecError, match="^1: unknown key; expected one of name, source, "):
        validated(HardwareSpec, {**H100, 1: 2})
    with pytest.raises(SpecError, match="^expected a mapping of keys to values, got list$"):
        validated(HardwareSpec, ["h100"])
    assert validated(HardwareSpec, H100) == HardwareSpec(**H100)


INPUTS = [Parallelism, TrainingSetup, DeepSpeedKnobs, EngineOptions, HardwareSpec, Architecture, ModelSummary,
          Overheads]


@pytest.mark.parametrize("kind", INPUTS, ids=[k.__name__ for k in INPUTS])
def test_every_input_forbids_unknown_keys(kind):
    with pytest.raises(SpecError, match="^xyzzy: unknown key; expected one of "):
        validated(kind, {"xyzzy": 1})


def test_several_problems_share_one_line():
    with pytest.raises(SpecError, match=r"^f\.yaml: gpus: must be > 0, got 0; nodes: expected a whole number, got 'x'$"):
        validated(Parallelism, {"gpus": 0, "nodes": "x"}, "f.yaml")


def test_inputs_are_frozen_keyword_only_and_hashable():
    par = Parallelism(gpus=16, nodes=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        par.gpus = 8  # type: ignore[misc]
    with pytest.raises(TypeError):
        Parallelism(16, 2)  # type: ignore[misc]
    assert par == Parallelism(gpus=16, nodes=2) and par != Parallelism(gpus=16)
    assert len({par, Parallelism(gpus=16, nodes=2)}) == 1
    assert repr(par) == "Parallelism(gpus=16, nodes=2)"


def test_replace_trusts_the_values_but_runs_the_cross_field_rule():
    setup = TrainingSetup()
    copy = dataclasses.replace(setup, micro_batch=4)
    assert copy.micro_batch == 4 and setup.micro_batch == 1 and copy.seq_len == setup.seq_len
    with pytest.raises(TypeError, match="micro_batches"):
        dataclasses.replace(setup, micro_batches=4)
    with pytest.raises(ValueError, match=escaped("gpus (16) is not a multiple of nodes (3)")):
        dataclasses.replace(Parallelism(gpus=16, nodes=2), nodes=3)


def test_as_json_and_asdict():
    knobs = DeepSpeedKnobs(offload_optimizer=OffloadDevice.cpu)
    assert dataclasses.asdict(knobs)["offload_optimizer"] is OffloadDevice.cpu
    dumped = as_json(knobs, include={"offload_optimizer", "overlap_comm"})
    assert dumped == {"offload_optimizer": "cpu", "overlap_comm": None}
    assert "overlap_comm" not in as_json(knobs, exclude_none=True)
    all_fields = {f.name for f in dataclasses.fields(TrainingSetup)}
    assert set(as_json(TrainingSetup(), exclude={"seq_len"})) == all_fields - {"seq_len"}


def test_command_line_values_are_validated_once_into_one_line():
    with pytest.raises(SpecError, match=escaped("gpus (12) is not a multiple of nodes (5)")):
        scenario(ScenarioArgs(params="9e9", gpus="12", nodes="5"))


class _File(BaseModel):
    """A pydantic model that nests inputs, as plans and DeepSpeed configs do."""

    parallelism: Parallelism
    hardware: HardwareSpec | None = None
    engine_options: EngineOptions = EngineOptions()


def test_pydantic_validates_a_nested_input_with_the_same_checks():
    assert _File(parallelism={"gpus": 16, "nodes": 2}).parallelism == Parallelism(gpus=16, nodes=2)
    with pytest.raises(ValidationError) as unknown:
        _File(parallelism={"gpus": 8, "gpu": 8})
    assert unknown.value.errors()[0]["loc"] == ("parallelism", "gpu")
    assert validation_message("f.yaml", unknown.value, _File) == "f.yaml: parallelism.gpu: unknown key; did you mean gpus?"
    with pytest.raises(ValidationError, match=r"gpus \(12\) is not a multiple of nodes \(5\)"):
        _File(parallelism={"gpus": 12, "nodes": 5})
    with pytest.raises(ValidationError) as bound:
        _File(parallelism={"gpus": 0})
    assert validation_message("f.yaml", bound.value, _File) == "f.yaml: parallelism.gpus: must be > 0, got 0"
    with pytest.raises(ValidationError) as strict:  # 1 is not true: strict there too
        _File(parallelism={}, engine_options={"gradient_as_bucket_view": 1})
    assert validation_message("", strict.value) == "engine_options.gradient_as_bucket_view: expected true or false, got 1"
    par = Parallelism(gpus=8)
    assert _File(parallelism=par).parallelism is par
