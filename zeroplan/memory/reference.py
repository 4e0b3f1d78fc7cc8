"""Post-training with a frozen reference model (DPO, KTO, ASFT): the copy's parameters, the forwarded batch, the
reference forward of DPO and KTO and the metrics after it.

TRL's DPOTrainer and KTOTrainer (huggingface/trl@f2cd57710ae345ea6428ae95363267fcf38a3dc8, trl/trainer/dpo_trainer.py,
kto_trainer.py):
- `__init__`: without peft (and without `precompute_ref_log_probs`) the reference is a second model loaded from
  the policy's checkpoint with the policy's `model_init_kwargs` (its dtype), frozen; under DeepSpeed it is
  prepared by `prepare_deepspeed` (trl/models/utils.py: ZeRO-3 keeps stage 3, so the copy is sharded over the
  data-parallel ranks; any other stage becomes stage 0, a whole copy on every GPU), under FSDP by `prepare_fsdp`
  (wrapped, so sharded), otherwise `accelerator.prepare_model(evaluation_mode=True)` (a whole copy). Under peft
  there is no copy: the reference is the same model with its adapters disabled (`use_adapter(..., None)`).
  LLaMA-Factory's ASFT prepares its reference the same way (src/llamafactory/train/sft/trainer.py, memory.posttrain).
- DPO's `_compute_loss`: the policy forward on the chosen and rejected rows concatenated, its per-token log-probs,
  then under `torch.no_grad()` (gradient checkpointing disabled) the reference forward on the same rows: the
  policy's saved activations, logits and log-probs are all alive while it runs; then the logged metrics.
- KTO's `_compute_loss`: unpaired rows, and (loss_type kto) the KL batch, the same prompts with mismatched
  completions: through the policy first under no_grad (`_compute_kl_logps`, nothing of the step alive yet: less than
  what the reference forward adds later), then the policy forward, then the KL batch and the batch through the
  reference one after the other (each the same transient), then the metrics.

So the reference forward's transient is that of an inference forward on the forwarded batch, and the metrics keep
the reference's logits and copies of the policy's (`reference_phases`), alive at the end of the policy's forward
(memory.timeline END_OF_FORWARD). Pure: no I/O. docs/finetune.md, post-training.
"""

from __future__ import annotations

from dataclasses import replace

from zeroplan.errors import ZeroplanError
from zeroplan.memory.stage import StageBase
from zeroplan.memory.setup import Checkpointing, Engine, Loss, PostTraining, TrainingLoop, TrainingSetup, ZeroStage

SHARDED_ENGINES = (Engine.fsdp, Engine.fsdp2)  # trl/models/utils.py prepare_fsdp wraps the reference too


def forwarded_setup(setup: TrainingSetup) -> TrainingSetup:
    """The setup the activations are counted for: a preference pair forwards 2 sequences per micro-batch row."""
    rows = setup.post_training.rows_per_sequence
    return setup if rows == 1 else replace(setup, micro_batch=setup.micro_batch * rows)


def reference_parameter_bytes(params: int, setup: TrainingSetup, engine: Engine, stage: ZeroStage, dp: int,
                              peft: bool) -> int:
    """This GPU's bytes of the frozen reference copy: none under peft (the adapter-disabled base) or without one;
    the model in its compute dtype, sharded over dp where TRL's prepare path shards it (ZeRO-3, FSDP)."""
    if not setup.post_training.reference or peft:
        return 0
    whole = params * setup.precision.compute_bytes
    sharded = (engine is Engine.deepspeed and stage is ZeroStage.zero3) or engine in SHARDED_ENGINES
    return -(-whole // dp) if sharded else whole


def reference_forward_bytes(acts_no_checkpointing, forwarded: TrainingSetup, hidden_size: int) -> int:
    """What the reference forward and the logged metrics after it add at the end of the policy's forward, on the
    forwarded batch (`forwarded_setup`: rows = its micro-batch, L = its logits, acts without checkpointing).

    The forward: the larger of one layer's working set (bounded by that layer's saved tensors in a training forward
    without checkpointing) and the head's: the final hidden state (rows x seq x hidden), the logits and one row's
    log-probs (TRL's selective_log_softmax loops over the rows: 16-bit logits' log_softmax, fp32 logits' logsumexp,
    whose kernel makes exp(x - max) the row's size inside the op). The metrics, the reference's logits still alive:
    entropy_from_logits reshapes the shifted policy logits (a copy for more than one row) and takes 128 rows at a
    time (log_softmax, exp, their product); or the rows' logits selected for "logits/chosen": DPO's chosen half by a
    boolean mask (a copy), KTO's chosen and rejected rows by index_select (copies, the logits' size together) and
    the chosen rows' masked logits (at most the logits: every row desirable, every token a completion token)."""
    return max(reference_phases(acts_no_checkpointing, forwarded, hidden_size))


def reference_phases(acts_no_checkpointing, forwarded: TrainingSetup, hidden_size: int) -> tuple[int, int]:
    """(the reference forward's transient, the metrics') of `reference_forward_bytes`."""
    logits = acts_no_checkpointing.logits_bytes
    rows, tokens = forwarded.micro_batch, forwarded.micro_batch * forwarded.seq_len
    hidden = tokens * hidden_size * forwarded.precision.compute_bytes
    forward = max(max(acts_no_checkpointing.layer_bytes, default=0), hidden + logits + -(-logits // rows))
    chunk = logits * min(ENTROPY_CHUNK, tokens) // tokens
    entropy = (logits if rows > 1 else 0) + ENTROPY_CHUNK_TENSORS * chunk
    selected = 2 * logits if forwarded.post_training is PostTraining.kto else logits // 2
    return forward, logits + max(entropy, selected)


ENTROPY_CHUNK = 128  # trl/trainer/utils.py entropy_from_logits chunk_size (rows of the flattened logits)
ENTROPY_CHUNK_TENSORS = 3  # a chunk's log_softmax, its exp and their product alive at once


def reference_assumption(setup: TrainingSetup, engine: Engine, peft: bool) -> str | None:
    """The line the output names for the post-training it models, or None for SFT and KD (memory.teacher's line)."""
    pt = setup.post_training
    if pt in (PostTraining.sft, PostTraining.kd):
        return None
    rows = (f"{pt.value.upper()}: chosen and rejected rows concatenated ({pt.rows_per_sequence} x --micro-batch "
            "sequences forwarded)" if pt.paired else
            "KTO: unpaired rows (--micro-batch sequences) and their KL batch (mismatched completions), each forwarded "
            "through the policy (the KL batch first, without gradients) and the reference" if pt is PostTraining.kto
            else "ASFT (LLaMA-Factory use_asft_loss): the reference forward before the policy's, its logits alive "
            "through the policy's forward and the loss (fp32 copies of the logits)")
    if pt is PostTraining.kto and setup.micro_batch == 1:  # kto_trainer.py __init__ raises for the KL term
        rows += (" (at --micro-batch 1 TRL's KTOTrainer refuses loss_type kto, whose KL batch needs 2 rows; "
                 "loss_type apo_zero_unpaired has no KL batch)")
    if not pt.reference:
        return rows + "; no reference model"
    after = "before the policy's" if pt is PostTraining.asft else "after the policy's, then the logged metrics"
    if peft:
        return rows + f"; peft: the adapter-disabled base is the reference, no copy; its forward {after}"
    dtype = "fp32" if setup.precision.compute_bytes == 4 else "16-bit"
    shard = (f"sharded over the data-parallel GPUs as {STACK[pt]} prepares it" if engine in SHARDED_ENGINES
             else f"sharded by ZeRO-3 as {STACK[pt]} prepares it (whole at stages 0-2)" if engine is Engine.deepspeed
             else "whole on every GPU")
    return rows + f"; reference model a frozen copy, {dtype}, {shard}; its forward {after}"


STACK = {PostTraining.dpo: "TRL", PostTraining.kto: "TRL",
         PostTraining.asft: "LLaMA-Factory (TRL's prepare_deepspeed / prepare_fsdp, FSDP2's fsdp2_prepare_model)"}


def check_reference(setup: TrainingSetup, mesh, peft: bool = False) -> None:
    """Refuse what is not modelled: post-training on a tensor/pipeline mesh, or with Liger's fused loss (TRL's
    `_compute_loss_liger` never makes the logits: another memory shape, not measured); ASFT under LoRA, where
    LLaMA-Factory's create_ref_model makes no reference and compute_loss calls it (the run fails)."""
    pt = setup.post_training
    if pt is not PostTraining.sft and setup.loss is Loss.liger:
        raise ZeroplanError(f"--post-training {pt.value} with --loss liger (Liger's fused preference or "
                            "distillation loss, no logits) is not modelled")
    if pt is not PostTraining.sft and mesh is not None:
        raise ZeroplanError(f"--post-training {pt.value} on a tensor- or pipeline-parallel mesh is not modelled (the "
                            "paired batch and reference or teacher model are modelled for data parallelism)")
    if pt is not PostTraining.sft and setup.training_loop is TrainingLoop.litgpt:
        raise ZeroplanError(f"--post-training {pt.value} with --training-loop litgpt is not modelled (litgpt's scripts "
                            "train no reference or teacher model; the post-training steps modelled are TRL's and "
                            "LLaMA-Factory's, under a trainer loop)")
    if pt is PostTraining.asft and peft:
        raise ZeroplanError("--post-training asft with LoRA: LLaMA-Factory's create_ref_model makes no reference under "
                            "lora and ASFT's compute_loss calls it (the run fails); give a full or freeze fine-tune")


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
