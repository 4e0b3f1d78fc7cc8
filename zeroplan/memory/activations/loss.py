"""What the LM head and the cross-entropy keep, for each loss a training stack uses.

Pure: no I/O. Symbols as in zeroplan.memory.activations (T = b s tokens, V vocabulary, h hidden size, e bytes
per activation element). Sources, each read at the commit named in docs/activations.md:
  hf         transformers loss/loss_utils.py ForCausalLMLoss: `logits = logits.float()`, then cross_entropy;
             log_softmax saves its fp32 output, the fp32 copy lives while the loss runs
  hf-shift   transformers 4.46.0 to 4.48.x, loss/loss_utils.py ForCausalLMLoss (4.47.1 lines 36-46): `logits.float()`,
             then `shift_logits = logits[..., :-1, :].contiguous()`: a second fp32 copy of b (s - 1) V while the
             loss runs, log-softmax and labels over the b (s - 1) shifted tokens
  hf-legacy  transformers before 4.46 (4.45.2 models/llama/modeling_llama.py lines 1213-1229, 4.36.2 lines 1199-1213):
             the model's forward upcasts (`logits = logits.float()`; the 16-bit head output is dropped) and returns
             fp32 logits, then the same shifted copy and cross-entropy
  no-upcast  torch.nn.functional.cross_entropy on the compute-dtype logits: log_softmax saves e T V
  chunked    torchtune modules/loss/ce_chunked_output_loss.py CEWithChunkedOutputLoss (num_output_chunks=8,
             lines 35-50, 84-100) with TransformerDecoder.chunked_output (modules/transformer.py line ~510): the
             logits come as 8 chunks along the sequence, each upcast on its own; every chunk's fp32 log-softmax
             is saved (4 T V in all), only one chunk's fp32 copy exists at a time
  liger      Liger Kernel ops/fused_linear_cross_entropy.py: the logits are computed chunk by chunk
             (chunk = next_pow2(ceil(T / ceil(V / h))), lines 64-70) and turned into their gradient in
             place; the forward saves grad_input (T x h) and grad_weight (V x h, the weight's dtype)
             (lines 72-77, 431-435), never the logits. Modelled from the source, not measured (Triton).
"""

from __future__ import annotations

from dataclasses import dataclass

from zeroplan.memory.activations.ops import FP32_BYTES, INDEX_BYTES
from zeroplan.memory.activations.traits import Traits
from zeroplan.memory.setup import Loss
from zeroplan.models.architecture import Architecture

SHIFTED = (Loss.hf_shift, Loss.hf_legacy)  # transformers' loss before 4.49 (labels padded, not logits shifted)
# torchtune CEWithChunkedOutputLoss(num_output_chunks: int = 8)
TORCHTUNE_OUTPUT_CHUNKS = 8
MASK_BYTES = 1  # Liger's target_mask (bool)
# cross_entropy = log_softmax + nll_loss (torch==2.13.0:aten/src/ATen/native/LossNLL.cpp cross_entropy_loss);
# their backward (tools/autograd/derivatives.yaml): nll_loss_backward makes a dense T x V gradient (zeros, then
# scatter), _log_softmax_backward_data(grad, output, ...) reads it and the saved output and returns a third
LOSS_BACKWARD_TENSORS = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class LossBytes:
    logits: int  # the logits the forward returns and keeps (e T V); Liger: none
    saved: int  # what the loss keeps for its backward, labels included
    transient: int  # alive only while the loss's forward runs, freed before the backward starts
    head_input_saved: bool  # the LM head matmul saves its input (Liger's kernel saves grad_input instead)
    softcap: bool  # a b x s x V soft-capping tanh output exists (Liger soft-caps inside the kernel)
    # The loss's backward at its high-water mark: log_softmax's saved output, the gradient nll_loss_backward hands
    # it and the one _log_softmax_backward_data returns (3 T V in the log-softmax dtype) + labels; 0 = not modelled
    backward: int = 0


def loss_bytes(arch: Architecture, traits: Traits, b: int, s: int, e: int, loss: Loss) -> LossBytes:
    t, vocab, h = b * s, arch.vocab_size, arch.hidden_size
    labels = INDEX_BYTES * t
    softcap = bool(arch.final_logit_softcapping)
    if loss is Loss.liger:
        return LossBytes(logits=0, saved=e * t * h + e * vocab * h, transient=liger_transient_bytes(arch, b, s, e),
                         head_input_saved=False, softcap=False)
    if loss in SHIFTED and traits.loss_upcast:
        return _shifted_loss_bytes(b, s, vocab, e, loss, softcap)
    upcast = e < FP32_BYTES and (loss is Loss.chunked or (loss is Loss.hf and traits.loss_upcast))
    log_softmax = FP32_BYTES if upcast else e
    if loss is Loss.chunked:
        copy = FP32_BYTES * b * -(-s // TORCHTUNE_OUTPUT_CHUNKS) * vocab if upcast else 0  # the largest chunk
    else:
        copy = FP32_BYTES * t * vocab if upcast else 0
    backward = LOSS_BACKWARD_TENSORS * log_softmax * t * vocab + labels if loss is not Loss.chunked else 0
    return LossBytes(logits=e * t * vocab, saved=log_softmax * t * vocab + labels, transient=copy,
                     head_input_saved=True, softcap=softcap, backward=backward)


def _shifted_loss_bytes(b: int, s: int, vocab: int, e: int, loss: Loss, softcap: bool) -> LossBytes:
    """transformers before 4.49: the fp32 logits (the loss's own copy under hf-shift, the model's output under
    hf-legacy) and their shifted contiguous copy, cross-entropy over the b (s - 1) shifted tokens."""
    t, shifted = b * s, b * (s - 1) * vocab
    # shift_labels = labels[..., 1:].contiguous(), and the logits' slice: one row's is contiguous already, not copied
    labels = INDEX_BYTES * b * (s - 1) if b > 1 else 0
    upcast = FP32_BYTES * t * vocab if e < FP32_BYTES else 0
    copy = FP32_BYTES * shifted if b > 1 else 0
    if loss is Loss.hf_legacy:  # the forward returns the fp32 logits: they are the logits kept
        logits, transient = FP32_BYTES * t * vocab, copy
    else:
        logits, transient = e * t * vocab, upcast + copy
    backward = LOSS_BACKWARD_TENSORS * FP32_BYTES * shifted + labels
    return LossBytes(logits=logits, saved=FP32_BYTES * shifted + labels, transient=transient, head_input_saved=True,
                     softcap=softcap, backward=backward)


def liger_chunk_rows(tokens: int, vocab: int, hidden: int) -> int:
    """Liger's chunk_size: next_power_of_2(cdiv(BT, cdiv(V, H))) (fused_linear_cross_entropy.py lines 68-69)."""
    rows = -(-tokens // -(-vocab // hidden))
    return 1 << max(0, rows - 1).bit_length()


def liger_transient_bytes(arch: Architecture, b: int, s: int, e: int) -> int:
    """Liger's forward at its largest moment, the grad_weight update of one chunk (lines 114, 257):
    the chunk's logits (turned into their gradient in place, e c V), torch.mm(grad_logits.t(), input) (e V h)
    and its .float() copy (4 V h, none in fp32), beside the fp32 per-token losses (4 T), the bool target mask
    and the shifted int64 labels (transformers/model/loss_utils.py line 88)."""
    t, vocab, h = b * s, arch.vocab_size, arch.hidden_size
    rows = min(t, liger_chunk_rows(t, vocab, h))
    mm = e * vocab * h + (FP32_BYTES * vocab * h if e < FP32_BYTES else 0)
    return e * rows * vocab + mm + FP32_BYTES * t + MASK_BYTES * t + INDEX_BYTES * t


def loss_assumption(traits: Traits, loss: Loss) -> str:
    backward = ("; its backward holds the saved log-softmax and two T x V gradients, the logits already dropped by "
                "the loop (HF Trainer, torchtitan)")
    if loss is Loss.hf:
        return ("loss: HF ForCausalLMLoss upcasts logits to fp32 before cross-entropy" if traits.loss_upcast else
                "loss: HF cross-entropy on the compute-dtype logits (T5's CrossEntropyLoss)") + backward
    if loss in SHIFTED:
        where = ("ForCausalLMLoss (transformers 4.46-4.48) upcasts" if loss is Loss.hf_shift else
                 "the model's forward (transformers before 4.46) returns fp32 logits;")
        return (f"loss: {where} then copies the shifted slice (logits[..., :-1, :].contiguous()) before "
                "cross-entropy" + backward)
    if loss is Loss.no_upcast:
        return "loss: cross-entropy on the compute-dtype logits (no fp32 upcast)" + backward
    if loss is Loss.chunked:
        return (f"loss: torchtune CEWithChunkedOutputLoss, {TORCHTUNE_OUTPUT_CHUNKS} chunks upcast one at a time, "
                "eager (not torch.compile'd)")
    return ("loss: Liger LigerFusedLinearCrossEntropyLoss (chunked, no full logits; grad_input and grad_weight "
            "kept from the forward); modelled from its source, not measured")
