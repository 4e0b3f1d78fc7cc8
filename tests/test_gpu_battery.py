"""The GPU battery (validation/gpu/): its --dry-run keeps it runnable without a GPU, and every committed GPU result
is compared with zeroplan (allocated within 3 %, reserved within 5 %; docs/calibrate.md, "The GPU battery")."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from zeroplan.calibration.compare import ALLOCATED_TOLERANCE, RESERVED_TOLERANCE
from zeroplan.cli.app import app

ROOT = Path(__file__).resolve().parent.parent
BATTERY = ROOT / "validation" / "gpu" / "battery.py"
RESULTS = sorted(p for p in (ROOT / "validation" / "gpu" / "results").glob("*.json") if not p.name.startswith("battery-model"))


@pytest.mark.torch
@pytest.mark.slow
def test_dry_run_writes_the_results_shape(tmp_path):
    """Two cases (one run on CPU, one skipped for needing CUDA), each in its own process: ~15 s per run case."""
    pytest.importorskip("torch")  # the battery's worker imports torch and transformers
    done = subprocess.run([sys.executable, str(BATTERY), "--dry-run", "--cases", "lora,qlora", "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "cpu-dry-run.json").read_text())
    assert (result["schema"], result["dry_run"]) == ("zeroplan-gpu-battery", True)
    assert result["environment"]["libraries"]["torch"]
    cases = {c["name"]: c for c in result["cases"]}
    assert cases["lora"]["status"] == "ok", cases["lora"]["error"]
    assert cases["lora"]["counters"]["step_seconds"] > 0 and "max_memory_allocated" not in cases["lora"]["counters"]
    assert cases["qlora"]["status"] == "skipped" and "bitsandbytes" in cases["qlora"]["error"]
    estimate = CliRunner().invoke(app, [*cases["lora"]["zeroplan_args"], "-f", "json"])  # the arguments run as they are
    assert estimate.exit_code == 0, estimate.output


@pytest.mark.torch
@pytest.mark.slow
def test_a_failing_case_is_recorded_and_the_battery_goes_on(tmp_path):
    """Without --dry-run on a machine without CUDA, the case fails in its own process: recorded with its error."""
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the case would run rather than fail")
    done = subprocess.run([sys.executable, str(BATTERY), "--cases", "full-adamw-foreach,full-float8", "--out",
                           str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "unknown-gpu.json").read_text())
    assert "no CUDA device answered" in result["environment"]["error"]
    cases = {c["name"]: c for c in result["cases"]}
    assert cases["full-adamw-foreach"]["status"] == "failed" and "CUDA" in cases["full-adamw-foreach"]["error"]
    assert cases["full-float8"]["status"] == "skipped"


def _gpu_cases():
    for path in RESULTS:
        data = json.loads(path.read_text())
        for case in data["cases"]:
            if not data["dry_run"] and case["status"] == "ok" and not case["unmodelled"]:
                yield pytest.param(path, case, id=f"{path.stem}:{case['name']}")


GPU_CASES = list(_gpu_cases())


@pytest.mark.skipif(not GPU_CASES, reason="no GPU battery result committed under validation/gpu/results/ yet "
                    "(no GPU has been at hand; run validation/gpu/battery.py on one)")
@pytest.mark.parametrize("path, case", GPU_CASES or [pytest.param(None, None, id="none")])
def test_zeroplan_agrees_with_the_gpu(path, case):
    args = [a if not a.endswith("battery-model.json") else str(path.parent / "battery-model.json")
            for a in case["zeroplan_args"]]
    stage = json.loads(CliRunner().invoke(app, [*args, "-f", "json"]).output)["stages"][0]
    allocated = stage["gpu_bytes"]["total"] - stage["gpu_bytes"]["overhead"]
    measured = case["counters"]
    assert abs(allocated - measured["max_memory_allocated"]) <= ALLOCATED_TOLERANCE * measured["max_memory_allocated"]
    gap = sum(t["bytes"] for t in stage["overhead"] if t["name"].startswith(("fragmentation", "allocator constant")))
    reserved = allocated + gap  # the caching allocator's segments: the allocated peak and its fragmentation term
    assert abs(reserved - measured["max_memory_reserved"]) <= RESERVED_TOLERANCE * measured["max_memory_reserved"]
