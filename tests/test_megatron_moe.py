"""--method megatron for the MoE, MLA and hybrid families: the arguments carry MLA's dims, the dense/MoE layer
pattern and the shared experts, so Megatron's formula sees the model zeroplan counts (tests/test_params_moe.py
holds those counts to transformers). What remains is what docs/megatron.md says the formula does not see."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zeroplan.errors import ZeroplanError
from zeroplan.megatron.mapping import Mesh, megatron_args
from zeroplan.megatron.theory import BYTES_PER_PARAM, weight_and_optimizer_bytes
from zeroplan.models.families import parse_family_config
from zeroplan.models.params import count_params

CONFIGS = Path(__file__).resolve().parent.parent / "validation" / "hf_reference" / "configs"


def config(name: str):
    raw = json.loads((CONFIGS / f"{name}.json").read_text())
    return parse_family_config(raw.get("text_config", raw), strict=False)


def megatron_params(name: str) -> tuple[int, int]:
    """(parameters Megatron's formula counts on one GPU, zeroplan's count)."""
    family = config(name)
    args = megatron_args(family.architecture(), Mesh(gpus=1), seq_len=1024, micro_batch=1,
                         distributed_optimizer=False, recompute=None)
    return int(weight_and_optimizer_bytes(args) / BYTES_PER_PARAM), count_params(family).num_params


def _gpt_oss_unseen(layers: int, d: int, h: int, k: int, head: int, experts: int, inner: int) -> int:
    """Biases of q, k, v, o, the sinks, the router's bias and the experts' biases, per layer, x layers."""
    return layers * ((h + 2 * k) * head + d + h + experts + experts * (2 * inner + d))


# zeroplan's count minus Megatron's: 0 where the formula sees every parameter; otherwise what it does not see.
UNSEEN = {
    "DeepSeek-V3": 0,  # MLA with q_lora_rank, 3 dense + 58 MoE layers, a shared expert
    "Kimi-K2": 0,
    "DeepSeek-V2-Lite": 0,  # q_lora_rank null (one q_proj), 1 dense + 26 MoE layers, 2 shared experts fused
    "GLM-4.5-Air": 46 * (96 + 2 * 8) * 128,  # q/k/v biases (attention_bias)
    "Qwen3-30B-A3B": 48 * 2 * 128,  # the per-head q/k RMSNorms
    "Qwen1.5-MoE-A2.7B": 24 * 3 * 2048,  # q/k/v biases; the shared expert and its gate are seen
    "granite-3.0-1b-a400m": -(49_280 - 49_155) * 1024,  # a padded vocabulary (the head is tied)
    "gpt-oss-20b": _gpt_oss_unseen(24, 2880, 64, 8, 64, 32, 2880),
    "Llama-4-Maverick-17B-128E": -(202_112 - 202_048) * 5120 * 2,  # Megatron pads the vocabulary to 202,112
}


@pytest.mark.parametrize(("name", "unseen"), UNSEEN.items(), ids=UNSEEN.keys())
def test_megatron_sees_the_model_zeroplan_counts(name: str, unseen: int) -> None:
    megatron, ours = megatron_params(name)
    assert ours - megatron == unseen


def test_linear_attention_is_refused() -> None:
    arch = config("Qwen3-Next-80B-A3B").architecture()
    with pytest.raises(ZeroplanError, match="no linear-attention layers, and qwen3_next has 36"):
        megatron_args(arch, Mesh(gpus=8), seq_len=1024, micro_batch=1, distributed_optimizer=False, recompute=None)
