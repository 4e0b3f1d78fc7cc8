"""KTO, ASFT and knowledge distillation (memory.reference, memory.posttrain, memory.teacher): where each term sits in
the step's timeline, the teacher's bytes, the output's lines and the refusals."""

import pytest

from zeroplan import api
from zeroplan.errors import ZeroplanError
from zeroplan.memory.posttrain import JSD_LOGITS_TENSORS, asft_loss_bytes
from zeroplan.memory.setup import Engine, PostTraining, Precision, TrainingSetup, ZeroStage
from zeroplan.memory.teacher import Teacher, teacher_parameter_bytes
from zeroplan.memory.timeline import CATEGORIES, END_OF_FORWARD, START

RUN = dict(model="llama-3.1-8b", gpus=8, hardware="h100-sxm-80gb", seq_len=1024)


def _stage(**kw):
    est = api.estimate(**RUN, **kw)
    return est, est.stages[0]


def _event(s, name):
    return [e for e in s.timeline.events if e.name == name][0].by_category()


def test_kto_forwards_the_micro_batch_with_the_reference_copy_and_its_forward():
    _, sft = _stage(stage=2, micro_batch=2)
    est, kto = _stage(stage=2, micro_batch=2, post_training="kto")
    _, dpo = _stage(stage=2, micro_batch=1, post_training="dpo")  # the same 2 rows, paired
    assert kto.profile.layers_bytes == sft.profile.layers_bytes  # unpaired: micro-batch rows, not twice
    end, end_sft = _event(kto, END_OF_FORWARD), _event(sft, END_OF_FORWARD)
    assert end["parameters"] - end_sft["parameters"] == 2 * est.model.num_params  # ZeRO-2: a whole 16-bit copy
    assert end["activations"] - end_sft["activations"] == kto.profile.reference > 0
    # KTO's metrics select the chosen and rejected rows by index_select (copies): more than DPO's views
    assert kto.profile.reference > dpo.profile.reference
    assert any("KL batch" in a for a in est.assumptions)


def test_asft_forwards_its_reference_first_and_holds_its_logits_through_the_forward():
    _, sft = _stage(stage=3, micro_batch=2)
    est, asft = _stage(stage=3, micro_batch=2, post_training="asft")
    logits = est.activations.logits_bytes
    assert asft.profile.forward_held == logits and asft.profile.start > 0
    start, start_sft = _event(asft, START), _event(sft, START)
    assert start["activations"] - start_sft["activations"] == asft.profile.start
    first = [e for e in asft.timeline.events if e.phase == "forward"][0].by_category()
    first_sft = [e for e in sft.timeline.events if e.phase == "forward"][0].by_category()
    assert first["activations"] - first_sft["activations"] == logits  # the reference's logits, kept
    assert asft.profile.loss == asft_loss_bytes(logits, TrainingSetup(micro_batch=2, seq_len=1024))
    # a layer's backward: the reference's logits and the loss's tensors freed (compute_loss has returned)
    backward = [e for e in asft.timeline.events if e.phase == "backward" and e.layer is not None][0].by_category()
    backward_sft = [e for e in sft.timeline.events if e.phase == "backward" and e.layer is not None][0].by_category()
    assert backward["activations"] == backward_sft["activations"]
    assert asft.profile.loss_backward == asft.profile.loss - logits  # the loss's backward: its forward term, a bound
    assert any("ASFT" in a and "before the policy's" in a for a in est.assumptions)


def test_asft_loss_counts_the_fp32_copies_of_the_logits():
    bf16, one = TrainingSetup(micro_batch=2), TrainingSetup(micro_batch=1)
    fp32 = TrainingSetup(micro_batch=2, precision=Precision.fp32)
    assert asft_loss_bytes(100, bf16) == 17 * 100  # 16-bit logits: 6 fp32 copies, 5 in the compute dtype
    assert asft_loss_bytes(100, one) == 17 * 100 - 300  # one row: the shifts are views
    assert asft_loss_bytes(100, fp32) == 9 * 100  # fp32 logits: no upcast copy


def test_kd_holds_the_teacher_and_its_logits_beside_the_jsd():
    _, sft = _stage(stage=2, micro_batch=1)
    est, kd = _stage(stage=2, micro_batch=1, post_training="kd", teacher="llama-3.1-70b")
    teacher = api.estimate(model="llama-3.1-70b", gpus=8, seq_len=1024).model.num_params
    end, end_sft = _event(kd, END_OF_FORWARD), _event(sft, END_OF_FORWARD)
    assert end["parameters"] - end_sft["parameters"] == 2 * teacher  # ZeRO-2: prepare_deepspeed makes it stage 0
    logits = est.activations.logits_bytes
    assert kd.profile.loss == (JSD_LOGITS_TENSORS + 1) * logits  # the teacher's logits and the JSD's tensors
    assert any("KD: teacher llama-3.1-70b" in a for a in est.assumptions)


@pytest.mark.parametrize(("engine", "stage", "whole"), [
    (Engine.deepspeed, ZeroStage.zero3, False), (Engine.deepspeed, ZeroStage.zero2, True),
    (Engine.fsdp2, ZeroStage.zero3, True),  # accelerate prepare_model(evaluation_mode=True) wraps nothing
    (Engine.ddp, ZeroStage.zero0, True),
])
def test_the_teacher_is_sharded_only_by_zero3(engine, stage, whole):
    teacher = Teacher("t", 1_000_000_007, None)
    assert teacher_parameter_bytes(teacher, engine, stage, 8) == (2 * teacher.params if whole
                                                                  else -(-2 * teacher.params // 8))


@pytest.mark.parametrize(("kw", "said"), [
    (dict(post_training="kd"), "needs the teacher model: give --teacher"),
    (dict(post_training="kd", teacher="llama-3.1-70b", precision="fp32"), "kd with --precision fp32"),
    (dict(post_training="kd", teacher="qwen2.5-7b"), "needs one vocabulary"),
    (dict(post_training="asft", lora_rank=16), "asft with LoRA"),
    (dict(post_training="kto", loss="liger"), "--loss liger"),
    (dict(post_training="dpo", training_loop="litgpt"), "with --training-loop litgpt"),
])
def test_what_is_not_modelled_is_one_line(kw, said):
    with pytest.raises(ZeroplanError, match=said):
        api.estimate(**RUN, **kw)


def test_a_teacher_without_kd_is_refused_naming_it(runner):
    from zeroplan.cli.app import app

    res = runner.invoke(app, ["estimate", "--model", "llama-3.1-8b", "--teacher", "llama-3.1-70b"])
    assert res.exit_code != 0 and "--teacher" in res.stderr and "--post-training kd" in res.stderr


def test_a_plan_names_its_teacher(tmp_path):
    from zeroplan.check.plan import Plan

    plan = Plan.model_validate({"params": 7_000_000_000, "hardware": "h100-sxm-80gb", "gpus": 8, "deepspeed": "ds.json",
                                "training": {"post_training": "kd", "teacher": "llama-3.1-70b"}})
    assert plan.setup().post_training is PostTraining.kd and plan.training.teacher == "llama-3.1-70b"


@pytest.mark.torch
@pytest.mark.parametrize("kind", ["asft", "kd"])
def test_the_harness_measures_what_zeroplan_counts(kind):
    pytest.importorskip("transformers")
    from validation import measure_posttrain as harness

    row = harness.measure(kind, 32, 2, 8000, "bf16")
    assert not harness.bad(row), row


def test_check_counts_the_post_training_it_is_given():
    """--post-training (and --teacher) are the checked run's training block, as estimate takes them."""
    ds = "configs/plans/ds/article-zero3-bf16.json"
    sft = api.check_plans(deepspeed_config=ds, model="llama-3.1-8b").results[0].memory.total
    dpo = api.check_plans(deepspeed_config=ds, model="llama-3.1-8b", post_training="dpo").results[0].memory.total
    kd = api.check_plans(deepspeed_config=ds, model="llama-3.1-8b", post_training="kd",
                         teacher="llama-3.1-70b").results[0].memory.total
    assert sft < dpo and sft < kd


def test_kto_at_micro_batch_1_says_trl_refuses_its_kl_batch():
    est, _ = _stage(stage=2, micro_batch=1, post_training="kto")
    assert any("at --micro-batch 1 TRL's KTOTrainer refuses loss_type kto" in a for a in est.assumptions)
    est, _ = _stage(stage=2, micro_batch=2, post_training="kto")
    assert not any("refuses loss_type kto" in a for a in est.assumptions)


def test_the_json_names_the_teacher(runner):
    import json

    from zeroplan.cli.app import app

    args = ["estimate", "--model", "llama-3.1-8b", "--post-training", "kd", "--teacher", "llama-3.1-70b", "-f", "json"]
    data = json.loads(runner.invoke(app, args).stdout)
    teacher = api.estimate(model="llama-3.1-70b").model.num_params
    assert data["teacher"] == {"name": "llama-3.1-70b", "num_params": teacher}
    assert json.loads(runner.invoke(app, ["estimate", "--model", "llama-3.1-8b", "-f", "json"]).stdout)["teacher"] is None
