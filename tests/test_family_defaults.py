"""Issue 25's families from transformers' own config class defaults (validation/check_family_defaults.py): zeroplan's
core count is what transformers builds on the meta device, and the core estimates each without the [hf] extra."""

from __future__ import annotations

import pytest

from validation.check_family_defaults import ITEM5, count_check, default_config, estimate_check

pytestmark = [pytest.mark.torch, pytest.mark.slow]


@pytest.mark.parametrize("model_type", ITEM5)
def test_counted_as_transformers_builds_it_and_estimated_without_torch(model_type):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    data = default_config(model_type)
    counted, text = count_check(data)
    assert counted, text
    estimated, text = estimate_check(data)
    assert estimated, text
