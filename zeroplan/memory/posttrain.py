"""The post-training terms of one micro-step's activation profile (docs/finetune.md, post-training).

- DPO and KTO (memory.reference): the reference forward and the logged metrics, at the end of the policy's forward.
- ASFT (LLaMA-Factory `use_asft_loss`, hiyouga/LLaMA-Factory@ff6d4d12eeb035d6ce06805a5733dd7b29f2ac30:
  src/llamafactory/train/sft/trainer.py `compute_loss`, train/trainer_utils.py `asft_loss_func`): the frozen
  reference's no-grad forward *before* the policy's (nothing of the step alive yet), its logits kept through the
  policy's forward and the loss; the loss on fp32 copies of the logits (below).
- Knowledge distillation (TRL GKDTrainer off-policy, huggingface/trl@f2cd57710ae345ea6428ae95363267fcf38a3dc8:
  trl/experimental/gkd/gkd_trainer.py `compute_loss`, `generalized_jsd_loss`): the student forward without labels
  (no cross-entropy), the teacher's no-grad forward after it, its logits alive for the generalized JSD (below).

The loss's backward (memory.timeline LOSS_BACKWARD, the logits freed) is taken at most the loss's forward term for
ASFT and KD (its saved tensors and the gradients it makes are fewer: measured by validation/measure_posttrain.py), in
place of transformers' cross-entropy's, which it exceeds. Every figure is in bytes of the forwarded batch; `plain` is the activation breakdown without checkpointing (an
inference forward's working set is bounded by a training layer's saved tensors). `scn` is a memory.estimate.Scenario,
unannotated here (estimate imports this module). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import replace

from zeroplan.memory.reference import check_reference, reference_forward_bytes, reference_parameter_bytes
from zeroplan.memory.setup import Engine, PostTraining, TrainingSetup, ZeroStage
from zeroplan.memory.teacher import check_teacher, teacher_parameter_bytes
from zeroplan.units import GIB

FP32_BYTES = 4
# generalized_jsd_loss (0 < beta < 1), each tensor the shifted logits' size, alive at its peak (the jsd sum):
# student / T, teacher / T, their log_softmax (2), the stacked shifted log-probs (2, saved by logsumexp), the
# mixture, kl_teacher's exp(target) (saved) and result, kl_student's exp, difference (both saved) and result,
# beta * kl_teacher, (1 - beta) * kl_student and their sum
JSD_LOGITS_TENSORS = 15


def posttrain_profile(prof, plain, forwarded: TrainingSetup, hidden_size: int, teacher=None, teacher_hidden: int = 0):
    """`prof` (memory.timeline.ActivationProfile) with the post-training's terms; unchanged for sft, orpo, simpo."""
    pt = forwarded.post_training
    if pt in (PostTraining.dpo, PostTraining.kto):
        return replace(prof, reference=reference_forward_bytes(plain, forwarded, hidden_size))
    logits = plain.logits_bytes
    if pt is PostTraining.asft:
        loss = asft_loss_bytes(logits, forwarded)
        return replace(prof, start=inference_forward_bytes(plain, forwarded, hidden_size), forward_held=logits,
                       loss=max(prof.loss, loss), loss_backward=max(prof.loss_backward, loss - logits))
    if pt is PostTraining.kd:
        jsd = jsd_loss_bytes(logits)
        return replace(prof, loss=max(inference_forward_bytes(teacher, forwarded, teacher_hidden),
                                      teacher.logits_bytes + jsd), loss_backward=max(prof.loss_backward, jsd - logits))
    return prof


def inference_forward_bytes(plain, forwarded: TrainingSetup, hidden_size: int) -> int:
    """A no-grad forward's transient: the larger of one layer's working set (bounded by its saved tensors without
    checkpointing) and the head's: the final hidden state and the logits."""
    hidden = forwarded.micro_batch * forwarded.seq_len * hidden_size * forwarded.precision.compute_bytes
    return max(max(plain.layer_bytes, default=0), hidden + plain.logits_bytes)


def asft_loss_bytes(logits: int, forwarded: TrainingSetup) -> int:
    """What ASFT's loss has alive at its peak beyond the policy's saved tensors and logits and the reference logits.

    The policy forward is given the labels, so transformers' ForCausalLMLoss has run and its cross-entropy keeps its
    fp32 log-softmax; then asft_loss_func: `logits.float()` (a copy for 16-bit logits), the shifted policy and
    reference logits made `.contiguous()` (copies for more than one row: one row's shift is already contiguous),
    `_dft_cross_entropy`'s log_softmax (fp32, saved), and `_kl_divergence`: log_softmax (fp32, saved), the reference's
    softmax (its dtype), and F.kl_div, which torch composes as xlogy(q, q) - q * log_p: the xlogy (q's dtype), the
    product and the difference (fp32), alive together at the subtraction."""
    fp32 = logits * FP32_BYTES // forwarded.precision.compute_bytes
    upcast = fp32 if forwarded.precision.compute_bytes != FP32_BYTES else 0
    copies = fp32 + logits if forwarded.micro_batch > 1 else 0
    kl = fp32 + logits + logits + fp32 + fp32
    return fp32 + upcast + copies + fp32 + kl


def jsd_loss_bytes(logits: int) -> int:
    """GKD's generalized JSD (0 < beta < 1) on the student's and teacher's logits of one size (GKD requires one
    vocabulary): JSD_LOGITS_TENSORS of the logits' size at the sum of its two KL terms, then the masked copy."""
    return JSD_LOGITS_TENSORS * logits


def posttrain_note(pt: PostTraining, prof) -> str | None:
    """The post-training's own activation terms in the output's words (they are not lines of the activation table)."""
    gib = lambda b: f"{b / GIB:.2f} GiB"  # noqa: E731
    if pt in (PostTraining.dpo, PostTraining.kto):
        return (f"{pt.value.upper()}: the reference forward and the logged metrics after it add {gib(prof.reference)} "
                "of activations at the end of the policy's forward (docs/finetune.md, post-training)")
    if pt is PostTraining.asft:
        return (f"ASFT: the reference forward before the policy's peaks at {gib(prof.start)}; its logits "
                f"({gib(prof.forward_held)}) stay alive through the policy's forward; the loss holds {gib(prof.loss)} "
                "at its peak, in place of the table's loss line (docs/finetune.md, post-training)")
    if pt is PostTraining.kd:
        return (f"KD: the teacher's forward, its logits and the generalized JSD hold {gib(prof.loss)} at the end of "
                "the student's forward, in place of the table's loss line (docs/finetune.md, post-training)")
    return None


def frozen_model_bytes(scn, stage: ZeroStage, par=None) -> int:
    """This GPU's bytes of a frozen reference copy (memory.reference: 0 under peft or without one) or of knowledge
    distillation's teacher (memory.teacher)."""
    dp = (par or scn.parallelism).dp
    teacher = teacher_parameter_bytes(scn.teacher, Engine(scn.engine), stage, dp)
    copy = reference_parameter_bytes(scn.model.num_params, scn.setup, Engine(scn.engine), stage, dp, _peft(scn))
    return teacher + copy


def _peft(scn) -> bool:
    return scn.tuning is not None and scn.tuning.spec.lora_rank > 0


def check_posttraining(scn) -> None:
    """memory.reference's and memory.teacher's refusals, in one line each."""
    check_reference(scn.setup, scn.mesh, _peft(scn))
    check_teacher(scn.setup, scn.teacher, scn.arch)
