"""Where presets come from: a preset in ZEROPLAN_CONFIG_DIR shadows the bundled one of the same name."""

from pathlib import Path

import pytest

from zeroplan.hardware.presets import load_hardware
from zeroplan.models.presets import model_facts
from zeroplan.registry import CONFIG_DIR_ENV, bundled_config_dir, preset_paths

BUNDLED = bundled_config_dir()
GEMMA2_9B = 9_241_705_984
LLAMA2_7B = 6_738_415_616


@pytest.fixture
def config_dir(tmp_path, monkeypatch) -> Path:
    """An empty ZEROPLAN_CONFIG_DIR, the preset registry re-read with it and again after the test."""
    for kind in ("models", "hardware"):
        (tmp_path / kind).mkdir()
    monkeypatch.setenv(CONFIG_DIR_ENV, str(tmp_path))
    preset_paths.cache_clear()
    yield tmp_path
    preset_paths.cache_clear()


def test_a_model_in_the_config_dir_shadows_the_bundled_preset(config_dir):
    text = (BUNDLED / "models" / "gemma2-9b.yaml").read_text(encoding="utf-8")
    (config_dir / "models" / "gemma2-9b.yaml").write_text(text.replace("num_hidden_layers: 42", "num_hidden_layers: 2"))
    _, counts, arch = model_facts("gemma2-9b")
    assert arch.num_layers == 2
    assert counts.num_params < GEMMA2_9B
    assert model_facts("llama-2-7b")[1].num_params == LLAMA2_7B  # the others still come from the bundle


def test_a_hardware_preset_in_the_config_dir_shadows_the_bundled_one(config_dir):
    text = (BUNDLED / "hardware" / "h100-sxm-80gb.yaml").read_text(encoding="utf-8")
    (config_dir / "hardware" / "h100-sxm-80gb.yaml").write_text(text.replace("memory_gib: 79.65", "memory_gib: 12"))
    assert load_hardware("h100-sxm-80gb").memory_gib == 12
    assert load_hardware("a100-sxm-80gb").memory_gib == 80.0
