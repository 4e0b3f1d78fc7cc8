"""peft's default LoRA targets (zeroplan/memory/peft_targets.py): the table is peft's mapping for the families
zeroplan describes, a family peft maps to query_key_value is adapted there, and one peft does not map is refused
with peft's reason."""

import json

import pytest
from typer.testing import CliRunner

from zeroplan.cli.app import app
from zeroplan.memory.peft_targets import PEFT_LORA_DEFAULT_TARGETS, PEFT_REGEX_TARGETS
from zeroplan.models.families import MULTIMODAL_TYPES, TEXT_TYPES


@pytest.mark.torch  # imports peft (and so torch)
def test_the_table_is_peft_0_21_2s_mapping_for_every_family_zeroplan_describes():
    pytest.importorskip("peft")
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as peft_map

    expected = {k: tuple(v) for k, v in peft_map.items()
                if (k in TEXT_TYPES or k in MULTIMODAL_TYPES) and k not in PEFT_REGEX_TARGETS}
    for k in PEFT_REGEX_TARGETS:  # a regex over the multimodal model: its language model's (a|b) names
        regex = peft_map[k]
        assert isinstance(regex, str) and regex.startswith(r".*language_model\.")
        expected[k] = tuple(regex[regex.rindex("(") + 1:regex.rindex(")")].split("|"))
    assert PEFT_LORA_DEFAULT_TARGETS == expected


def _estimate(*args: str):
    return CliRunner().invoke(app, ["estimate", *args, "--gpus", "1", "--stage", "0", "-f", "json"])


def test_falcon_takes_peft_s_default_query_key_value():
    res = _estimate("--model", "falcon-7b", "--lora-rank", "32")
    assert res.exit_code == 0, res.output
    given = _estimate("--model", "falcon-7b", "--lora-rank", "32", "--lora-targets", "query_key_value")
    assert json.loads(res.stdout)["stages"] == json.loads(given.stdout)["stages"]


def test_a_family_peft_does_not_map_is_refused_with_peft_s_reason():
    res = _estimate("--model", "phi-3-mini", "--lora-rank", "32")
    assert res.exit_code == 1
    assert "no default LoRA targets for phi3" in res.output and "give --lora-targets" in res.output
    assert "Traceback" not in res.output


TINY_TIED = {"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "tie_word_embeddings": True}


def _tuning(tmp_path, tie: bool, targets: tuple[str, ...]):
    from zeroplan.memory.finetune import Finetune, tune
    from zeroplan.models.named import named_parameters, tied_head
    from zeroplan.models.presets import load_model

    path = tmp_path / f"tied-{tie}.json"
    path.write_text(json.dumps({**TINY_TIED, "tie_word_embeddings": tie}))
    model = load_model(str(path))
    return tune(named_parameters(model), Finetune(lora_rank=4, lora_targets=targets), "llama", tied_head(model))


def test_a_tied_head_takes_lora_as_peft_wraps_it_its_weight_still_the_embeddings(tmp_path):
    tied, untied = _tuning(tmp_path, True, ("lm_head",)), _tuning(tmp_path, False, ("lm_head",))
    assert tied.num_trainable == untied.num_trainable == 4 * (64 + 256)  # lora_A (r, h) + lora_B (V, r)
    assert untied.num_params - tied.num_params == 256 * 64  # the untied head's own weight, once
    assert "lm_head" in tied.adapted
    assert "lm_head" not in _tuning(tmp_path, True, ("all-linear",)).adapted  # all-linear leaves the head out


@pytest.mark.torch
def test_a_tied_head_as_peft_0_21_2_wraps_it(tmp_path):
    pytest.importorskip("peft")
    import warnings

    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in TINY_TIED.items() if k != "model_type"}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # peft warns that a tied layer is part of the adapter; it wraps it all the same
        peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=["lm_head", "q_proj"]))
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in peft_model.parameters())
    tuning = _tuning(tmp_path, True, ("lm_head", "q_proj"))
    assert (tuning.num_trainable, tuning.num_params) == (trainable, total)
