"""A Hub id (`meta-llama/Llama-3.1-8B`) names a preset through its `hf_id`, offline; a local folder of that
name (holding config.json) comes first, as in transformers' from_pretrained; anything else says how to give one."""

import json
from pathlib import Path

import pytest

from zeroplan.cli.app import app
from zeroplan.errors import SpecError
from zeroplan.models.presets import (
    load_model,
    model_facts,
    model_reference,
    preset_for_hf_id,
)
from zeroplan.readers import parse_yaml, read_text
from zeroplan.registry import CONFIG_DIR_ENV, bundled_config_dir, preset_paths

PRESETS = sorted((bundled_config_dir() / "models").glob("*.yaml"))
HOW = "give --model PATH/config.json or a preset: run `zeroplan models`"


@pytest.fixture(autouse=True)
def _fresh_registry(monkeypatch):
    monkeypatch.delenv(CONFIG_DIR_ENV, raising=False)
    preset_paths.cache_clear()
    yield
    preset_paths.cache_clear()


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_each_preset_hf_id_is_the_repository_of_its_source(path):
    data = parse_yaml(read_text(path), str(path))
    assert data["source"] == f"https://huggingface.co/{data['hf_id']}/blob/main/config.json"
    assert load_model(path.stem).hf_id == data["hf_id"]


def test_hf_ids_are_unique():
    ids = [parse_yaml(read_text(p), str(p))["hf_id"].lower() for p in PRESETS]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize(("hub_id", "preset"), [
    ("meta-llama/Llama-3.1-8B", "llama-3.1-8b"),
    ("meta-llama/llama-3.1-8b", "llama-3.1-8b"),  # the Hub compares ids without case
    ("Qwen/Qwen2.5-7B", "qwen2.5-7b"),
    ("openai-community/gpt2", "gpt2"),
])  # fmt: skip
def test_a_hub_id_resolves_to_its_preset(hub_id, preset):
    assert preset_for_hf_id(hub_id) == preset
    assert model_reference(hub_id) == preset
    assert model_facts(hub_id) == model_facts(preset)
    assert load_model(hub_id) == load_model(preset)


def test_model_option_takes_a_hub_id(runner):
    def estimate(ref):
        res = runner.invoke(app, ["estimate", "--model", ref, "-f", "json"])
        assert res.exit_code == 0, res.output
        return json.loads(res.stdout)

    assert estimate("meta-llama/Llama-3.1-8B") == estimate("llama-3.1-8b")


def test_a_local_folder_of_that_name_comes_first(tmp_path, monkeypatch):
    folder = tmp_path / "meta-llama" / "Llama-3.1-8B"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 2}))
    monkeypatch.chdir(tmp_path)
    assert model_reference("meta-llama/Llama-3.1-8B") == Path("meta-llama/Llama-3.1-8B/config.json")
    assert model_facts("meta-llama/Llama-3.1-8B")[0] == "Llama-3.1-8B"  # the folder's config, named for its folder


def test_a_folder_without_config_json_says_so(tmp_path):
    with pytest.raises(SpecError, match=f"a folder without a config.json; {HOW}"):
        model_reference(str(tmp_path))


@pytest.mark.parametrize(("ref", "family"), [
    ("acme/Widget-7B", ""),
    ("models/Qwen2.5-7B", "; did you mean qwen2.5-0.5b (Qwen/Qwen2.5-0.5B-Instruct), qwen2.5-1.5b (Qwen/Qwen2.5-1.5B-Instruct), "
                          "qwen2.5-14b (Qwen/Qwen2.5-14B), qwen2.5-32b (Qwen/Qwen2.5-32B), qwen2.5-3b (Qwen/Qwen2.5-3B), "
                          "qwen2.5-72b (Qwen/Qwen2.5-72B), qwen2.5-7b (Qwen/Qwen2.5-7B)?"),
])  # fmt: skip
def test_an_unknown_hub_id_says_how_to_give_a_model(runner, ref, family, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["estimate", "--model", ref])
    assert res.exit_code == 1
    assert res.stderr.strip() == (f"error: {ref}: no preset has this hf_id, and no local folder or file has this "
                                  f"name (zeroplan never downloads); {HOW}{family}")  # fmt: skip


def test_a_user_preset_hf_id_is_read_from_its_yaml(tmp_path, monkeypatch):
    (tmp_path / "models").mkdir()
    spec = {"name": "tiny", "source": "https://huggingface.co/me/tiny/blob/main/config.json", "hf_id": "me/tiny",
            "config": {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 2}}  # fmt: skip
    (tmp_path / "models" / "tiny.yaml").write_text(json.dumps(spec))
    monkeypatch.setenv(CONFIG_DIR_ENV, str(tmp_path))
    preset_paths.cache_clear()
    assert model_reference("me/tiny") == "tiny"
    assert model_facts("me/tiny")[0] == "tiny"


def test_an_hf_id_that_is_not_one_is_refused(tmp_path):
    spec = {"name": "bad", "source": "x", "hf_id": "not a hub id", "config": {"model_type": "gpt2"}}
    path = tmp_path / "bad.yaml"
    path.write_text(json.dumps(spec))
    with pytest.raises(SpecError, match="hf_id: String should match pattern"):
        load_model(str(path))


def test_a_hub_id_close_to_a_presets_gets_a_did_you_mean(runner):
    from zeroplan.cli.app import app

    result = runner.invoke(app, ["estimate", "--model", "meta-llama/Llama-3.2-11B-Vision"])  # the presets of its family
    assert result.exit_code == 1 and result.stderr.strip().endswith(
        "did you mean llama-3.1-405b (meta-llama/Llama-3.1-405B), llama-3.1-70b (meta-llama/Llama-3.1-70B), "
        "llama-3.1-8b (meta-llama/Llama-3.1-8B), llama-3.2-1b (meta-llama/Llama-3.2-1B-Instruct), "
        "llama-3.2-3b (meta-llama/Llama-3.2-3B-Instruct)?")
    other = runner.invoke(app, ["estimate", "--model", "Qwen/QVQ-72B-Preview"])  # another family: no guess
    assert other.exit_code == 1 and "did you mean" not in other.stderr


@pytest.mark.parametrize(("hub_id", "preset"), [("Qwen/Qwen3-8B", "qwen3-8b"), ("google/gemma-3-27b-it", "gemma3-27b"),
                                                ("microsoft/phi-4", "phi-4"), ("HuggingFaceTB/SmolLM3-3B", "smollm3-3b")])
def test_a_2025_hub_id_finds_its_preset_offline(hub_id, preset):
    assert model_reference(hub_id) == preset
