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

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ParamCount:
    """Exact parameter counts of one model, tied weights counted once."""

    num_params: int  # all parameters, tied weights once
    num_embedding_params: int  # token (and learned position) embeddings, plus an untied LM head
    largest_layer_params: int  # max over modules of their own direct parameters (DeepSpeed's model_to_params)
    num_active_params: int  # parameters one token touches (MoE: top-k experts); = num_params if dense
