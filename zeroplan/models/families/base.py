"""What every family config shares: HF key names, strict types, alias keys, the checks they all need.

Pure: imports neither rich, typer nor yaml and does no I/O.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import ConfigDict, model_validator

from zeroplan.frozen import Frozen
from zeroplan.models.architecture import Architecture


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


def check_divides(divisor_name: str, divisor: int, name: str, value: int) -> None:
    """Raise ValueError naming both values unless `divisor` divides `value`."""
    if value % divisor:
        raise ValueError(f"{name} ({value}) is not a multiple of {divisor_name} ({divisor})")
