"""A model as the calculators see it: the shape facts (Architecture) and its exact parameter counts (ParamCount).

Built by zeroplan.models.families from a family's Hugging Face config; never written by hand. Frozen dataclasses
the calculators trust; models/presets.py checks a user file's Architecture against the bounds annotated here.
Pure: no I/O.
"""

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field

from zeroplan.validate import INPUT_CONFIG, Count, Flag, Int, Real, Size, Text

Probability = Annotated[Real, Field(ge=0.0, le=1.0)]


@dataclass(frozen=True, slots=True, kw_only=True)
class Architecture:
    """The shape facts the calculators need, normalized across model families.

    Built by `zeroplan.families` from a family's Hugging Face config; never written by hand.
    """

    __pydantic_config__ = INPUT_CONFIG
    family: Annotated[Text, Field(description="model family, the HF model_type (llama, gpt2, t5, ...)")]
    hidden_size: Count
    num_layers: Annotated[Count, Field(description="decoder layers (T5: decoder layers too)")]
    num_encoder_layers: Annotated[Size, Field(description="encoder layers of an encoder-decoder (T5)")] = 0
    num_attention_heads: Count
    num_key_value_heads: Count
    head_dim: Count
    intermediate_size: Annotated[Count, Field(description="MLP inner width (per expert for MoE)")]
    vocab_size: Count
    gated_mlp: Annotated[Flag, Field(description="SwiGLU/GeGLU: three MLP matrices and an extra inner tensor")]
    norm: Literal["layernorm", "rmsnorm"]
    norms_per_layer: Annotated[Count, Field(description="Gemma 2 has 4 (pre and post norms)")] = 2
    parallel_attn: Annotated[Flag, Field(description="attention and MLP read the same normed input")] = False
    num_experts: Annotated[Size, Field(description="routed experts per MoE layer; 0 = dense")] = 0
    num_experts_per_tok: Size = 0
    tie_word_embeddings: Flag
    learned_positions: Annotated[Size, Field(description="rows of a learned position table (GPT-2, OPT)")] = 0
    dropout: Annotated[Probability, Field(description="dropout probability in training")] = 0.0
    attention_dropout: Annotated[
        Probability, Field(description="dropout probability on the attention probabilities in training")
    ] = 0.0
    attn_logit_softcapping: Real | None = None
    final_logit_softcapping: Real | None = None
    sliding_window: Int | None = None
    # The facts of the 2025-26 families. Every default is what an old family is: one kind of layer, softmax
    # attention over the whole sequence (or sliding_window), a dense or all-MoE MLP.
    hidden_act: Annotated[
        Text | None, Field(description="the activation as the config names it (hidden_act, activation_function, "
                                       "hidden_activation); None = the family's fixed one")
    ] = None
    attention_types: Annotated[
        tuple[Text, ...], Field(description="per layer, as layer_types names it: full_attention, sliding_attention, "
                                            "chunked_attention, linear_attention; () = all full_attention")
    ] = ()
    no_rope_layers: Annotated[tuple[Size, ...], Field(description="indices of layers without RoPE (NoPE)")] = ()
    attention_chunk_size: Annotated[Int | None, Field(description="chunked_attention layers' chunk (Llama 4)")] = None
    qk_norm: Annotated[Literal["none", "head", "full"], Field(description="head: per-head norm of h_d (Qwen3); "
                                                                          "full: over all heads (OLMo 2)")] = "none"
    attention_sinks: Annotated[Flag, Field(description="a learned sink logit per head (gpt-oss)")] = False
    attention_output_gate: Annotated[Flag, Field(description="a sigmoid gate on the attention output (Qwen3-Next)")] = (
        False
    )
    mlp_types: Annotated[tuple[Literal["dense", "moe"], ...], Field(description="per layer; () = all dense, or all "
                                                                                "MoE when num_experts > 0")] = ()
    dense_intermediate_size: Annotated[Size, Field(description="MLP width of the dense layers of an MoE model; "
                                                               "0 = intermediate_size")] = 0
    shared_expert_intermediate_size: Annotated[Size, Field(description="total width of the shared experts")] = 0
    shared_expert_gate: Annotated[Flag, Field(description="a d -> 1 sigmoid gate on the shared expert (Qwen2-MoE)")] = (
        False
    )
    q_lora_rank: Annotated[Size, Field(description="MLA: low-rank query width; 0 = no low-rank query")] = 0
    kv_lora_rank: Annotated[Size, Field(description="MLA: compressed kv width; 0 = not MLA")] = 0
    qk_nope_head_dim: Size = 0
    qk_rope_head_dim: Size = 0
    v_head_dim: Size = 0
    linear_num_key_heads: Annotated[Size, Field(description="linear attention (gated delta net) key heads")] = 0
    linear_num_value_heads: Size = 0
    linear_key_head_dim: Size = 0
    linear_value_head_dim: Size = 0
    linear_conv_kernel_dim: Size = 0
    # Gemma 4 (gemma4_text): its global layers' own widths, kv sharing, its double-wide MLP and per-layer inputs.
    global_head_dim: Annotated[Size, Field(description="full_attention layers' head width; 0 = head_dim")] = 0
    global_key_value_heads: Annotated[Size, Field(description="full_attention layers' kv heads; 0 = "
                                                              "num_key_value_heads")] = 0
    kv_shared_layers: Annotated[Size, Field(description="the last N layers reuse earlier layers' k and v")] = 0
    attention_k_eq_v: Annotated[Flag, Field(description="full_attention layers' values are their keys")] = False
    double_wide_mlp: Annotated[Flag, Field(description="the kv-sharing layers' MLP is 2 x intermediate_size")] = False
    per_layer_input_size: Annotated[Size, Field(description="per-layer input embedding width (Gemma 4 PLE)")] = 0
    # Routing facts only the activations read (memory/activations/moe.py): how the router's top-k is formed.
    router_norm_topk: Annotated[Flag, Field(description="top-k weights renormalised (norm_topk_prob; Mixtral "
                                                        "always)")] = True
    router_groups: Annotated[Count, Field(description="group-limited routing's groups (n_group; DeepSeek-V3 8)")] = 1
    router_topk_groups: Annotated[Count, Field(description="groups kept per token (topk_group; DeepSeek-V3 4)")] = 1
    router_score: Annotated[Text | None, Field(description="the router's score function where the family names one "
                                                           "(DeepSeek-V4 scoring_func: sqrtsoftplus, sigmoid)")] = None
    # DeepSeek-V4 (deepseek_v4): hyper-connection streams, the grouped low-rank output, the KV compressors.
    hc_mult: Annotated[Size, Field(description="residual streams of the hyper-connections (mHC); 0 = one residual")] = 0
    hc_sinkhorn_iters: Annotated[Size, Field(description="Sinkhorn iterations of each hyper-connection's mixing")] = 0
    o_groups: Annotated[Size, Field(description="groups of the grouped low-rank output projection; 0 = none")] = 0
    o_lora_rank: Annotated[Size, Field(description="each output group's low-rank width")] = 0
    csa_compress_rate: Annotated[Size, Field(description="compressed_sparse_attention layers' KV compression rate "
                                                         "(overlapping windows); 0 = none")] = 0
    hca_compress_rate: Annotated[Size, Field(description="heavily_compressed_attention layers' KV compression rate; "
                                                         "0 = none")] = 0
    hf_config_json: Annotated[Text | None, Field(
        description="counted by transformers (zeroplan.models.hf): the config.json (sorted JSON) whose activations "
        "are measured by a meta-device forward instead of zeroplan's formulas; None for a described family")] = None

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def num_moe_layers(self) -> int:
        """Layers with routed experts: mlp_types says, else all of them for an MoE model."""
        if self.mlp_types:
            return self.mlp_types.count("moe")
        return self.num_layers if self.is_moe else 0

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    def attention_type(self, layer: int) -> str:
        """The attention type of layer `layer` (full_attention unless attention_types says otherwise)."""
        return self.attention_types[layer] if self.attention_types else "full_attention"


@dataclass(frozen=True, slots=True, kw_only=True)
class ParamCount:
    """Exact parameter counts of one model, tied weights counted once."""

    num_params: int  # all parameters, tied weights once
    num_embedding_params: int  # token (and learned position) embeddings, plus an untied LM head
    largest_layer_params: int  # max over modules of their own direct parameters (DeepSpeed's model_to_params)
    num_active_params: int  # parameters one token touches (MoE: top-k experts); = num_params if dense
    notes: tuple[str, ...] = ()  # what the count leaves out (a vision tower, multi-token-prediction layers)
