"""Gemma 4's language model (`Gemma4TextConfig`, model_type gemma4_text; inside Gemma4Config as its text_config).

Keys and defaults are those of transformers==5.25.0:models/gemma4/configuration_gemma4.py, the modules those of
modeling_gemma4.py (Gemma4TextModel, Gemma4TextDecoderLayer, Gemma4TextAttention, Gemma4TextMLP, Gemma4TextRouter,
Gemma4TextExperts). What Gemma 3's block gains:

- per-layer input embeddings (PLE, hidden_size_per_layer_input p > 0): one packed table embed_tokens_per_layer
  (V_p, L p), per_layer_model_projection d -> L p and per_layer_projection_norm (p) in the model; in every layer
  per_layer_input_gate d -> p, per_layer_projection p -> d and post_per_layer_input_norm (d);
- global (full_attention) layers of their own head width (global_head_dim, popped from the kwargs, default 512) and,
  with attention_k_eq_v, num_global_key_value_heads kv heads and no v_proj (the keys serve as values);
- kv sharing: the last num_kv_shared_layers layers build no k_proj, v_proj nor k_norm (they reuse the last earlier
  layer of their type); with use_double_wide_mlp their MLP is 2 I wide;
- the MoE block (enable_moe_block): in every layer, beside the dense MLP, a router (router.proj d -> E, router.scale
  (d), router.per_expert_scale (E); its norm has no weight), experts (E, 2 I_e, d) and (E, d, I_e), and three more
  norms (post_feedforward_layernorm_1, _2, pre_feedforward_layernorm_2).
v_norm and the router's norm are weightless (Gemma4RMSNorm(with_scale=False)); layer_scalar is a 1-element
persistent buffer per layer (in the checkpoint, not a parameter). Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from zeroplan.models.architecture import Architecture
from zeroplan.models.block import LINEAR, MLP, NORM, OTHER, Attention, Decoder, Extra, Layer, MoE, runs
from zeroplan.models.families.base import check_layer_count, decoder_architecture
from zeroplan.models.families.moe import check_top_k
from zeroplan.models.families.rmsnorm import SANDWICH_NORMS, RMSNormDecoderConfig

FULL, SLIDING = "full_attention", "sliding_attention"
GEMMA4_PATTERN = 6  # Gemma4TextConfig.__post_init__: sliding_window_pattern = 6 when layer_types is absent
DOUBLE_WIDE = 2  # Gemma4TextMLP: intermediate_size * 2 in a kv-sharing layer with use_double_wide_mlp
MOE_NORMS = ("post_feedforward_layernorm_1", "post_feedforward_layernorm_2", "pre_feedforward_layernorm_2")
PLE_NORM = "post_per_layer_input_norm"


def layer_types_of(given: Any, n: int) -> list[str]:
    """layer_types as Gemma4TextConfig.__post_init__ makes them: the default 5:1 pattern, the last layer full."""
    types = list(given) if isinstance(given, list) and given else [SLIDING if (i + 1) % GEMMA4_PATTERN else FULL
                                                                   for i in range(n)]
    return [*types[:-1], FULL] if types else []


def _folded(overrides: Any, full: set[int], k_eq_v: bool) -> dict | None:
    """The one override every full layer has (and no other layer), or None."""
    if not isinstance(overrides, dict) or not full:
        return None
    try:
        layers = {int(k): v for k, v in overrides.items()}
    except (TypeError, ValueError):
        return None
    values = [v for v in layers.values() if isinstance(v, dict)]
    allowed = {"head_dim", "num_key_value_heads"} if k_eq_v else {"head_dim"}
    if set(layers) != full or len(values) != len(layers) or any(v != values[0] for v in values):
        return None
    return values[0] if "head_dim" in values[0] and set(values[0]) <= allowed else None


class Gemma4TextConfig(RMSNormDecoderConfig):
    """Gemma 4's language model (defaults = Gemma4TextConfig's; see the module docstring for the modules).

    P = V d + L (2 d + ...) + d, per layer l of head width h_l (head_dim, or global_head_dim on full layers) and kv
    heads k_l: d h h_l + h h_l d + h_l (q_norm) + [d k_l h_l (k_proj) + d k_l h_l (v_proj, not with k_eq_v on full
    layers) + h_l (k_norm)] (not in kv-sharing layers) + 3 d I_l + 4 d
    + PLE: V_p L p + d L p + p + L (2 d p + d) + MoE: L (d E + d + E + 3 E d I_e + 3 d)   (+ V d if untied)
    """

    model_type: Literal["gemma4_text"]
    vocab_size: PositiveInt = 262_144
    hidden_size: PositiveInt = 2304
    intermediate_size: PositiveInt = 9216
    num_hidden_layers: PositiveInt = 30
    num_attention_heads: PositiveInt = 8
    num_key_value_heads: PositiveInt | None = 4
    head_dim: PositiveInt | None = 256
    max_position_embeddings: PositiveInt = 131_072
    hidden_act: str | None = None  # Gemma4TextMLP reads hidden_activation; a hidden_act beside it is never read
    UNUSED_ACTIVATION_KEYS: ClassVar[frozenset[str]] = frozenset({"hidden_act"})
    hidden_activation: str = "gelu_pytorch_tanh"
    tie_word_embeddings: bool = True
    attention_bias: bool = False
    attention_dropout: NonNegativeFloat = 0.0
    sliding_window: PositiveInt = 512
    layer_types: list[Literal["full_attention", "sliding_attention"]] | None = None
    final_logit_softcapping: PositiveFloat | None = None
    use_bidirectional_attention: Literal["all", "vision"] | None = None
    vocab_size_per_layer_input: PositiveInt = 262_144
    hidden_size_per_layer_input: NonNegativeInt = 256
    attention_k_eq_v: bool = False
    num_kv_shared_layers: NonNegativeInt = 0
    enable_moe_block: bool = False
    use_double_wide_mlp: bool = False
    num_experts: PositiveInt | None = None
    top_k_experts: PositiveInt | None = None
    moe_intermediate_size: PositiveInt | None = None
    global_head_dim: PositiveInt = 512  # popped from the kwargs by Gemma4TextConfig.__post_init__
    num_global_key_value_heads: PositiveInt | None = None  # likewise; read only with attention_k_eq_v
    per_layer_config: Any = None  # folded into the two keys above (_fold_per_layer_config), else refused

    @model_validator(mode="before")
    @classmethod
    def _fold_per_layer_config(cls, data: Any) -> Any:
        """A config saved by transformers 5.25 carries per_layer_config where it was given global_head_dim and
        num_global_key_value_heads (Gemma4TextConfig.__post_init__ makes it: {full layer: {head_dim, and with
        attention_k_eq_v num_key_value_heads}}, and to_dict writes it): read back as those two keys. Any other
        per-layer override is refused."""
        if not isinstance(data, dict) or data.get("per_layer_config") is None:
            return data
        data = dict(data)
        overrides = data.pop("per_layer_config")
        n = data.get("num_hidden_layers", 30)
        full = {i for i, kind in enumerate(layer_types_of(data.get("layer_types"), n if isinstance(n, int) else 0))
                if kind == FULL}
        folded = _folded(overrides, full, bool(data.get("attention_k_eq_v", False)))
        if folded is None:
            raise ValueError("per_layer_config: only the overrides transformers writes for the full_attention layers "
                             "(one head_dim, and with attention_k_eq_v one num_key_value_heads) are read; give "
                             "global_head_dim and num_global_key_value_heads instead")
        data["global_head_dim"] = folded["head_dim"]
        if "num_key_value_heads" in folded:
            data["num_global_key_value_heads"] = folded["num_key_value_heads"]
        return data

    @model_validator(mode="after")
    def _check_layers(self) -> Gemma4TextConfig:
        check_layer_count("num_hidden_layers", self.num_hidden_layers)
        if self.layer_types is not None and len(self.layer_types) != self.num_hidden_layers:
            raise ValueError(f"layer_types has {len(self.layer_types)} entries, num_hidden_layers is "
                             f"{self.num_hidden_layers}")
        if self.num_kv_shared_layers > self.num_hidden_layers:
            raise ValueError(f"num_kv_shared_layers ({self.num_kv_shared_layers}) exceeds num_hidden_layers "
                             f"({self.num_hidden_layers})")
        first = self.num_hidden_layers - self.num_kv_shared_layers
        types = self.types()
        if 0 < first and set(types[:first]) != set(types):  # Gemma4TextConfig.kv_sharing_modes raises the same
            raise ValueError("num_kv_shared_layers: a kv-sharing layer's type has no earlier layer of that type "
                             "to share with")
        if self.enable_moe_block:
            missing = [k for k in ("num_experts", "top_k_experts", "moe_intermediate_size") if getattr(self, k) is None]
            if missing:
                raise ValueError(f"enable_moe_block is true but {', '.join(missing)} "
                                 f"{'is' if len(missing) == 1 else 'are'} null")
            check_top_k("top_k_experts", self.top_k_experts, "num_experts", self.num_experts)
        return self

    def types(self) -> list[str]:
        return layer_types_of(self.layer_types, self.num_hidden_layers)

    def shares_kv(self, layer: int) -> bool:
        """Gemma4TextConfig.kv_sharing_modes: the last num_kv_shared_layers layers reuse an earlier layer's k/v."""
        return layer >= self.num_hidden_layers - self.num_kv_shared_layers

    @property
    def per_layer_input(self) -> int:
        return self.hidden_size_per_layer_input

    def global_kv_heads(self) -> int:
        """The full layers' kv heads: num_global_key_value_heads with attention_k_eq_v when given."""
        if self.attention_k_eq_v and self.num_global_key_value_heads is not None:
            return self.num_global_key_value_heads
        return self.kv_heads

    def attention(self, kind: str, shared: bool) -> Attention:
        full = kind == FULL
        return Attention(heads=self.num_attention_heads, kv_heads=self.global_kv_heads() if full else self.kv_heads,
                         head_dim=self.global_head_dim if full else self.attention_head_dim,
                         qkv_bias=self.attention_bias, o_bias=self.attention_bias, qk_norm="head",
                         kv_shared=shared, k_eq_v=self.attention_k_eq_v and full)

    def moe(self) -> MoE | None:
        if not self.enable_moe_block:
            return None
        return MoE(experts=self.num_experts or 0, top_k=self.top_k_experts or 0, inner=self.moe_intermediate_size or 0,
                   prefix="", router="router.proj", router_kind=LINEAR)  # Gemma4TextRouter.proj: an nn.Linear

    def layer_extras(self) -> tuple[Extra, ...]:
        d, p, extras = self.hidden_size, self.per_layer_input, []
        if self.enable_moe_block:
            extras.append(Extra(name="router", shapes=((d,), (self.num_experts or 0,)), kind=OTHER,
                                tensors=("scale", "per_expert_scale")))
            extras += [Extra(name=n, shapes=((d,),), kind=NORM) for n in MOE_NORMS]
        if p:
            extras += [Extra(name="per_layer_input_gate", shapes=((p, d),), kind=LINEAR, in_features=d, out_features=p),
                       Extra(name="per_layer_projection", shapes=((d, p),), kind=LINEAR, in_features=p, out_features=d),
                       Extra(name=PLE_NORM, shapes=((d,),), kind=NORM)]
        return tuple(extras)

    def model_extras(self) -> tuple[Extra, ...]:
        """The PLE table, its projection from the hidden state and that projection's norm."""
        d, p, width = self.hidden_size, self.per_layer_input, self.num_hidden_layers * self.per_layer_input
        if not p:
            return ()
        return (Extra(name="embed_tokens_per_layer", shapes=((self.vocab_size_per_layer_input, width),),
                      kind=OTHER, embedding=True),  # a token table, kept whole under TP (no tp_plan entry),
                Extra(name="per_layer_model_projection", shapes=((width, d),), kind=LINEAR, in_features=d,
                      out_features=width),
                Extra(name="per_layer_projection_norm", shapes=((p,),), kind=NORM))

    def decoder(self) -> Decoder:
        extras, beside, layers = self.layer_extras(), self.moe(), []
        for i, kind in enumerate(self.types()):
            shared = self.shares_kv(i)
            wide = DOUBLE_WIDE if shared and self.use_double_wide_mlp else 1
            layers.append(Layer(mixer=self.attention(kind, shared), mlp=MLP(inner=self.intermediate_size * wide),
                                attention_type=kind, beside=beside, extras=extras))
        return Decoder(hidden=self.hidden_size, vocab=self.vocab_size, layers=runs(layers),
                       tie_word_embeddings=self.tie_word_embeddings, layer_norms=SANDWICH_NORMS,
                       norm_position="sandwich", extras=self.model_extras())

    def window(self) -> int:
        # Gemma4TextConfig.__post_init__: a bidirectional ("all") model's window is halved (exclusive bounds).
        return self.sliding_window // 2 + 1 if self.use_bidirectional_attention == "all" else self.sliding_window

    def architecture(self) -> Architecture:
        """The sliding layers' head width and kv heads as the flat facts; the global layers', kv sharing, the
        double-wide MLP and the per-layer inputs as Gemma 4's own (memory.activations.gemma4 reads them)."""
        facts: dict[str, Any] = dict(
            hidden_act=self.hidden_activation, sliding_window=self.window(), attention_dropout=self.attention_dropout,
            final_logit_softcapping=self.final_logit_softcapping, head_dim=self.attention_head_dim,
            num_key_value_heads=self.kv_heads, global_head_dim=self.global_head_dim,
            global_key_value_heads=self.global_kv_heads(), kv_shared_layers=self.num_kv_shared_layers,
            attention_k_eq_v=self.attention_k_eq_v, double_wide_mlp=self.use_double_wide_mlp,
            per_layer_input_size=self.per_layer_input, attention_types=tuple(self.types()),
            intermediate_size=self.intermediate_size)
        if self.enable_moe_block:  # every layer: the dense MLP and the experts beside it
            facts |= dict(intermediate_size=self.moe_intermediate_size, dense_intermediate_size=self.intermediate_size,
                          num_experts=self.num_experts, num_experts_per_tok=self.top_k_experts,
                          mlp_types=("moe",) * self.num_hidden_layers)
        return decoder_architecture(self.model_type, self.decoder(), **facts)
