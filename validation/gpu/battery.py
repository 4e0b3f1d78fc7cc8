"""The GPU battery: a matrix of single-GPU training steps, each in its own process, measured and written as one JSON
file per GPU kind under validation/gpu/results/ (docs/calibrate.md, "The GPU battery").

    python validation/gpu/battery.py --out validation/gpu/results/          # on a GPU: all cases, < 8 min
    python validation/gpu/battery.py --dry-run --out /tmp/battery/          # CPU, tiny sizes, the same JSON shape

Run from the repository root (the worker imports zeroplan for the snapshot replay). A case that fails, hangs past
its time limit or needs what the machine lacks is recorded (status failed / timeout / skipped, with the error), and
the battery goes on.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from cases import CASES, DRY_CASES, DRY_MODEL, DRY_SHAPE, GPU_MODEL, GPU_SHAPE, zeroplan_args  # noqa: E402

SCHEMA, VERSION = "zeroplan-gpu-battery", 1
BUDGET_S = 8 * 60  # the whole battery's wall time on one GPU: one lent device call (docs/calibrate.md)
CASE_TIMEOUT_S = 60  # one case: model build, two steps, the snapshot
COMPILE_TIMEOUT_S = 120  # a torch.compile case: inductor's first compile of forward and backward
DRY_TIMEOUT_S = 180  # a shared CPU: importing torch and transformers alone can take 10-30 s
LIBRARIES = ("torch", "transformers", "peft", "bitsandbytes", "deepspeed", "torchao", "accelerate", "flash-attn")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for the result JSON")
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes on CPU, no GPU counters")
    parser.add_argument("--cases", help="comma-separated case names (default: all; --dry-run: a representative few)")
    opts = parser.parse_args(argv)
    result = run_battery(opts.dry_run, opts.cases.split(",") if opts.cases else None, opts.out)
    opts.out.mkdir(parents=True, exist_ok=True)
    path = opts.out / f"{result['environment']['gpu_kind']}.json"
    path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"{path}: {sum(c['status'] == 'ok' for c in result['cases'])}/{len(result['cases'])} cases ok")
    return 0


def run_battery(dry: bool, names: list[str] | None, out: Path) -> dict:
    chosen = [c for c in CASES if c.name in (names or (DRY_CASES if dry else [c.name for c in CASES]))]
    model, shape = (DRY_MODEL, DRY_SHAPE) if dry else (GPU_MODEL, GPU_SHAPE)
    out.mkdir(parents=True, exist_ok=True)
    model_path = out / ("battery-model-dry.json" if dry else "battery-model.json")
    model_path.write_text(json.dumps(model, indent=1) + "\n", encoding="utf-8")
    env = environment(dry)
    started, results = time.monotonic(), []
    for case in chosen:
        left = BUDGET_S - (time.monotonic() - started)
        results.append(run_case(case, dry, model, shape, str(model_path), env, left))
    return {"schema": SCHEMA, "version": VERSION, "dry_run": dry, "environment": env, "model": model, "shape": shape,
            "wall_seconds": round(time.monotonic() - started, 1), "cases": results}


def run_case(case, dry: bool, model: dict, shape: dict, model_path: str, env: dict, left: float) -> dict:
    record = {"name": case.name, "case": case.as_dict(), "zeroplan_args": zeroplan_args(case, model_path, shape),
              "unmodelled": [flag for flag, on in (("compile", case.compile), ("float8", case.float8)) if on],
              "status": "ok", "error": None, "seconds": 0.0, "counters": None}
    if dry and case.needs_cuda:
        return {**record, "status": "skipped", "error": f"needs CUDA: {', '.join(case.needs_cuda)}"}
    if case.float8 and not dry and (env.get("capability") or 0) < 8.9:
        return {**record, "status": "skipped", "error": f"float8 needs compute capability 8.9+, GPU has {env['capability']}"}
    if left < 10:
        return {**record, "status": "skipped", "error": "the battery's 8-minute budget is spent"}
    used_before = None if dry else device_used()
    spec = json.dumps({"case": case.as_dict(), "dry_run": dry, "model": model, "shape": shape})
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, str(HERE / "worker.py"), spec], capture_output=True, text=True,
                              timeout=min(case_timeout(case, dry), left), cwd=HERE.parent.parent)
    except subprocess.TimeoutExpired:
        return {**record, "status": "timeout", "error": "no result within the case's time limit",
                "seconds": round(time.monotonic() - started, 1)}
    record["seconds"] = round(time.monotonic() - started, 1)
    line = next((l for l in done.stdout.splitlines() if l.startswith("BATTERY-RESULT ")), None)
    if done.returncode != 0 or line is None:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {**record, "status": "failed", "error": " | ".join(tail)[-600:] or f"exit {done.returncode}"}
    found = json.loads(line.removeprefix("BATTERY-RESULT "))
    if found.get("context_used_bytes") is not None and used_before is not None:
        found["cuda_context_bytes"] = found["context_used_bytes"] - used_before
    record["counters"] = found
    return record


def case_timeout(case, dry: bool) -> float:
    return DRY_TIMEOUT_S if dry else (COMPILE_TIMEOUT_S if case.compile else CASE_TIMEOUT_S)


PROBE = ("import torch,json;p=torch.cuda.get_device_properties(0);print(json.dumps({'gpu':p.name,"
         "'cuda':torch.version.cuda,'capability':float(f'{p.major}.{p.minor}'),'total':p.total_memory}))")


def probe_device() -> tuple[dict | None, str]:
    """GPU 0's name, CUDA version, compute capability and memory, asked in a separate process (this one stays
    without a CUDA context); (None, why) when none answers."""
    try:
        done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    except subprocess.SubprocessError:
        return None, "no CUDA device answered within 120 s"
    try:
        return json.loads(done.stdout), ""
    except json.JSONDecodeError:
        return None, "no CUDA device answered: " + (done.stderr.strip().splitlines() or ["?"])[-1][:300]


def device_used() -> int | None:
    """nvidia-smi's memory.used of GPU 0, bytes, before a case starts (no CUDA in this process)."""
    text = device_query("memory.used", "nounits")
    return int(text) * 2**20 if text and text.isdigit() else None


def device_query(field: str, *extra: str) -> str | None:
    """One nvidia-smi --query-gpu field of GPU 0, or None without nvidia-smi."""
    form = ",".join(("csv", "noheader", *extra))
    try:
        done = subprocess.run(["nvidia-smi", f"--query-gpu={field}", f"--format={form}", "-i", "0"],
                              capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.strip().splitlines()
    return lines[0].strip() if done.returncode == 0 and lines else None


def environment(dry: bool) -> dict:
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    env = {"python": platform.python_version(), "libraries": versions, "gpu": None, "driver": None, "cuda": None,
           "capability": None, "total_memory_bytes": None, "gpu_kind": "cpu-dry-run" if dry else "unknown-gpu"}
    if dry:
        return env
    found, why = probe_device()
    if found is None:
        return {**env, "error": why}
    driver = device_query("driver_version")
    env.update(gpu=found["gpu"], cuda=found["cuda"], capability=found["capability"], driver=driver or None,
               total_memory_bytes=found["total"], gpu_kind=re.sub(r"[^a-z0-9]+", "-", found["gpu"].lower()).strip("-"))
    return env


if __name__ == "__main__":
    sys.exit(main())
