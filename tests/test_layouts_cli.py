"""`zeroplan advise --search-parallelism` from the command line: JSON, the policy setting, the emitters' usage
errors (docs/advisor.md, docs/json.md)."""

from __future__ import annotations

import json

from zeroplan.cli.app import app

BASE = ["advise", "--model", "llama-3.1-70b", "--gpus", "32", "--hardware", "h100-sxm-80gb", "--seq-len", "4096",
        "--global-batch", "64"]


def test_json_has_the_documented_keys(runner):
    res = runner.invoke(app, BASE + ["--search-parallelism", "-f", "json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["search"] == "parallelism" and data["gpus"] == 32 and data["global_batch"] == 64
    assert set(data["counts"]) == {"layouts", "configurations", "evaluations", "fitting", "timed", "interleaved",
                                   "pruned"}
    rec = data["recommendation"]
    assert rec["schedule"] in ("1f1b", "interleaved-1f1b") and (rec["vpp"] > 1) is (rec["schedule"] != "1f1b")
    assert rec["tp"] * rec["pp"] * rec["cp"] * rec["dp"] == 32
    assert rec["micro_batch"] * rec["grad_accum"] * rec["dp"] == 64
    assert data["trace"][0]["rule"] == "search.space"
    assert isinstance(rec["peak_bytes"], int) and len(data["alternatives"]) <= 10


def test_policy_setting_asks_for_the_search(runner):
    res = runner.invoke(app, BASE + ["--set", "search_parallelism=true", "-f", "json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["search"] == "parallelism"
    assert data["policy"]["thresholds"]["search_parallelism"] == {"value": True, "source": "set by --set"}


def test_emitters(runner, tmp_path):
    titan, ds = tmp_path / "titan.toml", tmp_path / "ds.json"
    res = runner.invoke(app, BASE + ["--search-parallelism", "--stack", "torchtitan", "--emit-torchtitan", str(titan)])
    assert res.exit_code == 0, res.output
    assert "[parallelism]" in titan.read_text()
    res = runner.invoke(app, BASE + ["--search-parallelism", "--stack", "deepspeed", "--emit-deepspeed", str(ds)])
    assert res.exit_code == 0, res.output
    assert json.loads(ds.read_text())["zero_optimization"]["stage"] in (0, 1, 2, 3)


def test_usage_errors(runner, tmp_path):
    out = str(tmp_path / "x.toml")
    for extra, needle in ((["--emit-torchtitan", out], "--search-parallelism"),
                          (["--search-parallelism", "--stack", "torchtitan", "--emit-deepspeed", out],
                           "--emit-torchtitan"),
                          (["--search-parallelism", "--policy", "article"], "article")):
        res = runner.invoke(app, BASE + extra)
        assert res.exit_code == 2, (extra, res.output)
        assert needle in res.stderr and "Traceback" not in res.output


def test_bare_count_is_one_line(runner):
    res = runner.invoke(app, ["advise", "--params", "7e9", "--search-parallelism"])
    assert res.exit_code == 1 and "--model" in res.stderr and "Traceback" not in res.output


def test_text_and_markdown_render(runner):
    res = runner.invoke(app, BASE + ["--search-parallelism"])
    assert res.exit_code == 0 and "search trace" in res.stdout and "[search.best]" in res.stdout
    res = runner.invoke(app, BASE + ["--search-parallelism", "-f", "markdown"])
    assert res.exit_code == 0, res.output
    assert "**recommendation**: tp " in res.stdout and "Traceback" not in res.output
