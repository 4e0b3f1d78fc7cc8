"""README's "What is modelled" names every family zeroplan reads (issue 25): its sentence is the registry's own."""

from __future__ import annotations

from pathlib import Path

from zeroplan.models.families import FAMILIES, MULTIMODAL_TYPES
from zeroplan.models.families.names import DISPLAY_NAMES, TEXT_ONLY_VIA_OUTER, readme_sentence

README = Path(__file__).resolve().parent.parent / "README.md"


def test_every_model_type_read_has_a_name_or_an_outer_type():
    assert set(FAMILIES) == set(DISPLAY_NAMES) | TEXT_ONLY_VIA_OUTER
    assert not set(DISPLAY_NAMES) & TEXT_ONLY_VIA_OUTER


def test_readme_states_the_generated_sentence():
    readme = " ".join(README.read_text(encoding="utf-8").split())
    sentence = readme_sentence()
    assert sentence in readme
    for model_type in FAMILIES:
        assert model_type in TEXT_ONLY_VIA_OUTER or f"(`{model_type}`)" in sentence
    assert all(f"(`{t}`)" in sentence for t in MULTIMODAL_TYPES)
