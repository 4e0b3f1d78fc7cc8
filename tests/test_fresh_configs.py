"""Fresh public config.json files (validation/hf_reference/fresh/: Qwen3.5, Qwen3-VL, Gemma 4, DeepSeek-R1 and V3.2,
Llama 3.1, Mixtral 8x22B, GLM-5, Nemotron 3, Kimi-K2.5, FP8 and ModelOpt checkpoints...), each counted exactly as
transformers builds it on the meta device (fresh/counts.json, count_fresh.py) or refused in one line, and their Hub ids
resolved to a preset of the same count or offered their family's presets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zeroplan.cli.app import app
from zeroplan.models.families import FAMILIES, parse_family_config
from zeroplan.models.params import count_params
from zeroplan.models.presets import model_reference

FRESH = Path(__file__).resolve().parent.parent / "validation" / "hf_reference" / "fresh"
SOURCES = {k: v for k, v in json.loads((FRESH / "sources.json").read_text(encoding="utf-8")).items() if k != "_about"}
COUNTS = json.loads((FRESH / "counts.json").read_text(encoding="utf-8"))["models"]
KEYS = ("num_params", "largest_layer_params", "num_embedding_params", "num_active_params")


def config(name: str) -> dict:
    return json.loads((FRESH / SOURCES[name]["file"]).read_text(encoding="utf-8"))


CORE = sorted(n for n in COUNTS if "num_params" in COUNTS[n] and config(n)["model_type"] in FAMILIES)
# What the CLI says of each fresh config zeroplan does not count: the words of its one line
REFUSED = {"DeepSeek-R1": "FP8 mixture-of-experts checkpoint", "Qwen3-30B-A3B-FP8": "FP8 mixture-of-experts checkpoint",
           "DeepSeek-V3.2": "quantization_config: quant_method fp8", "Qwen3-32B-FP8": "give --lora-rank R",
           "Kimi-K2.5": "text_config.quantization_config: quant_method compressed-tensors",
           "Llama-3.1-70B-Instruct-FP8": "quant_algo FP8: a ModelOpt-quantized checkpoint"}  # fmt: skip
NEED_TORCH = {"MiniMax-M2.5": "FP8 mixture-of-experts checkpoint", "MiMo-7B-Base": "model_type 'mimo' is described "
              "neither", "Llama-3_3-Nemotron-Super-49B-v1": "model_type 'nemotron-nas' is described neither",
              "Step-3.7-Flash": "transformers builds no causal LM"}  # fmt: skip


def test_every_fresh_config_has_its_source_and_a_transformers_record():
    on_disk = {p.stem for p in (FRESH / "configs").glob("*.json")} | {"Llama-3.1-70B-Instruct-FP8"}
    assert set(SOURCES) == on_disk and len(on_disk) >= 15
    assert set(COUNTS) == on_disk - {"Llama-3.1-70B-Instruct-FP8"}
    assert all(s["source"].startswith("ai-dynamo/aiconfigurator@095f58a51c4ca8e61b66ec108d86f223f8d559ce:")
               for s in SOURCES.values())


@pytest.mark.parametrize("name", CORE)
def test_a_fresh_config_of_a_described_family_counts_as_transformers_builds_it(name):
    counted = count_params(parse_family_config(config(name), strict=False))
    assert tuple(getattr(counted, key) for key in KEYS) == tuple(COUNTS[name][key] for key in KEYS)


def _estimate(runner, ref: str, *args: str):
    return runner.invoke(app, ["estimate", "--model", ref, *args, "-f", "json"])


@pytest.mark.parametrize("name", [n for n in CORE if n not in REFUSED])
def test_the_cli_counts_it_exactly(runner, name):
    res = _estimate(runner, str(FRESH / SOURCES[name]["file"]))
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["model"]["num_params"] == COUNTS[name]["num_params"]


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_quantized_checkpoint_is_refused_in_one_line(runner, name):
    folder = FRESH / SOURCES[name]["file"]
    res = _estimate(runner, str(folder.parent if folder.name == "config.json" else folder))
    line = res.stderr.strip()
    assert res.exit_code == 1 and len(line.splitlines()) == 1 and REFUSED[name] in line


def test_an_fp8_block_scaled_base_is_counted_at_its_stored_bytes_under_lora(runner):
    res = _estimate(runner, str(FRESH / SOURCES["Qwen3-32B-FP8"]["file"]), "--lora-rank", "8")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["model"]["num_params"] == COUNTS["Qwen3-32B-FP8"]["num_params"]


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(NEED_TORCH))
def test_what_transformers_cannot_count_is_refused_in_one_line(runner, name):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    res = _estimate(runner, str(FRESH / SOURCES[name]["file"]))
    line = res.stderr.strip()
    assert res.exit_code == 1 and len(line.splitlines()) == 1 and NEED_TORCH[name] in line


@pytest.mark.torch
@pytest.mark.parametrize("name", ["GLM-5", "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"])
def test_a_family_only_transformers_describes_is_counted_by_it(runner, name):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    res = _estimate(runner, str(FRESH / SOURCES[name]["file"]))
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["model"]["num_params"] == COUNTS[name]["num_params"]


# Hub ids of the fresh configs that name a preset's checkpoint (the same counts, checked here), and ids that do not
SAME_AS_PRESET = {"meta-llama/Meta-Llama-3.1-8B": "Meta-Llama-3.1-8B", "meta-llama/Meta-Llama-3.1-70B": "Meta-Llama-3.1-70B",
                  "meta-llama/Meta-Llama-3.1-405B": "Meta-Llama-3.1-405B", "deepseek-ai/DeepSeek-R1": "DeepSeek-R1",
                  "Qwen/Qwen3-1.7B": "Qwen3-1.7B", "mistralai/Mixtral-8x22B-v0.1": None}  # fmt: skip


@pytest.mark.parametrize("hub_id", [h for h, n in SAME_AS_PRESET.items() if n])
def test_a_hub_id_resolves_to_a_preset_of_its_configs_count(runner, hub_id):
    res = _estimate(runner, hub_id)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["model"]["num_params"] == COUNTS[SAME_AS_PRESET[hub_id]]["num_params"]
    assert model_reference(hub_id) in json.loads(res.stdout)["model"]["name"]


@pytest.mark.parametrize(("hub_id", "family"), [
    ("Qwen/Qwen3-VL-8B-Instruct", "qwen3-8b"), ("Qwen/Qwen3.5-27B", "qwen3-32b"),
    ("mistralai/Mixtral-8x22B-v0.1", "mixtral-8x7b"), ("Qwen/Qwen3-32B-FP8", "qwen3-32b"),
])  # fmt: skip
def test_a_hub_id_of_another_checkpoint_is_offered_its_family(runner, hub_id, family):
    res = _estimate(runner, hub_id)
    line = res.stderr.strip()
    assert res.exit_code == 1 and len(line.splitlines()) == 1 and "did you mean" in line and family in line
