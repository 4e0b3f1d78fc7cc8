"""The verdict that leads estimate, advise and check (memory/verdict.py): fit, headroom, and the term at the peak
moment that breaks the fit (the one that makes the difference, not the largest)."""

import json

import zeroplan
from zeroplan.cli.app import app
from zeroplan.memory.verdict import peak_lines, stage_verdict

GIB = 2**30
# The run: Qwen3-32B, 8 x H100, FSDP2, full checkpointing: 1.94 GiB over at the optimizer step, where the
# AdamW foreach temporary (15.26 GiB) is alive; optimizer states (30.51 GiB) are the largest line, not the cause.
QWEN_FSDP2 = dict(model="qwen3-32b", gpus=8, seq_len=4096, engine="fsdp2", stage=3, checkpointing="full")


def test_the_breaking_term_is_the_transient_that_makes_the_difference_not_the_largest():
    (s,) = zeroplan.estimate(**QWEN_FSDP2).stages
    v = stage_verdict(s)
    always, own = peak_lines(s)
    over = s.total - s.usable_bytes
    assert not v.fits and v.moment == "optimizer step" and not v.persistent
    assert v.breaking.startswith("AdamW foreach temporary") and v.breaking_bytes >= over
    assert max(always + own, key=lambda line: line[1])[0] == "optimizer states"  # the largest, not named
    assert sum(size for _, size in always) <= s.usable_bytes  # what lives all step fits by itself


def test_when_what_lives_all_step_is_over_the_largest_of_it_is_named():
    s = zeroplan.estimate(model="llama-3.1-8b", gpus=8, stage=0).stages[0]
    v = stage_verdict(s)
    assert not v.fits and v.persistent and v.breaking == "optimizer states"
    assert v.breaking_bytes == s.at_peak()["optimizer_states"]


def test_a_fit_has_headroom_and_no_breaking_term():
    s = zeroplan.estimate(model="llama-3.1-8b", gpus=8, stage=3).stages[0]
    v = stage_verdict(s)
    assert v.fits and v.breaking is None and v.headroom_bytes == s.usable_bytes - s.total == s.headroom_bytes
    assert stage_verdict(zeroplan.estimate(model="llama-3.1-8b", hardware="none", stage=3).stages[0]) is None


def test_estimate_leads_with_one_verdict_line_per_stage(runner):
    out = runner.invoke(app, ["estimate", "--model", "qwen3-32b", "--seq-len", "4096", "--engine", "fsdp2",
                              "--stage", "3", "--checkpointing", "full"]).stdout
    assert " ".join(out.split()).startswith("ZeRO-3: does not fit: 81.59 GiB of 79.65 GiB usable, 1.94 GiB over at optimizer step; "
                          "breaks it: AdamW foreach temporary")
    data = json.loads(runner.invoke(app, ["estimate", "--model", "llama-3.1-8b", "-f", "json"]).stdout)
    for stage in data["stages"]:
        v = stage["verdict"]
        assert (v["fits"], v["headroom_bytes"], v["peak_bytes"]) == (
            stage["fits"], stage["headroom_bytes"], stage["gpu_bytes"]["total"])
    out = runner.invoke(app, ["estimate", "--model", "llama-3.1-8b"]).stdout
    lead = " ".join(out[:out.index("llama-3.1-8b:")].split())  # the lines before the table's title
    assert lead.startswith("ZeRO-0: does not fit") and [lead.count(f"ZeRO-{n}: ") for n in range(4)] == [1] * 4


def test_advise_leads_with_the_closest_and_what_breaks_it_when_nothing_fits(runner):
    # Qwen3-32B at 4,096 tokens on 8 x H100 under FSDP2: GPU-only plans miss by the AdamW foreach temporary, so the
    # advisor now offers FSDP2's CPU offload, which fits: the first line is that recommendation.
    res = runner.invoke(app, ["advise", "--model", "qwen3-32b", "--seq-len", "4096", "--engine", "fsdp2"])
    assert " ".join(res.stdout.split()).startswith("ZeRO-3: fits: ")
    # 128K tokens of Qwen3-32B on one 24 GB L4: nothing fits, offload included; the closest leads.
    res = runner.invoke(app, ["advise", "--model", "qwen3-32b", "--seq-len", "131072", "--hardware", "l4-24gb",
                              "--gpus", "1", "--engine", "fsdp2"])  # fmt: skip
    first = " ".join(res.stdout.split())
    assert first.startswith("nothing fits; closest (checkpointing full, micro-batch 1): does not fit: ") and " over" in first
    doc = json.loads(runner.invoke(app, ["advise", "--params", "30e9", "-f", "json"]).stdout)
    plan = doc["recommendation"]["plan"]
    assert doc["verdict"]["fits"] and doc["verdict"]["headroom_bytes"] == plan["headroom_bytes"]


def test_check_leads_with_the_summary_and_failures_first(runner):
    import glob

    plans = sorted(glob.glob("configs/plans/*.yaml"))
    lines = runner.invoke(app, ["check", *plans]).stdout.splitlines()
    assert lines[0] == lines[-1] and lines[0].startswith("zeroplan check:")
    assert lines[1] == "FAIL configs/plans/gemma2-9b-zero0-8xh100.yaml"
    assert "does not fit" in lines[2] and lines[3].strip().startswith("over at optimizer step")
    severities = [line.split()[0] for line in lines if line.startswith("  ") and not line.startswith("   ")]
    assert severities[0] == "error"
