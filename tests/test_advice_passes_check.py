"""Advice never fails `check --strict` with defaults (issue 26): the advisor's headroom and check's low-headroom
threshold are one setting (memory.capacity.HEADROOM_FRACTION)."""

import json

import pytest

from zeroplan.advise.policy import ARTICLE, DEFAULT
from zeroplan.check.rules.memory import LOW_HEADROOM_PCT
from zeroplan.cli.app import app
from zeroplan.memory.capacity import HEADROOM_FRACTION

RUNS = [
    ["--model", "qwen3-32b", "--seq-len", "4096"],  # the issue's: ZeRO-3 at 3.3 % free, then a strict failure
    ["--model", "llama-3.1-70b", "--gpus", "16"],
    ["--model", "llama-3.1-8b", "--gpus", "8", "--seq-len", "8192"],
    ["--model", "mistral-7b", "--gpus", "2", "--hardware", "a100-sxm-40gb"],
    ["--model", "qwen3-8b", "--gpus", "4", "--hardware", "a100-sxm-80gb", "--global-batch", "64"],
    ["--model", "qwen3-8b", "--gpus", "8", "--policy", "article"],
]


def test_one_setting():
    assert DEFAULT.min_headroom_fraction == ARTICLE.min_headroom_fraction == HEADROOM_FRACTION
    assert LOW_HEADROOM_PCT == HEADROOM_FRACTION * 100


@pytest.mark.parametrize("run", RUNS, ids=lambda r: " ".join(r))
def test_emitted_config_passes_check_strict(runner, tmp_path, run):
    ds = tmp_path / "ds.json"
    advised = runner.invoke(app, ["advise", *run, "--emit-deepspeed", str(ds), "--format", "json"])
    assert advised.exit_code == 0, advised.output
    rec = json.loads(advised.stdout)["recommendation"]
    assert rec["fits"]
    given = [a for a in run if a not in ("--global-batch", "64", "--policy", "article")]
    checked = runner.invoke(app, ["check", "--deepspeed-config", str(ds), *given, "--checkpointing",
                                  rec["checkpointing"], "--strict"])
    assert checked.exit_code == 0, checked.output
    assert "low-headroom" not in checked.output
