"""Counts and shapes of preset models, for tests that need a real model without loading it per test."""

from zeroplan.models.params import count_params
from zeroplan.models.presets import load_model

_GEMMA2 = load_model("gemma2-9b")  # the source article's model
GEMMA2_9B = count_params(_GEMMA2)
GEMMA2_9B_ARCH = _GEMMA2.architecture()
