"""The pydantic base of the models that describe files and their results (plans, DeepSpeed configs, policies, advice).

The calculators' inputs and results are plain frozen dataclasses instead (validated at the edge by zeroplan.validate).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    """Immutable, and unknown keys are errors that name the key."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # schemas built on first use: fast start-up
