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
from zeroplan.memory.activations.checkpointing import (
    check_supported,
    checkpointed_layers,
    op_sac_layer_terms,
    op_sac_recompute_bytes,
)
from zeroplan.memory.activations.compiled import (
    COMPILE_AC_ASSUMPTION,
    COMPILE_ASSUMPTION,
    check_compile,
    compiled_stack,
)
from zeroplan.memory.activations.gated_delta import LINEAR_ATTENTION, delta_net_assumption
from zeroplan.memory.activations.deepseek_v4 import ASSUMPTION as DEEPSEEK_V4_ASSUMPTION
from zeroplan.memory.activations.deepseek_v4 import DEEPSEEK_V4_FAMILIES, residual_bytes
from zeroplan.memory.activations.deepseek_v4 import core_recompute as deepseek_v4_core_recompute
from zeroplan.memory.activations.gemma4 import GEMMA4_FAMILIES, core_recompute
from zeroplan.memory.activations.loop import (
    carried_logits_bytes,
    check_loop,
    handoff_bytes,
    litgpt_loss,
    loop_assumption,
)
from zeroplan.memory.activations.loss import loss_assumption, loss_bytes
from zeroplan.memory.activations.llama4 import chunk_mask_bytes
from zeroplan.memory.activations.moe import layer_kinds, layer_variants, moe_assumptions
from zeroplan.memory.activations.terms import (
    embedding_terms,
    final_norm_terms,
    layer_input_saved_bytes,
    layer_terms,
    recompute_held_bytes,
)
from zeroplan.memory.activations.traits import Traits, activation_saves, traits_of
from zeroplan.memory.float8 import check_float8, compiled_float8_terms, float8_assumption, layer_transients
from zeroplan.memory.setup import Attention, Checkpointing, Float8Recipe, Loss, TrainingLoop, TrainingSetup
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
    # Each layer's kept bytes in forward order (T5: encoder layers, then decoder layers) under this checkpointing;
    # they sum to layers_bytes less what the recompute re-reads (masks, position ids: held_bytes).
    layer_bytes: tuple[int, ...] = ()
    held_bytes: int = 0  # masks / position ids / biases the checkpointed layers re-read, kept once
    checkpointing: str = "none"  # as --checkpointing spells it: none, selective, selective-op, full, every:N
    loss: str = "hf"  # as --loss spells it
    # The part of loss_bytes alive only while the loss's forward runs (fp32 copy, Liger's chunk and temporaries).
    loss_transient_bytes: int = 0
    # DeepSpeed's PipelineEngine: the stage inputs and outputs its pipe buffers hold (memory.pipeengine); else 0.
    pipe_buffer_bytes: int = 0
    # A quantized base (memory.activations.tuning.dequantized_weight_bytes): the weight one quantized linear
    # dequantizes for its matmul, alive inside a layer's forward and backward only; not in total_bytes.
    dequant_bytes: int = 0
    # The same for a quantized output head (litgpt): alive while the head's matmul runs, in its forward (before the
    # loss's transient) and in the loss's backward; not in total_bytes.
    head_dequant_bytes: int = 0
    # --training-loop litgpt (memory.activations.loop), none in total_bytes: the previous micro-step's tensors the loop
    # still holds, alive until this forward returns (its fp32 logits; under bitsandbytes before 0.43.2 each 4-bit
    # matmul's input); the compute-dtype logits the head makes before Fabric casts them to fp32; and what the loop
    # holds of this micro-step after the loss's backward (its fp32 logits, through the backward and the optimizer step).
    carried_bytes: int = 0
    handoff_bytes: int = 0
    loop_held_bytes: int = 0
    # The loss's backward at its high-water mark (memory.activations.loss LossBytes.backward); 0 = not modelled.
    loss_backward_bytes: int = 0
    # --float8 (memory.float8): the largest converted linear's cast transients over nn.Linear's, alive inside a layer's
    # forward and inside its backward only; not in total_bytes.
    float8_forward_bytes: int = 0
    float8_backward_bytes: int = 0


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
    check_supported(arch, setup, traits.eager_only)
    check_loop(setup)
    e = setup.precision.compute_bytes
    b, s = setup.micro_batch, setup.seq_len
    flash = setup.attention is Attention.flash and not traits.eager_only
    if setup.compile:
        check_compile(arch, setup)
    check_float8(arch, setup)
    ckpt = _effective_checkpointing(setup.checkpointing, flash)
    terms = max((layer_terms(layer, traits, b, s, e, flash=flash, selective=False) for layer, _ in layer_variants(arch)),
                key=lambda ts: sum(t for _, t in ts))
    layer_full = sum(t for _, t in terms)
    per_layer, layers, each, held = _stack_bytes(arch, traits, b, s, e, flash, ckpt, setup.checkpoint_every)
    compiled = compiled_stack(arch, b, s, e, ckpt, setup.checkpoint_every) if setup.compile else None
    if compiled is not None:  # dense (check_compile): the compiled block's saved sets, no held masks or ids
        terms, each, held = list(compiled.terms), compiled.each, 0
        if ckpt is Checkpointing.none and setup.float8 is not Float8Recipe.none:  # memory.float8's compiled delta
            terms = compiled_float8_terms(terms, arch, setup.float8, e)
            each = (sum(t for _, t in terms),) * len(each)
        per_layer, layers = max(each), sum(each)
        layer_full = sum(t for _, t in terms)
    litgpt = setup.training_loop is TrainingLoop.litgpt
    head = litgpt_loss(arch, b, s, e, chunked_head=False) if litgpt else loss_bytes(arch, traits, b, s, e, setup.loss)
    softcap = e * b * s * arch.vocab_size if head.softcap else 0
    loss = head.saved + head.transient
    own = compiled.recompute if compiled is not None else _recompute_bytes(arch, traits, b, s, e, flash, ckpt,
                                                                            layer_full, setup.checkpoint_every)
    recompute = max(0, own - head.transient)
    whole = ckpt is Checkpointing.full and setup.checkpoint_every == 1
    embedding = sum(t for _, t in embedding_terms(arch, traits, b, s, e, full=whole))
    final_norm = sum(t for _, t in final_norm_terms(arch, traits, b, s, e))
    if not head.head_input_saved:
        final_norm -= e * b * s * arch.hidden_size  # the LM head input is the fused loss's, not saved
    total = layers + recompute + embedding + final_norm + head.logits + softcap + loss
    return ActivationEstimate(
        layers_bytes=layers,
        recompute_bytes=recompute,
        embedding_bytes=embedding,
        final_norm_bytes=final_norm,
        logits_bytes=head.logits,
        logit_softcap_bytes=softcap,
        loss_bytes=loss,
        total_bytes=total,
        per_layer_bytes=per_layer,
        layer_terms=tuple(ActivationTerm(name=n, bytes=t) for n, t in terms),
        assumptions=_assumptions(arch, traits, setup),
        layer_bytes=each,
        held_bytes=held,
        checkpointing=setup.checkpointing_label,
        loss=setup.loss.value,
        loss_transient_bytes=head.transient,
        carried_bytes=carried_logits_bytes(arch, b, s) if litgpt else 0,
        handoff_bytes=handoff_bytes(arch, b, s, e) if litgpt else 0,
        loop_held_bytes=head.logits if litgpt else 0,
        loss_backward_bytes=head.backward,
        float8_forward_bytes=(float8 := layer_transients(arch, setup, b * s, e)).forward,
        float8_backward_bytes=float8.backward,
    )


def _effective_checkpointing(ckpt: Checkpointing, flash: bool) -> Checkpointing:
    """Selective recompute targets the a s^2 core (Korthikanti et al. 2022 section 5); a flash core keeps
    none, so there is nothing to recompute: selective with flash is no checkpointing."""
    return Checkpointing.none if ckpt is Checkpointing.selective and flash else ckpt


def layer_input_bytes(arch: Architecture, b: int, s: int, e: int) -> int:
    """What a fully checkpointed layer keeps: its input (DeepSeek-V4: the N hyper-connection streams)."""
    if arch.family in DEEPSEEK_V4_FAMILIES:
        return residual_bytes(arch, b, s, e)
    return e * b * s * arch.hidden_size


def _num_layers(arch: Architecture) -> int:
    return arch.num_layers + arch.num_encoder_layers


def _stack_bytes(
    arch: Architecture, traits: Traits, b: int, s: int, e: int, flash: bool, ckpt: Checkpointing, every: int = 1
) -> tuple[int, int, tuple[int, ...], int]:
    """(the largest layer's bytes, all layers' bytes, each layer's bytes, bytes held once for the recompute).

    Layers differ where the Architecture says so (dense-then-MoE stacks, Llama 4's chunked and NoPE layers):
    each decoder layer's bytes are its kind's (moe.layer_kinds).
    """
    def decoders(selective: bool) -> tuple[int, ...]:
        by_kind: dict[int, int] = {}
        kinds = layer_kinds(arch)
        for kind in kinds:
            if id(kind) not in by_kind:
                by_kind[id(kind)] = sum(t for _, t in layer_terms(kind, traits, b, s, e, flash=flash,
                                                                   selective=selective))
        return tuple(by_kind[id(kind)] for kind in kinds)

    decoder = decoders(selective=False)
    encoder = sum(t for _, t in layer_terms(arch, traits, b, s, e, flash=flash, selective=False, encoder=True))
    chunk_mask = chunk_mask_bytes(arch, b, s, e, flash=flash, full=ckpt is Checkpointing.full)  # Llama 4 under SDPA
    if ckpt is Checkpointing.full:
        wrapped = layer_input_bytes(arch, b, s, e)
        if every == 1:
            each = (wrapped,) * _num_layers(arch)
        else:
            each = tuple(wrapped if c else one for c, one in zip(checkpointed_layers(arch.num_layers, every), decoder))
        wraps = every == 1 or any(checkpointed_layers(arch.num_layers, every))
        held = recompute_held_bytes(arch, traits, b, s, e, flash=flash, full=True) if wraps else 0
        return max(each), sum(each) + held + chunk_mask, each, held
    if ckpt is Checkpointing.selective_op:
        one = sum(t for _, t in op_sac_layer_terms(arch, b, s, e, flash=flash))
        held = recompute_held_bytes(arch, traits, b, s, e, flash=flash, full=True)
        return one, arch.num_layers * one + held, (one,) * arch.num_layers, held
    if ckpt is Checkpointing.selective:
        decoder = decoders(selective=True)
        encoder = sum(t for _, t in layer_terms(arch, traits, b, s, e, flash=flash, selective=True, encoder=True))
    held = recompute_held_bytes(arch, traits, b, s, e, flash=flash, full=False) if ckpt is Checkpointing.selective else 0
    each = (encoder,) * arch.num_encoder_layers + decoder
    return max(each), sum(each) + held + chunk_mask, each, held


def _recompute_bytes(
    arch: Architecture, traits: Traits, b: int, s: int, e: int, flash: bool, ckpt: Checkpointing, layer_full: int,
    every: int = 1,
) -> int:
    """What the backward's recompute of one layer (full, selective-op) or one attention core (selective) allocates."""
    own_input = layer_input_saved_bytes(arch, traits, b, s, e)
    if ckpt is Checkpointing.full:
        if not any(checkpointed_layers(arch.num_layers, every)):
            return 0  # every:N with N above the layer count wraps nothing
        return layer_full - own_input + recompute_extra_bytes(arch, s)
    if ckpt is Checkpointing.selective_op:
        return op_sac_recompute_bytes(arch, b, s, e, layer_full, own_input, flash=flash)
    if ckpt is Checkpointing.selective:
        cores = 2 if arch.num_encoder_layers else 1  # a T5 decoder layer recomputes self- and cross-attention
        if arch.family in DEEPSEEK_V4_FAMILIES:  # compressed layers attend over more keys
            return deepseek_v4_core_recompute([v for v, _ in layer_variants(arch)], b, s, e)
        if arch.family in GEMMA4_FAMILIES:  # its global layers' cores are wider: the largest one
            return core_recompute([v for v, _ in layer_variants(arch)], traits, b, s, e, flash=flash)
        return cores * core_recompute_bytes(arch, traits, b, s, e, flash=flash)
    return 0


def _assumptions(arch: Architecture, traits: Traits, setup: TrainingSetup) -> tuple[str, ...]:
    notes = [
        "Hugging Face transformers modules as written in PyTorch (no fused kernels"
        + (" beyond Liger's fused linear cross-entropy)" if setup.loss is Loss.liger else " such as Liger)"),
        f"activations in the compute dtype, {setup.precision.compute_bytes} B per element; parameters already "
        "in that dtype (DeepSpeed casts the module), no autocast",
        "dropout masks 1 B per element (CUDA's native_dropout)",
    ]
    saves = activation_saves(traits)
    notes.append(f"MLP activation {traits.act} (as the config names it): keeps {saves.tensors} tensor(s) of its "
                 f"input's size{' and a 1 B mask' if saves.mask_bytes else ''}"
                 f"{', its output shared with the next op' if saves.saves_output else ''}")
    flash = setup.attention is Attention.flash and not traits.eager_only
    if traits.eager_only and setup.attention is Attention.flash:
        notes.append(f"{arch.family}: transformers has no SDPA/flash path for it; attention counted as eager")
    if flash:
        notes.append("flash attention (SDPA flash/efficient, FlashAttention): q, k, v, output and fp32 log-sum-exp")
    else:
        notes.append("eager attention: score and probability matrices of a x s x s per layer")
    if arch.family in DEEPSEEK_V4_FAMILIES:
        notes.append(DEEPSEEK_V4_ASSUMPTION)
    notes.append(loss_assumption(traits, setup.loss) if (loop := loop_assumption(setup)) is None else loop)
    if setup.checkpointing is Checkpointing.full and setup.checkpoint_every > 1:
        notes.append(f"every:{setup.checkpoint_every} checkpointing (torchtitan layer SAC): layers "
                     f"{setup.checkpoint_every}, {2 * setup.checkpoint_every}, ... (from 1) keep only their input")
    elif setup.checkpointing is Checkpointing.full:
        notes.append("full checkpointing: layer inputs kept; one layer recomputed in backward after the loss copy is freed")
    if setup.checkpointing is Checkpointing.selective_op:
        notes.append("selective-op checkpointing (torchtitan SelectiveAC): each layer keeps its input, the outputs "
                     "of every other mm and the attention kernel's output; the rest recomputed in backward")
    if setup.checkpointing is Checkpointing.selective and flash:
        notes.append("selective checkpointing with flash attention: the core keeps no a x s x s matrices, so "
                     "nothing is recomputed (same as none)")
    elif setup.checkpointing is Checkpointing.selective:
        notes.append("selective checkpointing: attention core recomputed (Korthikanti et al. 2022 section 5)")
    if arch.is_moe:
        notes.extend(moe_assumptions(arch, setup.micro_batch * setup.seq_len))
    if arch.num_encoder_layers:
        notes.append("encoder-decoder: encoder and decoder sequences both seq_len")
    if LINEAR_ATTENTION in arch.attention_types:
        notes.append(delta_net_assumption())
    if setup.compile:
        notes.append(COMPILE_ASSUMPTION)
        if _effective_checkpointing(setup.checkpointing, flash) is not Checkpointing.none:
            notes.append(COMPILE_AC_ASSUMPTION)
    if setup.float8.value != "none":
        notes.append(float8_assumption(setup, layer_transients(arch, setup, setup.micro_batch * setup.seq_len,
                                                               setup.precision.compute_bytes)))
    return tuple(notes)
