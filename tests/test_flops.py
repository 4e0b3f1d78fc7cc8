"""FLOPs per token and per micro-step (docs/throughput.md 1)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from presetmodels import GEMMA2_9B as preset_gemma2
from presetmodels import GEMMA2_9B_ARCH as preset_gemma2_arch

from zeroplan.errors import ZeroplanError
from zeroplan.hardware.presets import load_hardware
from zeroplan.memory.setup import Attention, Checkpointing, Precision, TrainingSetup
from zeroplan.perf.flops import (
    attention_fwd_flops_per_token,
    hardware_flops_per_micro_step,
    model_flops_per_token,
    peak_tflops,
)

PSI = 9_241_705_984  # gemma2-9b's published count (SPEC section 7)
GEMMA2_9B, ARCH = preset_gemma2, preset_gemma2_arch
assert GEMMA2_9B.num_params == PSI


def test_attention_term_is_torchtitan_12_L_d_s_non_causal() -> None:
    # torchtitan get_num_flop_per_token: 12 L H Q T per token for fwd+bwd; forward is a third of it
    assert 3 * attention_fwd_flops_per_token(ARCH, 2048, causal=False) == 12 * 42 * 16 * 256 * 2048


def test_causal_attention_is_half() -> None:
    assert attention_fwd_flops_per_token(ARCH, 2048, causal=True) == 2 * 42 * 4096 * 2048


def test_model_flops_per_token_6N_plus_causal_attention() -> None:
    assert model_flops_per_token(GEMMA2_9B, ARCH, 2048) == 6 * PSI + 6 * 42 * 4096 * 2048


def test_moe_counts_active_parameters() -> None:
    moe = replace(GEMMA2_9B, num_active_params=PSI // 4)
    assert model_flops_per_token(moe, None, 2048) == 6 * (PSI // 4)


@pytest.mark.parametrize(
    ("checkpointing", "multiplier"),
    [(Checkpointing.none, 6), (Checkpointing.full, 8), (Checkpointing.selective, 6)],
    ids=["6N", "8N-full-recompute-MLE", "selective-no-arch-no-attention"],
)
def test_dense_flops_per_micro_step(checkpointing: Checkpointing, multiplier: int) -> None:
    setup = TrainingSetup(seq_len=1024, micro_batch=3, checkpointing=checkpointing)
    forward, backward = hardware_flops_per_micro_step(GEMMA2_9B, None, setup)
    assert forward == 2 * PSI * 3072
    assert forward + backward == multiplier * PSI * 3072


def test_eager_attention_runs_the_masked_half_and_selective_recomputes_it() -> None:
    tokens, attn_full = 2048, attention_fwd_flops_per_token(ARCH, 2048, causal=False)
    forward, backward = hardware_flops_per_micro_step(
        GEMMA2_9B, ARCH, TrainingSetup(attention=Attention.eager, checkpointing=Checkpointing.selective)
    )
    assert forward == tokens * (2 * PSI + attn_full)
    assert backward == 2 * forward + tokens * attn_full


@pytest.mark.parametrize(
    ("precision", "expected"),
    [(Precision.bf16_mixed, 989), (Precision.bf16_true, 989), (Precision.fp16_mixed, 989), (Precision.fp32, 67)],
)
def test_peak_by_precision(precision: Precision, expected: float) -> None:
    assert peak_tflops(load_hardware("h100-sxm-80gb"), precision) == expected


def test_bf16_on_v100_is_an_error() -> None:
    with pytest.raises(ZeroplanError, match="v100-sxm-32gb has no bf16"):
        peak_tflops(load_hardware("v100-sxm-32gb"), Precision.bf16_mixed)
