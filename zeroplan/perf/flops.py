"""FLOPs of one training micro-step: the dense 6N term, attention, and what recomputation adds.

Pure: imports neither rich, typer nor yaml and does no I/O. Sources: [MLE] = stas00/ml-engineering@744d01e
training/performance/README.md (6N; 8N with full recompute), pytorch/torchtitan `get_num_flop_per_token` and
mosaicml/llm-foundry@8c8dd48:scripts/train/benchmarking/README.md (attention); docs/throughput.md 1.
"""

from __future__ import annotations

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


def attention_fwd_flops_per_token(arch: Architecture, seq_len: int, *, causal: bool) -> float:
    """Forward attention FLOPs per token: 4 L d_attn s (non-causal), half of it causal.

    L layers (decoder + encoder), d_attn = heads x head_dim, s = sequence length. Times 3 for a training
    step this is torchtitan's 12 L H Q T non-causal term (`get_num_flop_per_token`), 6 L d s causal.
    Sliding windows (Gemma 2, Mistral) are ignored: exact for s <= window.
    """
    layers = arch.num_layers + arch.num_encoder_layers
    full = ATTN_FWD_FLOPS * layers * arch.num_attention_heads * arch.head_dim * seq_len
    return full * CAUSAL_FRACTION if causal else full


def model_flops_per_token(params: ParamCount, arch: Architecture | None, seq_len: int) -> float:
    """Model FLOPs per trained token: 6 N + 6 L d_attn s (causal attention), no recomputation.

    N = parameters one token touches (MoE: active). The numerator of MFU (PaLM's definition).
    """
    attn = attention_fwd_flops_per_token(arch, seq_len, causal=True) if arch else 0.0
    return (1 + BWD_PER_FWD) * (FWD_FLOPS_PER_PARAM * params.num_active_params + attn)


def hardware_flops_per_micro_step(
    params: ParamCount, arch: Architecture | None, setup: TrainingSetup
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
