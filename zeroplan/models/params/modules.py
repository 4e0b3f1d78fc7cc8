"""The unit every family's count is built from: one kind of nn.Module and its own direct parameters.

Pure: imports neither rich, typer nor yaml nor torch, and does no I/O.
"""

from __future__ import annotations

from typing import NamedTuple

from zeroplan.models.block import (  # noqa: F401  (the kinds, re-exported beside Module)
    COLUMN,
    EMBEDDING_KIND,
    EXPERTS_KIND,
    LINEAR,
    NORM,
    OTHER,
    ROUTER,
    ROW,
)

LAYERNORM_TENSORS = 2  # nn.LayerNorm: weight and bias, each of the normalized width
QKV = 3  # fused query, key and value projections (GPT-2 c_attn, NeoX/BLOOM query_key_value)
GATE_UP = 2  # fused gate and up projections (Phi-3 gate_up_proj, Mixtral experts.gate_up_proj)
ATTENTION_PROJECTIONS = 4  # query, key, value and output projections of one attention block
NORMS_PER_LAYER = 2  # pre-attention and pre-MLP norms of a decoder layer

BODY, EMBEDDING, EXPERTS = "body", "embedding", "experts"


class Module(NamedTuple):
    """One kind of nn.Module in the built model, with its own direct parameters (recurse=False)."""

    name: str
    params: int
    count: int = 1  # how many of them the model holds (usually one per layer)
    role: str = BODY  # EMBEDDING: token/position tables and an untied LM head; EXPERTS: routed experts
    tied: bool = False  # shares its weight with an earlier module (a tied LM head): counted once
    # Shapes of its direct parameter tensors, where a family lists them (FSDP2 pads dim 0, ZeroRedundancyOptimizer
    # partitions whole tensors); () = unknown, read as one flat tensor of `params` elements.
    shapes: tuple[tuple[int, ...], ...] = ()
    kind: str = OTHER  # COLUMN, ROW, LINEAR, EMBEDDING_KIND, NORM, ROUTER, EXPERTS_KIND or OTHER
    in_features: int = 0  # linears (and experts, per expert): nn.Linear's in_features; 0 = not a linear
    out_features: int = 0
    active: int | None = None  # own parameters one token touches (experts: k of E); None = all of them
    # Its tensors' attribute names where they are not nn.Linear's weight/bias: gpt-oss's `sinks`, Qwen3-Next's
    # `dt_bias` and `A_log`, a tied head's lone `bias` (zeroplan.models.named); () = weight, bias.
    tensors: tuple[str, ...] = ()


def linear(n_in: int, n_out: int, bias: bool) -> int:
    """nn.Linear / Conv1D: n_in * n_out weights, plus n_out biases."""
    return n_in * n_out + (n_out if bias else 0)


def layernorm(width: int, affine: bool = True) -> int:
    """nn.LayerNorm: weight and bias, none without elementwise_affine."""
    return LAYERNORM_TENSORS * width if affine else 0


def linear_shapes(n_in: int, n_out: int, bias: bool, conv1d: bool = False) -> tuple[tuple[int, ...], ...]:
    """nn.Linear's weight is (out, in); transformers' GPT-2 Conv1D stores it (in, out); the bias is (out,)."""
    weight = (n_in, n_out) if conv1d else (n_out, n_in)
    return (weight, (n_out,)) if bias else (weight,)


def lm_head(vocab: int, hidden: int, tied: bool) -> Module:
    """The output projection, V * d; with tied embeddings it is the embedding's weight again."""
    return Module("lm_head", vocab * hidden, role=EMBEDDING, tied=tied)

