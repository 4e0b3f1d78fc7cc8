"""Model families: Hugging Face config keys and defaults per family -> the normalized Architecture.

`parse_family_config` picks the family by `model_type`. Pure: no I/O, no yaml.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from importlib import import_module
from typing import Any, Literal

from pydantic import Field, SerializeAsAny, ValidationError, field_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from zeroplan.frozen import Frozen
from zeroplan.models.architecture import Architecture
from zeroplan.models.families.base import FamilyConfig
from zeroplan.models.hub import HF_ID_PATTERN
from zeroplan.validate import Name

# model_type -> (module of zeroplan.models.families, config class). A family's module is imported when its
# model_type is first read: reading one preset does not build all the pydantic classes (start-up,
# docs/benchmarks.md). tests/test_families.py checks this table against what every class declares.
_WHERE: dict[str, tuple[str, str]] = {
    "gpt2": ("layernorm", "GPT2Config"),
    "gpt_neox": ("layernorm", "GPTNeoXConfig"),
    "opt": ("layernorm", "OPTConfig"),
    "bloom": ("layernorm", "BloomConfig"),
    "falcon": ("falcon", "FalconConfig"),
    "llama": ("rmsnorm", "LlamaConfig"),
    "mistral": ("rmsnorm", "MistralConfig"),
    "mixtral": ("rmsnorm", "MixtralConfig"),
    "qwen2": ("rmsnorm", "Qwen2Config"),
    "gemma2": ("rmsnorm", "Gemma2Config"),
    "phi3": ("rmsnorm", "Phi3Config"),
    "t5": ("t5", "T5Config"),
    "qwen2_moe": ("qwen", "Qwen2MoeConfig"),
    "qwen3_moe": ("qwen", "Qwen3MoeConfig"),
    "qwen3_next": ("qwen", "Qwen3NextConfig"),
    "llama4_text": ("llama4", "Llama4TextConfig"),
    "deepseek_v2": ("deepseek", "DeepseekV2Config"),
    "deepseek_v3": ("deepseek", "DeepseekV3Config"),
    "kimi_k2": ("deepseek", "DeepseekV3Config"),
    "deepseek_v32": ("recent_moe", "DeepseekV32Config"),
    "deepseek_v4": ("deepseek_v4", "DeepseekV4Config"),
    "glm4_moe": ("deepseek", "Glm4MoeConfig"),
    "gpt_oss": ("moe", "GptOssConfig"),
    "granitemoe": ("moe", "GraniteMoeConfig"),
    "qwen3": ("dense", "Qwen3Config"),
    "gemma": ("dense", "GemmaConfig"),
    "gemma3_text": ("dense", "Gemma3TextConfig"),
    "gemma4_text": ("gemma4", "Gemma4TextConfig"),
    "glm4": ("dense", "Glm4Config"),
    "olmo2": ("dense", "Olmo2Config"),
    "olmo3": ("dense", "Olmo3Config"),
    "granite": ("dense", "GraniteConfig"),
    "smollm3": ("dense", "SmolLM3Config"),
    "gptj": ("gptj", "GPTJConfig"),
    "seed_oss": ("recent", "SeedOssConfig"),
    "ernie4_5": ("recent", "Ernie4_5Config"),
    "ministral3": ("recent", "Ministral3Config"),
    "exaone4": ("recent", "Exaone4Config"),
    "starcoder2": ("recent", "Starcoder2Config"),
    "phi": ("recent", "PhiConfig"),
    "cohere": ("recent", "CohereConfig"),
    "cohere2": ("recent", "Cohere2Config"),
    "qwen3_vl_text": ("recent", "Qwen3VLTextConfig"),
    "olmoe": ("recent_moe", "OlmoeConfig"),
    "ernie4_5_moe": ("recent_moe", "Ernie4_5_MoeConfig"),
    "qwen3_vl_moe_text": ("recent_moe", "Qwen3VLMoeTextConfig"),
    "qwen3_5_text": ("recent_moe", "Qwen3_5TextConfig"),
    "qwen3_5_moe_text": ("recent_moe", "Qwen3_5MoeTextConfig"),
}
TEXT_TYPES = frozenset(_WHERE)  # the language models zeroplan describes

# A multimodal model_type -> the model_type of its language model, where its text_config may leave it out (the
# outer config class's default text config: Gemma3Config -> Gemma3TextConfig, Llama4Config -> Llama4TextConfig,
# Mistral3Config -> MistralConfig, Qwen2_5_VLConfig -> Qwen2_5_VLTextConfig). A family helper adds its own here.
TEXT_MODEL_TYPES: dict[str, str] = {
    "gemma3": "gemma3_text",
    "gemma4": "gemma4_text",
    "llama4": "llama4_text",
    "mistral3": "mistral",
    "qwen2_5_vl": "qwen2_5_vl_text",
    "qwen3_vl": "qwen3_vl_text",
    "qwen3_vl_moe": "qwen3_vl_moe_text",
    "qwen3_5": "qwen3_5_text",
    "qwen3_5_moe": "qwen3_5_moe_text",
}
# Multimodal model_types whose LM head is the outer *ForConditionalGeneration's: tied as the outer config's
# tie_word_embeddings says (PreTrainedModel.tie_weights reads the model's own config), which MultimodalConfig reads.
OUTER_TIE_TYPES = frozenset({"qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"})
# The multimodal model_types zeroplan reads: those whose language model is a family here.
MULTIMODAL_TYPES = tuple(outer for outer, text in TEXT_MODEL_TYPES.items() if text in TEXT_TYPES)
_WHERE |= {outer: ("multimodal", "MultimodalConfig") for outer in MULTIMODAL_TYPES}

# The classes `from zeroplan.models.families import X` finds, each in its module (loaded on first use).
_CLASSES = {cls: module for module, cls in _WHERE.values()} | {
    "RMSNormDecoderConfig": "rmsnorm", "MoEDecoderConfig": "moe",
}


def family_class(model_type: str) -> type[FamilyConfig] | None:
    """The config class of `model_type`, its module imported now; None for a model_type zeroplan does not describe."""
    where = _WHERE.get(model_type)
    if where is None:
        return None
    return getattr(import_module(f"zeroplan.models.families.{where[0]}"), where[1])


class _Families(Mapping):
    """model_type -> family config class, each module imported on first lookup (iterating imports nothing)."""

    def __getitem__(self, model_type: str) -> type[FamilyConfig]:
        cls = family_class(model_type) if isinstance(model_type, str) else None
        if cls is None:
            raise KeyError(model_type)
        return cls

    def __iter__(self) -> Iterator[str]:
        return iter(_WHERE)

    def __len__(self) -> int:
        return len(_WHERE)


# model_type -> family config class; the HF model_type is the only discriminator.
FAMILIES: Mapping[str, type[FamilyConfig]] = _Families()


def __getattr__(name: str) -> Any:
    if name in _CLASSES:
        return getattr(import_module(f"zeroplan.models.families.{_CLASSES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ModelSpec(Frozen):
    """A model: provenance plus its family config (HF key names, as the source states them)."""

    name: Name
    source: str = Field(description="URL of the HF config.json or model card the numbers come from")
    hf_id: str | None = Field(None, pattern=HF_ID_PATTERN,
                              description="the Hugging Face Hub id (org/name) whose config.json `source` is")
    reference_params: int | None = Field(None, description="parameter count the source states")
    reference_rounded: bool = Field(
        False, description="reference_params is a rounded figure ('7B'), not an exact count"
    )
    reference_active_params: int | None = Field(
        None, description="active parameters per token the source states (MoE), rounded as reference_params is"
    )
    reference_differs: list[Literal["total", "active"]] = Field(
        [],  # pydantic copies a list default for each model
        description="stated figures the exact count does not equal (or round to); the note says why",
    )
    note: str | None = Field(None, description="where reference_params comes from, and any known difference")
    aliases: dict[str, str] = Field(
        {}, description="other Hub ids counted as this preset -> why: their config.json holds this one's shapes "
                        "(validation/hf_reference/presets/sources.json vendors each, tests/test_presets_hf.py holds it)")
    config: SerializeAsAny[FamilyConfig] = Field(description="the family config (a pydantic model per HF model_type)")

    @field_validator("config", mode="before")
    @classmethod
    def _family_of(cls, value: Any) -> Any:
        """A mapping is validated by its model_type's class (parse_family_config); an instance is kept."""
        return parse_family_config(value, strict=True) if isinstance(value, dict) else value

    def architecture(self) -> Architecture:
        return self.config.architecture()


def _model_type_error(data: dict) -> ValidationError:
    context = {"supported": ", ".join(sorted(FAMILIES))}
    if "model_type" in data:
        value, template = data["model_type"], "{model_type} is not a supported model_type; supported: {supported}"
        context["model_type"] = repr(value)
    else:
        value, template = data, "model_type is missing; supported: {supported}"
    error = PydanticCustomError("unsupported_model_type", template, context)
    details = InitErrorDetails(type=error, loc=("model_type",), input=value)
    return ValidationError.from_exception_data("FamilyConfig", [details])


def missing_required(data: dict) -> tuple[str, ...] | None:
    """The first key an HF config.json must state and does not (a text_config's as text_config.KEY), or None."""
    family = FAMILIES.get(data.get("model_type")) if isinstance(data.get("model_type"), str) else None
    if family is None:
        return None
    for key in family.REQUIRED:
        if key not in data:
            return (key,)
    text = data.get("text_config")
    if data["model_type"] in MULTIMODAL_TYPES and isinstance(text, dict):
        inner = missing_required({"model_type": TEXT_MODEL_TYPES[data["model_type"]], **text})
        return ("text_config", *inner) if inner else None
    return None


def parse_family_config(data: dict, *, strict: bool) -> FamilyConfig:
    """Validate an HF-style config dict into its family's pydantic model.

    strict=True (zeroplan YAML specs): unknown keys are errors. strict=False (HF config.json):
    keys the family does not use are ignored, the ones it uses are type-checked.
    """
    family = FAMILIES.get(data.get("model_type")) if isinstance(data.get("model_type"), str) else None
    if family is None:
        raise _model_type_error(data)
    if not strict:
        data = _known_keys(family, data)
    return family.model_validate(data)


def _known_keys(family: type[FamilyConfig], data: dict) -> dict:
    """An HF config.json's keys that `family` reads (a multimodal config's text_config likewise)."""
    known = {key: value for key, value in data.items() if key in family.hf_keys()}
    text = known.get("text_config")
    if data["model_type"] in MULTIMODAL_TYPES and isinstance(text, dict):
        text_type = text.get("model_type", TEXT_MODEL_TYPES.get(data["model_type"]))
        text_family = FAMILIES.get(text_type) if isinstance(text_type, str) else None
        if text_family is not None and text_type not in MULTIMODAL_TYPES:
            known["text_config"] = _known_keys(text_family, {**text, "model_type": text_type})
    return known


__all__ = [
    "FAMILIES",
    "BloomConfig",
    "DeepseekV2Config",
    "DeepseekV3Config",
    "FalconConfig",
    "FamilyConfig",
    "GPT2Config",
    "GPTJConfig",
    "Gemma3TextConfig",
    "GemmaConfig",
    "Glm4Config",
    "GraniteConfig",
    "Olmo2Config",
    "Olmo3Config",
    "Qwen3Config",
    "SmolLM3Config",
    "TEXT_MODEL_TYPES",
    "GPTNeoXConfig",
    "Gemma2Config",
    "Glm4MoeConfig",
    "GptOssConfig",
    "GraniteMoeConfig",
    "Llama4TextConfig",
    "LlamaConfig",
    "MistralConfig",
    "MixtralConfig",
    "MoEDecoderConfig",
    "ModelSpec",
    "MultimodalConfig",
    "OPTConfig",
    "Phi3Config",
    "Qwen2Config",
    "Qwen2MoeConfig",
    "Qwen3MoeConfig",
    "Qwen3NextConfig",
    "RMSNormDecoderConfig",
    "T5Config",
    "missing_required",
    "parse_family_config",
]
