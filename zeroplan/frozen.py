"""The pydantic base of the models that describe files and results off the estimate path (plans, configs, advice).

The estimate path's inputs and results are zeroplan.record records instead, which load without pydantic.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    """Immutable, and unknown keys are errors that name the key."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # schemas built on first use: fast start-up
