"""A decoder as data: what one block holds (attention, MLP, norms) and how the blocks stack, per layer.

A family config says what its transformers modeling file builds by returning a `Decoder` from `decoder()`;
zeroplan.models.params turns it into the module inventory (HF module names, own parameters, tensor shapes, what
LoRA can target and tensor parallelism splits), and the count, largest layer, embeddings and active parameters
follow from that inventory. docs/models.md shows how to write one. Pure: frozen dataclasses, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

NormKind = Literal["rmsnorm", "layernorm"]
QKNorm = Literal["none", "head", "full"]  # head: one norm of head_dim per head (Qwen3); full: over h h_d (OLMo 2)
ExpertLayout = Literal["out_in", "in_out"]  # fused experts' gate_up_proj: (E, 2I, d) or (E, d, 2I) (Llama 4, gpt-oss)

# Module kinds: what a module is to LoRA (which linears an adapter can target) and to tensor parallelism (which
# tensors it splits, Megatron-style: column = split the output features, row = split the input features).
COLUMN = "linear_column"  # a linear whose output features TP splits (q/k/v, gate/up, fused qkv)
ROW = "linear_row"  # a linear whose input features TP splits (o_proj, down_proj)
LINEAR = "linear"  # a linear TP keeps whole (MLA's low-rank a-projections, a shared-expert gate)
EMBEDDING_KIND = "embedding"  # a token or position table (TP: vocab-parallel), or the LM head
NORM = "norm"
ROUTER = "router"  # an MoE router (a linear d -> E, replicated)
EXPERTS_KIND = "experts"  # fused routed experts, leading dimension E (expert parallelism splits it)
OTHER = "other"  # sinks, a depthwise conv, per-head scalars, relative-position tables


@dataclass(frozen=True, kw_only=True)
class Attention:
    """Softmax attention, MHA / GQA / MQA: q d -> h h_d, k and v d -> k h_d each, o h h_d -> d.

    head_dim is its own width (Gemma, Mistral-Small: h h_d may exceed d). `fused` names one q/k/v projection
    (Phi-3 qkv_proj) whose width is `fused_width` when the family sets it, else (h + 2 k) h_d.
    """

    heads: int
    kv_heads: int
    head_dim: int
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: QKNorm = "none"
    sinks: bool = False  # gpt-oss: one learned logit per head, a parameter of the attention module itself
    output_gate: bool = False  # Qwen3-Next: q_proj also emits a sigmoid gate as wide as the queries
    prefix: str = "self_attn"
    names: tuple[str, str, str, str] = ("q_proj", "k_proj", "v_proj", "o_proj")
    fused: str | None = None
    fused_width: int | None = None
    conv1d: bool = False  # GPT-2's Conv1D stores weights (in, out)
    qk_norm_names: tuple[str, str] = ("q_norm", "k_norm")  # Phi: q_layernorm, k_layernorm
    qk_norm_stacked: bool = False  # Cohere's per-head norms: one weight (heads, h_d), not one h_d shared by all
    kv_shared: bool = False  # Gemma 4's kv-sharing layers: no k/v projections nor k norm (they reuse an earlier layer's)
    k_eq_v: bool = False  # Gemma 4's attention_k_eq_v global layers: no v_proj (the keys serve as values)


@dataclass(frozen=True, kw_only=True)
class MLA:
    """Multi-head latent attention (DeepSeek-V2/V3): low-rank q (optional) and a shared compressed kv.

    q_a_proj d -> r_q, q_a_layernorm, q_b_proj r_q -> h (n + r)   (or q_proj d -> h (n + r) without q_lora_rank);
    kv_a_proj_with_mqa d -> r_kv + r, kv_a_layernorm r_kv, kv_b_proj r_kv -> h (n + v_h); o_proj h v_h -> d
    (n = qk_nope_head_dim, r = qk_rope_head_dim, v_h = v_head_dim).
    """

    heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    bias: bool = False  # attention_bias: q_a_proj, kv_a_proj_with_mqa and o_proj
    prefix: str = "self_attn"
    # DeepSeek-V3.2's lightning indexer (DeepseekV32Indexer), (heads, head_dim): wq_b r_q -> heads head_dim, wk d ->
    # head_dim, k_norm (a LayerNorm with bias), weights_proj d -> heads; None: no indexer
    indexer: tuple[int, int] | None = None


@dataclass(frozen=True, kw_only=True)
class LinearAttention:
    """Qwen3-Next's gated delta net (Qwen3NextGatedDeltaNet): a linear-attention token mixer.

    in_proj_qkvz d -> 2 K + 2 V, in_proj_ba d -> 2 h_v, conv1d over 2 K + V channels, dt_bias and A_log (h_v),
    a gated RMSNorm of v_d, out_proj V -> d (K = h_k k_d, V = h_v v_d).
    """

    key_heads: int
    value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int
    prefix: str = "linear_attn"
    split: bool = False  # Qwen3.5: in_proj_qkv, in_proj_z, in_proj_b, in_proj_a (Qwen3-Next fuses qkvz and ba)


@dataclass(frozen=True, kw_only=True)
class CompressedAttention:
    """DeepSeek-V4's attention (DeepseekV4Attention): a low-rank query, one shared k=v head, per-head sinks, a grouped
    low-rank output projection, and on compressed layers a KV compressor (and on CSA layers its lightning indexer).

    q_a_proj d -> r_q, q_a_norm (r_q), q_b_proj r_q -> h h_d, kv_proj d -> h_d, kv_norm (h_d), sinks (h),
    o_a_proj (g o_r, h h_d / g) (one weight, g block-diagonal groups), o_b_proj g o_r -> d; compressor: kv_proj and
    gate_proj d -> w h_d, position_bias (m, w h_d), kv_norm (h_d), w = 2 on CSA layers (two overlapping series),
    1 on HCA; indexer (CSA): kv_proj and gate_proj d -> 2 i_d, position_bias (m, 2 i_d), kv_norm (i_d), q_b_proj
    r_q -> i_h i_d, scorer.weights_proj d -> i_h.
    """

    heads: int
    head_dim: int
    q_lora_rank: int
    o_groups: int
    o_lora_rank: int
    compress_rate: int = 0  # 0: a sliding-only layer, no compressor
    overlap: bool = False  # CSA: the compressor's two series (w = 2) and a lightning indexer
    indexer: tuple[int, int] = (0, 0)  # (index_n_heads, index_head_dim), read with overlap
    prefix: str = "self_attn"


Mixer = Attention | MLA | LinearAttention | CompressedAttention


@dataclass(frozen=True, kw_only=True)
class MLP:
    """A dense MLP: gated (gate, up: d -> I; down: I -> d) or not (up: d -> I, down: I -> d).

    `names` are (gate, up, down); a fused gate+up projection (Phi-3, GLM-4) is named by `fused`.
    """

    inner: int
    gated: bool = True
    bias: bool = False
    prefix: str = "mlp"
    names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")
    fused: str | None = None
    conv1d: bool = False


@dataclass(frozen=True, kw_only=True)
class MoE:
    """Routed experts, fused as transformers 5.x builds them (one module, leading dimension E), and a router.

    experts.gate_up_proj (E, 2I, d) and experts.down_proj (E, d, I) in the "out_in" layout, transposed in "in_out";
    with `expert_bias`, gate_up_proj_bias (E, 2I) and down_proj_bias (E, d). Optional shared experts (a dense
    MLP beside the routed ones) and a shared-expert gate d -> 1 (Qwen2-MoE). A router score-correction bias
    (DeepSeek-V3) is a persistent buffer, not a parameter.
    """

    experts: int
    top_k: int
    inner: int
    router_bias: bool = False
    expert_bias: bool = False
    layout: ExpertLayout = "out_in"
    shared: MLP | None = None
    shared_gate: bool = False
    correction_bias: bool = False
    router_statics: bool = False  # ERNIE 4.5: gate.moe_statics.e_score_correction_bias (1, E), a parameter
    prefix: str = "mlp"
    router: str = "gate"
    router_kind: str = ROUTER  # LINEAR where the router's projection is an nn.Linear LoRA can target (Gemma 4's proj)
    shared_gate_name: str = "shared_expert_gate"


FeedForward = MLP | MoE


@dataclass(frozen=True, kw_only=True)
class Layer:
    """One decoder layer: its token mixer, its MLP, and the attention type its family's layer_types names."""

    mixer: Mixer
    mlp: FeedForward
    attention_type: str = "full_attention"  # sliding_attention, chunked_attention, linear_attention, ...
    rope: bool = True  # False: a NoPE layer (SmolLM3's no_rope_layers, Llama 4's global layers)
    beside: MoE | None = None  # routed experts beside the dense MLP, at the layer's own level (Gemma 4's MoE block)
    extras: tuple[Extra, ...] = ()  # the layer's own modules no field above covers (Gemma 4's per-layer input gate)


@dataclass(frozen=True, kw_only=True)
class Extra:
    """A family's module the block description does not cover (BLOOM's embedding LayerNorm, OPT's projections)."""

    name: str
    shapes: tuple[tuple[int, ...], ...]
    kind: str
    in_features: int = 0
    out_features: int = 0
    embedding: bool = False
    tensors: tuple[str, ...] = ()  # attribute names where they are not weight/bias (Gemma 4's router `scale`)


@dataclass(frozen=True, kw_only=True)
class Decoder:
    """A decoder-only LM as transformers' *ForCausalLM builds it.

    Names are the HF module paths: `{body}.{embed}`, `{body}.{stack}.<i>.{...}`, `{body}.{final_norm}`, `{head}`.
    `layer_norms` are the norm module names inside a layer, in order; `norm_position` says where they sit
    (pre: before attention and MLP; post: after them, OLMo 2; sandwich: both, Gemma 2/3).
    """

    hidden: int
    vocab: int
    layers: tuple[tuple[Layer, int], ...]  # runs of identical layers in order: ((layer, how many), ...)
    tie_word_embeddings: bool
    norm: NormKind = "rmsnorm"
    norm_bias: bool = False  # LayerNorm with bias (nn.LayerNorm's default)
    norm_affine: bool = True  # False: norms without parameters (OPT's layer_norm_elementwise_affine=False)
    embed_width: int | None = None  # token-embedding and head width when it is not `hidden` (OPT's word_embed_proj_dim)
    layer_norms: tuple[str, ...] = ("input_layernorm", "post_attention_layernorm")
    norm_position: Literal["pre", "post", "sandwich"] = "pre"
    parallel: bool = False  # attention and MLP read the same normed input (GPT-J, NeoX)
    positions: int = 0  # rows of a learned position table
    lm_head_bias: bool = False  # GPT-J
    body: str = "model"
    stack: str = "layers"
    embed: str = "embed_tokens"
    position_name: str = "embed_positions"
    final_norm: str | None = "norm"
    head: str = "lm_head"
    extras: tuple[Extra, ...] = ()
    notes: tuple[str, ...] = field(default=())  # what transformers builds differently from the checkpoint (MTP)

    @property
    def num_layers(self) -> int:
        return sum(count for _, count in self.layers)

    def per_layer(self) -> list[Layer]:
        """One entry per layer (only for a bounded layer count: families with per-layer types check it)."""
        return [layer for layer, count in self.layers for _ in range(count)]


def uniform(layer: Layer, n: int) -> tuple[tuple[Layer, int], ...]:
    """n identical layers, as one run."""
    return ((layer, n),)


def runs(layers: list[Layer]) -> tuple[tuple[Layer, int], ...]:
    """Per-layer entries as runs of identical consecutive layers."""
    out: list[tuple[Layer, int]] = []
    for layer in layers:
        if out and out[-1][0] == layer:
            out[-1] = (layer, out[-1][1] + 1)
        else:
            out.append((layer, 1))
    return tuple(out)
