"""The committed preset index: current, equal to the full loader for every preset, never used for user files."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from zeroplan.hardware.presets import load_hardware
from zeroplan.models import index_writer, preset_index
from zeroplan.models.params import count_params
from zeroplan.models.preset_index import bundled_config_dir
from zeroplan.models.presets import _indexed, load_model_file, model_facts
from zeroplan.registry import CONFIG_DIR_ENV, preset_names, preset_paths

BUNDLED = bundled_config_dir()
MODELS = sorted(p.stem for p in (BUNDLED / "models").glob("*.yaml"))
HARDWARE = sorted(p.stem for p in (BUNDLED / "hardware").glob("*.yaml"))


@pytest.fixture
def config_dir(tmp_path, monkeypatch) -> Path:
    """An empty ZEROPLAN_CONFIG_DIR, the preset registry re-read with it and again after the test."""
    for kind in ("models", "hardware"):
        (tmp_path / kind).mkdir()
    monkeypatch.setenv(CONFIG_DIR_ENV, str(tmp_path))
    preset_paths.cache_clear()
    yield tmp_path
    preset_paths.cache_clear()


@pytest.fixture(autouse=True)
def _bundledpreset_paths(monkeypatch):
    monkeypatch.delenv(CONFIG_DIR_ENV, raising=False)
    preset_paths.cache_clear()
    yield
    preset_paths.cache_clear()


def test_committed_index_is_current():
    committed, built = preset_index.load_index(), index_writer.build_index()
    fix = f"run `{index_writer.REGENERATE}` and commit configs/index.json"
    assert committed is not None, f"configs/index.json is missing: {fix}"
    stale = [f"{kind}/{name}" for kind in ("models",)
             for name in sorted(committed.get(kind, {}).keys() | built[kind].keys())
             if committed.get(kind, {}).get(name) != built[kind].get(name)]
    assert committed == built, f"configs/index.json is stale ({', '.join(stale) or 'layout'}): {fix}"
    text = (BUNDLED / preset_index.INDEX_FILE).read_text(encoding="utf-8")
    assert text == index_writer.dumps(built), f"configs/index.json is not as the generator writes it: {fix}"


def test_index_covers_every_bundled_preset():
    index = preset_index.load_index()
    assert sorted(index["models"]) == MODELS == preset_names("models")


@pytest.mark.parametrize("name", MODELS)
def test_indexed_model_equals_the_full_path(name):
    spec = load_model_file(BUNDLED / "models" / f"{name}.yaml")
    assert _indexed("models", name) is not None
    assert model_facts(name) == (spec.name, count_params(spec.config), spec.architecture())


def _doctored(monkeypatch, name: str, keep_digest: bool) -> None:
    """Replace the index by one whose entry for model `name` has wrong counts (and, optionally, a wrong digest)."""
    index = index_writer.build_index()
    index["models"][name]["counts"]["num_params"] = 1
    if not keep_digest:
        index["models"][name]["crc32"] = "0" * 8
    monkeypatch.setattr(preset_index, "load_index", lambda: index)


def test_the_index_answers_for_a_bundled_preset(monkeypatch):
    _doctored(monkeypatch, "gemma2-9b", keep_digest=True)
    assert model_facts("gemma2-9b")[1].num_params == 1


def test_a_preset_edited_since_the_index_was_built_is_read_from_its_yaml(monkeypatch):
    _doctored(monkeypatch, "gemma2-9b", keep_digest=False)
    assert model_facts("gemma2-9b")[1].num_params == 9_241_705_984


def test_without_an_index_every_preset_is_read_from_its_yaml(monkeypatch):
    monkeypatch.setattr(preset_index, "load_index", lambda: None)
    assert model_facts("gemma2-9b")[1].num_params == 9_241_705_984
    assert load_hardware("h100-sxm-80gb").memory_gib == 79.65


def test_a_shadowing_model_in_the_config_dir_is_read_from_its_yaml(config_dir):
    text = (BUNDLED / "models" / "gemma2-9b.yaml").read_text(encoding="utf-8")
    (config_dir / "models" / "gemma2-9b.yaml").write_text(text.replace("num_hidden_layers: 42", "num_hidden_layers: 2"))
    assert _indexed("models", "gemma2-9b") is None
    name, counts, arch = model_facts("gemma2-9b")
    assert arch.num_layers == 2
    assert counts.num_params < 9_241_705_984
    assert _indexed("models", "llama-2-7b") is not None  # the others still come from the index


def test_a_shadowing_hardware_preset_in_the_config_dir_is_read_from_its_yaml(config_dir):
    text = (BUNDLED / "hardware" / "h100-sxm-80gb.yaml").read_text(encoding="utf-8")
    (config_dir / "hardware" / "h100-sxm-80gb.yaml").write_text(text.replace("memory_gib: 79.65", "memory_gib: 12"))
    assert load_hardware("h100-sxm-80gb").memory_gib == 12


def test_a_user_file_is_never_looked_up_in_the_index(tmp_path):
    path = tmp_path / "gemma2-9b.yaml"
    path.write_text((BUNDLED / "models" / "gemma2-9b.yaml").read_text(encoding="utf-8"))
    assert _indexed("models", str(path)) is None
    assert model_facts(str(path))[1].num_params == 9_241_705_984


def test_load_index_imports_neither_yaml_pydantic_nor_the_families():
    code = ("import sys\nfrom zeroplan.models import preset_index\nassert preset_index.load_index()\n"
            "print([m for m in ('yaml', 'pydantic', 'zeroplan.models.families', 'zeroplan.models.params') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_indexed_presets_load_without_yaml_or_the_families():
    code = ("import sys\nfrom zeroplan.models import preset_index\nfrom zeroplan.models.presets import model_facts\nassert preset_index.load_index()\n"
            "model_facts('gemma2-9b')\n"
            "print([m for m in ('yaml', 'zeroplan.models.families', 'zeroplan.models.params') if m in sys.modules])")
    env = {k: v for k, v in os.environ.items() if k != CONFIG_DIR_ENV}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "[]"


def test_the_generator_refuses_to_write_outside_a_source_checkout(monkeypatch, tmp_path):
    installed = tmp_path / "lib" / "site-packages" / "zeroplan" / "models" / "index_writer.py"
    monkeypatch.setattr(index_writer, "__file__", str(installed))
    with pytest.raises(SystemExit, match="not a source checkout"):
        index_writer.main(["--write"])


def test_write_index_describes_the_presets_beside_it(tmp_path):
    for kind in ("models", "hardware"):
        shutil.copytree(BUNDLED / kind, tmp_path / kind)
    (tmp_path / "models" / "gpt2.yaml").unlink()
    index_writer.write_index(tmp_path / "index.json")
    written = (tmp_path / "index.json").read_text(encoding="utf-8")
    assert written == index_writer.dumps(index_writer.build_index(tmp_path))
    assert "gpt2" not in index_writer.build_index(tmp_path)["models"]
