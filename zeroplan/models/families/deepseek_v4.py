"""DeepSeek-V4 (`DeepseekV4Config`, model_type deepseek_v4): keys and defaults of
transformers==5.25.0:models/deepseek_v4/configuration_deepseek_v4.py, modules of modeling_deepseek_v4.py.

What differs from DeepSeek-V3 (models/families/deepseek.py): attention is no MLA but one shared k=v head behind a
low-rank query (CompressedAttention: sinks, a grouped low-rank output projection, and per layer type a KV compressor:
heavily compressed (HCA, every compress_rates' m' tokens) or compressed sparse (CSA, m, with a lightning indexer));
every layer is MoE (hash-routed `hash_moe` or top-k `moe`, mlp_layer_types) with one shared expert of
moe_intermediate_size; the residual stream is hc_mult hyper-connection streams (attn_hc and ffn_hc per layer:
fn ((2 + N) N, N d), base ((2 + N) N), scale (3); hc_head in the model: hc_fn (N, N d), hc_base (N), hc_scale (1)).
Buffers, not parameters: a hash layer's tid2eid (V, k) int64 and a top-k layer's e_score_correction_bias (E).
Legacy keys folded as DeepseekV4Config.__post_init__ folds them: compress_ratios (per layer 0/4/128),
compress_rate_csa / compress_rate_hca, num_hash_layers. The multi-token-prediction layers are not built.

Its activations (hyper-connection streams with a Sinkhorn normalisation, compressors, the eager core with sinks):
memory/activations/deepseek_v4.py, from the facts architecture() hands it. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from zeroplan.models.architecture import Architecture
from zeroplan.models.block import MLP, OTHER, CompressedAttention, Decoder, Extra, Layer, MoE, runs
from zeroplan.models.families.base import FamilyConfig, check_layer_count
from zeroplan.models.families.moe import check_top_k

SLIDING, CSA, HCA = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"
RATIO_TYPES = {0: SLIDING, 4: CSA, 128: HCA}  # DeepseekV4Config's _COMPRESS_RATIO_TO_LAYER_TYPE
DEFAULT_RATES = {CSA: 4, HCA: 128}
DEFAULT_HASH_LAYERS = 3  # DeepseekV4Config.default_num_hash_layers
DEFAULT_ROTARY_FACTOR = 64 / 512  # DeepseekV4Config.default_partial_rotary_factor (qk_rope_head_dim / head_dim)
HC_OUTPUTS = 3  # the hyper-connection's pre, post and comb weights, a scale each
AttentionType = Literal["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"]


class DeepseekV4Config(FamilyConfig):
    """DeepSeek-V4 (defaults = DeepseekV4Config's, V4-Flash's shapes).

    P = V d (+ V d untied head) + d + N N d + 2 N + 1
        + L (h + d r_q + r_q + r_q h h_d + d h_d + h_d + h h_d o_r + g o_r d + 2 d
             + E d + 3 E d I + 3 d I + 2 (N d (2 + N) N + (2 + N) N + 3))
        + HCA layers (m' h_d + 2 d h_d + h_d) + CSA layers (2 m h_d + 4 d h_d + h_d
             + 2 m i_d + 4 d i_d + i_d + r_q i_h i_d + d i_h)
    """

    ALIASES: ClassVar[dict[str, str]] = {"num_local_experts": "n_routed_experts",
                                         "intermediate_size": "moe_intermediate_size"}  # attribute_map
    REQUIRED: ClassVar[tuple[str, ...]] = ("hidden_size", "num_hidden_layers", "num_attention_heads")

    model_type: Literal["deepseek_v4"]
    vocab_size: PositiveInt = 129280
    hidden_size: PositiveInt = 4096
    moe_intermediate_size: PositiveInt = 2048
    intermediate_size: PositiveInt | None = None
    num_hidden_layers: PositiveInt = 43
    num_attention_heads: PositiveInt = 64
    num_key_value_heads: PositiveInt = 1  # the shared k=v head; no module reads it
    head_dim: PositiveInt = 512
    q_lora_rank: PositiveInt = 1024
    num_experts_per_tok: PositiveInt = 6
    n_routed_experts: PositiveInt = 256
    num_local_experts: PositiveInt | None = None
    n_shared_experts: NonNegativeInt = 1  # DeepseekV4SparseMoeBlock builds one shared MLP whatever it says
    max_position_embeddings: PositiveInt = 1_048_576
    layer_types: list[AttentionType] | None = None
    compress_rates: dict[AttentionType, PositiveInt] | None = None
    compress_ratios: list[Literal[0, 4, 128]] | None = None  # legacy, popped by __post_init__
    compress_rate_csa: PositiveInt | None = None
    compress_rate_hca: PositiveInt | None = None
    hc_mult: PositiveInt = 4
    mlp_layer_types: list[Literal["hash_moe", "moe"]] | None = None
    num_hash_layers: NonNegativeInt | None = None  # legacy
    sliding_window: PositiveInt = 128
    o_groups: PositiveInt = 8
    o_lora_rank: PositiveInt = 1024
    index_n_heads: PositiveInt = 64
    index_head_dim: PositiveInt = 128
    index_topk: PositiveInt = 512
    num_nextn_predict_layers: NonNegativeInt = 1
    hidden_act: str = "silu"
    swiglu_limit: PositiveFloat = 10.0
    # Read by the forward only, so by the activations (memory/activations/deepseek_v4.py): the router's score function,
    # the Sinkhorn iterations of the hyper-connections (each keeps its tensors), the rotary slice; hc_eps and the
    # scaling factor change no saved tensor.
    scoring_func: Literal["sqrtsoftplus", "softmax", "sigmoid"] = "sqrtsoftplus"
    routed_scaling_factor: PositiveFloat = 1.5
    hc_sinkhorn_iters: PositiveInt = 20
    hc_eps: PositiveFloat = 1.0e-6
    partial_rotary_factor: PositiveFloat | None = None
    qk_rope_head_dim: PositiveInt | None = None  # legacy: partial_rotary_factor = qk_rope_head_dim / head_dim
    tie_word_embeddings: bool = False
    mlp_bias: bool = False
    attention_dropout: NonNegativeFloat = 0.0  # on the eager core's probabilities (memory/activations/deepseek_v4.py)

    @model_validator(mode="after")
    def _check(self) -> DeepseekV4Config:
        check_layer_count("num_hidden_layers", self.num_hidden_layers)
        check_top_k("num_experts_per_tok", self.num_experts_per_tok, "n_routed_experts", self.experts)
        n = self.num_hidden_layers
        for name, types in (("layer_types", self.types()), ("mlp_layer_types", self.mlp_types())):
            if len(types) != n:  # DeepseekV4Config.validate_layer_type
                raise ValueError(f"{name} has {len(types)} entries, num_hidden_layers is {n}")
        if (self.num_attention_heads * self.head_dim) % self.o_groups:
            raise ValueError(f"num_attention_heads x head_dim ({self.num_attention_heads * self.head_dim}) is not a "
                             f"multiple of o_groups ({self.o_groups})")
        return self

    @property
    def experts(self) -> int:
        return self.resolved("n_routed_experts")

    @property
    def expert_width(self) -> int:
        return self.resolved("moe_intermediate_size")

    def types(self) -> list[str]:
        """layer_types > legacy compress_ratios > 2 HCA layers then CSA/HCA alternating; cut to num_hidden_layers."""
        n = self.num_hidden_layers
        if self.layer_types is not None:
            return list(self.layer_types[:n])
        if self.compress_ratios is not None:
            return [RATIO_TYPES[r] for r in self.compress_ratios][:n]
        return [HCA] * min(n, 2) + [CSA if i % 2 else HCA for i in range(max(n - 2, 0))]

    def mlp_types(self) -> list[str]:
        n = self.num_hidden_layers
        if self.mlp_layer_types is not None:
            return list(self.mlp_layer_types[:n])
        hashed = DEFAULT_HASH_LAYERS if self.num_hash_layers is None else self.num_hash_layers
        return ["hash_moe"] * min(n, hashed) + ["moe"] * max(0, n - hashed)

    def rates(self) -> dict[str, int]:
        rates = {**DEFAULT_RATES, **(self.compress_rates or {})}
        if self.compress_rate_csa is not None:
            rates[CSA] = self.compress_rate_csa
        if self.compress_rate_hca is not None:
            rates[HCA] = self.compress_rate_hca
        return rates

    def attention(self, kind: str) -> CompressedAttention:
        return CompressedAttention(heads=self.num_attention_heads, head_dim=self.head_dim, q_lora_rank=self.q_lora_rank,
                                   o_groups=self.o_groups, o_lora_rank=self.o_lora_rank,
                                   compress_rate=0 if kind == SLIDING else self.rates()[kind], overlap=kind == CSA,
                                   indexer=(self.index_n_heads, self.index_head_dim))

    def hyper_connections(self) -> tuple[Extra, ...]:
        n, d = self.hc_mult, self.hidden_size
        width = (2 + n) * n
        return tuple(Extra(name=name, shapes=((width, n * d), (width,), (HC_OUTPUTS,)), kind=OTHER,
                           tensors=("fn", "base", "scale")) for name in ("attn_hc", "ffn_hc"))

    def decoder(self) -> Decoder:
        shared = MLP(inner=self.expert_width, bias=self.mlp_bias, prefix="shared_experts")
        layers = []
        for kind, routing in zip(self.types(), self.mlp_types(), strict=True):
            moe = MoE(experts=self.experts, top_k=self.num_experts_per_tok, inner=self.expert_width, shared=shared,
                      correction_bias=routing == "moe")
            layers.append(Layer(mixer=self.attention(kind), mlp=moe, attention_type=kind,
                                extras=self.hyper_connections()))
        n, d = self.hc_mult, self.hidden_size
        head = Extra(name="hc_head", shapes=((n, n * d), (n,), (1,)), kind=OTHER,
                     tensors=("hc_fn", "hc_base", "hc_scale"))
        notes = (f"num_nextn_predict_layers: {self.num_nextn_predict_layers} multi-token-prediction layer(s) in the "
                 "checkpoint, not built by transformers: not counted",) if self.num_nextn_predict_layers else ()
        return Decoder(hidden=d, vocab=self.vocab_size, layers=runs(layers),
                       tie_word_embeddings=self.tie_word_embeddings, extras=(head,), notes=notes)

    def rotary_dims(self) -> int:
        """The rotary slice of a head: int(head_dim x partial_rotary_factor) (legacy qk_rope_head_dim / head_dim,
        default DeepseekV4Config.default_partial_rotary_factor 64/512), in cos/sin pairs as
        DeepseekV4RotaryEmbedding makes them (arange(0, dim, 2), each entry repeated twice)."""
        factor = self.partial_rotary_factor
        if factor is None:
            factor = self.qk_rope_head_dim / self.head_dim if self.qk_rope_head_dim else DEFAULT_ROTARY_FACTOR
        return 2 * -(-int(self.head_dim * factor) // 2)

    def architecture(self) -> Architecture:
        """The flat facts, and what memory.activations.deepseek_v4 reads of its blocks."""
        rates = self.rates()
        facts: dict[str, Any] = dict(
            family=self.model_type, hidden_size=self.hidden_size, num_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads, num_key_value_heads=1, head_dim=self.head_dim,
            intermediate_size=self.expert_width, vocab_size=self.vocab_size, gated_mlp=True, norm="rmsnorm",
            tie_word_embeddings=self.tie_word_embeddings, num_experts=self.experts,
            num_experts_per_tok=self.num_experts_per_tok, shared_expert_intermediate_size=self.expert_width,
            attention_sinks=True, sliding_window=self.sliding_window, hidden_act=self.hidden_act,
            q_lora_rank=self.q_lora_rank, qk_rope_head_dim=self.rotary_dims(), attention_types=tuple(self.types()),
            attention_dropout=self.attention_dropout, router_score=self.scoring_func, hc_mult=self.hc_mult,
            hc_sinkhorn_iters=self.hc_sinkhorn_iters,
            o_groups=self.o_groups, o_lora_rank=self.o_lora_rank, csa_compress_rate=rates[CSA],
            hca_compress_rate=rates[HCA])
        return Architecture(**facts)
