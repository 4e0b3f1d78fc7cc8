"""Post-training with a reference model (DPO): the frozen copy's parameters, the paired batch, the reference forward.

TRL's DPOTrainer (huggingface/trl@f2cd57710ae345ea6428ae95363267fcf38a3dc8, trl/trainer/dpo_trainer.py):
- `__init__`: without peft (and without `precompute_ref_log_probs`) the reference is a second model loaded from
  the policy's checkpoint with the policy's `model_init_kwargs` (its dtype), frozen; under DeepSpeed it is
  prepared by `prepare_deepspeed` (trl/models/utils.py: ZeRO-3 keeps stage 3, so the copy is sharded over the
  data-parallel ranks; any other stage becomes stage 0, a whole copy on every GPU), under FSDP by `prepare_fsdp`
  (wrapped, so sharded), otherwise `accelerator.prepare_model(evaluation_mode=True)` (a whole copy). Under peft
  there is no copy: the reference is the same model with its adapters disabled (`use_adapter(..., None)`).
- `_compute_loss`: the policy forward on the chosen and rejected rows concatenated, its per-token log-probs,
  then under `torch.no_grad()` (gradient checkpointing disabled) the reference forward on the same rows: the
  policy's saved activations, logits and log-probs are all alive while it runs.

So the reference forward's transient is that of an inference forward on the doubled batch: one layer's working
set (at most the layer's saved tensors without checkpointing) or its logits, whichever is larger, alive at the
end of the policy's forward (memory.timeline END_OF_FORWARD). Pure: no I/O. docs/finetune.md, post-training.
"""

from __future__ import annotations

from dataclasses import replace

from zeroplan.errors import ZeroplanError
from zeroplan.memory.stage import StageBase
from zeroplan.memory.setup import Checkpointing, Engine, Loss, PostTraining, TrainingSetup, ZeroStage

SHARDED_ENGINES = (Engine.fsdp, Engine.fsdp2)  # trl/models/utils.py prepare_fsdp wraps the reference too


def forwarded_setup(setup: TrainingSetup) -> TrainingSetup:
    """The setup the activations are counted for: a preference pair forwards 2 sequences per micro-batch row."""
    rows = setup.post_training.rows_per_sequence
    return setup if rows == 1 else replace(setup, micro_batch=setup.micro_batch * rows)


def reference_parameter_bytes(params: int, setup: TrainingSetup, engine: Engine, stage: ZeroStage, dp: int,
                              peft: bool) -> int:
    """This GPU's bytes of the frozen reference copy: none under peft (the adapter-disabled base) or without DPO;
    the model in its compute dtype, sharded over dp where TRL's prepare path shards it (ZeRO-3, FSDP)."""
    if not setup.post_training.reference or peft:
        return 0
    whole = params * setup.precision.compute_bytes
    sharded = (engine is Engine.deepspeed and stage is ZeroStage.zero3) or engine in SHARDED_ENGINES
    return -(-whole // dp) if sharded else whole


def reference_forward_bytes(acts_no_checkpointing, rows: int, compute_bytes: int, hidden_bytes: int) -> int:
    """The reference forward's transient on the forwarded (doubled) batch of `rows` sequences: the larger of one
    layer's working set (bounded by that layer's saved tensors in a training forward without checkpointing) and
    the head's: the final hidden state (`hidden_bytes`, rows x seq x hidden), the logits and their log-probs. TRL's selective_log_softmax (trl/trainer/utils.py at the commit above) takes
    16-bit logits one row (sequence) at a time, a row's log_softmax alive at once; fp32 logits through logsumexp
    over the whole tensor, a temporary the logits' size."""
    logits = acts_no_checkpointing.logits_bytes
    logprobs = logits if compute_bytes == FP32_BYTES else -(-logits // rows)
    return max(max(acts_no_checkpointing.layer_bytes, default=0), hidden_bytes + logits + logprobs)


FP32_BYTES = 4


def reference_assumption(setup: TrainingSetup, engine: Engine, peft: bool) -> str | None:
    """The line the output names for the post-training it models, or None for SFT."""
    pt = setup.post_training
    if pt is PostTraining.sft:
        return None
    pair = f"{pt.value.upper()}: chosen and rejected rows concatenated ({pt.rows_per_sequence} x --micro-batch sequences forwarded)"
    if not pt.reference:
        return pair + "; no reference model"
    if peft:
        return pair + "; peft: the adapter-disabled base is the reference, no copy; its forward after the policy's"
    dtype = "fp32" if setup.precision.compute_bytes == 4 else "16-bit"
    shard = ("sharded over the data-parallel GPUs as TRL prepares it" if engine in SHARDED_ENGINES
             else "sharded by ZeRO-3 as TRL prepares it (whole at stages 0-2)" if engine is Engine.deepspeed
             else "whole on every GPU")
    return pair + f"; reference model a frozen copy, {dtype}, {shard}; its forward after the policy's"


def check_reference(setup: TrainingSetup, mesh) -> None:
    """Refuse what is not modelled: preference pairs on a tensor/pipeline mesh, or with Liger's fused loss (TRL's
    `_compute_loss_liger` never makes the logits: another memory shape, not measured)."""
    if setup.post_training is not PostTraining.sft and setup.loss is Loss.liger:
        raise ZeroplanError(f"--post-training {setup.post_training.value} with --loss liger (Liger's fused preference "
                            "loss, no logits) is not modelled")
    if setup.post_training is not PostTraining.sft and mesh is not None:
        raise ZeroplanError(f"--post-training {setup.post_training.value} on a tensor- or pipeline-parallel mesh is "
                            "not modelled (the paired batch and reference model are modelled for data parallelism)")


def no_checkpointing(setup: TrainingSetup) -> TrainingSetup:
    """TRL disables gradient checkpointing for the reference forward (`disable_gradient_checkpointing`)."""
    return replace(forwarded_setup(setup), checkpointing=Checkpointing.none, checkpoint_every=1)


def with_reference(base: StageBase, reference_bytes: int) -> StageBase:
    """`base` holding the frozen reference copy's parameters at every event of the step (a no-op for 0 bytes)."""
    if not reference_bytes:
        return base
    states = replace(base.states, parameters=base.states.parameters + reference_bytes)
    moments = tuple(replace(m, parameters=m.parameters + reference_bytes) for m in base.moments)
    return replace(base, states=states, moments=moments)
