"""Models used by the throughput benchmarks: the presets where zeroplan has one (Gemma2-9B, Llama-3.1-8B), the
others (MPT-7B, Granite-7B) stated here from their Hugging Face config.json; MPT-7B's count from its model card,
Granite-7B's computed from its shape.
"""

from __future__ import annotations

from zeroplan.models.architecture import Architecture, ParamCount
from zeroplan.models.params import count_params
from zeroplan.models.presets import load_model


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


# The article's model and Llama-3.1-8B: zeroplan's presets (exact counts, tested against transformers).
_GEMMA2, _LLAMA31 = load_model("gemma2-9b"), load_model("llama-3.1-8b")
GEMMA2_9B, GEMMA2_9B_ARCH = count_params(_GEMMA2), _GEMMA2.architecture()
LLAMA31_8B, LLAMA31_8B_ARCH = count_params(_LLAMA31), _LLAMA31.architecture()

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
