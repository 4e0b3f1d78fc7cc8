"""Activation bytes given by measurement: a model counted by transformers (zeroplan.models.hf), not by formula.

The measurement (one meta-device forward and loss of a shallow copy) gives bytes per region; this module
scales them to the real depth and the checkpointing mode, into the same ActivationEstimate lines the formulas
fill (memory.activations), so every calculator reads it unchanged. Real layer j is measured by the copy layer
of its kind that stands for it (`layer_of`); each real layer keeps:
  none       what its copy layer saved
  selective  flash: as none (nothing s x s to recompute); eager: that less what its attention core saved beyond
             its q, k, v, plus those q, k, v (kept for the recompute); the cores' masks are held once
  full       its hidden-state input, if checkpointed (every:N: the N-th, 2N-th, ... layers, counted from 1, as
             torchtitan's layer SAC wraps them), else what it saved; what checkpointed layers take as
             arguments (masks) is held once; the recompute is the largest checkpointed layer's own bytes less
             its input
  embedding = before the first layer + storages more than one region saved (rotary tables), final norm = after
  the last layer; logits and loss as measured (transformers' ForCausalLMLoss), or for another --loss from
  memory.activations.loss; the recompute line is what it adds beyond the loss's transient bytes (freed first),
  as memory.activations counts it. selective-op (torchtitan's per-op policy) is not modelled here.
Source of the frame: docs/activations.md; of the measurement: docs/hf.md. Pure: no torch here.
"""

from __future__ import annotations

from dataclasses import replace

from zeroplan.errors import ZeroplanError
from zeroplan.memory.activations import ActivationEstimate, ActivationTerm, activation_bytes
from zeroplan.memory.activations.checkpointing import checkpointed_layers
from zeroplan.memory.activations.loss import loss_assumption, loss_bytes
from zeroplan.memory.activations.traits import traits_of
from zeroplan.memory.setup import Attention, Checkpointing, Loss, TrainingLoop, TrainingSetup
from zeroplan.models.architecture import Architecture
from zeroplan.models.hf import measure_activations
from zeroplan.models.hf.nearest import nearest_architecture
from zeroplan.models.hf.records import NotMeasurable

DTYPE_NAMES = {2: "bf16", 4: "fp32"}


def measured_activation_bytes(arch: Architecture, setup: TrainingSetup) -> ActivationEstimate:
    """The ActivationEstimate of a transformers-counted model, from its meta-device measurement."""
    if setup.checkpointing is Checkpointing.selective_op:
        raise ZeroplanError(f"--checkpointing selective-op (torchtitan's per-op policy) is not modelled for "
                            f"{arch.family}, a model counted by transformers")
    if setup.checkpoint_every > 1 and setup.checkpointing is not Checkpointing.full:
        raise ZeroplanError("checkpoint_every applies to full checkpointing only (--checkpointing every:N)")
    if setup.training_loop is not TrainingLoop.trainer:
        raise ZeroplanError(f"--training-loop {setup.training_loop.value}: modelled for the families zeroplan "
                            f"describes, not for {arch.family}, a model counted by transformers")
    flash = setup.attention is Attention.flash
    try:
        m = measure_activations(arch.hf_config_json, micro_batch=setup.micro_batch, seq_len=setup.seq_len,
                                dtype=DTYPE_NAMES[setup.precision.compute_bytes], flash=flash)
    except NotMeasurable as exc:
        return nearest_activation_bytes(arch, setup, str(exc))
    depth = len(m.layer_of)  # the real model's; a model scaled in depth (capacity) keeps its mix of kinds
    copy_of = [m.layer_of[j * depth // arch.num_layers] for j in range(arch.num_layers)]
    ckpt = Checkpointing.none if setup.checkpointing is Checkpointing.selective and flash else setup.checkpointing
    own = [n - (m.layer_input_bytes if saved else 0) for n, saved in zip(m.layer_bytes, m.layer_input_saved)]
    recompute, held = 0, 0
    if ckpt is Checkpointing.full:
        wrapped = checkpointed_layers(arch.num_layers, setup.checkpoint_every)
        each = [m.layer_input_bytes if w else m.layer_bytes[c] for w, c in zip(wrapped, copy_of)]
        if any(wrapped):
            held = m.held_bytes
            recompute = max(own[c] for w, c in zip(wrapped, copy_of) if w)
    elif ckpt is Checkpointing.selective:
        kept = [n - c + i for n, c, i in zip(m.layer_bytes, m.core_bytes, m.core_input_bytes)]
        each = [kept[c] for c in copy_of]
        held, recompute = m.core_mask_bytes, max(m.core_bytes)
    else:
        each = [m.layer_bytes[c] for c in copy_of]
    logits, loss, transient, head = _loss(arch, setup, m)
    recompute = max(0, recompute - transient)
    embedding = m.embedding_bytes + m.shared_bytes
    layers = sum(each) + held
    total = layers + recompute + embedding + head + logits + loss
    terms = tuple(ActivationTerm(name=f"copy layer {i} (stands for {copy_of.count(i)} of {arch.num_layers})", bytes=n)
                  for i, n in enumerate(m.layer_bytes))
    return ActivationEstimate(
        layers_bytes=layers, recompute_bytes=recompute, embedding_bytes=embedding, final_norm_bytes=head,
        logits_bytes=logits, logit_softcap_bytes=0, loss_bytes=loss, total_bytes=total,
        per_layer_bytes=max(each), layer_terms=terms, assumptions=_assumptions(arch, m, setup, ckpt),
        layer_bytes=tuple(each), held_bytes=held, checkpointing=setup.checkpointing_label, loss=setup.loss.value,
        loss_transient_bytes=transient,
    )


def nearest_activation_bytes(arch: Architecture, setup: TrainingSetup, reason: str) -> ActivationEstimate:
    """The activations of a model whose meta forward cannot run: the formulas of its nearest described block
    (zeroplan.models.hf.nearest), the output saying so; its parameter count stays transformers' exact one."""
    near, which = nearest_architecture(arch)
    acts = activation_bytes(near, setup)
    note = (f"activations estimated, not measured: {reason.removesuffix('; activations not measurable')}; "
            f"estimated by {which}")
    return replace(acts, assumptions=(note, *acts.assumptions))


def _loss(arch: Architecture, setup: TrainingSetup, m) -> tuple[int, int, int, int]:
    """(logits, loss, its transient part, head) bytes: measured for transformers' own loss, else the loss formulas
    of memory.activations.loss (they read only b, s, V, h and e) with the measured head."""
    if setup.loss is Loss.hf:
        return m.logits_bytes, m.loss_saved_bytes + m.loss_copy_bytes, m.loss_copy_bytes, m.head_bytes
    e = setup.precision.compute_bytes
    b, s = setup.micro_batch, setup.seq_len
    formula = loss_bytes(arch, traits_of(arch), b, s, e, setup.loss)
    head = m.head_bytes - (0 if formula.head_input_saved else e * b * s * arch.hidden_size)
    if arch.final_logit_softcapping and not formula.softcap:  # Liger soft-caps inside its kernel: no tanh output
        head -= e * b * s * arch.vocab_size
    head = max(0, head)
    return formula.logits, formula.saved + formula.transient, formula.transient, head


def _assumptions(arch: Architecture, m, setup: TrainingSetup, ckpt: Checkpointing) -> tuple[str, ...]:
    notes = [*m.notes,
             "dropout masks 1 B per element (CUDA's native_dropout), LayerNorm statistics fp32 (CUDA)",
             f"activations in the compute dtype, {setup.precision.compute_bytes} B per element"]
    if setup.loss is Loss.hf:
        notes.append("loss: the model's loss_function (ForCausalLMLoss) as measured, with the fp32 copy of 16-bit "
                     "logits alive while it runs")
    else:
        notes.append(loss_assumption(traits_of(arch), setup.loss) + " (zeroplan's loss formula; the rest measured)")
    if ckpt is Checkpointing.full:
        which = "each" if setup.checkpoint_every == 1 else f"every {setup.checkpoint_every}th (torchtitan layer SAC)"
        notes.append(f"full checkpointing: {which} layer's input kept; one layer recomputed in backward after the "
                     "loss's transient bytes are freed")
    elif setup.checkpointing is Checkpointing.selective and ckpt is Checkpointing.none:
        notes.append("selective checkpointing with flash attention: nothing s x s to recompute (same as none)")
    elif ckpt is Checkpointing.selective:
        notes.append("selective checkpointing: each attention core's saved tensors beyond its inputs recomputed")
    return tuple(notes)
