"""Model families: Hugging Face config keys and defaults per family -> the normalized Architecture.

Pure: no I/O, no yaml. STUB: the families work (issue 2) fills this in.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from zeroplan.spec import Architecture, Frozen


class ModelSpec(Frozen):
    """A model: provenance plus its family config (HF key names, as the source states them)."""

    name: str
    source: str = Field(description="URL of the HF config.json or model card the numbers come from")
    reference_params: int | None = Field(None, description="parameter count the source states")
    config: Any = Field(description="the family config (a pydantic model per HF model_type)")

    def architecture(self) -> Architecture:
        return self.config.architecture()


def parse_family_config(data: dict, *, strict: bool) -> Any:
    """Validate an HF-style config dict into its family's pydantic model.

    strict=True (zeroplan YAML specs): unknown keys are errors. strict=False (HF config.json):
    keys the family does not use are ignored, the ones it uses are type-checked.
    """
    raise NotImplementedError
