"""What a training loop keeps alive from one micro-step into the next (--training-loop; docs/activations.md).

Pure: no I/O. Symbols as in zeroplan.memory.activations (T = b s tokens, V vocabulary, h hidden size, e bytes per
activation element).

  trainer  HF Trainer, Accelerate, TRL, torchtune, torchtitan: the outputs and the graph of a micro-step are gone
           before the next forward starts. Nothing is carried.
  litgpt   litgpt's finetune scripts on Lightning Fabric (Lightning-AI/litgpt@00af8b0d9b43eaa3f8c812e3e8bd53ef38cbb49d
           litgpt/finetune/lora.py lines 303-310, full.py lines 255-257; lightning==2.4.0):
    logits   Fabric returns the model's outputs in torch.get_default_dtype(), fp32 (HalfPrecision and
             BitsandbytesPrecision.convert_output, src/lightning/fabric/plugins/precision/half.py, bitsandbytes.py).
             The fp32 copy (4 T V) is made while the compute-dtype logits (e T V: the handoff) still exist; the loop's
             `logits` then holds it through the loss, the backward, the optimizer step and the next micro-step's
             forward, until `model(...)` returns.
    loss     litgpt's chunked_cross_entropy (litgpt/utils.py) on those fp32 logits: every chunk's log-softmax is saved
             (4 T V in all) with the labels. The shift `logits[..., :-1, :]` copies what it slices when the micro-batch
             has more than one row (the slice is then not contiguous): full.py slices the whole logits (4 b (s-1) V
             while the loss runs); lora.py runs the head in chunks of 128 tokens and slices only the last chunk.
    carried  the previous micro-step's fp32 logits (4 T V), and what its graph holds outside autograd's saved
             tensors (which the backward frees): bitsandbytes before 0.43.2 keeps each 4-bit matmul's input as
             `ctx.tensors = (A, B)` (bitsandbytes@0.42.0 autograd/_functions.py MatMul4Bit.forward), so every such
             input stays until the graph dies, when the next forward returns (memory.activations.tuning adds them).
  The steady state: every micro-step of the same shape (the first one has nothing carried). Measured on CPU with
  Lightning 2.4.0 Fabric: validation/measure_training_loop.py (docs/activations.md, training loops).
"""

from __future__ import annotations

from zeroplan.errors import ZeroplanError
from zeroplan.memory.activations.loss import LOSS_BACKWARD_TENSORS, LossBytes
from zeroplan.memory.activations.ops import FP32_BYTES, INDEX_BYTES
from zeroplan.memory.setup import Loss, TrainingLoop

LITGPT_HEAD_CHUNK = 128  # litgpt/finetune/lora.py: model(input_ids, lm_head_chunk_size=128)
LITGPT_LOSSES = (Loss.hf, Loss.no_upcast)  # both mean cross-entropy on the fp32 logits Fabric returns


def check_loop(setup) -> None:
    """ZeroplanError when the loss cannot run under the loop: litgpt computes its own cross-entropy."""
    if setup.training_loop is TrainingLoop.litgpt and setup.loss not in LITGPT_LOSSES:
        raise ZeroplanError(f"--training-loop litgpt: litgpt runs its own chunked_cross_entropy on Fabric's fp32 logits, "
                            f"not --loss {setup.loss.value} (give --loss hf or no-upcast)")


def litgpt_loss(arch, b: int, s: int, e: int, chunked_head: bool) -> LossBytes:
    """The head and loss of a litgpt micro-step (module docstring): fp32 logits kept, their log-softmax saved, the
    shifted slice's copy while the loss runs. Its backward: the loop still holds the logits, every chunk's saved
    log-softmax is alive when the first chunk's backward makes its two gradients (memory.activations.loss
    LOSS_BACKWARD_TENSORS), a chunk of b x 128 rows (lora.py's head chunks) or 128 rows (full.py's flat split)."""
    t, vocab = b * s, arch.vocab_size
    sliced = (s - LITGPT_HEAD_CHUNK * ((s - 1) // LITGPT_HEAD_CHUNK) if chunked_head else s) - 1
    copy = FP32_BYTES * b * sliced * vocab if b > 1 else 0
    logits, saved = FP32_BYTES * t * vocab, FP32_BYTES * t * vocab + INDEX_BYTES * t
    rows = min(t, (b if chunked_head else 1) * LITGPT_HEAD_CHUNK)
    gradients = (LOSS_BACKWARD_TENSORS - 1) * FP32_BYTES * rows * vocab
    return LossBytes(logits=logits, saved=saved, transient=copy, head_input_saved=True,
                     softcap=bool(arch.final_logit_softcapping), backward=logits + saved + gradients)


def handoff_bytes(arch, b: int, s: int, e: int) -> int:
    """The compute-dtype logits the head makes before Fabric's convert_output copies them to fp32 (in fp32 they are
    the logits themselves: no copy)."""
    return e * b * s * arch.vocab_size


def carried_logits_bytes(arch, b: int, s: int) -> int:
    """The previous micro-step's fp32 logits, alive until this micro-step's forward returns."""
    return FP32_BYTES * b * s * arch.vocab_size


def loop_assumption(setup) -> str | None:
    if setup.training_loop is TrainingLoop.trainer:
        return None
    return ("training loop litgpt (Lightning Fabric): logits returned in fp32 (convert_output) and cross-entropy on them; "
            "the previous micro-step's logits, and what its graph holds outside saved tensors (bitsandbytes before "
            "0.43.2: each 4-bit matmul's input), alive until this forward returns; steady state (micro-steps of one "
            "shape)")
