"""What a fine-tune changes in the activations autograd saves: frozen parts, adapters, a frozen prefix, the head.

Pure: no I/O. Symbols as in zeroplan.memory.activations (T = b s tokens, e compute bytes, h hidden), a = adapter
element bytes (4: peft keeps adapters fp32 on a 16-bit base under the PyTorch engines; e: DeepSpeed casts them).
The per-layer rules (which saved tensor serves which gradient) are memory.activations.flow's (per op,
memory.activations.site's); this module walks the layers in order, carrying whether the residual stream needs a
gradient, and adds the embedding's and head's changes. Checked against peft by
validation/measure_finetune_activations.py (docs/finetune.md).

  no / selective checkpointing: total + sum over layers of the layer deltas + the embedding's and head's
  full checkpointing: layer inputs kept as before; total + the head's + the change in
                      max(0, max over layers (R_i + delta_i) - the loss copy)   (R_i: layer i's recompute)
"""

from __future__ import annotations

from dataclasses import replace

from zeroplan.memory.activations.attention import recompute_extra_bytes
from zeroplan.memory.activations.flow import layer_change
from zeroplan.memory.activations.layouts import embeddings_prefix, final_norm, layer_prefix
from zeroplan.memory.activations.loop import litgpt_loss
from zeroplan.memory.activations.loss import loss_bytes
from zeroplan.memory.activations.moe import layer_kinds
from zeroplan.memory.activations.ops import INDEX_BYTES, norm_bytes
from zeroplan.memory.activations.site import Site, norm_change
from zeroplan.memory.activations.terms import (
    embedding_terms,
    layer_input_saved_bytes,
    rotary_table_sets,
)
from zeroplan.memory.activations.traits import GEMMA_FAMILIES, traits_of
from zeroplan.memory.finetune import unit_of
from zeroplan.memory.quant import QloraStack, saves_matmul_input
from zeroplan.memory.setup import Precision, TrainingLoop

# Families whose decoder layers name their modules as flow.py reads them (model.layers.i.input_layernorm,
# self_attn.{q,k,v,o}_proj or DeepSeek's MLA projections, post_attention_layernorm, Gemma's pre/post feed-forward
# norms, mlp.{gate,up,down}_proj or mlp.gate + mlp.experts + mlp.shared_experts), pre-norm, gated MLP.
# The families of memory.activations.layouts name theirs otherwise (phi, phi3, gpt_neox, falcon).
MODELLED_FAMILIES = frozenset({"llama", "mistral", "qwen2", "qwen3", "smollm3", "gemma", "gemma2", "gemma3_text",
                               "qwen3_moe", "mixtral", "deepseek_v2", "deepseek_v3", "kimi_k2", "glm4_moe",
                               "gpt_oss", "phi", "phi3", "gpt_neox", "falcon"})
UPPER_BOUND = ("fine-tune on {family}: activations are full training's (an upper bound but for the adapters' own "
               "tensors); the frozen-part rules are modelled for " + ", ".join(sorted(MODELLED_FAMILIES)))


FINETUNE_ASSUMPTION = ("fine-tune: a saved tensor is kept only for a gradient that is needed (frozen parts, adapters' "
                       "inputs and rank-r outputs, a frozen prefix saves nothing; under checkpointing transformers "
                       "makes the embeddings' output require grad; docs/finetune.md)")
DEQUANT_ASSUMPTION = ("quantized base: bitsandbytes dequantizes each linear's weight to the compute dtype for its "
                      "matmul in forward (CUDA gemm_4bit above 1536 tokens) and backward; the largest one's copy is "
                      "alive inside each layer's forward and backward, never saved (bitsandbytes 0.50.2; from source, "
                      "not measured: CPU runs the same autograd function, CUDA's kernel choice is read from source)")


def modelled(arch) -> bool:
    return arch.family in MODELLED_FAMILIES


def tuned_activations(acts, arch, setup, tuning, adapter_bytes: int, autocast: int = 0):
    """`acts` (full training's ActivationEstimate) with the fine-tune's changes (see the module docstring).
    autocast: the autocast dtype's bytes when `acts` and `setup` are the fp32 stream that peft's
    prepare_model_for_kbit_training leaves under bf16/fp16 mixed precision (Site.autocast); 0 otherwise."""
    spec = tuning.spec
    if spec.full:
        return acts
    if not modelled(arch):
        acts = _looped(acts, arch, setup, 0)  # the inputs an old MatMul4Bit keeps are not walked: not carried
        return replace(acts, assumptions=acts.assumptions + (UPPER_BOUND.format(family=arch.family),))
    b, s, e = setup.micro_batch, setup.seq_len, setup.precision.compute_bytes
    t, flash = b * s, setup.attention.value == "flash"
    embed = any(n.startswith(embeddings_prefix(arch.family)) for n in tuning.trainable_names)
    full_ckpt = setup.checkpointing.value == "full"
    # transformers' gradient_checkpointing_enable calls enable_input_require_grads (modeling_utils.py): under
    # checkpointing the embeddings' output requires grad, so a gradient flows from the first layer on
    held: list[int] = []  # the inputs an old MatMul4Bit keeps on its ctx (Site.held)
    layers, grad, cores = _walk(arch, tuning, spec, b, s, e, adapter_bytes, flash, embed or full_ckpt, held, autocast)
    final = _head_change(arch, setup, tuning, t, e, embed=embed, grad=grad, cores=cores)
    if _head_input_kept(arch, tuning, grad):
        held.append(e * t * arch.hidden_size)
    dequant = dequantized_weight_bytes(tuning, e, setup), dequantized_head_bytes(tuning, e, setup)
    acts = _autocast_head(_looped(acts, arch, setup, sum(held)), arch, setup, autocast)
    if not full_ckpt:
        deltas = tuple(d for _, d, _ in layers)
        return _with(acts, sum(deltas) + final, final, deltas=deltas, recompute=acts.recompute_bytes, dequant=dequant)
    copy = _loss(arch, setup, autocast or e).transient
    raw = max(full + delta - own for full, delta, own in layers) + recompute_extra_bytes(arch, s)
    recompute = max(0, raw - copy)
    return _with(acts, final + recompute - acts.recompute_bytes, final, deltas=(), recompute=recompute, dequant=dequant)


def _loss(arch, setup, e: int):
    """The head and loss of an adapter fine-tune: litgpt's lora.py runs its head in chunks (memory.activations.loop)."""
    b, s = setup.micro_batch, setup.seq_len
    if setup.training_loop is TrainingLoop.litgpt:
        return litgpt_loss(arch, b, s, e, chunked_head=True)
    return loss_bytes(arch, traits_of(arch), b, s, e, setup.loss)


def _autocast_head(acts, arch, setup, c: int):
    """Under autocast on prepare_model_for_kbit_training's fp32 stream the fp32 LM head runs in the autocast dtype:
    the logits come out c-byte and the loss upcasts them as in 16-bit training, and F.linear keeps the c-cast copy
    of the head's fp32 weight for its input's gradient (c V h, alive until the head's backward). Unchanged without."""
    if not c:
        return acts
    loss = _loss(arch, setup, c)
    weight = c * arch.vocab_size * arch.hidden_size
    total = loss.saved + loss.transient
    return replace(acts, logits_bytes=loss.logits, loss_bytes=total, loss_transient_bytes=loss.transient,
                   loss_backward_bytes=loss.backward, final_norm_bytes=acts.final_norm_bytes + weight,
                   total_bytes=acts.total_bytes - acts.logits_bytes - acts.loss_bytes + loss.logits + total + weight)


def _looped(acts, arch, setup, held: int):
    """`acts` with litgpt lora.py's loss (its head chunked) and the inputs an old MatMul4Bit keeps carried into the
    next micro-step beside the logits (memory.activations.loop); unchanged under any other loop."""
    if setup.training_loop is not TrainingLoop.litgpt:
        return acts
    loss = _loss(arch, setup, setup.precision.compute_bytes)
    total = loss.saved + loss.transient
    return replace(acts, loss_bytes=total, loss_transient_bytes=loss.transient, loss_backward_bytes=loss.backward,
                   total_bytes=acts.total_bytes - acts.loss_bytes + total, carried_bytes=acts.carried_bytes + held)


def keeps_matmul_input(spec) -> bool:
    """A 4-bit base under bitsandbytes before 0.43.2: each quantized linear keeps its input (memory/quant.py)."""
    return spec.quant.four_bit and spec.qlora_stack is not QloraStack.torchtune and saves_matmul_input(spec.bnb_version)


# Lightning's BitsandbytesPrecision quantizes `weight.to(dtype=torch.half)` (lightning==2.4.0
# src/lightning/fabric/plugins/precision/bitsandbytes.py _NF4Linear.quantize), so the quant state's dtype is fp16
# (bitsandbytes@0.42.0 functional.py quantize_4bit: QuantState(dtype=A.dtype)) and dequantize_4bit returns fp16
# (`torch.empty(quant_state.shape, dtype=quant_state.dtype)`), which MatMul4Bit casts to the input's dtype
# (`F.dequantize_4bit(B, quant_state).to(A.dtype)`, autograd/_functions.py@0.42.0, forward and backward): while
# it casts, the fp16 copy is alive beside the compute-dtype one
LIGHTNING_STATE_BYTES = 2


def _state_copy_bytes(tuning, setup) -> int:
    """Bytes per element of the fp16 copy a Lightning-quantized weight dequantizes to before its cast (none in fp16)."""
    spec = tuning.spec
    lightning = spec.quant.four_bit and spec.qlora_stack is QloraStack.litgpt
    return LIGHTNING_STATE_BYTES if lightning and setup.precision is not Precision.fp16_mixed else 0


def dequantized_weight_bytes(tuning, e: int, setup=None) -> int:
    """The weight bitsandbytes dequantizes for one quantized linear's matmul: e x its elements, the largest one's
    (and its fp16 copy under Lightning's quantizer, which dequantizes to fp16 first: LIGHTNING_STATE_BYTES).

    Transient, alive inside that linear's forward and backward (and its recompute), never saved. Sources,
    bitsandbytes==0.50.2: autograd/_functions.py MatMul4Bit.forward calls gemm_4bit, whose CUDA kernel
    (backends/cuda/ops.py, `_gemm_4bit_custom_max_m = 1536`) dequantizes into a new (out, in) tensor of the input
    dtype and runs F.linear (`_dequant_linear_fallback`) for more than 1536 tokens, as training has; the backward
    always does (`F.dequantize_4bit(B, ctx.state).to(grad_output.dtype)`). LLM.int8's MatMul8bitLt backward
    rebuilds CB x SCB / 127 in the input dtype the same way.
    """
    return (e + (_state_copy_bytes(tuning, setup) if setup else 0)) * tuning.largest_quantized


def dequantized_head_bytes(tuning, e: int, setup=None) -> int:
    """A quantized output head's dequantized weight (litgpt quantizes it): e V h (and its fp16 copy under
    Lightning's quantizer), alive while the head's matmul runs."""
    return (e + (_state_copy_bytes(tuning, setup) if setup else 0)) * tuning.head_quantized


def _walk(arch, tuning, spec, b: int, s: int, e: int, a: int, flash: bool, grad: bool, held: list[int],
          autocast: int = 0):
    """The layers in order: [(full-training bytes, delta, own input saved)], the last output's grad, any core's."""
    adapted = frozenset(tuning.adapted)
    by_layer: dict[int, list[str]] = {}
    for name in (*tuning.trainable_names, *tuning.adapted, *(w.name for w in tuning.adapted_params)):
        by_layer.setdefault(unit_of(name) - 1, []).append(name)
    cores, layers = set(), []
    for i, kind in enumerate(layer_kinds(arch)):
        names = by_layer.get(i, [])
        site = Site.of(layer_prefix(arch.family, i), [n for n in names if n in tuning.trainable_names],
                       [n for n in names if n in adapted], tuning.adapted_params, b * s, e, a,
                       spec.lora_rank, spec.lora_dropout, spec.dora, quant_input=keeps_matmul_input(spec),
                       autocast=autocast)
        full, delta, grad_out, core, kept = layer_change(site, kind, b, s, flash, grad)
        held.append(kept)
        own_input = layer_input_saved_bytes(kind, traits_of(kind), b, s, e) if grad else 0
        layers.append((full, delta, own_input))
        grad = grad_out
        if core:
            cores.add(kind.attention_types[0] if kind.attention_types else "")
    return layers, grad, cores


def _head_change(arch, setup, tuning, t: int, e: int, *, embed: bool, grad: bool, cores: set[str]) -> int:
    """Embedding and head: frozen embeddings drop the token ids (and Gemma's 0-d scale); the final norm keeps what
    its weight and input gradients need; a frozen head drops its input; the rotary tables of an attention type
    (Gemma 3: local and global) are saved only by layers of that type whose core needs a gradient."""
    h, trains, traits = arch.hidden_size, tuning.trainable_names, traits_of(arch)
    head = "lm_head.weight" in trains or (arch.tie_word_embeddings and embed)
    root, norm = final_norm(arch.family)
    site = Site.of(root, [n for n in trains if unit_of(n) == 0], (), (), t, e)
    delta = norm_change(site, norm, traits.norm, norm_bytes(traits.norm, t, h, e), t, h, grad)
    kept = _head_input_kept(arch, tuning, grad)
    if not head and not kept and _loss(arch, setup, e).head_input_saved:
        delta -= e * t * h
    if not embed:
        delta -= INDEX_BYTES * t + (e if arch.family in GEMMA_FAMILIES else 0)
    sets = rotary_table_sets(arch)
    tables = sum(v for n, v in embedding_terms(arch, traits, setup.micro_batch, setup.seq_len, e)
                 if n.startswith("rotary"))
    return delta - tables // sets * (sets - len(cores))


def _head_input_kept(arch, tuning, grad: bool) -> bool:
    """litgpt quantizes the head too: an old MatMul4Bit keeps its input wherever a gradient flows into it."""
    head_quantized = tuning.spec.qlora_stack is QloraStack.litgpt and not arch.tie_word_embeddings
    return head_quantized and keeps_matmul_input(tuning.spec) and grad


def _with(acts, delta: int, final: int, *, deltas: tuple[int, ...], recompute: int, dequant: tuple[int, int]):
    """`acts` with the fine-tune's totals and each layer's own bytes (`deltas`: per layer, () under full checkpointing,
    where the layers keep their inputs as before): the timeline reads the same per-layer figures the breakdown sums."""
    each, per_layer = acts.layer_bytes, acts.per_layer_bytes
    if deltas and len(each) == len(deltas):
        each = tuple(b + d for b, d in zip(each, deltas))
        per_layer = max(each)
    return replace(acts, layers_bytes=acts.layers_bytes + sum(deltas), final_norm_bytes=acts.final_norm_bytes + final,
                   recompute_bytes=recompute, total_bytes=acts.total_bytes + delta, layer_bytes=each,
                   per_layer_bytes=per_layer, dequant_bytes=dequant[0], head_dequant_bytes=dequant[1],
                   assumptions=acts.assumptions + (FINETUNE_ASSUMPTION,) + ((DEQUANT_ASSUMPTION,) if any(dequant) else ()))
