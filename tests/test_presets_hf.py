"""The presets of issue 25 (the models people fine-tune in 2025-26), their Hub-id aliases and the torchtune builders
mapped to them, held to transformers: validation/hf_reference/presets/ vendors each config.json (sources.json names the
public copy) and counts.json holds what transformers 5.25 built from it on the meta device (count_presets.py)."""

from __future__ import annotations

import importlib.util
import json
from functools import cache
from pathlib import Path

import pytest

from zeroplan.frameworks.torchtune import BUILDERS
from zeroplan.frameworks.torchtune_builders import SAME_SHAPE_BUILDERS
from zeroplan.models.params import count_params
from zeroplan.models.presets import load_model, load_model_file, model_facts
from zeroplan.registry import bundled_config_dir

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "validation" / "hf_reference"


@cache
def _json(relative: str) -> dict:
    return json.loads((REFERENCE / relative).read_text(encoding="utf-8"))


SOURCES = _json("presets/sources.json")
PRESETS = sorted(SOURCES["presets"])
ALIASES = sorted(SOURCES["aliases"])


def measured(file: str) -> tuple[int, int, int, int]:
    ref = _json("presets/counts.json")["configs"][file]
    return ref["num_params"], ref["largest_layer_params"], ref["num_embedding_params"], ref["num_active_params"]


def counted(spec) -> tuple[int, int, int, int]:
    c = count_params(spec)
    return c.num_params, c.largest_layer_params, c.num_embedding_params, c.num_active_params


def test_issue_25_adds_at_least_30_presets_each_vendored() -> None:
    assert len(PRESETS) >= 30
    for entry in [*SOURCES["presets"].values(), *SOURCES["aliases"].values()]:
        assert (REFERENCE / entry["file"]).is_file() and entry["source"] and entry["kind"]
        assert entry["file"] in _json("presets/counts.json")["configs"]


@pytest.mark.parametrize("name", PRESETS)
def test_preset_counts_equal_transformers(name: str) -> None:
    """The preset's four figures are transformers' for its vendored config.json, and zeroplan reading that
    config.json whole (every key, not only the preset's) counts the same."""
    entry = SOURCES["presets"][name]
    assert counted(load_model(name)) == measured(entry["file"])
    assert counted(load_model_file(REFERENCE / entry["file"])) == measured(entry["file"])


@cache
def _expected() -> dict[str, str]:
    return _make_presets().expected()


def _make_presets():
    spec = importlib.util.spec_from_file_location("make_presets", REFERENCE / "make_presets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", PRESETS)
def test_preset_file_is_what_make_presets_writes(name: str) -> None:
    """Every config value in the preset is the vendored file's (make_presets.py copies them), none guessed."""
    written = (bundled_config_dir() / "models" / f"{name}.yaml").read_text(encoding="utf-8")
    assert written == _expected()[name]


@pytest.mark.parametrize("hub_id", ALIASES)
def test_alias_config_counts_as_its_preset(hub_id: str) -> None:
    """An alias's own config.json builds the same model in transformers as its preset's, the preset lists it, and the
    id resolves to the preset with a note that says why."""
    alias = SOURCES["aliases"][hub_id]
    preset = load_model(alias["preset"])
    assert hub_id in preset.aliases
    assert measured(alias["file"]) == counted(preset)
    name, counts, _ = model_facts(hub_id)
    assert name == alias["preset"]
    assert any(f"{hub_id} resolved to preset {name}" in note and "the config is the same" in note
               for note in counts.notes)


def test_a_variant_of_an_alias_says_its_shapes_are_assumed() -> None:
    name, counts, _ = model_facts("Qwen/Qwen2-0.5B")
    assert name == "qwen2.5-0.5b"
    assert any("a variant (base) of Qwen/Qwen2-0.5B-Instruct" in note and "assumed the same" in note
               for note in counts.notes)


@pytest.mark.parametrize(("hub_id", "preset"), [
    ("Qwen/Qwen2-0.5B", "qwen2.5-0.5b"),  # a variant (base) of an alias
    ("NousResearch/Llama-2-7b-hf", "llama-2-7b"),  # a re-upload
    ("NousResearch/Meta-Llama-3-8B", "llama-3.1-8b"),  # a re-upload of a same-shapes id
    ("unsloth/Qwen2.5-7B", "qwen2.5-7b"),
    ("TinyLlama/TinyLlama-1.1B-Chat-v1.0", "tinyllama-1.1b"),
    ("meta-llama/Llama-3.2-3B", "llama-3.2-3b"),
    ("google/gemma-3-1b-it", "gemma3-1b"),
])  # fmt: skip
def test_hub_ids_of_the_issue_resolve(hub_id: str, preset: str) -> None:
    assert model_facts(hub_id)[0] == preset


def test_a_quantized_reupload_is_not_its_original() -> None:
    from zeroplan.errors import SpecError

    with pytest.raises(SpecError, match="no preset has this hf_id"):
        load_model("unsloth/Qwen2.5-7B-bnb-4bit")


BUILDER_SHAPES = _json("presets/torchtune_builders.json")["builders"]
ARCH_OF = {"vocab_size": "vocab_size", "num_layers": "num_layers", "num_heads": "num_attention_heads",
           "num_kv_heads": "num_key_value_heads", "embed_dim": "hidden_size", "intermediate_dim": "intermediate_size",
           "head_dim": "head_dim", "tie_word_embeddings": "tie_word_embeddings"}


@pytest.mark.parametrize("builder", sorted(SAME_SHAPE_BUILDERS))
def test_mapped_torchtune_builder_states_its_presets_shapes(builder: str) -> None:
    arch = load_model(SAME_SHAPE_BUILDERS[builder]).architecture()
    stated = {k: v for k, v in BUILDER_SHAPES[builder].items() if k != "file"}
    assert {"vocab_size", "num_layers", "num_heads", "num_kv_heads", "embed_dim", "intermediate_dim"} <= set(stated)
    assert {k: getattr(arch, ARCH_OF[k]) for k in stated} == stated


def test_builder_tables_do_not_overlap() -> None:
    assert not set(BUILDERS) & set(SAME_SHAPE_BUILDERS)


def test_docs_list_each_preset_and_alias_with_its_count() -> None:
    lines = (ROOT / "docs" / "models.md").read_text(encoding="utf-8").splitlines()
    for name, entry in SOURCES["presets"].items():
        assert any(line.startswith(f"| {name} | {entry['hf_id']} | {measured(entry['file'])[0]:,} |") for line in lines)
    for hub_id, alias in SOURCES["aliases"].items():
        assert any(line.startswith(f"| {hub_id} | {alias['preset']} |") for line in lines)


def test_a_qwen3_next_config_without_full_attention_is_refused_in_one_line() -> None:
    """The fuzz campaign over the presets found it: a hybrid with no softmax layer has no heads to size attention by."""
    from zeroplan.errors import SpecError
    from zeroplan.models.presets import model_from_data

    config = {**load_model("qwen3-next-80b-a3b").config.model_dump(exclude_unset=True), "full_attention_interval": 64}
    with pytest.raises(SpecError, match=r"^config\.json: no full_attention layer in 48 layers"):
        model_from_data(config, "config.json", hf_name="x")


def test_models_json_names_each_presets_hub_id_and_aliases() -> None:
    from zeroplan.cli.presets import models_output

    rows = {row["name"]: row for row in models_output()[0]["models"]}
    assert rows["qwen2.5-7b"]["hf_id"] == "Qwen/Qwen2.5-7B" and "Qwen/Qwen2-7B-Instruct" in rows["qwen2.5-7b"]["aliases"]
    assert rows["gpt2"]["aliases"] == {}
