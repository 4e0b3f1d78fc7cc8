"""Llama 4's text model (transformers v5.24.0 configuration_llama4.py `Llama4TextConfig`, modeling_llama4.py).
Pure: no I/O.
"""

from __future__ import annotations

from typing import Literal

from pydantic import NonNegativeInt, PositiveInt, model_validator

from zeroplan.models.architecture import Architecture
from zeroplan.models.block import MLP, Decoder, Layer, MoE
from zeroplan.models.families.moe import (
    CHUNKED_ATTENTION,
    FULL_ATTENTION,
    MoEDecoderConfig,
    check_layer_types,
    check_top_k,
)


class Llama4TextConfig(MoEDecoderConfig):
    """Llama 4 text model (`Llama4TextConfig`, defaults = Llama-4-Scout): routed experts of width
    `intermediate_size` plus a shared expert of the same width in the layers of `moe_layers` (every
    `interleave_moe_layer_step`-th); dense layers have width `intermediate_size_mlp`. Every
    `no_rope_layer_interval`-th layer is a NoPE layer with full attention, the rest chunked attention
    (`attention_chunk_size`). The qk-norm is an L2 norm without parameters.
    """

    model_type: Literal["llama4_text"]
    vocab_size: PositiveInt = 202048
    hidden_size: PositiveInt = 5120
    intermediate_size: PositiveInt = 8192
    intermediate_size_mlp: PositiveInt = 16384
    num_hidden_layers: PositiveInt = 48
    num_attention_heads: PositiveInt = 40
    num_key_value_heads: PositiveInt = 8
    head_dim: PositiveInt = 128
    max_position_embeddings: PositiveInt = 4096 * 32
    attention_bias: bool = False
    num_experts_per_tok: PositiveInt = 1
    num_local_experts: PositiveInt = 16
    moe_layers: list[NonNegativeInt] | None = None
    interleave_moe_layer_step: PositiveInt = 1
    use_qk_norm: bool = True
    no_rope_layers: list[int] | None = None
    no_rope_layer_interval: PositiveInt = 4
    attention_chunk_size: PositiveInt | None = 8192
    layer_types: list[str] | None = None

    @model_validator(mode="after")
    def _check_experts(self) -> Llama4TextConfig:
        check_top_k("num_experts_per_tok", self.num_experts_per_tok, "num_local_experts", self.num_local_experts)
        check_layer_types(self.layer_types, self.num_hidden_layers, (FULL_ATTENTION, CHUNKED_ATTENTION))
        if self.no_rope_layers and len(self.no_rope_layers) != self.num_hidden_layers:
            raise ValueError(f"no_rope_layers has {len(self.no_rope_layers)} entries, "
                             f"num_hidden_layers is {self.num_hidden_layers}")
        return self

    @property
    def routed_experts(self) -> int:
        return self.num_local_experts

    @property
    def top_k(self) -> int:
        return self.num_experts_per_tok

    def moe_layer_indices(self) -> list[int]:
        """Llama4TextConfig.__post_init__: moe_layers, else range(step - 1, L, step)."""
        if self.moe_layers is not None:
            return [i for i in range(self.num_hidden_layers) if i in set(self.moe_layers)]
        return list(range(self.interleave_moe_layer_step - 1, self.num_hidden_layers, self.interleave_moe_layer_step))

    def rope_layers(self) -> list[bool]:
        """no_rope_layers[i] = 1 where layer i uses RoPE (an empty list takes the default, as transformers does)."""
        if self.no_rope_layers:
            return [bool(x) for x in self.no_rope_layers]
        return [bool((i + 1) % self.no_rope_layer_interval) for i in range(self.num_hidden_layers)]

    def attention_layer_types(self) -> list[str]:
        if self.layer_types is not None:
            return list(self.layer_types)
        chunked = self.attention_chunk_size is not None
        return [CHUNKED_ATTENTION if rope and chunked else FULL_ATTENTION for rope in self.rope_layers()]

    def decoder(self) -> Decoder:
        """Llama4ForCausalLM, text (modeling_llama4.py): Llama4TextMoe (router, experts (E, d, 2 I) / (E, I, d),
        shared_expert of width I) in moe_layers, Llama4TextMLP of intermediate_size_mlp elsewhere, all under
        feed_forward; the qk-norm (use_qk_norm, RoPE layers only) is an L2 norm without parameters.

        P = V d + L (d (h + 2 k) h_d + h h_d d + 2 d) + L_moe (E d + 3 E d I + 3 d I) + L_dense 3 d I_mlp + d (+ V d)
        """
        attention = self._attention(self.attention_bias, self.attention_bias)
        moe = MoE(experts=self.num_local_experts, top_k=self.num_experts_per_tok, inner=self.intermediate_size,
                  layout="in_out", prefix="feed_forward", router="router",
                  shared=MLP(inner=self.intermediate_size, prefix="shared_expert"))
        dense = MLP(inner=self.intermediate_size_mlp, prefix="feed_forward")
        rope = self.rope_layers()
        return self._stack(lambda i, kind, routes: Layer(mixer=attention, mlp=moe if routes else dense,
                                                         attention_type=kind, rope=rope[i]))

    def architecture(self) -> Architecture:
        chunked = CHUNKED_ATTENTION in self.attention_layer_types()
        # Llama4TextL2Norm has no parameters, so the block's attention has no qk-norm; the activations keep its
        # fp32 input and rsqrt (zeroplan.memory.activations.llama4), so the Architecture says whether it runs.
        return self._moe_architecture(attention_chunk_size=self.attention_chunk_size if chunked else None,
                                      qk_norm="head" if self.use_qk_norm else "none")
