"""zeroplan.record: the checks the pydantic models made, made by the records that replaced them on the estimate path."""

import dataclasses

import pytest
from pydantic import BaseModel, ValidationError

from zeroplan.errors import SpecError
from zeroplan.hardware.spec import HardwareSpec
from zeroplan.memory.setup import (
    Checkpointing,
    DeepSpeedKnobs,
    OffloadDevice,
    Parallelism,
    Precision,
    TrainingSetup,
)
from zeroplan.record import FieldError

H100 = dict(
    name="h100", source="datasheet", memory_gib=79.65, bf16_tflops=989, fp16_tflops=989, fp32_tflops=67,
    hbm_bandwidth_tbps=3.35, supports_bf16=True, gpus_per_node=8, intra_node_fabric="nvlink",
    intra_node_busbw_gbps=360, intra_node_alpha_us=10, pcie_busbw_gbps=20, pcie_alpha_us=20, nic_gbps_per_gpu=50,
    inter_node_alpha_us=20, host_link_gbps=25, default_mfu=0.4, cuda_context_gib=0.5, nccl_gib=1.0,
)


def test_field_error_is_a_spec_error_and_a_value_error():
    # SpecError: the CLI prints it as one line; ValueError: pydantic reports it in place inside a file's model.
    assert issubclass(FieldError, SpecError) and issubclass(FieldError, ValueError)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"gpus": 0}, "gpus: must be > 0, got 0"),
        ({"gpus": True}, "gpus: expected a whole number, got True"),
        ({"gpus": "8"}, "gpus: expected a whole number, got '8'"),
        ({"gpus": 8.0}, "gpus: expected a whole number, got 8.0"),
        ({"gpus": 12, "nodes": 5}, "gpus (12) is not a multiple of nodes (5)"),
    ],
)
def test_parallelism_rejects_what_pydantic_strict_ints_rejected(kwargs, message):
    with pytest.raises(FieldError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Parallelism(**kwargs)


def test_enum_fields_take_their_values_and_reject_others():
    setup = TrainingSetup(precision="bf16-true", checkpointing="full")
    assert setup.precision is Precision.bf16_true and setup.checkpointing is Checkpointing.full
    with pytest.raises(FieldError, match="precision: expected bf16-mixed \\| fp16-mixed \\| bf16-true \\| fp32"):
        TrainingSetup(precision="bf17")


def test_float_fields_take_ints_as_floats_and_check_bounds():
    hw = HardwareSpec(**H100)
    assert isinstance(hw.bf16_tflops, float) and hw.bf16_tflops == 989.0
    with pytest.raises(FieldError, match="default_mfu: must be <= 1"):
        HardwareSpec(**{**H100, "default_mfu": 1.5})
    with pytest.raises(FieldError, match="intra_node_fabric: expected 'nvlink' or 'pcie' or 'xgmi'"):
        HardwareSpec(**{**H100, "intra_node_fabric": "infiniband"})
    with pytest.raises(FieldError, match="supports_bf16 .* disagrees with bf16_tflops"):
        HardwareSpec(**{**H100, "bf16_tflops": 0})


def test_optional_fields_take_none():
    assert DeepSpeedKnobs(overlap_comm=None).overlap_comm is None
    with pytest.raises(FieldError, match="overlap_comm: expected true or false"):
        DeepSpeedKnobs(overlap_comm="yes")


def test_model_validate_names_unknown_and_missing_keys():
    with pytest.raises(FieldError, match="^memory_gb: unknown key; did you mean memory_gib\\?$"):
        HardwareSpec.model_validate({**H100, "memory_gb": 80})
    with pytest.raises(FieldError, match="^vram: unknown key; expected one of name, source, memory_gib"):
        HardwareSpec.model_validate({**H100, "vram": 80})
    without = {k: v for k, v in H100.items() if k != "nccl_gib"}
    with pytest.raises(FieldError, match="^nccl_gib: missing"):
        HardwareSpec.model_validate(without)
    with pytest.raises(FieldError, match="expected a mapping"):
        HardwareSpec.model_validate(["h100"])
    assert HardwareSpec.model_validate(H100) == HardwareSpec(**H100)


def test_records_are_frozen_keyword_only_and_hashable():
    par = Parallelism(gpus=16, nodes=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        par.gpus = 8  # type: ignore[misc]
    with pytest.raises(TypeError):
        Parallelism(16, 2)  # type: ignore[misc]
    assert par == Parallelism(gpus=16, nodes=2) and par != Parallelism(gpus=16)
    assert len({par, Parallelism(gpus=16, nodes=2)}) == 1
    assert repr(par) == "Parallelism(gpus=16, nodes=2)"


def test_model_copy_replaces_fields_without_checking_like_pydantic():
    setup = TrainingSetup()
    copy = setup.model_copy(update={"micro_batch": 4})
    assert copy.micro_batch == 4 and setup.micro_batch == 1 and copy.seq_len == setup.seq_len
    with pytest.raises(TypeError, match="no field 'micro_batches'"):
        setup.model_copy(update={"micro_batches": 4})


def test_model_dump_python_and_json():
    knobs = DeepSpeedKnobs(offload_optimizer=OffloadDevice.cpu)
    assert knobs.model_dump()["offload_optimizer"] is OffloadDevice.cpu
    dumped = knobs.model_dump(mode="json", include={"offload_optimizer", "overlap_comm"})
    assert dumped == {"offload_optimizer": "cpu", "overlap_comm": None}
    assert "overlap_comm" not in knobs.model_dump(exclude_none=True)
    assert set(TrainingSetup().model_dump(exclude={"seq_len"})) == set(TrainingSetup.model_fields) - {"seq_len"}


class _File(BaseModel):
    """A pydantic model that embeds records, as plans and DeepSpeed configs do."""

    parallelism: Parallelism
    hardware: HardwareSpec | None = None


def test_pydantic_validates_an_embedded_record_with_the_same_checks():
    assert _File(parallelism={"gpus": 16, "nodes": 2}).parallelism == Parallelism(gpus=16, nodes=2)
    with pytest.raises(ValidationError) as unknown:
        _File(parallelism={"gpus": 8, "gpu": 8})
    assert unknown.value.errors()[0]["loc"] == ("parallelism", "gpu")
    with pytest.raises(ValidationError, match="gpus \\(12\\) is not a multiple of nodes \\(5\\)"):
        _File(parallelism={"gpus": 12, "nodes": 5})
    with pytest.raises(ValidationError, match="must be > 0"):
        _File(parallelism={"gpus": 0})
    par = Parallelism(gpus=8)
    assert _File(parallelism=par).parallelism is par
