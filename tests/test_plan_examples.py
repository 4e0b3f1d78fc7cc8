"""Golden verdicts of the example plans in configs/plans/: which pass, which fail, on which rules.

Only verdicts and rule ids are pinned, not byte counts: the activation model is still moving. The
plans name model presets (gemma2-9b, ...); where a preset is not installed, the full check skips and
the same plan is checked with the model replaced by its parameter count, which already fixes the verdict.
"""

import json
from pathlib import Path

import pytest

from zeroplan.check.planfiles import plan_from_data
from zeroplan.check.runner import check_plans
from zeroplan.cli.app import app
from zeroplan.deepspeed.reader import parse_ds_config
from zeroplan.deepspeed.source import read_deepspeed_config
from zeroplan.readers import parse_yaml

PLANS = Path(__file__).parent.parent / "configs" / "plans"
# plan file -> (exit code alone, rule ids of its errors and warnings)
EXPECTED = {
    "llama3.1-8b-fsdp-8xh100.yaml": (0, set()),
    "article-gemma2-9b-8xh100.yaml": (0, set()),
    "gemma2-9b-zero0-8xh100.yaml": (1, {"does-not-fit"}),
    "multinode-zero3.yaml": (0, set()),
    "pcie-llama3.1-8b-zero2.yaml": (0, set()),
    "qlora-llama3.1-8b-zero3.yaml": (0, set()),
}
# Published parameter counts (SPEC.md section 7; the presets' reference_params) and the largest layer,
# the token embedding (vocab x hidden), for checking the plans before the model presets are installed.
STAND_INS = {
    "gemma2-9b": (9_241_705_984, 256_000 * 3584),
    "llama-3.1-8b": (8_030_261_248, 128_256 * 4096),
    "llama-3.1-70b": (70_553_706_496, 128_256 * 8192),
}


def load(name: str) -> dict:
    return parse_yaml((PLANS / name).read_text(encoding="utf-8"), name)


def test_every_example_has_an_expected_verdict():
    assert sorted(p.name for p in PLANS.glob("*.yaml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_is_a_valid_plan_with_a_readable_config(name):
    plan = plan_from_data(load(name), name)
    assert plan.model in STAND_INS and plan.description
    if isinstance(plan.deepspeed, str):
        parse_ds_config(read_deepspeed_config(PLANS / plan.deepspeed).data)
    elif plan.deepspeed is not None:
        parse_ds_config(plan.deepspeed)
    else:  # an FSDP plan's fsdp: block, read as the stand-in DeepSpeed block it replaces
        parse_ds_config(plan.standin_config())


def _errors_and_warnings(result) -> set[str]:
    return {f.rule for f in result.findings if f.severity != "info"}


# A fine-tune's adapters and frozen globs need the model's named parameters: no parameter-count stand-in.
COUNT_ONLY = sorted(n for n in EXPECTED if "finetune" not in load(n))


@pytest.mark.parametrize("name", COUNT_ONLY)
def test_example_verdict_with_a_parameter_count(name, tmp_path):
    data = load(name)
    data["params"], data["largest_layer"] = STAND_INS[data.pop("model")]
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")  # JSON is YAML; the plan's folder is tmp_path
    for ds in PLANS.glob("ds/*.json"):
        (tmp_path / "ds").mkdir(exist_ok=True)
        (tmp_path / "ds" / ds.name).write_bytes(ds.read_bytes())
    report = check_plans([str(path)])
    code, rules = EXPECTED[name]
    assert (report.exit_code, _errors_and_warnings(report.results[0])) == (code, rules)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_verdict(name):
    report = check_plans([str(PLANS / name)])
    code, rules = EXPECTED[name]
    assert (report.exit_code, _errors_and_warnings(report.results[0])) == (code, rules)


def test_all_examples_at_once_fail_because_one_does_not_fit(runner):
    res = runner.invoke(app, ["check", str(PLANS / "*.yaml"), "-f", "json"])
    data = json.loads(res.stdout)
    assert res.exit_code == 1
    assert {Path(p["file"]).name: p["status"] for p in data["plans"]} == {
        name: "fail" if code else "pass" for name, (code, _) in EXPECTED.items()}  # fmt: skip
