"""Model families: Hugging Face config keys and defaults per family -> the normalized Architecture.

`parse_family_config` picks the family by `model_type`. Pure: no I/O, no yaml.
"""

from __future__ import annotations

from typing import Annotated, Union, get_args

from pydantic import Field, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from zeroplan.frozen import Frozen
from zeroplan.models.architecture import Architecture
from zeroplan.models.families.base import FamilyConfig
from zeroplan.models.families.layernorm import (
    BloomConfig,
    FalconConfig,
    GPT2Config,
    GPTNeoXConfig,
    OPTConfig,
)
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
)

# model_type -> family config class; the HF model_type is the only discriminator.
FAMILIES: dict[str, type[FamilyConfig]] = {
    get_args(cls.model_fields["model_type"].annotation)[0]: cls for cls in _FAMILY_CLASSES
}

AnyFamilyConfig = Annotated[Union[_FAMILY_CLASSES], Field(discriminator="model_type")]  # noqa: UP007


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


def parse_family_config(data: dict, *, strict: bool) -> FamilyConfig:
    """Validate an HF-style config dict into its family's pydantic model.

    strict=True (zeroplan YAML specs): unknown keys are errors. strict=False (HF config.json):
    keys the family does not use are ignored, the ones it uses are type-checked.
    """
    family = FAMILIES.get(data.get("model_type")) if isinstance(data.get("model_type"), str) else None
    if family is None:
        raise _model_type_error(data)
    if not strict:
        data = {key: value for key, value in data.items() if key in family.hf_keys()}
    return family.model_validate(data)


__all__ = [
    "FAMILIES",
    "AnyFamilyConfig",
    "BloomConfig",
    "FalconConfig",
    "FamilyConfig",
    "GPT2Config",
    "GPTNeoXConfig",
    "Gemma2Config",
    "LlamaConfig",
    "MistralConfig",
    "MixtralConfig",
    "ModelSpec",
    "OPTConfig",
    "Phi3Config",
    "Qwen2Config",
    "RMSNormDecoderConfig",
    "T5Config",
    "parse_family_config",
]
