"""What every family config shares: HF key names, strict types, alias keys, the checks they all need.

Pure: imports neither rich, typer nor yaml and does no I/O.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import ConfigDict, model_validator

from zeroplan.frozen import Frozen
from zeroplan.models.architecture import Architecture
from zeroplan.models.block import MLA, MLP, Attention, Decoder, LinearAttention, MoE

# The activation names transformers' ACT2FN resolves (transformers 5.x activations.py, ACT2CLS): a config's
# hidden_act / activation_function / hidden_activation must be one of them, or transformers cannot build it.
HF_ACTIVATIONS = frozenset({
    "gelu", "gelu_10", "gelu_fast", "gelu_new", "gelu_python", "gelu_pytorch_tanh", "gelu_python_tanh",
    "gelu_accurate", "hardswish", "laplace", "leaky_relu", "linear", "mish", "quick_gelu", "relu", "relu2",
    "relu6", "sigmoid", "silu", "sqrtsoftplus", "swish", "tanh", "prelu", "xielu",
})
# The keys a family names its MLP activation by (GPT2Config.activation_function, FalconConfig.activation,
# Gemma2Config.hidden_activation, the rest hidden_act).
ACTIVATION_KEYS = ("hidden_act", "activation_function", "hidden_activation", "activation")


class FamilyConfig(Frozen):
    """One family's Hugging Face config keys, each defaulting as that family's transformers config class does.

    Fields keep the source's values untouched (load-then-dump gives the input back); whatever
    transformers derives in its `__post_init__` (a head_dim, a default kv-head count) is derived
    here in `architecture()` or a property, never written back into a field.
    """

    # strict: "12" or 12.5 is not silently turned into 12, as it would be in a typo'd YAML file.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    # Other spellings transformers accepts for a key (an attribute_map entry or a popped kwarg):
    # {alias: canonical}. Both are fields; the alias wins when given, as in transformers.
    ALIASES: ClassVar[dict[str, str]] = {}

    # Keys a Hugging Face config.json must state (a published config always does): the width, depth and heads.
    # Their config-class defaults describe some other model, so a file without them is refused, not defaulted.
    REQUIRED: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="after")
    def _check_aliases_agree(self) -> FamilyConfig:
        for alias, canonical in self.ALIASES.items():
            given = self.model_fields_set
            if {alias, canonical} <= given and getattr(self, alias) != getattr(self, canonical):
                raise ValueError(
                    f"{alias} ({getattr(self, alias)}) and {canonical} ({getattr(self, canonical)}) "
                    "name the same setting with different values"
                )
        return self

    # Activation keys a family accepts but transformers does not read (Gemma 2's hidden_act): not checked.
    UNUSED_ACTIVATION_KEYS: ClassVar[frozenset[str]] = frozenset()

    @model_validator(mode="after")
    def _check_activation_names(self) -> FamilyConfig:
        for key in set(ACTIVATION_KEYS) - self.UNUSED_ACTIVATION_KEYS:
            value = getattr(self, key, None)
            if isinstance(value, str):
                check_activation(key, value)
        return self

    def resolved(self, canonical: str) -> Any:
        """A key's value, taking an alias spelling of it when one was given."""
        for alias, target in self.ALIASES.items():
            if target == canonical and getattr(self, alias) is not None:
                return getattr(self, alias)
        return getattr(self, canonical)

    @classmethod
    def hf_keys(cls) -> frozenset[str]:
        """The config.json keys this family reads (aliases as written in the file)."""
        return frozenset(field.alias or name for name, field in cls.model_fields.items())

    def architecture(self) -> Architecture:
        raise NotImplementedError

    def decoder(self) -> Decoder | None:
        """What transformers builds, as a block description (zeroplan.models.block); None: the family lists its
        modules itself (T5's encoder-decoder, zeroplan.models.params.t5)."""
        return None


def check_activation(key: str, value: str) -> None:
    """Raise ValueError naming the key unless transformers' ACT2FN knows the activation name."""
    if value not in HF_ACTIVATIONS:
        raise ValueError(f"{key} ({value!r}) is not an activation transformers knows (ACT2FN: e.g. 'silu', 'gelu')")


def check_divides(divisor_name: str, divisor: int, name: str, value: int) -> None:
    """Raise ValueError naming both values unless `divisor` divides `value`."""
    if value % divisor:
        raise ValueError(f"{name} ({value}) is not a multiple of {divisor_name} ({divisor})")


# Families whose layers differ (layer_types, a dense-then-MoE layout) hold one entry per layer, as transformers'
# config does (layer_types) and its model (a ModuleList): more layers than this is no model, and is refused.
MAX_LAYERS = 10_000


def check_layer_count(name: str, layers: int) -> None:
    """Raise ValueError naming the key unless a per-layer description of `layers` layers is reasonable."""
    if layers > MAX_LAYERS:
        raise ValueError(f"{name} ({layers}) is more layers than zeroplan describes one by one (at most {MAX_LAYERS})")


def decoder_architecture(family: str, dec: Decoder, **fields: Any) -> Architecture:
    """The Architecture a block description implies; `fields` add or override (dropout, windows, soft-capping).

    Heads come from the first softmax or MLA layer; the MLP widths from the first dense and first MoE layer.
    """
    kinds = [layer for layer, _ in dec.layers]
    mixers = [layer.mixer for layer in kinds]
    attention = next((m for m in mixers if isinstance(m, Attention)), None)
    mla = next((m for m in mixers if isinstance(m, MLA)), None)
    linear = next((m for m in mixers if isinstance(m, LinearAttention)), None)
    dense = next((layer.mlp for layer in kinds if isinstance(layer.mlp, MLP)), None)
    moe = next((layer.mlp for layer in kinds if isinstance(layer.mlp, MoE)), None)
    facts: dict[str, Any] = dict(
        family=family, hidden_size=dec.hidden, num_layers=dec.num_layers, vocab_size=dec.vocab,
        norm=dec.norm, norms_per_layer=len(dec.layer_norms), parallel_attn=dec.parallel,
        tie_word_embeddings=dec.tie_word_embeddings, learned_positions=dec.positions,
        gated_mlp=dense.gated if dense is not None else True,
    )
    if attention is not None:
        facts |= dict(num_attention_heads=attention.heads, num_key_value_heads=attention.kv_heads,
                      head_dim=attention.head_dim, qk_norm=attention.qk_norm, attention_sinks=attention.sinks,
                      attention_output_gate=attention.output_gate)
    if mla is not None:
        facts |= dict(q_lora_rank=mla.q_lora_rank or 0, kv_lora_rank=mla.kv_lora_rank,
                      qk_nope_head_dim=mla.qk_nope_head_dim, qk_rope_head_dim=mla.qk_rope_head_dim,
                      v_head_dim=mla.v_head_dim)
        if attention is None:
            facts |= dict(num_attention_heads=mla.heads, num_key_value_heads=mla.heads,
                          head_dim=mla.qk_nope_head_dim + mla.qk_rope_head_dim)
    if linear is not None:
        facts |= dict(linear_num_key_heads=linear.key_heads, linear_num_value_heads=linear.value_heads,
                      linear_key_head_dim=linear.key_head_dim, linear_value_head_dim=linear.value_head_dim,
                      linear_conv_kernel_dim=linear.conv_kernel)
    if moe is not None:
        facts |= dict(intermediate_size=moe.inner, num_experts=moe.experts, num_experts_per_tok=moe.top_k,
                      shared_expert_intermediate_size=moe.shared.inner if moe.shared else 0,
                      shared_expert_gate=moe.shared_gate,
                      dense_intermediate_size=dense.inner if dense is not None else 0)
        if dense is not None:
            facts["mlp_types"] = tuple("moe" if isinstance(layer.mlp, MoE) else "dense" for layer in dec.per_layer())
    else:
        facts["intermediate_size"] = dense.inner if dense is not None else 0
    if any(layer.attention_type != "full_attention" for layer in kinds):
        facts["attention_types"] = tuple(layer.attention_type for layer in dec.per_layer())
    if not all(layer.rope for layer in kinds):
        facts["no_rope_layers"] = tuple(i for i, layer in enumerate(dec.per_layer()) if not layer.rope)
    return Architecture(**(facts | fields))
