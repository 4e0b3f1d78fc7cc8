"""The Python API is the CLI's equal: estimate, recommend and check_plans take every option their command takes
(the lists derived from the typer signatures and the API's), and give the same answer."""

import inspect
import json

import pytest
import typer.main

import zeroplan
from zeroplan.cli.app import app

# What only a command line has: how the answer is shown or written, and the peers' own estimators (--method).
CLI_ONLY = {"fmt", "units", "html", "force", "output", "emit_deepspeed", "emit_accelerate", "emit_torchtitan",
            "method", "buffer_factor"}
API_NAME = {"assignments": "thresholds"}  # --set key=value, repeatable; the API takes the mapping
PAIRS = {"estimate": zeroplan.estimate, "advise": zeroplan.recommend, "check": zeroplan.check_plans}


@pytest.mark.parametrize("command", PAIRS)
def test_the_api_takes_every_option_its_command_takes(command):
    cli = {p.name for p in typer.main.get_command(app).commands[command].params} - CLI_ONLY
    api = set(inspect.signature(PAIRS[command]).parameters)
    assert {API_NAME.get(name, name) for name in cli} == api


def test_recommend_takes_the_fine_tuning_options(runner):
    advice = zeroplan.recommend(model="llama-3.1-8b", qlora=True, lora_rank=16)
    cli = json.loads(runner.invoke(app, ["advise", "--model", "llama-3.1-8b", "--qlora", "--lora-rank", "16",
                                         "-f", "json"]).stdout)
    assert zeroplan.to_dict(advice)["recommendation"] == cli["recommendation"]
    assert advice.recommendation.plan.peak_bytes != zeroplan.recommend(model="llama-3.1-8b").recommendation.plan.peak_bytes


def test_check_plans_checks_a_deepspeed_config_on_a_run_as_the_cli_does(runner):
    ds = "configs/plans/ds/article-zero3-bf16.json"
    report = zeroplan.check_plans(deepspeed_config=ds, model="gemma2-9b")
    cli = json.loads(runner.invoke(app, ["check", "--deepspeed-config", ds, "--model", "gemma2-9b", "-f", "json"]).stdout)
    assert report.exit_code == cli["exit_code"] and len(report.findings) == len(cli["plans"][0]["findings"])
    with pytest.raises(zeroplan.ZeroplanError, match="a plan states its own"):
        zeroplan.check_plans("configs/plans/*.yaml", model="gemma2-9b")


def test_results_are_indexed_by_stage_number_with_gib_helpers():
    est = zeroplan.estimate(model="llama-3.1-8b", engine="fsdp2")  # FSDP2 has no ZeRO-0: stages holds 2 and 3
    assert [int(s.stage) for s in est.stages] == [2, 3] and est.stage(3) is est.stages[1]
    s = est.stage(3)
    assert s.total_gib == s.total / 2**30 and s.headroom_gib == s.headroom_bytes / 2**30
    with pytest.raises(zeroplan.ZeroplanError, match="no ZeRO-0 in this estimate; it has ZeRO-2, ZeRO-3"):
        est.stage(0)
