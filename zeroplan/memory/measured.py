"""Activation bytes given by measurement: a model counted by transformers (zeroplan.models.hf), not by formula.

The measurement (one meta-device forward and loss of a shallow copy) gives bytes per region; this module
scales them to the real depth and the checkpointing mode, into the same ActivationEstimate lines the formulas
fill (memory.activations), so every calculator reads it unchanged:
  none       layers = sum over copy layers of (bytes only that layer saved) x (real layers it stands for)
  selective  flash: as none (nothing s x s to recompute); eager: each layer less what its core saved beyond its
             inputs, plus the core's q, k, v and the masks (kept for the recompute), and one core recomputed
  full       layers = L x (one layer's hidden-state input) + what the layers take as arguments (masks);
             recompute = the largest copy layer's own bytes less its input
  embedding = before the first layer + storages more than one region saved (rotary tables), final norm = after
  the last layer, logits = the forward's output, loss = its saved tensors + the fp32 copy of 16-bit logits;
  the recompute line is what it adds beyond that copy (freed first), as memory.activations counts it.
Source of the frame: docs/activations.md; of the measurement: docs/hf.md. Pure: no torch here.
"""

from __future__ import annotations

from zeroplan.memory.activations import ActivationEstimate, ActivationTerm
from zeroplan.memory.setup import Attention, Checkpointing, TrainingSetup
from zeroplan.models.architecture import Architecture
from zeroplan.models.hf import count_notes, measure_activations

DTYPE_NAMES = {2: "bf16", 4: "fp32"}


def measured_activation_bytes(arch: Architecture, setup: TrainingSetup) -> ActivationEstimate:
    """The ActivationEstimate of a transformers-counted model, from its meta-device measurement."""
    flash = setup.attention is Attention.flash
    m = measure_activations(arch.hf_config_json, micro_batch=setup.micro_batch, seq_len=setup.seq_len,
                            dtype=DTYPE_NAMES[setup.precision.compute_bytes], flash=flash)
    depth = sum(m.layer_weights)
    scale = arch.num_layers / depth  # a model scaled in depth (capacity's max model) keeps its layer mix
    ckpt = Checkpointing.none if setup.checkpointing is Checkpointing.selective and flash else setup.checkpointing
    own = [n - (m.layer_input_bytes if saved else 0) for n, saved in zip(m.layer_bytes, m.layer_input_saved)]
    if ckpt is Checkpointing.full:
        per_layer = m.layer_input_bytes
        layers = round(arch.num_layers * per_layer) + m.held_bytes
        recompute = max(own)
    elif ckpt is Checkpointing.selective:
        kept = [n - c + i for n, c, i in zip(m.layer_bytes, m.core_bytes, m.core_input_bytes)]
        per_layer = max(kept)
        layers = round(scale * sum(k * w for k, w in zip(kept, m.layer_weights))) + m.core_mask_bytes
        recompute = max(m.core_bytes)
    else:
        per_layer = max(m.layer_bytes)
        layers = round(scale * sum(n * w for n, w in zip(m.layer_bytes, m.layer_weights)))
        recompute = 0
    recompute = max(0, recompute - m.loss_copy_bytes)
    embedding = m.embedding_bytes + m.shared_bytes
    loss = m.loss_saved_bytes + m.loss_copy_bytes
    total = layers + recompute + embedding + m.head_bytes + m.logits_bytes + loss
    terms = tuple(ActivationTerm(name=f"copy layer {i} (stands for {w} layer{'s' * (w > 1)})", bytes=n)
                  for i, (n, w) in enumerate(zip(m.layer_bytes, m.layer_weights)))
    return ActivationEstimate(
        layers_bytes=layers, recompute_bytes=recompute, embedding_bytes=embedding, final_norm_bytes=m.head_bytes,
        logits_bytes=m.logits_bytes, logit_softcap_bytes=0, loss_bytes=loss, total_bytes=total,
        per_layer_bytes=per_layer, layer_terms=terms, assumptions=_assumptions(arch, m, setup, ckpt),
    )


def _assumptions(arch: Architecture, m, setup: TrainingSetup, ckpt: Checkpointing) -> tuple[str, ...]:
    notes = [*count_notes(arch.hf_config_json), *m.notes,
             "dropout masks 1 B per element (CUDA's native_dropout), LayerNorm statistics fp32 (CUDA)",
             f"activations in the compute dtype, {setup.precision.compute_bytes} B per element"]
    if ckpt is Checkpointing.full:
        notes.append("full checkpointing: each layer's input kept; one layer recomputed in backward after the loss "
                     "copy is freed")
    elif setup.checkpointing is Checkpointing.selective and ckpt is Checkpointing.none:
        notes.append("selective checkpointing with flash attention: nothing s x s to recompute (same as none)")
    elif ckpt is Checkpointing.selective:
        notes.append("selective checkpointing: each attention core's saved tensors beyond its inputs recomputed")
    return tuple(notes)
