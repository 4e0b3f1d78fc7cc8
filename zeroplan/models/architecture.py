"""A model as the calculators see it: the shape facts (Architecture) and its exact parameter counts (ParamCount).

Built by zeroplan.models.families from a family's Hugging Face config; never written by hand. Pure: no I/O.
"""

from typing import Literal

from zeroplan.record import Record, field, positive, record


@record
class Architecture(Record):
    """The shape facts the calculators need, normalized across model families.

    Built by `zeroplan.families` from a family's Hugging Face config; never written by hand.
    """

    family: str = field(description="model family, the HF model_type (llama, gpt2, t5, ...)")
    hidden_size: int = positive()
    num_layers: int = positive(description="decoder layers (T5: decoder layers too)")
    num_encoder_layers: int = field(0, ge=0, description="encoder layers of an encoder-decoder (T5)")
    num_attention_heads: int = positive()
    num_key_value_heads: int = positive()
    head_dim: int = positive()
    intermediate_size: int = positive(description="MLP inner width (per expert for MoE)")
    vocab_size: int = positive()
    gated_mlp: bool = field(description="SwiGLU/GeGLU: three MLP matrices and an extra inner tensor")
    norm: Literal["layernorm", "rmsnorm"]
    norms_per_layer: int = positive(2, description="Gemma 2 has 4 (pre and post norms)")
    parallel_attn: bool = field(False, description="attention and MLP read the same normed input")
    num_experts: int = field(0, ge=0, description="routed experts per MoE layer; 0 = dense")
    num_experts_per_tok: int = field(0, ge=0)
    tie_word_embeddings: bool
    learned_positions: int = field(0, ge=0, description="rows of a learned position table (GPT-2, OPT)")
    dropout: float = field(0.0, ge=0.0, le=1.0, description="dropout probability in training")
    attention_dropout: float = field(
        0.0, ge=0.0, le=1.0, description="dropout probability on the attention probabilities in training"
    )
    attn_logit_softcapping: float | None = None
    final_logit_softcapping: float | None = None
    sliding_window: int | None = None

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0


@record
class ParamCount(Record):
    """Exact parameter counts of one model, tied weights counted once."""

    num_params: int = field(description="all parameters, tied weights once")
    num_embedding_params: int = field(description="token (and learned position) embeddings, plus an untied LM head")
    largest_layer_params: int = field(
        description="max over modules of their own direct parameters (DeepSpeed's model_to_params)"
    )
    num_active_params: int = field(description="parameters one token touches (MoE: top-k experts); = num_params if dense")
