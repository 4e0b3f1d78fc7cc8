"""Activation memory of one training micro-step: what the forward keeps alive for the backward.

Pure: imports neither rich, typer, yaml nor torch and does no I/O.

Starting point: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models" (arXiv:2205.05198), eq. 1-2: s b h (34 + 5 a s / h) bytes per layer in 16-bit. This module
counts what PyTorch autograd actually saves when Hugging Face transformers trains each family (the
per-tensor list, its closed forms and the measurement that checks them are in docs/activations.md
and validation/measure_activations.py). Symbols: b micro-batch, s sequence length, T = b s tokens,
h hidden size, a attention heads, g key/value heads, d head dim, f MLP inner width, V vocabulary,
L layers, E experts, k experts per token, e bytes per activation element (compute dtype).
"""

from dataclasses import dataclass

from zeroplan.memory.activations.attention import (
    core_recompute_bytes,
    recompute_extra_bytes,
)
from zeroplan.memory.activations.terms import (
    FP32_BYTES,
    INDEX_BYTES,
    embedding_terms,
    final_norm_terms,
    layer_input_saved_bytes,
    layer_terms,
    recompute_held_bytes,
)
from zeroplan.memory.activations.traits import Traits, traits_of
from zeroplan.memory.setup import Attention, Checkpointing, TrainingSetup
from zeroplan.models.architecture import Architecture


@dataclass(frozen=True, slots=True, kw_only=True)
class ActivationTerm:
    """One named tensor group and its bytes."""

    name: str
    bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ActivationEstimate:
    """Activation bytes alive at the peak of one micro-step, per line; the lines sum to total_bytes."""

    # All layers' saved tensors (selective: + the masks the core recompute re-reads); full checkpointing: the
    # layer inputs and what the recompute re-reads (masks, position ids).
    layers_bytes: int
    # Full checkpointing: what recomputing one layer in backward adds beyond the fp32 loss copy (freed before
    # the backward starts); selective with eager attention: the same for one attention core; else 0.
    recompute_bytes: int
    embedding_bytes: int  # token ids, position ids / rotary tables, embedding norm and dropout mask
    final_norm_bytes: int  # final norm(s), the LM head's input (T5: + encoder output)
    logits_bytes: int  # the b x s x V logits in the compute dtype, as the forward returns them
    logit_softcap_bytes: int  # Gemma 2 final soft-capping: the tanh output, b x s x V
    # Cross-entropy at the forward's peak: its log-softmax (saved), the fp32 copy of 16-bit logits (alive while
    # the loss runs) and the int64 labels.
    loss_bytes: int
    total_bytes: int
    per_layer_bytes: int  # one (the largest) layer's saved tensors under this checkpointing
    layer_terms: tuple[ActivationTerm, ...]  # per_layer_bytes without checkpointing, by tensor group
    assumptions: tuple[str, ...]


# Cross-entropy: HF's ForCausalLMLoss upcasts the logits with .float() (a new fp32 b s V tensor) and
# log_softmax saves its fp32 output for the backward (transformers loss/loss_utils.py).
LOSS_LOG_SOFTMAX_BYTES = FP32_BYTES


def activation_bytes(arch: Architecture, setup: TrainingSetup) -> ActivationEstimate:
    """Activation bytes per GPU for one micro-step, by line.

    total = layers + recompute + embedding + final_norm + logits + softcap + loss, where
      layers    = sum over layers of the tensors autograd saves   (none / selective)
                = L e T h (+ masks the recompute reuses)            (full)
      recompute = max(0, one layer's new saved bytes - 4 T V)      (full; the fp32 copy is freed first)
      logits    = e T V ; loss = 4 T V (log-softmax) + 4 T V (fp32 copy, 16-bit only) + 8 T (labels)
    Source: Korthikanti et al. 2022 eq. 1-2 as the frame, terms from what PyTorch saves (docs/activations.md).
    """
    traits = traits_of(arch)
    e = setup.precision.compute_bytes
    b, s = setup.micro_batch, setup.seq_len
    flash = setup.attention is Attention.flash and not traits.eager_only
    ckpt = _effective_checkpointing(setup.checkpointing, flash)
    terms = layer_terms(arch, traits, b, s, e, flash=flash, selective=False)
    layer_full = sum(t for _, t in terms)
    per_layer, layers = _stack_bytes(arch, traits, b, s, e, flash, ckpt)
    logits = e * b * s * arch.vocab_size
    softcap = e * b * s * arch.vocab_size if arch.final_logit_softcapping else 0
    loss_copy = _loss_copy_bytes(traits, b, s, arch.vocab_size, e)
    loss = _loss_saved_bytes(traits, b, s, arch.vocab_size, e) + loss_copy
    recompute = max(0, _recompute_bytes(arch, traits, b, s, e, flash, ckpt, layer_full) - loss_copy)
    embedding = sum(t for _, t in embedding_terms(arch, traits, b, s, e, full=ckpt is Checkpointing.full))
    final_norm = sum(t for _, t in final_norm_terms(arch, traits, b, s, e))
    total = layers + recompute + embedding + final_norm + logits + softcap + loss
    return ActivationEstimate(
        layers_bytes=layers,
        recompute_bytes=recompute,
        embedding_bytes=embedding,
        final_norm_bytes=final_norm,
        logits_bytes=logits,
        logit_softcap_bytes=softcap,
        loss_bytes=loss,
        total_bytes=total,
        per_layer_bytes=per_layer,
        layer_terms=tuple(ActivationTerm(name=n, bytes=t) for n, t in terms),
        assumptions=_assumptions(arch, traits, setup),
    )


def _effective_checkpointing(ckpt: Checkpointing, flash: bool) -> Checkpointing:
    """Selective recompute targets the a s^2 core (Korthikanti et al. 2022 section 5); a flash core keeps
    none, so there is nothing to recompute: selective with flash is no checkpointing."""
    return Checkpointing.none if ckpt is Checkpointing.selective and flash else ckpt


def _num_layers(arch: Architecture) -> int:
    return arch.num_layers + arch.num_encoder_layers


def _stack_bytes(
    arch: Architecture, traits: Traits, b: int, s: int, e: int, flash: bool, ckpt: Checkpointing
) -> tuple[int, int]:
    """(one layer's bytes, all layers' bytes) under the checkpointing mode."""
    if ckpt is Checkpointing.full:
        per_layer = e * b * s * arch.hidden_size
        held = recompute_held_bytes(arch, traits, b, s, e, flash=flash, full=True)
        return per_layer, _num_layers(arch) * per_layer + held
    selective = ckpt is Checkpointing.selective
    decoder = sum(t for _, t in layer_terms(arch, traits, b, s, e, flash=flash, selective=selective))
    encoder = sum(t for _, t in layer_terms(arch, traits, b, s, e, flash=flash, selective=selective, encoder=True))
    masks = recompute_held_bytes(arch, traits, b, s, e, flash=flash, full=False) if selective else 0
    return max(decoder, encoder), arch.num_layers * decoder + arch.num_encoder_layers * encoder + masks


def _recompute_bytes(
    arch: Architecture, traits: Traits, b: int, s: int, e: int, flash: bool, ckpt: Checkpointing, layer_full: int
) -> int:
    """What the backward's recompute of one layer (full) or one attention core (selective) allocates."""
    if ckpt is Checkpointing.full:
        return layer_full - layer_input_saved_bytes(arch, traits, b, s, e) + recompute_extra_bytes(arch, s)
    if ckpt is Checkpointing.selective:
        cores = 2 if arch.num_encoder_layers else 1  # a T5 decoder layer recomputes self- and cross-attention
        return cores * core_recompute_bytes(arch, traits, b, s, e, flash=flash)
    return 0


def _loss_copy_bytes(traits: Traits, b: int, s: int, vocab: int, e: int) -> int:
    """The fp32 copy .float() makes of 16-bit logits; alive while the loss's forward runs."""
    return FP32_BYTES * b * s * vocab if traits.loss_upcast and e < FP32_BYTES else 0


def _loss_saved_bytes(traits: Traits, b: int, s: int, vocab: int, e: int) -> int:
    """log_softmax's output (fp32 after the upcast, else the compute dtype) and the int64 labels."""
    log_softmax = LOSS_LOG_SOFTMAX_BYTES if traits.loss_upcast else e
    return log_softmax * b * s * vocab + INDEX_BYTES * b * s


def _assumptions(arch: Architecture, traits: Traits, setup: TrainingSetup) -> tuple[str, ...]:
    notes = [
        "Hugging Face transformers modules as written in PyTorch (no fused kernels such as Liger)",
        f"activations in the compute dtype, {setup.precision.compute_bytes} B per element; parameters already "
        "in that dtype (DeepSpeed casts the module), no autocast",
        "dropout masks 1 B per element (CUDA's native_dropout)",
    ]
    flash = setup.attention is Attention.flash and not traits.eager_only
    if traits.eager_only and setup.attention is Attention.flash:
        notes.append(f"{arch.family}: transformers has no SDPA/flash path for it; attention counted as eager")
    if flash:
        notes.append("flash attention (SDPA flash/efficient, FlashAttention): q, k, v, output and fp32 log-sum-exp")
    else:
        notes.append("eager attention: score and probability matrices of a x s x s per layer")
    if traits.loss_upcast:
        notes.append("loss: HF ForCausalLMLoss upcasts logits to fp32 before cross-entropy")
    if setup.checkpointing is Checkpointing.full:
        notes.append("full checkpointing: layer inputs kept; one layer recomputed in backward after the loss copy is freed")
    if setup.checkpointing is Checkpointing.selective and flash:
        notes.append("selective checkpointing with flash attention: the core keeps no a x s x s matrices, so "
                     "nothing is recomputed (same as none)")
    elif setup.checkpointing is Checkpointing.selective:
        notes.append("selective checkpointing: attention core recomputed (Korthikanti et al. 2022 section 5)")
    if arch.is_moe:
        notes.append("MoE: HF grouped_mm experts; every token routed to top-k experts, no shared expert")
    if arch.num_encoder_layers:
        notes.append("encoder-decoder: encoder and decoder sequences both seq_len")
    return tuple(notes)
