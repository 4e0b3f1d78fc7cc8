"""The committed preset index: current, equal to the full loader for every preset, never used for user files."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from zeroplan import preset_index, presets
from zeroplan.params import count_params
from zeroplan.preset_index import bundled_config_dir

BUNDLED = bundled_config_dir()
MODELS = sorted(p.stem for p in (BUNDLED / "models").glob("*.yaml"))
HARDWARE = sorted(p.stem for p in (BUNDLED / "hardware").glob("*.yaml"))


@pytest.fixture
def config_dir(tmp_path, monkeypatch) -> Path:
    """An empty ZEROPLAN_CONFIG_DIR, the preset registry re-read with it and again after the test."""
    for kind in ("models", "hardware"):
        (tmp_path / kind).mkdir()
    monkeypatch.setenv(presets.CONFIG_DIR_ENV, str(tmp_path))
    presets._registry.cache_clear()
    yield tmp_path
    presets._registry.cache_clear()


@pytest.fixture(autouse=True)
def _bundled_registry(monkeypatch):
    monkeypatch.delenv(presets.CONFIG_DIR_ENV, raising=False)
    presets._registry.cache_clear()
    yield
    presets._registry.cache_clear()


def test_committed_index_is_current():
    committed, built = preset_index.load_index(), preset_index.build_index()
    fix = f"run `{preset_index.REGENERATE}` and commit configs/index.json"
    assert committed is not None, f"configs/index.json is missing: {fix}"
    stale = [f"{kind}/{name}" for kind in ("models", "hardware")
             for name in sorted(committed.get(kind, {}).keys() | built[kind].keys())
             if committed.get(kind, {}).get(name) != built[kind].get(name)]
    assert committed == built, f"configs/index.json is stale ({', '.join(stale) or 'layout'}): {fix}"
    text = (BUNDLED / preset_index.INDEX_FILE).read_text(encoding="utf-8")
    assert text == preset_index.dumps(built), f"configs/index.json is not as the generator writes it: {fix}"


def test_index_covers_every_bundled_preset():
    index = preset_index.load_index()
    assert sorted(index["models"]) == MODELS == presets.preset_names("models")
    assert sorted(index["hardware"]) == HARDWARE == presets.preset_names("hardware")


@pytest.mark.parametrize("name", MODELS)
def test_indexed_model_equals_the_full_path(name):
    spec = presets.load_model_file(BUNDLED / "models" / f"{name}.yaml")
    assert presets._indexed("models", name) is not None
    assert presets.model_facts(name) == (spec.name, count_params(spec.config), spec.architecture())


@pytest.mark.parametrize("name", HARDWARE)
def test_indexed_hardware_equals_the_full_path(name):
    assert presets._indexed("hardware", name) is not None
    assert presets.load_hardware(name) == presets.load_hardware_file(BUNDLED / "hardware" / f"{name}.yaml")


def _doctored(monkeypatch, name: str, keep_digest: bool) -> None:
    """Replace the index by one whose entry for model `name` has wrong counts (and, optionally, a wrong digest)."""
    index = preset_index.build_index()
    index["models"][name]["counts"]["num_params"] = 1
    if not keep_digest:
        index["models"][name]["crc32"] = "0" * 8
    monkeypatch.setattr(preset_index, "load_index", lambda: index)


def test_the_index_answers_for_a_bundled_preset(monkeypatch):
    _doctored(monkeypatch, "gemma2-9b", keep_digest=True)
    assert presets.model_facts("gemma2-9b")[1].num_params == 1


def test_a_preset_edited_since_the_index_was_built_is_read_from_its_yaml(monkeypatch):
    _doctored(monkeypatch, "gemma2-9b", keep_digest=False)
    assert presets.model_facts("gemma2-9b")[1].num_params == 9_241_705_984


def test_without_an_index_every_preset_is_read_from_its_yaml(monkeypatch):
    monkeypatch.setattr(preset_index, "load_index", lambda: None)
    assert presets.model_facts("gemma2-9b")[1].num_params == 9_241_705_984
    assert presets.load_hardware("h100-sxm-80gb").memory_gib == 79.65


def test_a_shadowing_model_in_the_config_dir_is_read_from_its_yaml(config_dir):
    text = (BUNDLED / "models" / "gemma2-9b.yaml").read_text(encoding="utf-8")
    (config_dir / "models" / "gemma2-9b.yaml").write_text(text.replace("num_hidden_layers: 42", "num_hidden_layers: 2"))
    assert presets._indexed("models", "gemma2-9b") is None
    name, counts, arch = presets.model_facts("gemma2-9b")
    assert arch.num_layers == 2
    assert counts.num_params < 9_241_705_984
    assert presets._indexed("models", "llama-2-7b") is not None  # the others still come from the index


def test_a_shadowing_hardware_preset_in_the_config_dir_is_read_from_its_yaml(config_dir):
    text = (BUNDLED / "hardware" / "h100-sxm-80gb.yaml").read_text(encoding="utf-8")
    (config_dir / "hardware" / "h100-sxm-80gb.yaml").write_text(text.replace("memory_gib: 79.65", "memory_gib: 12"))
    assert presets.load_hardware("h100-sxm-80gb").memory_gib == 12


def test_a_user_file_is_never_looked_up_in_the_index(tmp_path):
    path = tmp_path / "gemma2-9b.yaml"
    path.write_text((BUNDLED / "models" / "gemma2-9b.yaml").read_text(encoding="utf-8"))
    assert presets._indexed("models", str(path)) is None
    assert presets.model_facts(str(path))[1].num_params == 9_241_705_984


def test_load_index_imports_neither_yaml_pydantic_nor_the_families():
    code = ("import sys\nfrom zeroplan import preset_index\nassert preset_index.load_index()\n"
            "print([m for m in ('yaml', 'pydantic', 'zeroplan.families', 'zeroplan.params') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_indexed_presets_load_without_yaml_or_the_families():
    code = ("import sys\nfrom zeroplan import preset_index, presets\nassert preset_index.load_index()\n"
            "presets.model_facts('gemma2-9b'); presets.load_hardware('h100-sxm-80gb')\n"
            "print([m for m in ('yaml', 'zeroplan.families', 'zeroplan.params') if m in sys.modules])")
    env = {k: v for k, v in os.environ.items() if k != presets.CONFIG_DIR_ENV}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "[]"


def test_the_generator_refuses_to_write_outside_a_source_checkout(monkeypatch, tmp_path):
    installed = tmp_path / "lib" / "site-packages" / "zeroplan" / "preset_index.py"
    monkeypatch.setattr(preset_index, "__file__", str(installed))
    with pytest.raises(SystemExit, match="not a source checkout"):
        preset_index.main(["--write"])


def test_write_index_describes_the_presets_beside_it(tmp_path):
    for kind in ("models", "hardware"):
        shutil.copytree(BUNDLED / kind, tmp_path / kind)
    (tmp_path / "models" / "gpt2.yaml").unlink()
    preset_index.write_index(tmp_path / "index.json")
    written = (tmp_path / "index.json").read_text(encoding="utf-8")
    assert written == preset_index.dumps(preset_index.build_index(tmp_path))
    assert "gpt2" not in preset_index.build_index(tmp_path)["models"]
