"""The committed preset index: current, equal to the full loader for every preset, never used for user files."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from zeroplan import preset_index, presets
from zeroplan.preset_index import bundled_config_dir

BUNDLED = bundled_config_dir()
MODELS = sorted(p.stem for p in (BUNDLED / "models").glob("*.yaml"))
HARDWARE = sorted(p.stem for p in (BUNDLED / "hardware").glob("*.yaml"))


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


def test_load_index_imports_neither_yaml_pydantic_nor_the_families():
    code = ("import sys\nfrom zeroplan import preset_index\nassert preset_index.load_index()\n"
            "print([m for m in ('yaml', 'pydantic', 'zeroplan.families', 'zeroplan.params') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
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
