"""`zeroplan check` end to end: exit codes, --strict, --ignore, every format (JUnit parsed back), --output, bare configs."""

import json
import xml.etree.ElementTree as ET

import pytest

from zeroplan.cli.app import app

HEADER = "params: 7e9\nhardware: h100-sxm-80gb\ngpus: 8\n"
ZERO3 = "deepspeed:\n  train_micro_batch_size_per_gpu: 1\n  bf16: {enabled: true}\n  zero_optimization:\n    stage: 3\n"
PLANS = {
    "good.yaml": HEADER + ZERO3,  # 13 GiB of model states on an 80 GiB GPU: clean
    "big.yaml": HEADER + "deepspeed:\n  train_micro_batch_size_per_gpu: 1\n  zero_optimization:\n    stage: 0\n",
    "tight.yaml": HEADER + "min_headroom_pct: 90\n" + ZERO3,  # fits, but not with 90 % free: a warning
}


@pytest.fixture
def plans(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name, text in PLANS.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


def check(runner, *args):
    return runner.invoke(app, ["check", *args])


# --- exit codes ----------------------------------------------------------------------------------------


def test_clean_plan_exits_0(runner, plans):
    res = check(runner, "good.yaml")
    assert res.exit_code == 0, res.output
    assert "PASS good.yaml" in res.stdout
    assert "zeroplan check: 1 plan, 0 failed; 0 errors, 0 warnings, 0 info" in res.stdout


def test_plan_that_does_not_fit_exits_1(runner, plans):
    res = check(runner, "big.yaml")
    assert res.exit_code == 1
    assert "FAIL big.yaml" in res.stdout and "does-not-fit" in res.stdout and "does not fit at ZeRO-0" in res.stdout


def test_warnings_pass_unless_strict(runner, plans):
    assert check(runner, "tight.yaml").exit_code == 0
    res = check(runner, "tight.yaml", "--strict")
    assert res.exit_code == 1 and "low-headroom" in res.stdout and "(strict: warnings fail)" in res.stdout


def test_ignore_on_the_command_line_and_in_the_plan(runner, plans):
    assert check(runner, "big.yaml", "--ignore", "does-not-fit").exit_code == 0
    (plans / "quiet.yaml").write_text(PLANS["tight.yaml"] + "ignore: [low-headroom]\n", encoding="utf-8")
    assert check(runner, "quiet.yaml", "--strict").exit_code == 0


def test_unknown_rule_is_a_usage_error_with_close_matches(runner, plans):
    res = check(runner, "good.yaml", "--ignore", "does-not-fits")
    assert res.exit_code == 2
    assert "unknown rule 'does-not-fits'; did you mean does-not-fit" in res.stderr
    assert "Traceback" not in res.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ([], "give plan files"),
        (["good.yaml", "--deepspeed-config", "ds.json"], "not both"),
        (["good.yaml", "--gpus", "16"], "--gpus describe the run for --deepspeed-config"),
        (["good.yaml", "--output", "out.txt"], "--output writes the json, github or junit report"),
        (["good.yaml", "--format", "xml"], "xml"),
    ],
)
def test_usage_errors_exit_2(runner, plans, args, needle):
    res = check(runner, *args)
    assert res.exit_code == 2 and needle in res.output


def test_unreadable_plan_is_a_finding_and_the_others_are_still_checked(runner, plans):
    (plans / "broken.yaml").write_text("params: [\n", encoding="utf-8")
    (plans / "binary.yaml").write_bytes(b"\xff\xfe")
    res = check(runner, "good.yaml", "broken.yaml", "missing.yaml", "binary.yaml", "big.yaml", "-f", "json")
    assert res.exit_code == 1
    data = json.loads(res.stdout)
    status = {p["file"]: (p["status"], [f["rule"] for f in p["findings"]]) for p in data["plans"]}
    assert status == {
        "good.yaml": ("pass", []),
        "broken.yaml": ("fail", ["invalid-input"]),
        "missing.yaml": ("fail", ["invalid-input"]),
        "binary.yaml": ("fail", ["invalid-input"]),
        "big.yaml": ("fail", ["does-not-fit"]),
    }
    messages = {p["file"]: p["findings"][0]["message"] for p in data["plans"] if p["findings"]}
    assert messages["missing.yaml"] == "no such file"
    assert messages["broken.yaml"].startswith("invalid YAML (line 2)")
    assert messages["binary.yaml"] == "not UTF-8 text (byte 0)"


def test_globs_are_expanded_by_zeroplan_too(runner, plans):
    data = json.loads(check(runner, "*.yaml", "-f", "json").stdout)
    assert [p["file"] for p in data["plans"]] == ["big.yaml", "good.yaml", "tight.yaml"]
    nothing = json.loads(check(runner, "nothing/*.yaml", "-f", "json").stdout)
    assert nothing["plans"][0]["findings"][0]["message"] == "no file matches 'nothing/*.yaml'"
    assert nothing["exit_code"] == 1


# --- formats --------------------------------------------------------------------------------------------


def test_json_report(runner, plans):
    res = check(runner, "good.yaml", "big.yaml", "-f", "json")
    data = json.loads(res.stdout)
    assert (data["schema_version"], data["exit_code"], data["strict"]) == (1, 1, False)
    assert data["summary"] == {"plans": 2, "failed": 1, "error": 1, "warning": 0, "info": 0}
    good, big = data["plans"]
    assert good["run"]["stage"] == 3 and good["run"]["hardware"] == "h100-sxm-80gb" and good["run"]["topology"] == "nvlink"
    assert good["memory"]["fits"] is True and type(good["memory"]["peak_bytes"]) is int
    assert big["memory"]["fits"] is False
    (finding,) = big["findings"]
    assert finding == {"rule": "does-not-fit", "severity": "error", "message": finding["message"], "file": "big.yaml",
                       "key": "zero_optimization.stage", "line": 7}  # fmt: skip


def test_github_annotations(runner, plans):
    res = check(runner, "good.yaml", "big.yaml", "tight.yaml", "-f", "github")
    lines = res.stdout.splitlines()
    assert lines[0].startswith("::error file=big.yaml,line=7,title=zeroplan does-not-fit::zero_optimization.stage: "
                               "does not fit at ZeRO-0: peak ")  # fmt: skip
    assert lines[1].startswith("::warning file=tight.yaml,line=9,title=zeroplan low-headroom::")
    assert lines[2] == "zeroplan check: 3 plans, 1 failed; 1 error, 1 warning, 0 info"
    assert res.exit_code == 1


def test_junit_parses_back_one_case_per_plan(runner, plans):
    res = check(runner, "good.yaml", "big.yaml", "tight.yaml", "missing.yaml", "-f", "junit")
    root = ET.fromstring(res.stdout)
    assert root.tag == "testsuites" and (root.get("tests"), root.get("failures")) == ("4", "2")
    (suite,) = root.findall("testsuite")
    cases = {case.get("name"): case for case in suite.findall("testcase")}
    assert list(cases) == ["good.yaml", "big.yaml", "tight.yaml", "missing.yaml"]
    assert cases["good.yaml"].find("failure") is None
    assert cases["big.yaml"].find("failure").get("type") == "does-not-fit"
    assert "error does-not-fit big.yaml:7 zero_optimization.stage: does not fit" in cases["big.yaml"].find("failure").text
    assert cases["tight.yaml"].find("failure") is None and "low-headroom" in cases["tight.yaml"].find("system-out").text
    assert cases["missing.yaml"].find("failure").get("type") == "invalid-input"


def test_junit_strict_turns_warnings_into_failures(runner, plans):
    root = ET.fromstring(check(runner, "tight.yaml", "--strict", "-f", "junit").stdout)
    assert root.find("testsuite/testcase/failure").get("type") == "low-headroom"


# --- --output ---------------------------------------------------------------------------------------------


def test_output_writes_the_report_and_refuses_to_overwrite(runner, plans):
    res = check(runner, "big.yaml", "-f", "junit", "--output", "report.xml")
    assert res.exit_code == 1 and res.stdout == ""
    written = (plans / "report.xml").read_text(encoding="utf-8")
    assert ET.fromstring(written).get("failures") == "1"
    again = check(runner, "good.yaml", "-f", "junit", "--output", "report.xml")
    assert again.exit_code == 2 and "already exists; pass --force" in again.stderr  # usage, as for --emit-deepspeed
    assert (plans / "report.xml").read_text(encoding="utf-8") == written
    forced = check(runner, "good.yaml", "-f", "junit", "--output", "report.xml", "--force")
    assert forced.exit_code == 0 and ET.fromstring((plans / "report.xml").read_text()).get("failures") == "0"
    assert sorted(p.name for p in plans.iterdir() if p.name.startswith(".")) == []  # no temp file left behind


def test_output_into_a_missing_folder_is_one_line_exit_1(runner, plans):
    res = check(runner, "good.yaml", "-f", "json", "--output", "no/such/dir/report.json")
    assert res.exit_code == 1 and "cannot write" in res.stderr and "Traceback" not in res.output


# --- a bare DeepSpeed config ---------------------------------------------------------------------------------


def test_bare_deepspeed_config(runner, plans):
    (plans / "ds.json").write_text(json.dumps({
        "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": 4,
        "bf16": {"enabled": True}, "zero_optimization": {"stage": 3}}), encoding="utf-8")  # fmt: skip
    res = check(runner, "--deepspeed-config", "ds.json", "--params", "7e9", "--gpus", "16", "--nodes", "2",
                "--micro-batch", "2", "-f", "json")  # fmt: skip
    data = json.loads(res.stdout)
    (plan,) = data["plans"]
    assert plan["file"] == "ds.json" and plan["run"]["topology"] == "multinode"
    assert plan["run"]["setup"]["micro_batch"] == 2 and plan["run"]["setup"]["grad_accum"] == 4
    rules = [f["rule"] for f in plan["findings"]]
    assert "zero3-slow-fabric" in rules and "auto-value" in rules
    assert res.exit_code == 0
    assert check(runner, "--deepspeed-config", "ds.json", "--params", "200e9").exit_code == 1  # does not fit


def test_bare_config_errors_are_plain_errors(runner, plans):
    res = check(runner, "--deepspeed-config", "missing.json", "--params", "7e9")
    assert res.exit_code == 1 and "missing.json: no such file" in res.stderr and "Traceback" not in res.output
    res = check(runner, "--deepspeed-config", "missing.json")
    assert res.exit_code == 1 and "give either model" in res.stderr


def test_github_annotation_escapes_as_the_actions_toolkit_does():
    from zeroplan.check.findings import Finding
    from zeroplan.check.formats import github_annotation

    finding = Finding(rule="r", severity="info", message="100% done\nnext", file="a,b:c.json", line=3)
    assert github_annotation(finding, "plan.yaml") == (
        "::notice file=a%2Cb%3Ac.json,line=3,title=zeroplan r::100%25 done\\nnext (plan plan.yaml)")  # fmt: skip
    # a newline from an input file is shown as \n (zeroplan.printable), never a second annotation line


BAD_BATCH = {"train_batch_size": 1000, "train_micro_batch_size_per_gpu": 3, "bf16": {"enabled": True}}
ASSERT_TEXT = "1000 != 3 * 41 * 8"  # DeepSpeed's _batch_assertion, with the accumulation it floors to


@pytest.mark.parametrize("fmt", ["text", "json", "github", "junit"])
def test_a_config_inconsistent_with_itself_is_the_batch_identity_finding(runner, tmp_path, fmt):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(BAD_BATCH), encoding="utf-8")
    args = ["check", "--deepspeed-config", str(path), "--params", "1e9", "--gpus", "8", "-f", fmt]
    result = runner.invoke(app, args)
    assert result.exit_code == 1 and "batch-identity" in result.stdout and ASSERT_TEXT in result.stdout
    assert "(derived)" not in result.stdout + result.stderr  # the user's files say 1000 and 3, nothing else
    ignored = runner.invoke(app, [*args, "--ignore", "batch-identity"])
    assert ignored.exit_code == 0 and "batch-identity" not in ignored.stdout
