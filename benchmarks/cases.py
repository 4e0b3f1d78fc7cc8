"""Model shapes used by the throughput benchmarks (stated here until the model presets land in configs/models).

Shapes from each model's Hugging Face config.json; counts from the model cards (Gemma2-9B, Llama-3.1-8B, MPT-7B)
or computed from the shape (Granite-7B).
"""

from __future__ import annotations

from zeroplan.spec import Architecture, ParamCount


def _llama_like_count(arch: Architecture) -> int:
    """Untied Llama-family count: 2 V h + L (attention + SwiGLU MLP + 2 norms) + final norm."""
    h, q, kv = arch.hidden_size, arch.num_attention_heads * arch.head_dim, arch.num_key_value_heads * arch.head_dim
    layer = 2 * h * q + 2 * h * kv + 3 * h * arch.intermediate_size + 2 * h
    return 2 * arch.vocab_size * h + arch.num_layers * layer + h


def dense(num_params: int, embedding: int) -> ParamCount:
    return ParamCount(
        num_params=num_params,
        num_embedding_params=embedding,
        largest_layer_params=embedding,
        num_active_params=num_params,
    )


# The article's model: google/gemma-2-9b (tied embeddings, 16 heads x 256 = 4096 attention width).
GEMMA2_9B_ARCH = Architecture(
    family="gemma2",
    hidden_size=3584,
    num_layers=42,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=256,
    intermediate_size=14336,
    vocab_size=256000,
    gated_mlp=True,
    norm="rmsnorm",
    norms_per_layer=4,
    tie_word_embeddings=True,
    attn_logit_softcapping=50.0,
    final_logit_softcapping=30.0,
    sliding_window=4096,
)
GEMMA2_9B = dense(9_241_705_984, 256000 * 3584)

# mosaicml/mpt-7b: d_model 4096, 32 layers, 32 heads, GELU MLP x4, vocab 50432, tied, no biases.
MPT_7B_ARCH = Architecture(
    family="mpt",
    hidden_size=4096,
    num_layers=32,
    num_attention_heads=32,
    num_key_value_heads=32,
    head_dim=128,
    intermediate_size=16384,
    vocab_size=50432,
    gated_mlp=False,
    norm="layernorm",
    tie_word_embeddings=True,
)
MPT_7B = dense(6_649_286_656, 50432 * 4096)

# meta-llama/Llama-3.1-8B.
LLAMA31_8B_ARCH = Architecture(
    family="llama",
    hidden_size=4096,
    num_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    intermediate_size=14336,
    vocab_size=128256,
    gated_mlp=True,
    norm="rmsnorm",
    tie_word_embeddings=False,
)
LLAMA31_8B = dense(8_030_261_248, 2 * 128256 * 4096)

# ibm-granite/granite-7b-base: Llama-2-7B shape with a 32008 vocabulary.
GRANITE_7B_ARCH = Architecture(
    family="llama",
    hidden_size=4096,
    num_layers=32,
    num_attention_heads=32,
    num_key_value_heads=32,
    head_dim=128,
    intermediate_size=11008,
    vocab_size=32008,
    gated_mlp=True,
    norm="rmsnorm",
    tie_word_embeddings=False,
)
GRANITE_7B = dense(_llama_like_count(GRANITE_7B_ARCH), 2 * 32008 * 4096)
