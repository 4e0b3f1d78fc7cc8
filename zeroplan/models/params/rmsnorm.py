"""Module inventories of the RMSNorm decoders: Llama, Mistral, Mixtral, Qwen2, Gemma 2, Phi-3.

Each function lists what transformers' *ForCausalLM builds (transformers 5.x modeling_<family>.py).
Pure: imports neither rich, typer nor yaml nor torch, and does no I/O.
"""

from __future__ import annotations

from zeroplan.models import families as fam
from zeroplan.models.families.rmsnorm import GEMMA2_NORMS_PER_LAYER
from zeroplan.models.params.modules import (
    EMBEDDING,
    EXPERTS,
    GATE_UP,
    NORMS_PER_LAYER,
    Module,
    linear,
    lm_head,
)


def _attention(c: fam.RMSNormDecoderConfig, qkv_bias: bool, o_bias: bool, fused: bool = False) -> list[Module]:
    """q: d -> h h_d, k and v: d -> k h_d each, o: h h_d -> d; Phi-3 fuses q, k and v into qkv_proj."""
    d, n, head = c.hidden_size, c.num_hidden_layers, c.attention_head_dim
    q_width, kv_width = c.num_attention_heads * head, c.kv_heads * head
    if fused:
        qkv = [Module("layers.*.self_attn.qkv_proj", linear(d, q_width + 2 * kv_width, qkv_bias), n)]
    else:
        qkv = [
            Module("layers.*.self_attn.q_proj", linear(d, q_width, qkv_bias), n),
            Module("layers.*.self_attn.{k,v}_proj", linear(d, kv_width, qkv_bias), 2 * n),
        ]
    return [*qkv, Module("layers.*.self_attn.o_proj", linear(q_width, d, o_bias), n)]


def _gated_mlp(c: fam.RMSNormDecoderConfig, bias: bool, fused: bool = False) -> list[Module]:
    """gate and up: d -> I each, down: I -> d; Phi-3 fuses gate and up into gate_up_proj."""
    d, inner, n = c.hidden_size, c.intermediate_size, c.num_hidden_layers
    down = Module("layers.*.mlp.down_proj", linear(inner, d, bias), n)
    if fused:
        return [Module("layers.*.mlp.gate_up_proj", linear(d, GATE_UP * inner, bias), n), down]
    return [Module("layers.*.mlp.{gate,up}_proj", linear(d, inner, bias), 2 * n), down]


def _rmsnorm_decoder(
    c: fam.RMSNormDecoderConfig, blocks: list[Module], norms_per_layer: int = NORMS_PER_LAYER
) -> list[Module]:
    """Embedding, the given attention and MLP modules, m RMSNorms per layer, a final norm and the head."""
    d = c.hidden_size
    return [
        Module("embed_tokens", c.vocab_size * d, role=EMBEDDING),
        *blocks,
        Module("layers.*.<rms norms>", d, norms_per_layer * c.num_hidden_layers),
        Module("norm", d),
        lm_head(c.vocab_size, d, c.tie_word_embeddings),
    ]


def llama_modules(c: fam.LlamaConfig) -> list[Module]:
    """LlamaForCausalLM.

    P = V d + L (d (h + 2 k) h_d + h h_d d + 3 d I + 2 d) + d   (+ V d if untied;
    + (h + 2 k) h_d + d per layer with attention_bias, + 2 I + d with mlp_bias)
    """
    attention = _attention(c, c.attention_bias, c.attention_bias)
    return _rmsnorm_decoder(c, attention + _gated_mlp(c, c.mlp_bias))


def mistral_modules(c: fam.MistralConfig) -> list[Module]:
    """MistralForCausalLM: the Llama formula without biases."""
    return _rmsnorm_decoder(c, _attention(c, False, False) + _gated_mlp(c, False))


def mixtral_modules(c: fam.MixtralConfig) -> list[Module]:
    """MixtralForCausalLM: Mistral attention; per layer a router (E d) and E SwiGLU experts (3 d I each).

    P = V d + L (d (h + 2 k) h_d + h h_d d + E d + 3 E d I + 2 d) + d   (+ V d if untied)
    transformers >= 5 keeps all experts of a layer in one module (experts.gate_up_proj, experts.down_proj).
    """
    d, inner, n, experts = c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.num_local_experts
    moe = [
        Module("layers.*.mlp.gate", experts * d, n),
        Module("layers.*.mlp.experts", experts * (GATE_UP * inner * d + d * inner), n, role=EXPERTS),
    ]
    return _rmsnorm_decoder(c, _attention(c, False, False) + moe)


def qwen2_modules(c: fam.Qwen2Config) -> list[Module]:
    """Qwen2ForCausalLM: the Llama formula plus q, k, v biases, (h + 2 k) h_d per layer."""
    return _rmsnorm_decoder(c, _attention(c, qkv_bias=True, o_bias=False) + _gated_mlp(c, False))


def gemma2_modules(c: fam.Gemma2Config) -> list[Module]:
    """Gemma2ForCausalLM: the Llama formula with 4 norms per layer and h_d from the config.

    P = V d + L (d (h + 2 k) h_d + h h_d d + 3 d I + 4 d) + d   (tied head by default)
    """
    attention = _attention(c, c.attention_bias, c.attention_bias)
    return _rmsnorm_decoder(c, attention + _gated_mlp(c, False), GEMMA2_NORMS_PER_LAYER)


def phi3_modules(c: fam.Phi3Config) -> list[Module]:
    """Phi3ForCausalLM: the Llama formula with fused qkv_proj and gate_up_proj (same count)."""
    return _rmsnorm_decoder(c, _attention(c, False, False, fused=True) + _gated_mlp(c, False, fused=True))
