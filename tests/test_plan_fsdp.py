"""A plan for FSDP or FSDP2 states its sharding in the engine's words (`fsdp:`), with no `deepspeed:` block, and
its batch under `training:` alone (docs/checks.md, "Plan files")."""

import json

import pytest
import yaml

from zeroplan.cli.app import app

RUN = {"model": "llama-3.1-8b", "hardware": "h100-sxm-80gb", "gpus": 8,
       "training": {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4}}


def _check(runner, tmp_path, plan: dict) -> dict:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    res = runner.invoke(app, ["check", str(path), "-f", "json"])
    return json.loads(res.stdout)


def _peak(doc: dict) -> tuple[int, int]:
    (plan,) = doc["plans"]
    return plan["run"]["stage"], plan["memory"]["peak_bytes"]


@pytest.mark.parametrize(("engine", "fsdp", "stage"), [
    ("fsdp2", {"reshard_after_forward": True}, 3), ("fsdp2", {"reshard_after_forward": False}, 2),
    ("fsdp", {"sharding_strategy": "FULL_SHARD"}, 3), ("fsdp", {"sharding_strategy": "SHARD_GRAD_OP"}, 2),
    ("fsdp", {"sharding_strategy": "NO_SHARD"}, 0),
])
def test_fsdp_block_is_the_deepspeed_stand_in_it_replaces(runner, tmp_path, engine, fsdp, stage):
    own = _check(runner, tmp_path, {**RUN, "engine": engine, "fsdp": fsdp})
    standin = _check(runner, tmp_path, {**RUN, "engine": engine, "deepspeed": {"zero_optimization": {"stage": stage}}})
    assert own["exit_code"] == standin["exit_code"] and _peak(own) == _peak(standin) and _peak(own)[0] == stage
    assert [f["rule"] for f in own["plans"][0]["findings"]] == [f["rule"] for f in standin["plans"][0]["findings"]]


def test_batch_under_training_alone_passes_for_a_pytorch_engine(runner, tmp_path):
    doc = _check(runner, tmp_path, {**RUN, "engine": "fsdp2", "deepspeed": {"zero_optimization": {"stage": 3}}})
    assert "batch-identity" not in [f["rule"] for f in doc["plans"][0]["findings"]]
    ddp = _check(runner, tmp_path, {**RUN, "engine": "ddp", "gpus": 1, "params": "1e8", "model": None})
    assert ddp["plans"][0]["run"]["stage"] == 0  # DDP needs neither block: ZeRO-0


@pytest.mark.parametrize(("plan", "message"), [
    ({"engine": "fsdp2", "fsdp": {"reshard_after_forward": True}, "deepspeed": {"zero_optimization": {"stage": 3}}},
     "give fsdp: or deepspeed:, not both"),
    ({"engine": "deepspeed", "fsdp": {"reshard_after_forward": True}}, "fsdp: is for engine fsdp or fsdp2, not deepspeed"),
    ({"engine": "fsdp", "fsdp": {"reshard_after_forward": True}},
     "fsdp.reshard_after_forward is not engine fsdp's setting; it takes fsdp.sharding_strategy"),
    ({"engine": "fsdp2"}, "give fsdp: (reshard_after_forward) or a deepspeed: block with the stage"),
    ({"engine": "deepspeed"}, "give deepspeed: (a ds_config path or an inline block)"),
    ({"engine": "fsdp", "fsdp": {"sharding_strategy": "HYBRID"}}, "sharding_strategy"),
])
def test_a_wrong_engine_block_is_one_finding_naming_it(runner, tmp_path, plan, message):
    doc = _check(runner, tmp_path, {**RUN, **plan})
    (finding,) = doc["plans"][0]["findings"]
    assert finding["rule"] == "invalid-input" and message in finding["message"]
