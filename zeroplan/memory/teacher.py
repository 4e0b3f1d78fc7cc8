"""Knowledge distillation's teacher model (`--post-training kd --teacher MODEL`): its weights on each GPU, the checks.

TRL's GKDTrainer (huggingface/trl@f2cd57710ae345ea6428ae95363267fcf38a3dc8, trl/experimental/gkd/gkd_trainer.py
`__init__`): a teacher named by a string is loaded with `AutoModelForCausalLM.from_pretrained(teacher,
**teacher_model_init_kwargs)`, whose dtype defaults to "auto", the checkpoint's own (transformers==5.25.0:
modeling_utils.py `from_pretrained`): 16-bit assumed, TEACHER_BYTES per parameter. Under DeepSpeed it is prepared by
`prepare_deepspeed` (trl/models/utils.py: ZeRO-3 kept, the teacher sharded over the data-parallel ranks; stages 0-2
become stage 0, a whole copy), otherwise by `accelerator.prepare_model(teacher, evaluation_mode=True)`, which under
FSDP wraps nothing (accelerate==1.16.0:accelerator.py `prepare_model`: the wrapping is under `if not
evaluation_mode`): a whole teacher on every GPU. It must share the student's vocabulary (GKD raises otherwise).
The forward and the loss: memory.posttrain. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from zeroplan.errors import ZeroplanError
from zeroplan.memory.setup import Engine, PostTraining, Precision, TrainingSetup, ZeroStage
from zeroplan.models.architecture import Architecture

TEACHER_BYTES = 2  # the checkpoint's dtype ("auto"), a 16-bit checkpoint assumed


@dataclass(frozen=True, slots=True)
class Teacher:
    name: str
    params: int
    arch: Architecture


def teacher_parameter_bytes(teacher: Teacher | None, engine: Engine, stage: ZeroStage, dp: int) -> int:
    """This GPU's bytes of the teacher: sharded over dp under ZeRO-3, whole otherwise (FSDP included)."""
    if teacher is None:
        return 0
    whole = teacher.params * TEACHER_BYTES
    return -(-whole // dp) if engine is Engine.deepspeed and stage is ZeroStage.zero3 else whole


def teacher_assumption(teacher: Teacher, engine: Engine) -> str:
    shard = "sharded by ZeRO-3 (whole at stages 0-2)" if engine is Engine.deepspeed else "whole on every GPU"
    return (f"KD: teacher {teacher.name} ({teacher.params:,} params) frozen, 16-bit (its checkpoint's dtype), {shard} "
            "as TRL's GKDTrainer prepares it; its no-grad forward after the student's, its logits alive for the "
            "generalized JSD (0 < beta < 1); off-policy: the student's or teacher's generation (lmbda, seq_kd) not "
            "modelled")


def check_teacher(setup: TrainingSetup, teacher: Teacher | None, student: Architecture | None) -> None:
    """One line for a teacher without kd, kd without a teacher, fp32 (mixed-dtype logits), another vocabulary."""
    kd = setup.post_training is PostTraining.kd
    if teacher is not None and not kd:
        raise ZeroplanError("--teacher names knowledge distillation's teacher: give --post-training kd")
    if not kd:
        return
    if teacher is None:
        raise ZeroplanError("--post-training kd needs the teacher model: give --teacher NAME|PATH (a plan: "
                            "training.teacher)")
    if setup.precision is Precision.fp32:
        raise ZeroplanError("--post-training kd with --precision fp32 is not modelled (the teacher loads in its "
                            "checkpoint's 16-bit dtype: logits of two dtypes)")
    if student is not None and student.vocab_size != teacher.arch.vocab_size:
        raise ZeroplanError(f"--teacher {teacher.name}: vocabulary {teacher.arch.vocab_size:,} against the student's "
                            f"{student.vocab_size:,}; GKD compares full next-token distributions and needs one "
                            "vocabulary")
