"""What a fine-tune changes in the activations autograd saves: frozen linears, adapters, a frozen prefix.

Pure: no I/O. Symbols as in zeroplan.memory.activations (T = b s tokens, e compute bytes, h hidden, f MLP inner
width), plus a = adapter element bytes (4: peft keeps adapters fp32 on a 16-bit base under the PyTorch engines;
e: DeepSpeed casts them), r the rank, p the dropout. Checked against peft by
validation/measure_finetune_activations.py (docs/finetune.md); modelled for the Llama-style decoders (RMSNorm,
gated MLP, dense), an upper bound (full training's figure) elsewhere.

In HF's LlamaRMSNorm, `weight * h` saves h (e T h) for the weight's gradient only; the rest (the fp32 copy or
the input, and rsqrt) only for the input's. A linear saves its input for its weight's gradient only: frozen,
it saves nothing, unless another consumer saves the same tensor (the attention output is also SDPA's output).
peft's lora.Linear (tuners/lora/layer.py forward): x cast to the adapter dtype, dropout (nn.Identity at p = 0),
lora_A saves its input, lora_B saves lora_A's output (T r a); the scale and the sum save nothing.
A tensor that does not require grad saves nothing for its own gradient: with frozen embeddings the first
layer's input norm keeps only its weight-gradient part, and a dropout there keeps no mask.
"""

from __future__ import annotations

from dataclasses import replace

from zeroplan.memory.activations.attention import recompute_extra_bytes
from zeroplan.memory.activations.ops import INDEX_BYTES, MASK_BYTES, norm_bytes
from zeroplan.memory.activations.terms import layer_input_saved_bytes, layer_terms
from zeroplan.memory.activations.traits import traits_of



def _adapted_in_layer(adapted: tuple[str, ...], layer: int) -> set[str]:
    prefix = f"model.layers.{layer}."
    return {name.rsplit(".", 1)[-1] for name in adapted if name.startswith(prefix)}


def dora_bytes(t: int, n_in: int, n_out: int, e: int, a: int, dropout: float, grad_in: bool) -> int:
    """What one DoRA linear saves beyond LoRA (peft tuners/lora/dora.py DoraLinearLayer.forward, variants.py):

        p = 0: e T out (the base output, reused) + a T out (the LoRA output) + a out (the detached weight norm)
               + a out (magnitude / norm) + a out (that minus 1, where the input needs a gradient)
        p > 0: the base output is recomputed from the dropped-out input in the adapter dtype, a T out, and
               F.linear keeps the weight cast to it, a out in, where the input needs a gradient and a != e.
    The lora_B(lora_A(I)) weight is built with a graph used only detached: freed when the forward ends.
    """
    scale = a * n_out * (3 if grad_in else 2)
    if dropout == 0:
        return e * t * n_out + a * t * n_out + scale
    weight = a * n_out * n_in if grad_in and a != e else 0
    return 2 * a * t * n_out + scale + weight


def _group_delta(names: set[str], group: dict[str, int], width: int, saved_in_full: int, t: int, e: int, a: int,
                 rank: int, dropout: float, grad_in: bool, dora: bool) -> int:
    """One input tensor and the linears that read it (name -> out features): what freezing them drops and their
    adapters add."""
    adapters = [n for n in group if n in names]
    if not adapters:
        return -saved_in_full
    shared = a == e and dropout == 0  # lora_A saves the input tensor itself, once for all of them
    delta = 0 if shared else -saved_in_full
    for name in adapters:
        if dropout > 0:
            delta += a * t * width + (MASK_BYTES * t * width if grad_in else 0)
        elif a != e:
            delta += a * t * width  # the cast copy lora_A saves
        delta += a * t * rank
        if dora:
            delta += dora_bytes(t, width, group[name], e, a, dropout, grad_in)
    return delta


def lora_layer_delta(arch, t: int, e: int, a: int, rank: int, dropout: float, names: set[str], first: bool,
                     dora: bool = False) -> int:
    """Bytes one decoder layer saves under LoRA (or DoRA) minus what full training saves (first: the frozen
    embeddings' layer, whose input needs no gradient)."""
    h, f = arch.hidden_size, arch.intermediate_size
    q, kv = arch.num_attention_heads * arch.head_dim, arch.num_key_value_heads * arch.head_dim
    norm_h = e * t * h
    delta = -2 * norm_h  # both norms' weight-gradient halves
    if first:
        delta -= norm_bytes("llama", t, h, e) - norm_h  # the input norm keeps nothing for its input
    args = (t, e, a, rank, dropout)
    delta += _group_delta(names, {"q_proj": q, "k_proj": kv, "v_proj": kv}, h, e * t * h, *args, not first, dora)
    delta += _group_delta(names, {"o_proj": h}, q, 0, *args, True, dora)  # SDPA keeps its output anyway
    delta += _group_delta(names, {"gate_proj": f, "up_proj": f}, h, e * t * h, *args, True, dora)
    delta += _group_delta(names, {"down_proj": h}, f, e * t * f, *args, True, dora)
    return delta


def modelled(arch) -> bool:
    return arch.norm != "layernorm" and arch.gated_mlp and not arch.is_moe and arch.family in (
        "llama", "mistral", "qwen2")


def tuned_activations(acts, arch, setup, tuning, adapter_bytes: int):
    """`acts` (full training's ActivationEstimate) with the fine-tune's changes; unchanged where not modelled.

        no / selective checkpointing: total + sum over layers of the layer deltas + the head's
        full checkpointing: layer inputs kept as before; total + the head's + the change in
                            max(0, R + steady layer delta - 4 T V) (R: one layer's recompute, the loss copy first freed)
    """
    spec = tuning.spec
    if spec.full or not modelled(arch):
        return acts
    t, e, h = setup.micro_batch * setup.seq_len, setup.precision.compute_bytes, arch.hidden_size
    flash = setup.attention.value == "flash"
    if spec.lora_rank:
        layers = [lora_layer_delta(arch, t, e, adapter_bytes, spec.lora_rank, spec.lora_dropout,
                                   _adapted_in_layer(tuning.adapted, i), first=i == 0, dora=spec.dora)
                  for i in range(arch.num_layers)]
        head_trains = any(m.endswith("lm_head") for m in spec.modules_to_save)
        final = -e * t * h * (1 if head_trains else 2) - INDEX_BYTES * t  # final norm's h, head input, token ids
        steady = max(layers[1:] or layers)
    else:
        layers, final = _frozen_prefix(arch, setup.micro_batch, t, e, tuning, flash)
        steady = 0
    # bitsandbytes saves only the packed weight (autograd/_functions.py:357-358, MatMul4Bit); its backward
    # dequantizes it to the compute dtype (:385-388), one linear at a time: the largest one's, transient.
    # LLM.int8's MatMul8bitLt backward likewise rebuilds CB x SCB / 127 in the input dtype. Not measured.
    dequantized = e * tuning.largest_quantized
    final += dequantized
    if setup.checkpointing.value != "full":
        return _with(acts, sum(layers) + final, final, layers_delta=sum(layers), recompute=acts.recompute_bytes)
    b, s = setup.micro_batch, setup.seq_len
    raw = _full_layer_bytes(arch, b, s, e, flash) - layer_input_saved_bytes(arch, traits_of(arch), b, s, e) \
        + recompute_extra_bytes(arch, setup.seq_len)
    copy = 4 * t * arch.vocab_size if e < 4 else 0
    recompute = max(0, raw + steady - copy)
    return _with(acts, final + recompute - acts.recompute_bytes, final, layers_delta=0, recompute=recompute)


def _frozen_prefix(arch, b: int, t: int, e: int, tuning, flash: bool):
    """--freeze: frozen embeddings drop the token ids; a frozen prefix of whole layers saves nothing, and the first
    trainable layer's input norm keeps only its weight half. Other frozen tensors: counted as trainable."""
    trainable = tuning.trainable_by_unit
    embed_frozen = tuning.frozen_by_unit[0] > 0 and _embedding_frozen(tuning)
    final = -INDEX_BYTES * t if embed_frozen else 0
    layers = [0] * arch.num_layers
    if not embed_frozen:
        return layers, final
    h = arch.hidden_size
    first = next((i for i in range(arch.num_layers) if trainable[i + 1]), arch.num_layers)
    for i in range(first):
        layers[i] = -_full_layer_bytes(arch, b, t // b, e, flash)
    if first < arch.num_layers:
        layers[first] -= norm_bytes("llama", t, h, e) - e * t * h
    return layers, final


def _embedding_frozen(tuning) -> bool:
    return any(g.startswith("model.embed_tokens") or g == "*" for g in tuning.spec.freeze)


def _full_layer_bytes(arch, b: int, s: int, e: int, flash: bool) -> int:
    """One layer's saved bytes in full training."""
    return sum(v for _, v in layer_terms(arch, traits_of(arch), b, s, e, flash=flash, selective=False))


def _with(acts, delta: int, final: int, *, layers_delta: int, recompute: int):
    return replace(acts, layers_bytes=acts.layers_bytes + layers_delta, final_norm_bytes=acts.final_norm_bytes + final,
                   recompute_bytes=recompute, total_bytes=acts.total_bytes + delta,
                   assumptions=acts.assumptions + ("fine-tune: frozen linears save no input for a weight gradient; "
                                                   "adapters' inputs and rank-r outputs added (docs/finetune.md)",))
