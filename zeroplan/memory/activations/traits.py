"""How each family's Hugging Face modules save tensors for backward: the facts activation_terms reads.

Pure: imports neither rich, typer, yaml nor torch and does no I/O. Every entry names the HF module
(transformers 5.x) it describes; validation/measure_activations.py checks them against PyTorch.
"""

from __future__ import annotations

from dataclasses import dataclass

from zeroplan.models.architecture import Architecture

GEMMA_FAMILIES = frozenset({"gemma", "gemma2", "gemma3", "gemma3_text"})
# Olmo2RMSNorm (modeling_olmo2.py) returns its rotary tables in fp32: OLMo 2 and OLMo 3.
OLMO2_NORM_FAMILIES = frozenset({"olmo2", "olmo3"})
# RMSNorms that multiply by their weight in fp32 and cast after (Olmo2RMSNorm, GptOssRMSNorm).
FP32_WEIGHT_NORM_FAMILIES = OLMO2_NORM_FAMILIES | {"gpt_oss", "deepseek_v4"}
# Qwen3NextRMSNorm / Qwen3_5RMSNorm (transformers==5.25.0: models/qwen3_5/modeling_qwen3_5.py): Gemma's
# (1 + weight) multiply in fp32, cast after
GEMMA_NORM_FAMILIES = GEMMA_FAMILIES | {"qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"}
T5_FAMILIES = frozenset({"t5", "mt5", "umt5"})
# CohereLayerNorm (modeling_cohere.py, Cohere 2's the same): a LayerNorm written out in fp32 ops, no bias.
COHERE_NORM_FAMILIES = frozenset({"cohere", "cohere2"})
# One q/k/v matmul whose output the q, k, v are views of: GPT2Attention.c_attn, Phi3Attention.qkv_proj,
# GPTNeoXAttention / BloomAttention / FalconAttention.query_key_value.
FUSED_QKV_FAMILIES = frozenset({"gpt2", "phi3", "gpt_neox", "bloom"})
# FalconAttention reshapes q, k, v out of the fused output into tensors of their own and broadcasts the
# k/v heads to the query heads with expand (no repeat_kv copy).
KV_BROADCAST_FAMILIES = frozenset({"falcon"})
ALIBI_FAMILIES = frozenset({"bloom"})  # no rotary tables; the ALiBi bias is not saved by baddbmm
# Eager softmax in the compute dtype (GPT2/T5 eager_attention_forward); the others (Falcon too since transformers 5:
# transformers==5.25.0 models/falcon/modeling_falcon.py eager_attention_forward) call softmax(..., dtype=torch.float32)
# and cast the probabilities back.
SOFTMAX_IN_COMPUTE_DTYPE = frozenset({"gpt2", "llama4_text"}) | T5_FAMILIES  # Llama 4: softmax(x.float()).to(e)
# BloomAttention has no SDPA / FlashAttention path; DeepseekV4PreTrainedModel neither (_supports_sdpa,
# _supports_flash_attn False: head_dim 512, the learned sinks, the compressed keys appended inside the attention)
EAGER_ONLY_FAMILIES = frozenset({"bloom", "deepseek_v4"})
EMBEDDING_NORM_FAMILIES = frozenset({"bloom"})  # BloomModel.word_embeddings_layernorm
PER_TOKEN_POSITION_IDS = frozenset({"opt"})  # OPTLearnedPositionalEmbedding: b x s ids (cumsum of the mask)
# Rotary dims / head dim when the Architecture cannot say: GPTNeoXConfig rotary_pct (partial_rotary_factor)
# defaults to 0.25 and every published GPT-NeoX / Pythia config keeps it.
# GptOssRotaryEmbedding: cos/sin of d/2 columns (no duplication), applied to the two halves and concatenated.
HALF_ROTARY_TABLE_FAMILIES = frozenset({"gpt_oss"})
ROTARY_FRACTION = {"gpt_neox": 0.25, "glm4_moe": 0.5}  # Glm4MoeConfig partial_rotary_factor 0.5 (GLM-4.5 keeps it)
# Qwen3-Next, Qwen3.5: partial_rotary_factor 0.25 (transformers==5.25.0 configuration_qwen3_5.py __post_init__
# default; the published configs' rope_parameters keep it): the rotated quarter and the rest joined by torch.cat
ROTARY_FRACTION |= dict.fromkeys(("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"), 0.25)

# The activation a family uses when the Architecture names none (built without a config): its config default.
FAMILY_ACTIVATION = {"gpt2": "gelu_new", "opt": "relu", "gpt_neox": "gelu", "bloom": "bloom_gelu", "falcon": "gelu"}


@dataclass(frozen=True)
class ActivationSaves:
    """What one activation keeps for backward per element of its input (T x f in an MLP)."""

    tensors: int  # tensors of the input's size and dtype (e bytes per element each)
    mask_bytes: int  # and bytes per element independent of the dtype (a bool mask)
    saves_output: bool  # one of the tensors is its output, which the next op (down input, gate product) shares


# Measured: validation/measure_act_fns.py -> validation/act_fns_measured.json (every name in transformers'
# ACT2CLS, fp32 and bf16; tests/test_activation_functions.py holds this table to the file). Native kernels
# (F.gelu with or without approximate="tanh", F.silu, mish, hardswish, the ReLUs) keep one tensor: their input,
# or for relu / sigmoid / tanh their output. Python compositions keep their intermediates: NewGELUActivation
# ("gelu_new") keeps the input, tanh output, 0.5 x and 1 + tanh; FastGELU 7; XIELU 4 and a bool mask (and three
# scalars, ignored). BloomGelu (modeling_bloom.py GeLUFunction) saves its input: the bloom cases measure it.
ACTIVATION_SAVES = {
    "gelu": ActivationSaves(1, 0, False),
    "gelu_10": ActivationSaves(2, 0, False),
    "gelu_fast": ActivationSaves(7, 0, False),
    "gelu_new": ActivationSaves(4, 0, False),
    "gelu_python": ActivationSaves(3, 0, False),
    "gelu_pytorch_tanh": ActivationSaves(1, 0, False),
    "gelu_python_tanh": ActivationSaves(4, 0, False),
    "gelu_accurate": ActivationSaves(4, 0, False),
    "hardswish": ActivationSaves(1, 0, False),
    "laplace": ActivationSaves(1, 0, False),
    "leaky_relu": ActivationSaves(1, 0, False),
    "linear": ActivationSaves(0, 0, False),
    "mish": ActivationSaves(1, 0, False),
    "quick_gelu": ActivationSaves(2, 0, False),
    "relu": ActivationSaves(1, 0, True),
    "relu2": ActivationSaves(1, 0, False),
    "relu6": ActivationSaves(1, 0, False),
    "sigmoid": ActivationSaves(1, 0, True),
    "silu": ActivationSaves(1, 0, False),
    "sqrtsoftplus": ActivationSaves(2, 0, True),
    "swish": ActivationSaves(1, 0, False),
    "tanh": ActivationSaves(1, 0, True),
    "prelu": ActivationSaves(1, 0, False),
    "xielu": ActivationSaves(4, 1, False),
    "bloom_gelu": ActivationSaves(1, 0, False),
}

# Where a family's hidden dropout (Architecture.dropout) applies; the attention probabilities follow
# Architecture.attention_dropout in every family.
HIDDEN_DROPOUT_SITES = {
    "gpt2": frozenset({"embed", "attn_out", "mlp_out"}),  # GPT2Model.drop (embd_pdrop taken = resid_pdrop)
    "t5": frozenset({"embed", "attn_out", "mlp_inner", "mlp_out", "final"}),  # T5Stack, T5LayerFF, T5DenseActDense
}
DEFAULT_HIDDEN_DROPOUT_SITES = frozenset({"attn_out", "mlp_out"})  # residual-branch dropout (OPT, Phi-3, GPT-NeoX)


@dataclass(frozen=True)
class Traits:
    """How one family's HF modules save tensors; derived from the Architecture, never stored."""

    norm: str  # llama | gemma | t5 | olmo2 | cohere | layernorm (see ops.norm_bytes)
    rope: bool  # rotary cos/sin tables, shared by all layers
    rotary_fraction: float
    fused_qkv: bool
    softmax_fp32: bool
    dropout_sites: frozenset[str]  # embed, attn_probs, attn_out, mlp_inner, mlp_out, final
    loss_upcast: bool  # ForCausalLMLoss .float(); T5 calls CrossEntropyLoss on the 16-bit logits
    act: str
    eager_only: bool
    embedding_norm: bool
    per_token_positions: bool
    alibi: bool
    kv_broadcast: bool
    rotary_by_cat: bool  # gpt-oss: rotary rebuilds q, k with torch.cat, over half-width cos/sin tables
    qk_norm: str  # none | head (a norm of h_d per head: Qwen3, Gemma 3) | full (over all heads: OLMo 2)


def traits_of(arch: Architecture) -> Traits:
    family = "t5" if arch.family in T5_FAMILIES else arch.family
    return Traits(
        norm=_norm_style(arch),
        rope=arch.learned_positions == 0 and family not in ALIBI_FAMILIES | T5_FAMILIES,
        rotary_fraction=ROTARY_FRACTION.get(family, 1.0),
        fused_qkv=family in FUSED_QKV_FAMILIES,
        softmax_fp32=family not in SOFTMAX_IN_COMPUTE_DTYPE,
        dropout_sites=_dropout_sites(arch, family),
        loss_upcast=family != "t5",
        act=_activation(arch, family),
        eager_only=family in EAGER_ONLY_FAMILIES,
        embedding_norm=family in EMBEDDING_NORM_FAMILIES,
        per_token_positions=family in PER_TOKEN_POSITION_IDS,
        alibi=family in ALIBI_FAMILIES,
        kv_broadcast=family in KV_BROADCAST_FAMILIES,
        qk_norm=arch.qk_norm,
        rotary_by_cat=family in HALF_ROTARY_TABLE_FAMILIES,
    )


def activation_saves(traits: Traits) -> ActivationSaves:
    return ACTIVATION_SAVES[traits.act]


GEMMA4_NORM_FAMILIES = frozenset({"gemma4_text", "gemma4"})  # Gemma4RMSNorm (ops.norm_bytes "gemma4")


def _norm_style(arch: Architecture) -> str:
    if arch.family in GEMMA4_NORM_FAMILIES:
        return "gemma4"
    if arch.family in GEMMA_NORM_FAMILIES:
        return "gemma"
    if arch.family in T5_FAMILIES:
        return "t5"
    if arch.family in FP32_WEIGHT_NORM_FAMILIES:
        return "olmo2"
    if arch.family in COHERE_NORM_FAMILIES:
        return "cohere"
    return "layernorm" if arch.norm == "layernorm" else "llama"


def _dropout_sites(arch: Architecture, family: str) -> frozenset[str]:
    hidden = HIDDEN_DROPOUT_SITES.get(family, DEFAULT_HIDDEN_DROPOUT_SITES) if arch.dropout > 0 else frozenset()
    return hidden | ({"attn_probs"} if arch.attention_dropout > 0 else frozenset())


def _activation(arch: Architecture, family: str) -> str:
    if arch.hidden_act is not None:
        if arch.hidden_act not in ACTIVATION_SAVES:
            raise ValueError(f"hidden_act ({arch.hidden_act!r}) is not an activation transformers knows")
        return arch.hidden_act
    if family == "t5":
        return "gelu_new" if arch.gated_mlp else "relu"
    if arch.family in GEMMA_FAMILIES | GEMMA4_NORM_FAMILIES:
        return "gelu_pytorch_tanh"
    return FAMILY_ACTIVATION.get(family, "silu")
