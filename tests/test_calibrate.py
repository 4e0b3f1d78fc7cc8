"""zeroplan calibrate: each record format read from its sample (tests/data/calibrate, make_samples.py), hostile and
bad records refused in one line, the comparison and fit, --save / --calibration / the plan key applied."""

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from zeroplan.calibration.records import read_record, text_reading
from zeroplan.calibration.snapshot import replay
from zeroplan.cli.app import app
from zeroplan.errors import SpecError

DATA = Path(__file__).parent / "data" / "calibrate"
GIB, MIB = 2**30, 2**20
MODEL = str(DATA / "model.json")
RUN = ["--model", MODEL, "--gpus", "1", "--engine", "none", "--stage", "0", "--seq-len", "1024", "--micro-batch", "2"]
# The synthetic run's numbers (make_samples.py): peak = params + states + grads + step temporaries, 2 MiB-rounded.
PEAK = sum(round(g * GIB / (2 * MIB)) * 2 * MIB for g in (2.504, 5.008, 2.504, 2.934))
RESERVED = round(13.90 * GIB / (2 * MIB)) * 2 * MIB


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.mark.parametrize("name, kind, allocated, reserved", [
    ("memory_stats.json", "memory_stats", PEAK, RESERVED),
    ("snapshot.pickle", "snapshot", PEAK, RESERVED),
    ("trainer_state.json", "hf-trainer", PEAK, None),
    ("lightning_metrics.csv", "lightning", PEAK, RESERVED),
    ("torchtitan.log", "torchtitan", None, round(13.90 * GIB)),
])
def test_each_format_gives_its_peaks(name, kind, allocated, reserved):
    found = read_record(DATA / name)
    assert (found.kind, found.allocated_peak) == (kind, allocated)
    assert found.reserved_peak == reserved


def test_rounded_formats_within_their_rounding():
    ds = read_record(DATA / "deepspeed.log")  # GiB to 2 decimals
    assert abs(ds.allocated_peak - PEAK) <= ds.resolution and abs(ds.reserved_peak - RESERVED) <= ds.resolution
    log = read_record(DATA / "trainer.log")  # log_metrics: bytes >> 20, "MB"
    assert 0 <= PEAK - log.allocated_peak < 4 * MIB and log.loaded is not None
    assert read_record(DATA / "nvidia-smi.csv").device_used == 14970 * MIB  # the largest row


def test_snapshot_replay_finds_the_gap_at_the_allocated_peak():
    found = read_record(DATA / "snapshot.pickle")
    assert found.gap_at_peak == RESERVED - PEAK and found.segments == 4
    # by hand: end 10 allocated / 20 reserved; backwards: a free of 5 (so 15 before it), an alloc of 5, a segment of 4
    assert replay([("segment_alloc", 4), ("alloc", 5), ("free_completed", 5)], 10, 20) == (15, 20, 5)


class Boom:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_a_pickle_with_a_global_is_refused_unrun(tmp_path):
    bad = tmp_path / "evil.pickle"
    bad.write_bytes(pickle.dumps({"segments": [Boom()]}))
    with pytest.raises(SpecError, match="refuses the global") as err:
        read_record(bad)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("text, match", [
    ('{"allocated_bytes.all.peak": 5}', "reserved_bytes.all.peak: expected a byte count"),
    ('{"allocated_bytes.all.peak": -1, "reserved_bytes.all.peak": 1}', "got -1"),
    ("memory.used [MiB]\n12 GiB\n", "line 2: expected memory.used"),
    ("hello\n", "no memory record recognised"),
    ('{"log_history": [{"loss": 1}]}', "skip_memory_metrics=False"),
    ('{"a": 1}', "neither memory_stats"),
])
def test_bad_records_are_one_line_naming_what_was_expected(text, match):
    with pytest.raises(SpecError, match=match) as err:
        text_reading(text, "rec")
    assert "\n" not in str(err.value)


def test_a_fifo_is_refused_before_reading(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(SpecError, match="named pipe"):
        read_record(fifo)


def test_a_huge_record_is_refused_by_its_size(tmp_path, monkeypatch):
    import zeroplan.calibration.records as records

    monkeypatch.setattr(records, "MAX_RECORD_BYTES", 1024)
    big = tmp_path / "big.log"
    big.write_text("x" * 2048)
    with pytest.raises(SpecError, match="larger than"):
        read_record(big)


def test_calibrate_compares_term_by_term_and_names_the_suspect():
    out = invoke("calibrate", str(DATA / "memory_stats.json"), str(DATA / "nvidia-smi.csv"), *RUN, "-f", "json")
    assert out.exit_code == 0, out.output
    view = json.loads(out.output)
    terms = {t["term"]: t for t in view["terms"]}
    assert terms["allocated peak"]["measured_bytes"] == PEAK
    assert terms["allocated peak"]["residual_bytes"] == PEAK - terms["allocated peak"]["predicted_bytes"]
    assert terms["CUDA context + NCCL"]["measured_bytes"] == 14970 * MIB - RESERVED
    assert terms["model as loaded"]["measured_bytes"] is None  # neither record says it
    worst = max((t for t in view["terms"] if t["term"] in ("allocated peak", "allocator gap", "CUDA context + NCCL")),
                key=lambda t: abs(t["residual_bytes"]))
    assert view["suspect"].startswith(worst["term"])
    assert view["calibration"]["allocator"]["fraction"] == pytest.approx((RESERVED - PEAK) / PEAK, abs=1e-6)


def test_save_then_apply_the_calibration(tmp_path):
    cal = tmp_path / "cal.yaml"
    records = [str(DATA / "snapshot.pickle"), str(DATA / "nvidia-smi.csv")]
    assert invoke("calibrate", *records, *RUN, "--save", str(cal)).exit_code == 0
    again = invoke("calibrate", *records, *RUN, "--save", str(cal))
    assert again.exit_code == 2 and "--force" in again.output
    assert invoke("calibrate", *records, *RUN, "--save", str(cal), "--force").exit_code == 0
    plain = json.loads(invoke("estimate", *RUN, "-f", "json").output)
    applied = json.loads(invoke("estimate", *RUN, "--calibration", str(cal), "-f", "json").output)
    assert applied["calibration"]["file"] == str(cal) and "fragmentation" in applied["calibration"]["changes"][0]
    assert any(a.startswith(f"calibration from {cal} applied") for a in applied["assumptions"])
    assert "calibration" not in plain
    # The fitted run, re-estimated with its calibration, now agrees with its own record.
    refit = json.loads(invoke("calibrate", *records, *RUN, "--calibration", str(cal), "-f", "json").output)
    assert all(t["agrees"] in (True, None) for t in refit["terms"] if t["term"] != "model as loaded"), refit["terms"]


def test_a_calibration_for_other_hardware_is_refused(tmp_path):
    cal = tmp_path / "cal.yaml"
    cal.write_text("schema: zeroplan-calibration\nversion: 1\nhardware: a100-sxm-80gb\n")
    out = invoke("estimate", *RUN, "--calibration", str(cal))
    assert out.exit_code == 1 and "a calibration for hardware a100-sxm-80gb" in out.output


def test_a_bad_calibration_file_names_the_key(tmp_path):
    cal = tmp_path / "cal.yaml"
    cal.write_text("schema: zeroplan-calibration\nversion: 1\nhardware: h100-sxm-80gb\nallocator: {fraction: 3}\n")
    out = invoke("estimate", *RUN, "--calibration", str(cal))
    assert out.exit_code == 1 and "allocator.fraction" in out.output


def test_the_plan_key_applies_a_calibration(tmp_path):
    plans = Path(__file__).parent.parent / "configs" / "plans"
    shutil.copytree(plans / "ds", tmp_path / "ds")
    text = (plans / "article-gemma2-9b-8xh100.yaml").read_text()
    (tmp_path / "cal.yaml").write_text("schema: zeroplan-calibration\nversion: 1\nhardware: h100-sxm-80gb\n"
                                       "residual_gib: 30\n")
    (tmp_path / "p.yaml").write_text(text)
    (tmp_path / "q.yaml").write_text(text + "calibration: cal.yaml\n")
    from zeroplan.check.planfiles import load_plan
    from zeroplan.memory.estimate import estimate_memory

    def total(name):
        run = load_plan(tmp_path / name)
        return estimate_memory(run.scenario, stages=(run.config.stage,)).stages[0].total

    assert total("q.yaml") - total("p.yaml") == 30 * GIB
    shown = invoke("check", str(tmp_path / "q.yaml"))
    assert f"calibration from {tmp_path / 'cal.yaml'} applied: + residual 30.00 GiB" in " ".join(shown.output.split())


def test_api_estimate_takes_a_calibration(tmp_path):
    import zeroplan

    cal = tmp_path / "cal.yaml"
    cal.write_text("schema: zeroplan-calibration\nversion: 1\nhardware: h100-sxm-80gb\nresidual_gib: 1\n")
    base = zeroplan.estimate(model=MODEL, gpus=1, engine="none", stage=0).stages[0].total
    assert zeroplan.estimate(model=MODEL, gpus=1, engine="none", stage=0, calibration=cal).stages[0].total == base + GIB


def test_calibrate_needs_one_stage():
    out = invoke("calibrate", str(DATA / "memory_stats.json"), "--model", MODEL, "--gpus", "1")
    assert out.exit_code == 2 and "--stage" in out.output


def test_one_log_with_two_formats_merges_them():
    text = (DATA / "deepspeed.log").read_text() + (DATA / "trainer.log").read_text()
    found = text_reading(text, "both.log")
    assert found.kind == "deepspeed + hf-trainer" and found.loaded is not None and found.reserved_peak is not None


def test_nvidia_smi_errors_name_the_file_line():
    with pytest.raises(SpecError, match="line 4: expected memory.used"):
        text_reading("memory.used [MiB]\n100 MiB\n\nlots\n", "smi.csv")


def test_plan_refuses_run_options_beside_it(tmp_path):
    out = invoke("calibrate", str(DATA / "memory_stats.json"), "--plan", "p.yaml", "--seq-len", "4")
    assert out.exit_code == 2 and "drop --seq-len" in out.output


def test_a_calibration_needs_a_hardware_profile():
    out = invoke("estimate", "--params", "1e9", "--hardware", "none", "--calibration", str(DATA / "h100.yaml"))
    assert out.exit_code == 1 and "this run has none" in out.output


def test_advise_applies_a_calibration():
    out = invoke("advise", "--model", MODEL, "--gpus", "1", "--calibration", str(DATA / "h100.yaml"), "-f", "json")
    view = json.loads(out.output)
    assert view["calibration"]["file"] == str(DATA / "h100.yaml")
    assert any(a.startswith("calibration from") for a in view["assumptions"])


def test_calibrate_estimates_a_mesh_as_estimate_does():
    run = ["--model", "llama-3.1-8b", "--gpus", "8", "--tp", "2", "--stage", "1", "-f", "json"]
    view = json.loads(invoke("calibrate", str(DATA / "memory_stats.json"), *run).output)
    estimate = json.loads(invoke("estimate", *run).output)
    assert view["terms"][0]["predicted_bytes"] == estimate["stages"][0]["timeline"]["peak_bytes"]
