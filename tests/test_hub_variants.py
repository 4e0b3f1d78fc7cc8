"""Hub ids offline: an instruct, base, chat, pre-trained or dated variant of a preset's checkpoint is counted as the
preset and the assumptions say so; a quantized checkpoint's id never is; an unknown id's did-you-mean lists the presets
of its family (its name and generation)."""

import json

import pytest

from zeroplan.cli.app import app
from zeroplan.models.hub import base_form, family_key, variant_candidates
from zeroplan.models.presets import model_reference


@pytest.mark.parametrize(("hub_id", "preset"), [
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"), ("meta-llama/Meta-Llama-3-8B-Instruct", "llama-3.1-8b"),
    ("Qwen/Qwen3-30B-A3B-Instruct-2507", "qwen3-30b-a3b"), ("Qwen/Qwen3-8B-Base", "qwen3-8b"),
    ("google/gemma-2-9b-it", "gemma2-9b"), ("google/gemma-3-27b-pt", "gemma3-27b"),
    ("meta-llama/Llama-2-7b-chat-hf", "llama-2-7b"), ("mistralai/Mistral-7B-Instruct-v0.1", "mistral-7b"),
    ("deepseek-ai/DeepSeek-V3-0324", "deepseek-v3"), ("Qwen/Qwen3-30B-A3B-Thinking-2507", "qwen3-30b-a3b"),
    ("Qwen/Qwen3-235B-A22B-Thinking-2507", "qwen3-235b-a22b"), ("meta-llama/Llama-3.3-70B-Instruct", "llama-3.1-70b"),
    ("deepseek-ai/DeepSeek-R1", "deepseek-v3"), ("deepseek-ai/DeepSeek-R1-0528", "deepseek-v3"),
])  # fmt: skip
def test_a_variant_resolves_to_its_preset(hub_id, preset):
    assert model_reference(hub_id) == preset


@pytest.mark.parametrize("hub_id", ["Qwen/Qwen3-8B-FP8", "Qwen/Qwen3-8B-AWQ", "mistralai/Mistral-7B-Instruct-v0.2",
                                    "Qwen/Qwen3-Coder-30B-A3B-Instruct", "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
                                    "meta-llama/Llama-3.3-70B-Instruct-FP8"])
def test_a_quantized_or_other_checkpoint_does_not(hub_id):
    with pytest.raises(Exception, match="no preset has this hf_id"):
        model_reference(hub_id)


def test_the_output_says_which_preset_counted_it(runner):
    res = runner.invoke(app, ["estimate", "--model", "Qwen/Qwen3-8B-Base", "--gpus", "8", "-f", "json"])
    notes = [a for a in json.loads(res.stdout)["assumptions"] if "counted as" in a]
    assert notes == ["parameter count: Qwen/Qwen3-8B-Base is counted as qwen3-8b (Qwen/Qwen3-8B): a variant (base) of that "
                     "checkpoint; the same layers, widths, heads and vocabulary assumed (zeroplan is offline; if its "
                     "config.json differs, give it with --model PATH/config.json)"]


def test_an_unknown_id_is_offered_its_family(runner):
    res = runner.invoke(app, ["estimate", "--model", "Qwen/Qwen3-Coder-30B-A3B-Instruct", "--gpus", "8"])
    assert res.exit_code == 1
    assert res.stderr.strip().endswith("did you mean qwen3-0.6b (Qwen/Qwen3-0.6B), qwen3-1.7b (Qwen/Qwen3-1.7B), qwen3-14b (Qwen/Qwen3-14B), "
                                       "qwen3-235b-a22b (Qwen/Qwen3-235B-A22B), qwen3-30b-a3b (Qwen/Qwen3-30B-A3B), "
                                       "qwen3-32b (Qwen/Qwen3-32B), qwen3-4b (Qwen/Qwen3-4B), qwen3-8b (Qwen/Qwen3-8B), "
                                       "qwen3-next-80b-a3b (Qwen/Qwen3-Next-80B-A3B-Thinking)?")


def test_the_shapes_of_an_id():
    assert base_form("meta-llama/Llama-3.1-8B-Instruct") == ("meta-llama/llama-3.1-8b", ("instruct",))
    assert family_key("Qwen/Qwen2.5-7B") == ("qwen", "2") and family_key("meta-llama/Meta-Llama-3-8B") == ("llama", "3")
    assert variant_candidates("Qwen/Qwen3-8B-GPTQ-Int4") == []
