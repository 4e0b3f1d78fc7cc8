"""Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models" (arXiv:2205.05198):
the paper's activation accounting, as it states it, and its model setups.

The paper counts a GPT layer (LayerNorm, attention with softmax dropout, MLP of width 4h with GeLU, two dropouts)
in 16-bit with 1-byte dropout masks (section 4.1). Per layer, in bytes (Table 2):

    no parallelism                        s b h (34 + 5 a s / h)
    tensor parallel (baseline)            s b h (10 + 24/t + 5 a s / (h t))
    tensor + sequence parallel            s b h (34/t + 5 a s / (h t))
    tensor parallel + selective           s b h (10 + 24/t)
    tensor + sequence + selective         s b h (34/t)
    full recompute                        s b h (2)

s sequence, b micro-batch, h hidden, a heads, t tensor-parallel size, L layers, p pipeline stages, v vocabulary.
Pipeline (section 4.2.3): 1F1B's first stage keeps p micro-batches of L/p layers, L layers' worth whatever p;
the interleaved schedule with m model chunks per stage keeps L (1 + (p - 1) / (p m)). Section 4.3 adds the
embedding dropout's mask, s b h p / t, and when p = 1 the final norm, output layer and fp32 loss, 4 s b h / t
(1 + v / h). zeroplan/megatron/theory.py (Megatron-LM's own estimator) takes the "tensor + sequence + selective"
row for MLP widths other than 4h and adds 8 s b p / t bytes of token ids; tests/test_korthikanti.py pins both.
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

ATTENTION_SCORES = 5  # 2 a s^2 b softmax + a s^2 b dropout mask + 2 a s^2 b dropout output (section 4.1)
REPLICATED = 10  # two LayerNorm inputs (4), two dropout masks (2), the qkv and first MLP linears' inputs (4)
SPLIT = 24  # 34 - 10: q, k, v, the out-projection input, GeLU's and fc2's inputs, divided by t (section 4.2.1)
LAYER = REPLICATED + SPLIT  # 34 s b h (section 4.1, eq. 1)
FULL_RECOMPUTE = 2  # the layer's 16-bit input (Table 2, "full activation recomputation")
OUTPUT = 4  # final LayerNorm input 2 s b h + output layer input 2 s b h, and the fp32 logits 4 s b v (section 4.3)


class Row(str, Enum):
    """The rows of the paper's Table 2."""

    none = "no parallelism"
    tp = "tensor parallel (baseline)"
    tp_sp = "tensor + sequence parallel"
    tp_selective = "tensor parallel + selective recompute"
    tp_sp_selective = "tensor + sequence parallel + selective recompute"
    full = "full recompute"


@dataclass(frozen=True, slots=True)
class Setup:
    """One of the paper's Table 3 configurations (s = 2048, v = 51200 for all: section 6)."""

    name: str
    heads: int
    hidden: int
    layers: int
    tp: int
    pp: int
    gpus: int
    global_batch: int
    micro_batch: int
    seq_len: int = 2048
    vocab: int = 51200


SETUPS = (  # Table 3
    Setup("22B", heads=64, hidden=6144, layers=48, tp=8, pp=1, gpus=8, global_batch=4, micro_batch=4),
    Setup("175B", heads=96, hidden=12288, layers=96, tp=8, pp=8, gpus=64, global_batch=64, micro_batch=1),
    Setup("530B", heads=128, hidden=20480, layers=105, tp=8, pp=35, gpus=280, global_batch=280, micro_batch=1),
    Setup("1T", heads=160, hidden=25600, layers=128, tp=8, pp=64, gpus=512, global_batch=512, micro_batch=1),
)


def layer_activation_bytes(row: Row, s: int, b: int, h: int, a: int, t: int = 1) -> float:
    """One layer's activations, Table 2: sbh (34 + 5as/h) and its five variants (module docstring)."""
    sbh, scores = s * b * h, ATTENTION_SCORES * a * s / h
    if row is Row.none:
        return sbh * (LAYER + scores)
    if row is Row.tp:
        return sbh * (REPLICATED + SPLIT / t + scores / t)
    if row is Row.tp_sp:
        return sbh * (LAYER / t + scores / t)
    if row is Row.tp_selective:
        return sbh * (REPLICATED + SPLIT / t)
    if row is Row.tp_sp_selective:
        return sbh * (LAYER / t)
    return sbh * FULL_RECOMPUTE


def layers_in_flight(layers: int, p: int, chunks: int = 1) -> float:
    """The layers' worth of activations the first pipeline stage keeps (section 4.2.3): L for 1F1B (p micro-batches
    of L/p layers), L (1 + (p - 1) / (p m)) for the interleaved schedule with m model chunks per stage."""
    return layers * (1 + (p - 1) / (p * chunks)) if chunks > 1 else layers


def first_stage_activation_bytes(row: Row, setup: Setup, chunks: int = 1) -> float:
    """The first pipeline stage's activations, section 4.3: the layers in flight x Table 2's row, plus the embedding
    dropout's mask s b h p / t, plus 4 s b h / t (1 + v / h) for the output layer and loss when p = 1."""
    s, b, h, t, p = setup.seq_len, setup.micro_batch, setup.hidden, setup.tp, setup.pp
    total = layers_in_flight(setup.layers, p, chunks) * layer_activation_bytes(row, s, b, h, setup.heads, t)
    total += s * b * h * p / t
    if p == 1:
        total += OUTPUT * s * b * h / t * (1 + setup.vocab / h)
    return total


def selective_saving(setup: Setup) -> float:
    """The share of a layer's activations selective recompute removes without tensor parallelism:
    (5as/h) / (34 + 5as/h) (section 5: 70% for GPT-3 175B, 65% for MT-NLG 530B)."""
    scores = ATTENTION_SCORES * setup.heads * setup.seq_len / setup.hidden
    return scores / (LAYER + scores)


def reduction_over_baseline(setup: Setup) -> float:
    """Tensor-parallel baseline over tensor + sequence parallel + selective recompute, per layer (the abstract's
    "reduces activation memory by 5x")."""
    args = (setup.seq_len, setup.micro_batch, setup.hidden, setup.heads, setup.tp)
    return layer_activation_bytes(Row.tp, *args) / layer_activation_bytes(Row.tp_sp_selective, *args)

