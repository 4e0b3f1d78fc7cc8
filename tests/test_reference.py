"""Post-training with a reference model (memory.reference): the copy's bytes, the paired batch, the reference
forward at the end of the policy's, the output's assumption line, and the refusals."""

import pytest

from zeroplan import api
from zeroplan.errors import ZeroplanError
from zeroplan.memory.reference import reference_parameter_bytes
from zeroplan.memory.setup import Engine, PostTraining, Precision, TrainingSetup, ZeroStage
from zeroplan.memory.timeline import CATEGORIES, END_OF_FORWARD, LOSS_BACKWARD

P = 1_000_000_007
DPO = TrainingSetup(post_training=PostTraining.dpo)


@pytest.mark.parametrize(("engine", "stage", "expected"), [
    (Engine.deepspeed, ZeroStage.zero0, 2 * P),  # trl/models/utils.py prepare_deepspeed: stages 0-2 become 0
    (Engine.deepspeed, ZeroStage.zero2, 2 * P),
    (Engine.deepspeed, ZeroStage.zero3, -(-2 * P // 8)),  # ZeRO-3 kept: sharded
    (Engine.fsdp2, ZeroStage.zero3, -(-2 * P // 8)),  # prepare_fsdp wraps it
    (Engine.ddp, ZeroStage.zero0, 2 * P),
])
def test_reference_copy_is_the_model_in_its_dtype_sharded_as_trl_prepares_it(engine, stage, expected):
    assert reference_parameter_bytes(P, DPO, engine, stage, 8, peft=False) == expected


def test_no_copy_under_peft_nor_without_a_reference():
    assert reference_parameter_bytes(P, DPO, Engine.deepspeed, ZeroStage.zero2, 8, peft=True) == 0
    for pt in (PostTraining.sft, PostTraining.orpo, PostTraining.simpo):
        setup = TrainingSetup(post_training=pt)
        assert reference_parameter_bytes(P, setup, Engine.deepspeed, ZeroStage.zero2, 8, peft=False) == 0
    fp32 = TrainingSetup(post_training=PostTraining.dpo, precision=Precision.fp32)
    assert reference_parameter_bytes(P, fp32, Engine.deepspeed, ZeroStage.zero2, 1, peft=False) == 4 * P


def _stage(**kw):
    est = api.estimate(model="llama-3.1-8b", gpus=8, hardware="h100-sxm-80gb", seq_len=1024, **kw)
    return est, est.stages[0]


def _line(s, name):
    return s.peak_lines[CATEGORIES.index(name)]


@pytest.mark.parametrize("stage", [2, 3])
def test_dpo_adds_the_copy_to_the_parameters_and_its_forward_at_the_end_of_the_policys(stage):
    _, sft = _stage(stage=stage, micro_batch=2)  # the paired batch: 2 x micro-batch sequences
    est, dpo = _stage(stage=stage, micro_batch=1, post_training="dpo")
    copy = reference_parameter_bytes(est.model.num_params, est.setup, Engine.deepspeed, ZeroStage(stage), 8, False)
    assert copy > 0
    # the reference's forward ends the policy's; the loss's backward (its T x V gradients) may top it
    assert dpo.timeline.events[dpo.peak_index].name in (END_OF_FORWARD, LOSS_BACKWARD)
    assert dpo.profile.reference > 0
    # the policy's activations are those of SFT on twice the sequences; the reference forward comes on top
    assert dpo.profile.layers_bytes == sft.profile.layers_bytes
    end = [e for e in dpo.timeline.events if e.name == END_OF_FORWARD][0]
    end_sft = [e for e in sft.timeline.events if e.name == END_OF_FORWARD][0]
    by, by_sft = end.by_category(), end_sft.by_category()
    assert by["parameters"] - by_sft["parameters"] == copy
    assert by["activations"] - by_sft["activations"] == dpo.profile.reference
    assert any("reference model a frozen copy, 16-bit" in a for a in est.assumptions)


def test_orpo_is_the_paired_batch_without_a_reference():
    _, sft = _stage(stage=2, micro_batch=2)
    est, orpo = _stage(stage=2, micro_batch=1, post_training="orpo")
    assert orpo.peak_lines == sft.peak_lines and orpo.profile.reference == 0
    assert any("no reference model" in a for a in est.assumptions)


def test_peft_uses_the_adapter_disabled_base_no_copy():
    _, sft = _stage(stage=2, micro_batch=2, lora_rank=16)
    est, dpo = _stage(stage=2, micro_batch=1, lora_rank=16, post_training="dpo")
    end = [e for e in dpo.timeline.events if e.name == END_OF_FORWARD][0].by_category()
    end_sft = [e for e in sft.timeline.events if e.name == END_OF_FORWARD][0].by_category()
    assert end["parameters"] == end_sft["parameters"]
    assert end["activations"] - end_sft["activations"] == dpo.profile.reference > 0
    assert any("adapter-disabled base is the reference, no copy" in a for a in est.assumptions)


def test_a_mesh_and_the_throughput_refuse_it_in_one_line():
    with pytest.raises(ZeroplanError, match="post-training dpo on a tensor- or pipeline-parallel mesh"):
        api.estimate(model="llama-3.1-8b", gpus=8, tp=2, post_training="dpo")
    with pytest.raises(ZeroplanError, match="not timed"):
        api.recommend(model="llama-3.1-8b", gpus=8, post_training="dpo")  # it times candidates


@pytest.mark.torch
@pytest.mark.parametrize("kind", ["dpo", "kto"])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_the_harness_measures_the_reference_forward_zeroplan_counts(kind, dtype):
    pytest.importorskip("transformers")
    from validation import measure_reference as harness

    row = harness.measure(kind, 32, 2, 8000, dtype)
    assert row["copy"] == row["zeroplan_copy"]
    assert not harness.bad(row), row


def test_a_plan_states_its_post_training():
    from zeroplan.check.plan import Plan

    plan = Plan.model_validate({"params": 7_000_000_000, "hardware": "h100-sxm-80gb", "gpus": 8,
                                "deepspeed": "ds.json", "training": {"post_training": "dpo"}})
    assert plan.setup().post_training is PostTraining.dpo
    assert Plan.model_validate({"params": 7_000_000_000, "hardware": "h100-sxm-80gb", "gpus": 8, "deepspeed": "ds.json"}).setup().post_training is PostTraining.sft
