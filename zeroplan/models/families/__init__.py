"""Model families: Hugging Face config keys and defaults per family -> the normalized Architecture.

`parse_family_config` picks the family by `model_type`. Pure: no I/O, no yaml.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any, ClassVar, Literal, Union, get_args

from pydantic import Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from zeroplan.frozen import Frozen
from zeroplan.models.architecture import Architecture
from zeroplan.models.block import Decoder
from zeroplan.models.families.base import FamilyConfig
from zeroplan.models.families.deepseek import DeepseekV2Config, DeepseekV3Config, Glm4MoeConfig
from zeroplan.models.families.dense import (
    Gemma3TextConfig,
    GemmaConfig,
    Glm4Config,
    GraniteConfig,
    Olmo2Config,
    Olmo3Config,
    Qwen3Config,
    SmolLM3Config,
)
from zeroplan.models.families.falcon import FalconConfig
from zeroplan.models.families.gptj import GPTJConfig
from zeroplan.models.families.layernorm import BloomConfig, GPT2Config, GPTNeoXConfig, OPTConfig
from zeroplan.models.families.llama4 import Llama4TextConfig
from zeroplan.models.families.moe import GptOssConfig, GraniteMoeConfig, MoEDecoderConfig
from zeroplan.models.families.qwen import Qwen2MoeConfig, Qwen3MoeConfig, Qwen3NextConfig
from zeroplan.models.families.rmsnorm import (
    Gemma2Config,
    LlamaConfig,
    MistralConfig,
    MixtralConfig,
    Phi3Config,
    Qwen2Config,
    RMSNormDecoderConfig,
)
from zeroplan.models.families.t5 import T5Config
from zeroplan.models.hub import HF_ID_PATTERN
from zeroplan.validate import Name

_FAMILY_CLASSES = (
    GPT2Config,
    GPTNeoXConfig,
    OPTConfig,
    BloomConfig,
    FalconConfig,
    LlamaConfig,
    MistralConfig,
    MixtralConfig,
    Qwen2Config,
    Gemma2Config,
    Phi3Config,
    T5Config,
    Qwen2MoeConfig,
    Qwen3MoeConfig,
    Qwen3NextConfig,
    Llama4TextConfig,
    DeepseekV2Config,
    DeepseekV3Config,
    Glm4MoeConfig,
    GptOssConfig,
    GraniteMoeConfig,
    Qwen3Config,
    GemmaConfig,
    Gemma3TextConfig,
    Glm4Config,
    Olmo2Config,
    Olmo3Config,
    GraniteConfig,
    SmolLM3Config,
    GPTJConfig,
)

AnyTextConfig = Annotated[Union[_FAMILY_CLASSES], Field(discriminator="model_type")]  # noqa: UP007

# A multimodal model_type -> the model_type of its language model, where its text_config may leave it out (the
# outer config class's default text config: Gemma3Config -> Gemma3TextConfig, Llama4Config -> Llama4TextConfig,
# Mistral3Config -> MistralConfig, Qwen2_5_VLConfig -> Qwen2_5_VLTextConfig). A family helper adds its own here.
TEXT_MODEL_TYPES: dict[str, str] = {
    "gemma3": "gemma3_text",
    "llama4": "llama4_text",
    "mistral3": "mistral",
    "qwen2_5_vl": "qwen2_5_vl_text",
}
_TEXT_TYPES = {t for cls in _FAMILY_CLASSES for t in get_args(cls.model_fields["model_type"].annotation)}
# The multimodal model_types zeroplan reads: those whose language model is a family here.
MULTIMODAL_TYPES = tuple(outer for outer, text in TEXT_MODEL_TYPES.items() if text in _TEXT_TYPES)


class MultimodalConfig(FamilyConfig):
    """A vision-language config (Gemma3Config, Llama4Config, Mistral3Config, ...) read through its `text_config`:
    the language model is counted as AutoModelForCausalLM builds it from `get_text_config()`; the vision tower and
    multimodal projector are not counted, and the count's notes say so.
    """

    REQUIRED: ClassVar[tuple[str, ...]] = ("text_config",)

    model_type: Literal[MULTIMODAL_TYPES]  # type: ignore[valid-type]
    text_config: AnyTextConfig

    @model_validator(mode="before")
    @classmethod
    def _default_text_model_type(cls, data: Any) -> Any:
        # The outer config class builds its default text config when text_config is absent, and a text_config
        # without model_type is of that default class.
        if isinstance(data, dict) and data.get("model_type") in TEXT_MODEL_TYPES:
            text = data.get("text_config", {})
            if isinstance(text, dict) and "model_type" not in text:
                data = {**data, "text_config": {**text, "model_type": TEXT_MODEL_TYPES[data["model_type"]]}}
            text_type = data["text_config"].get("model_type") if isinstance(data.get("text_config"), dict) else None
            if isinstance(text_type, str) and text_type not in _TEXT_TYPES:
                raise ValueError(f"text_config.model_type {text_type!r} is not a supported language model; "
                                 f"supported: {', '.join(sorted(_TEXT_TYPES))}")
        return data

    def architecture(self) -> Architecture:
        """The language model's architecture, its family the outer model_type (TEXT_MODEL_TYPES maps it)."""
        return replace(self.text_config.architecture(), family=self.model_type)

    def decoder(self) -> Decoder | None:
        text = self.text_config.decoder()
        if text is None:
            return None
        note = (f"{self.model_type}: the language model (text_config, {self.text_config.model_type}) only; the "
                "vision tower and multimodal projector are not counted")
        return replace(text, notes=(*text.notes, note))


_ALL_CLASSES = (*_FAMILY_CLASSES, MultimodalConfig)

# model_type -> family config class; the HF model_type is the only discriminator.
FAMILIES: dict[str, type[FamilyConfig]] = {
    model_type: cls for cls in _ALL_CLASSES for model_type in get_args(cls.model_fields["model_type"].annotation)
}

AnyFamilyConfig = Annotated[Union[_ALL_CLASSES], Field(discriminator="model_type")]  # noqa: UP007


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
        default_factory=list,
        description="stated figures the exact count does not equal (or round to); the note says why",
    )
    note: str | None = Field(None, description="where reference_params comes from, and any known difference")
    config: AnyFamilyConfig = Field(description="the family config (a pydantic model per HF model_type)")

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
    if family is MultimodalConfig and isinstance(text, dict):
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
    if family is MultimodalConfig and isinstance(text, dict):
        text_type = text.get("model_type", TEXT_MODEL_TYPES.get(data["model_type"]))
        text_family = FAMILIES.get(text_type) if isinstance(text_type, str) else None
        if text_family is not None and text_family is not MultimodalConfig:
            known["text_config"] = _known_keys(text_family, {**text, "model_type": text_type})
    return known


__all__ = [
    "FAMILIES",
    "AnyFamilyConfig",
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
