"""peft's default LoRA targets (zeroplan/memory/peft_targets.py): the table is peft's mapping for the families
zeroplan describes, a family peft maps to query_key_value is adapted there, and one peft does not map is refused
with peft's reason."""

import json

import pytest
from typer.testing import CliRunner

from zeroplan.cli.app import app
from zeroplan.memory.peft_targets import PEFT_LORA_DEFAULT_TARGETS
from zeroplan.models.families import TEXT_TYPES


@pytest.mark.torch  # imports peft (and so torch)
def test_the_table_is_peft_0_21_2s_mapping_for_every_family_zeroplan_describes():
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as peft_map

    expected = {k: tuple(v) for k, v in peft_map.items() if k in TEXT_TYPES}
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
