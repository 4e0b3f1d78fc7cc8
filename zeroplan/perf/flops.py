"""FLOPs of one training micro-step: the dense 6N term, attention, and what recomputation adds.

Pure: imports neither rich, typer nor yaml and does no I/O. Sources: [MLE] = stas00/ml-engineering@744d01e
training/performance/README.md (6N; 8N with full recompute), pytorch/torchtitan `get_num_flop_per_token` and
mosaicml/llm-foundry@8c8dd48:scripts/train/benchmarking/README.md (attention); docs/throughput.md 1. Under a
fine-tune (zeroplan.memory.finetune.Tuning): frozen weights skip their weight gradient, adapters add their own
GEMMs, DoRA its weight norm, a 4-bit base its dequantization (docs/throughput.md 1.1).
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from zeroplan.errors import ZeroplanError
from zeroplan.hardware.spec import HardwareSpec
from zeroplan.memory.activations.checkpointing import checkpointed_layers, op_sac_recomputed_params
from zeroplan.memory.setup import Attention, Checkpointing, Precision, TrainingSetup
from zeroplan.models.architecture import Architecture, ParamCount

FWD_FLOPS_PER_PARAM = 2  # one multiply-add per parameter per token (Kaplan et al. 2020; [MLE] "6N" = 2 fwd + 4 bwd)
BWD_PER_FWD = 2  # backward = gradients w.r.t. activations and weights: twice the forward ([MLE] training/performance)
ATTN_FWD_FLOPS = 4  # per layer, token, key and attention channel: QK^T and PV, 2 FLOPs per multiply-add each
CAUSAL_FRACTION = 0.5  # a causal mask keeps half the scores ([MLE] insights: non-causal "double-counts")
TFLOPS = 1e12
# A frozen weight's backward is the activation gradient only: 2 FLOPs per parameter per token instead of 4 (no
# weight gradient; Hu et al. 2021, arXiv:2106.09685 4.2: no gradients "for the vast majority of the parameters";
# Schulman et al. 2025, "LoRA Without Regret", https://thinkingmachines.ai/blog/lora/: 2N^2 + 6NR multiply-adds
# for LoRA against 3N^2 for full fine-tuning)
FROZEN_BWD_PER_FWD = 1


def attention_fwd_flops_per_token(arch: Architecture, seq_len: int, *, causal: bool) -> float:
    """Forward attention FLOPs per token: 4 L d_attn s (non-causal), half of it causal.

    L layers (decoder + encoder), d_attn = heads x head_dim, s = sequence length. Times 3 for a training
    step this is torchtitan's 12 L H Q T non-causal term (`get_num_flop_per_token`), 6 L d s causal.
    Sliding windows (Gemma 2, Mistral) are ignored: exact for s <= window. Gemma 4's global layers attend with
    their own global_head_dim.
    """
    layers = arch.num_layers + arch.num_encoder_layers
    wide = arch.attention_types.count("full_attention") if arch.global_head_dim else 0
    widths = layers * arch.head_dim + wide * (arch.global_head_dim - arch.head_dim)
    full = ATTN_FWD_FLOPS * arch.num_attention_heads * widths * seq_len
    return full * CAUSAL_FRACTION if causal else full


def model_flops_per_token(params: ParamCount, arch: Architecture | None, seq_len: int) -> float:
    """Model FLOPs per trained token: 6 N + 6 L d_attn s (causal attention), no recomputation.

    N = parameters one token touches (MoE: active). The numerator of MFU (PaLM's definition).
    """
    attn = attention_fwd_flops_per_token(arch, seq_len, causal=True) if arch else 0.0
    return (1 + BWD_PER_FWD) * (FWD_FLOPS_PER_PARAM * params.num_active_params + attn)


def model_flops_per_micro_step(params: ParamCount, arch: Architecture | None, setup: TrainingSetup, tuning=None) -> float:
    """MFU's numerator for one micro-step: T x model_flops_per_token; under a fine-tune, the FLOPs its forward and
    backward need (tuned_flops_per_micro_step with causal attention and without recomputation: frozen weights 4
    per token, trainable ones and adapters 6, DoRA's own, a frozen prefix's backward not run), so MFU stays the
    share of peak doing needed work, as PaLM's definition leaves recomputation out. Against 6N a LoRA run's MFU
    would read about 1.5x higher (4N of 6N needed)."""
    if tuning is None:
        return setup.tokens_per_micro_step * model_flops_per_token(params, arch, setup.seq_len)
    attn = attention_fwd_flops_per_token(arch, setup.seq_len, causal=True) if arch else 0.0
    return sum(tuned_flops_per_micro_step(params, arch, setup, tuning, attn, recompute=False))


def hardware_flops_per_micro_step(
    params: ParamCount, arch: Architecture | None, setup: TrainingSetup, tuning=None
) -> tuple[float, float]:
    """(forward, backward) FLOPs the GPU runs in one micro-step, recomputation included.

    forward = T (2N + A), A = attention forward per token (causal for flash/SDPA, which skips masked tiles;
    non-causal for eager, which computes the masked half); backward = 2 x forward, plus one more forward
    with full checkpointing (8N instead of 6N, ml-engineering training/performance) or the attention core again with
    selective checkpointing (Korthikanti et al. 2022). T = tokens per micro-step on one GPU.
    """
    causal = setup.attention is Attention.flash
    attn = attention_fwd_flops_per_token(arch, setup.seq_len, causal=causal) if arch else 0.0
    tokens = setup.tokens_per_micro_step
    if tuning is not None:
        return tuned_flops_per_micro_step(params, arch, setup, tuning, attn)
    forward = tokens * (FWD_FLOPS_PER_PARAM * params.num_active_params + attn)
    if setup.checkpointing is Checkpointing.full:
        recompute = forward * _wrapped_share(arch, setup.checkpoint_every)
    elif setup.checkpointing is Checkpointing.selective_op and arch is not None:
        # torchtitan SelectiveAC: the mms it does not keep run again; attention's kernel output is kept
        recompute = tokens * FWD_FLOPS_PER_PARAM * arch.num_layers * op_sac_recomputed_params(arch)
    else:
        recompute = tokens * attn if setup.checkpointing is Checkpointing.selective else 0.0
    return forward, BWD_PER_FWD * forward + recompute


def _wrapped_share(arch: Architecture | None, every: int) -> float:
    """Share of the layers a full checkpoint wraps (every:N: the N-th, 2N-th, ...)."""
    if every == 1 or arch is None:
        return 1.0
    return sum(checkpointed_layers(arch.num_layers, every)) / arch.num_layers


def peak_tflops(hw: HardwareSpec, precision: Precision) -> float:
    """Dense peak of the tensor math the precision runs on; bf16 on hardware without it is an error."""
    if precision is Precision.fp32:
        return hw.fp32_tflops
    if precision is Precision.fp16_mixed:
        return hw.fp16_tflops
    if not hw.supports_bf16:
        raise ZeroplanError(f"{hw.name} has no bf16 ({precision.value}); use fp16-mixed or fp32")
    return hw.bf16_tflops


# --- under a fine-tune ----------------------------------------------------------------------------------------


def _tuned_counts(params: ParamCount, tuning) -> tuple[int, int, int]:
    """(frozen, trainable base, adapter) parameters one token touches. modules_to_save copies replace their frozen
    original in the forward (peft ModulesToSaveWrapper); MoE: trainable tensors are counted as active."""
    adapters = tuning.num_trainable - tuning.saved_numel if tuning.spec.lora_rank else 0
    trained = tuning.num_trainable - adapters
    return max(0, params.num_active_params - trained), trained, adapters


def adapter_shapes(tuning) -> list[tuple[int, int]]:
    """(in, out) of each adapted linear, read off the adapter tensors memory.finetune.tune appends last, in order:
    lora_A (r x in), lora_B (out x r)[, DoRA's magnitude (out)] per linear."""
    r, per = tuning.spec.lora_rank, 3 if tuning.spec.dora else 2
    tail = tuning.trainable[len(tuning.trainable) - per * len(tuning.adapted):]
    return [(tail[i] // r, tail[i + 1] // r) for i in range(0, len(tail), per)]


def frozen_prefix_layers(arch: Architecture | None, tuning) -> int:
    """Leading decoder layers without a trainable tensor, below frozen embeddings: backward never reaches them
    (nothing below needs a gradient), so they run no backward and no recompute. Dense models only."""
    spec = tuning.spec
    if arch is None or arch.is_moe or spec.lora_rank or not any(fnmatchcase("model.embed_tokens.weight", g)
                                                                 for g in spec.freeze):  # fmt: skip
        return 0
    layers = tuning.trainable_by_unit[1:]
    return next((i for i, n in enumerate(layers) if n), len(layers))


def tuned_flops_per_micro_step(params: ParamCount, arch: Architecture | None, setup: TrainingSetup, tuning,
                               attn: float, *, recompute: bool = True) -> tuple[float, float]:  # fmt: skip
    """(forward, backward) FLOPs of one micro-step of a fine-tune, recomputation included.

    forward = T (2 (N_f + N_t + N_a) + A); backward = T (2 N_f + 4 (N_t + N_a) + 2 A) less a frozen prefix's
    backward; DoRA per adapted linear (in -> out, rank r): 2 r in (in + out) for B A built from an identity, per
    forward (peft tuners/lora/dora.py get_lora_weight; used detached, so no backward; the weight norm is
    elementwise, uncounted as 6N counts no elementwise op), and with lora_dropout > 0 the base output recomputed on the dropped input, 2 in out
    per token forward and 2 in out backward (DoraLinearVariant passes no base result then). Full checkpointing
    runs the wrapped layers' forward again, a frozen prefix's excepted.
    """
    tokens = setup.tokens_per_micro_step
    frozen, trained, adapters = _tuned_counts(params, tuning)
    forward = tokens * (FWD_FLOPS_PER_PARAM * (frozen + trained + adapters) + attn)
    backward = tokens * (FWD_FLOPS_PER_PARAM * (FROZEN_BWD_PER_FWD * frozen + BWD_PER_FWD * (trained + adapters))
                         + BWD_PER_FWD * attn)  # fmt: skip
    prefix = frozen_prefix_layers(arch, tuning)
    layers = arch.num_layers if arch else 1
    if prefix:
        per_layer = sum(tuning.frozen_by_unit[1:prefix + 1]) / prefix
        backward -= tokens * prefix * (FWD_FLOPS_PER_PARAM * FROZEN_BWD_PER_FWD * per_layer + BWD_PER_FWD * attn / layers)
    backward -= first_layer_saving(arch, tuning, tokens, attn / layers)
    if tuning.spec.dora:
        for n_in, n_out in adapter_shapes(tuning):
            r = tuning.spec.lora_rank
            forward += FWD_FLOPS_PER_PARAM * r * n_in * (n_in + n_out)
            if tuning.spec.lora_dropout > 0:
                forward += tokens * FWD_FLOPS_PER_PARAM * n_in * n_out
                backward += tokens * FWD_FLOPS_PER_PARAM * n_in * n_out
    if not recompute:
        return forward, backward
    if setup.checkpointing is Checkpointing.full:
        backward += forward * _wrapped_share(arch, setup.checkpoint_every) * (1 - prefix / layers)
    elif setup.checkpointing is Checkpointing.selective:
        backward += tokens * attn
    elif setup.checkpointing is Checkpointing.selective_op and arch is not None:
        backward += tokens * FWD_FLOPS_PER_PARAM * arch.num_layers * op_sac_recomputed_params(arch)
    return forward, backward


LAYER0 = "model.layers.0."
ATTN_LINEARS, MLP_IN = ("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj")


def first_layer_saving(arch: Architecture | None, tuning, tokens: int, attn_layer: float) -> float:
    """Backward FLOPs layer 0 does not run under LoRA on frozen embeddings, for the q/k/v/o, gate/up/down layers
    (Llama-style names): its input needs no gradient, so autograd computes no input gradient for the frozen q, k, v
    (2 per weight per token) nor for their adapters' lora_A (2 r in), and of the attention core's four backward
    matmuls (dQ, dK of Q K^T; dP, dV of P V) only those leading to an adapted q, k or v run. With no adapter on
    q, k, v the core, o_proj's input gradient, and, without one on o_proj either, gate/up's follow."""
    spec = tuning.spec
    if arch is None or not spec.lora_rank or "embed_tokens" in " ".join(spec.modules_to_save):
        return 0.0
    adapted = {name[len(LAYER0):].rsplit(".", 1)[-1]: shape for name, shape in zip(tuning.adapted, adapter_shapes(tuning))
               if name.startswith(LAYER0)}  # fmt: skip
    d, q_out, kv_out = arch.hidden_size, arch.num_attention_heads * arch.head_dim, arch.num_key_value_heads * arch.head_dim
    if arch.is_moe or not set(adapted) <= {*ATTN_LINEARS, "o_proj", *MLP_IN, "down_proj"}:
        return 0.0  # fused or other linears: not derived here (full training's dgrad kept, an upper bound)
    r = spec.lora_rank

    def no_input_grad(names, outs) -> float:  # frozen weights' and lora_A's input gradients, DoRA's recomputed base
        saved = 0.0
        for name, out in zip(names, outs):
            saved += d_in(name) * out
            if name in adapted:
                saved += r * d_in(name) + (d_in(name) * out if spec.dora and spec.lora_dropout else 0)
        return FWD_FLOPS_PER_PARAM * tokens * saved

    def d_in(name: str) -> int:
        return arch.intermediate_size if name == "down_proj" else (q_out if name == "o_proj" else d)

    saved = no_input_grad(ATTN_LINEARS, (q_out, kv_out, kv_out))
    q, k, v = (name in adapted for name in ATTN_LINEARS)
    running = q + k + (q or k) + v  # of the core's 4 backward matmuls, each attn_layer / 2 (forward = 2 of them)
    saved += tokens * attn_layer / 2 * (4 - running)
    if q or k or v:
        return saved
    saved += no_input_grad(("o_proj",), (d,))
    if "o_proj" not in adapted:
        saved += no_input_grad(MLP_IN, (arch.intermediate_size,) * 2)
    return saved


DEQUANT_PASSES = 2  # bitsandbytes MatMul4Bit: dequantize in the forward and again for grad_A in the backward


def dequant_seconds(tuning, setup: TrainingSetup, arch: Architecture | None, hbm_tbps: float) -> tuple[float, float]:
    """(forward, backward) seconds one micro-step spends dequantizing a 4-bit base, memory-bound.

    Per pass every packed weight and its QuantState are read and the weight written in the compute dtype c:
    t = (Q + S + n c) / B_HBM, B_HBM the preset's peak bandwidth (a lower bound: kernels reach part of it).
    For T > 1536 tokens bitsandbytes dequantizes then calls F.linear (backends/cuda/ops.py
    `_dequant_linear_fallback`, `_gemm_4bit_custom_max_m`; below it a fused kernel, modelled the same); the
    backward dequantizes again (autograd/_functions.py MatMul4Bit.backward, F.dequantize_4bit); full
    checkpointing's recompute once more. An 8-bit base is timed at the 16-bit rate (its int8 kernels not modelled).
    """
    if not tuning.spec.quant.four_bit:
        return 0.0, 0.0
    c = setup.precision.compute_bytes
    per_pass = (tuning.packed_bytes + tuning.quant_state_bytes + tuning.quantized_numel * c) / (hbm_tbps * TFLOPS)
    recompute = _wrapped_share(arch, setup.checkpoint_every) if setup.checkpointing is Checkpointing.full else 0.0
    return per_pass, per_pass * (DEQUANT_PASSES - 1 + recompute)


def tuned_flops_notes(tuning) -> tuple[str, ...]:
    """What the throughput of a fine-tune assumes, in words (none for full training)."""
    if tuning is None:
        return ()
    notes = ["fine-tune FLOPs per token: frozen weights 4 (forward, activation gradient; no weight gradient), "
             "trainable ones and adapters 6; MFU counts these, not 6N (docs/throughput.md 1.1)",
             "gradient reductions, ZeRO-1/2's post-step all-gather and optimizer offload's gradient copies carry the "
             "trainable parameters only; ZeRO-3's gathers every parameter, in the compute dtype (a 4-bit base's "
             "packed weights would move fewer bytes: not modelled)"]
    if tuning.spec.dora:
        notes.append("DoRA: B A built from an identity per adapted linear each forward (its norm, elementwise, uncounted)"
                     + ("; the base output recomputed on the dropped-out input" if tuning.spec.lora_dropout else ""))
    if tuning.spec.quant.four_bit:
        notes.append("4-bit base: dequantized in each forward and backward (and recompute), memory-bound at the "
                     "preset's peak HBM bandwidth (a lower bound on that time)")
    elif tuning.spec.quant.value == "int8":
        notes.append("8-bit base: timed at the 16-bit rate; LLM.int8's kernels and outlier decomposition not modelled")
    elif tuning.spec.quant.value == "fp8":
        notes.append("FP8 base: timed at the 16-bit rate; its FP8 GEMM and block dequantization kernels not modelled")
    return tuple(notes)
