"""Mixture-of-experts decoders: what they share (`MoEDecoderConfig`: routed layers, per-layer attention types, the
checks), and gpt-oss and Granite-MoE. Qwen's MoE families are in families/qwen.py, Llama 4 in families/llama4.py,
DeepSeek's in families/deepseek.py.

Keys and defaults are those of the transformers 5.x config classes (transformers v5.24.0,
src/transformers/models/<family>/configuration_<family>.py), typed as they type them (they are strict
dataclasses: a null where the class says `int` is refused there too); only keys that change the parameter count
or the Architecture are modelled. Which layers are MoE, and which attention each layer has, follows the modeling
files (modeling_<family>.py, same version), cited at each method. Pure: imports neither rich, typer nor yaml and
does no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Literal

from pydantic import PositiveInt, model_validator

from zeroplan.models.architecture import Architecture
from zeroplan.models.block import Decoder, Layer, MoE, runs
from zeroplan.models.families.base import check_layer_count, decoder_architecture
from zeroplan.models.families.rmsnorm import RMSNormDecoderConfig

FULL_ATTENTION, SLIDING_ATTENTION = "full_attention", "sliding_attention"
LINEAR_ATTENTION, CHUNKED_ATTENTION = "linear_attention", "chunked_attention"


def check_top_k(top_k_name: str, top_k: int | None, experts_name: str, experts: int) -> None:
    """A router picks at most as many experts as there are; transformers leaves some top-k defaults unset."""
    if top_k is None:
        raise ValueError(f"{top_k_name} is not set: the {experts} routed experts need a top-k")
    if top_k > experts:
        raise ValueError(f"{top_k_name} ({top_k}) is more than {experts_name} ({experts})")


def check_layer_types(layer_types: list[str] | None, layers: int, allowed: tuple[str, ...]) -> None:
    if layer_types is None:
        return
    if len(layer_types) != layers:
        raise ValueError(f"layer_types has {len(layer_types)} entries, num_hidden_layers is {layers}")
    if unknown := sorted(set(layer_types) - set(allowed)):
        raise ValueError(f"layer_types: {', '.join(map(repr, unknown))} is not one of {', '.join(allowed)}")


class MoEDecoderConfig(RMSNormDecoderConfig):
    """What the MoE families add: which layers route (`moe_layer_indices`), E experts of width I_e, top-k, and
    per-layer attention types; `decoder()` lists the layers one by one (zeroplan.models.block)."""

    @model_validator(mode="after")
    def _check_layer_count(self) -> MoEDecoderConfig:
        check_layer_count("num_hidden_layers", self.num_hidden_layers)
        return self

    @property
    def routed_experts(self) -> int:
        raise NotImplementedError

    @property
    def top_k(self) -> int:
        raise NotImplementedError

    @property
    def expert_intermediate_size(self) -> int:
        return self.intermediate_size

    def moe_layer_indices(self) -> list[int]:
        return list(range(self.num_hidden_layers))

    def attention_layer_types(self) -> list[str]:
        return [FULL_ATTENTION] * self.num_hidden_layers

    def notes(self) -> tuple[str, ...]:
        """What the count leaves out or how it reads the config, for the output's assumptions."""
        return ()

    def _stack(self, layer: Callable[[int, str, bool], Layer]) -> Decoder:
        """The decoder of layer(i, attention type of i, whether i routes) for every layer i."""
        moe, types = set(self.moe_layer_indices()), self.attention_layer_types()
        layers = [layer(i, types[i], i in moe) for i in range(self.num_hidden_layers)]
        return Decoder(hidden=self.hidden_size, vocab=self.vocab_size, layers=runs(layers),
                       tie_word_embeddings=self.tie_word_embeddings, notes=self.notes())

    def _moe_architecture(self, **overrides: Any) -> Architecture:
        return decoder_architecture(self.model_type, self.decoder(), hidden_act=self.hidden_act,
                                    attention_dropout=self.attention_dropout, **overrides)

    def architecture(self) -> Architecture:
        return self._moe_architecture()


class GptOssConfig(MoEDecoderConfig):
    """gpt-oss (`GptOssConfig`, defaults = gpt-oss-120b): biased attention with a learned sink logit per head,
    sliding and full attention alternating (`layer_types`), a biased router and experts with biases."""

    ALIASES: ClassVar[dict[str, str]] = {"num_experts": "num_local_experts"}  # GptOssConfig.attribute_map
    model_type: Literal["gpt_oss"]
    vocab_size: PositiveInt = 201088
    hidden_size: PositiveInt = 2880
    intermediate_size: PositiveInt = 2880
    num_hidden_layers: PositiveInt = 36
    num_attention_heads: PositiveInt = 64
    num_key_value_heads: PositiveInt = 8
    head_dim: PositiveInt = 64
    max_position_embeddings: PositiveInt = 131072
    attention_bias: bool = True
    sliding_window: PositiveInt | None = 128
    num_local_experts: PositiveInt = 128
    num_experts: PositiveInt | None = None
    num_experts_per_tok: PositiveInt = 4
    layer_types: list[str] | None = None

    @model_validator(mode="after")
    def _check_experts(self) -> GptOssConfig:
        check_top_k("num_experts_per_tok", self.num_experts_per_tok, "num_local_experts", self.routed_experts)
        check_layer_types(self.layer_types, self.num_hidden_layers, (FULL_ATTENTION, SLIDING_ATTENTION))
        return self

    @property
    def routed_experts(self) -> int:
        return self.resolved("num_local_experts")

    @property
    def top_k(self) -> int:
        return self.num_experts_per_tok

    def attention_layer_types(self) -> list[str]:
        """GptOssConfig.__post_init__: even layers slide, odd layers attend fully, unless layer_types is given."""
        if self.layer_types is not None:
            return list(self.layer_types)
        return [SLIDING_ATTENTION if (i + 1) % 2 else FULL_ATTENTION for i in range(self.num_hidden_layers)]

    def decoder(self) -> Decoder:
        """GptOssForCausalLM (modeling_gpt_oss.py): biased q/k/v/o (attention_bias), sinks (one logit per head, a
        parameter of self_attn itself), mlp.router with a bias, experts (E, d, 2 I) + (E, 2 I), (E, I, d) + (E, d).

        P = V d + L (d (h + 2 k) h_d + h h_d d + [(h + 2 k) h_d + d] + h + E d + E + E (3 d I + 2 I + d) + 2 d) + d
            (+ V d)
        """
        attention = self._attention(self.attention_bias, self.attention_bias, sinks=True)
        moe = MoE(experts=self.routed_experts, top_k=self.num_experts_per_tok, inner=self.intermediate_size,
                  layout="in_out", router="router", router_bias=True, expert_bias=True)
        return self._stack(lambda i, kind, routes: Layer(mixer=attention, mlp=moe, attention_type=kind))

    def architecture(self) -> Architecture:
        window = self.sliding_window if SLIDING_ATTENTION in self.attention_layer_types() else None
        return self._moe_architecture(sliding_window=window)


class GraniteMoeConfig(MoEDecoderConfig):
    """Granite-MoE (`GraniteMoeConfig`): Llama attention, every layer routed (experts of width
    `intermediate_size`, no shared expert); scaling multipliers change no count."""

    model_type: Literal["granitemoe"]
    vocab_size: PositiveInt = 32000
    hidden_size: PositiveInt = 4096
    intermediate_size: PositiveInt = 11008
    num_hidden_layers: PositiveInt = 32
    num_attention_heads: PositiveInt = 32
    num_key_value_heads: PositiveInt | None = None
    max_position_embeddings: PositiveInt = 2048
    attention_bias: bool = False
    num_local_experts: PositiveInt = 8
    num_experts_per_tok: PositiveInt = 2

    @model_validator(mode="after")
    def _check_experts(self) -> GraniteMoeConfig:
        check_top_k("num_experts_per_tok", self.num_experts_per_tok, "num_local_experts", self.num_local_experts)
        return self

    @property
    def routed_experts(self) -> int:
        return self.num_local_experts

    @property
    def top_k(self) -> int:
        return self.num_experts_per_tok

    def decoder(self) -> Decoder:
        """GraniteMoeForCausalLM (modeling_granitemoe.py): block_sparse_moe.router (E x d) and experts (E, 2 I, d),
        (E, d, I), every layer.

        P = V d + L (d (h + 2 k) h_d + h h_d d + E d + 3 E d I + 2 d) + d   (+ V d; the published configs tie)
        """
        attention = self._attention(self.attention_bias, self.attention_bias)
        moe = MoE(experts=self.num_local_experts, top_k=self.num_experts_per_tok, inner=self.intermediate_size,
                  prefix="block_sparse_moe", router="router")
        return self._stack(lambda i, kind, routes: Layer(mixer=attention, mlp=moe))
