"""Vision-language configs read through their language model's `text_config`.

Loaded only when a multimodal model_type is read: its text_config may be any family, so this imports them all.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import Field, model_validator

from zeroplan.models.architecture import Architecture
from zeroplan.models.block import Decoder
from zeroplan.models.families import (
    _WHERE,
    MULTIMODAL_TYPES,
    OUTER_TIE_TYPES,
    TEXT_MODEL_TYPES,
    TEXT_TYPES,
    family_class,
)
from zeroplan.models.families.base import FamilyConfig

_TEXT_CLASSES = tuple(dict.fromkeys(family_class(t) for t in _WHERE if t in TEXT_TYPES))
AnyTextConfig = Annotated[Union[_TEXT_CLASSES], Field(discriminator="model_type")]  # noqa: UP007
_TEXT_TYPES = TEXT_TYPES


class MultimodalConfig(FamilyConfig):
    """A vision-language config (Gemma3Config, Llama4Config, Mistral3Config, ...) read through its `text_config`:
    the language model is counted as AutoModelForCausalLM builds it from `get_text_config()`; the vision tower and
    multimodal projector are not counted, and the count's notes say so.
    """

    REQUIRED: ClassVar[tuple[str, ...]] = ("text_config",)

    model_type: Literal[MULTIMODAL_TYPES]  # type: ignore[valid-type]
    text_config: AnyTextConfig
    # Qwen3-VL, Qwen3.5: the outer config's flag ties the LM head (their config classes default it to false).
    tie_word_embeddings: bool | None = None

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

    @property
    def tied(self) -> bool | None:
        """The LM head's tie where the outer config decides it (OUTER_TIE_TYPES), else None (the text config's)."""
        return bool(self.tie_word_embeddings) if self.model_type in OUTER_TIE_TYPES else None

    def architecture(self) -> Architecture:
        """The language model's architecture, its family the outer model_type (TEXT_MODEL_TYPES maps it)."""
        arch = replace(self.text_config.architecture(), family=self.model_type)
        return arch if self.tied is None else replace(arch, tie_word_embeddings=self.tied)

    def decoder(self) -> Decoder | None:
        text = self.text_config.decoder()
        if text is None:
            return None
        if self.tied is not None:
            text = replace(text, tie_word_embeddings=self.tied)
        note = (f"{self.model_type}: the language model (text_config, {self.text_config.model_type}) only; the "
                "vision tower and multimodal projector are not counted")
        return replace(text, notes=(*text.notes, note))


