"""zeroplan's start-up budget, measured against the floor in one run; prints a markdown report.

Usage: python benchmarks/bench.py [--runs 15] [--peers-python /path/to/venv/bin/python] [--grid-repeats 5]
                                  [--instructions] [--startup-only]

The floor is benchmarks/typer_floor.py: a bare typer command with one option that prints one rich table (what
any typer command that prints a table costs before it does anything of its own). The budget is a ratio to it,
so it holds on a fast machine and a slow one: `zeroplan estimate --model llama-3.1-8b --gpus 8` within 1.6x the
floor, `zeroplan advise` within 2.5x, and the configuration grid at >= 100,000 configurations in 2 s on one
core, in-process. With --instructions the start-up budget is judged by callgrind's instruction counts (the
same whatever the load; the machine is shared), else by the wall-clock medians. The start-up part alone:
`python benchmarks/bench.py --startup-only --instructions --runs 3` (no peers, no grid).
`python -c "import pydantic, typer, rich.table, yaml"` (the libraries imported and nothing else) is timed
beside it for reference.

Every command is timed as a whole process: one warm-up round, then `--runs` rounds, each running every
command once (interleaved, so the machine's changing load falls on all commands alike); median, min and
max of the wall clock. Bytecode is cached as in a real install (PYTHONDONTWRITEBYTECODE is removed from the
environment). zeroplan runs as the console script beside this python when there is one (install the
checkout into the benchmark's venv to time it). Rows whose tool is missing print "not available" and why.
The peers (DeepSpeed, llm-analysis) are optional and never dependencies of zeroplan: install them in a
scratch venv and pass its python with --peers-python.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

IMPORTS = "python -c 'import pydantic, typer, rich.table, yaml'"  # for reference: the libraries imported alone
ESTIMATE = "zeroplan estimate --model llama-3.1-8b --gpus 8"
ADVISE = "zeroplan advise"
# The floor the budget is a ratio to: a typer command with one option that prints one rich table.
FLOOR = "benchmarks/typer_floor.py run (typer, one option, one rich table)"
BUDGET = {ESTIMATE: 1.6, ADVISE: 2.5}  # at most this many times the floor (instructions when counted, else median)
DEEPSPEED_SPEEDUP_TARGET = 10  # zeroplan estimate at least this many times faster than DeepSpeed's estimator
GRID_MIN_CONFIGS = 100_000
GRID_TARGET_S = 2.0

# The comparable question: Llama-2-7B (meta-llama/Llama-2-7b-hf), 8 GPUs in one node, ZeRO-3.
LLAMA2_7B_PARAMS = 6_738_415_616
LLAMA2_7B_LARGEST_LAYER = 131_072_000  # 32000 x 4096 embedding (DeepSpeed's model_to_params)
DEEPSPEED_CODE = (
    "from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs_all_cold as f; "
    f"f(total_params={LLAMA2_7B_PARAMS}, largest_layer_params={LLAMA2_7B_LARGEST_LAYER}, num_gpus_per_node=8, num_nodes=1)"
)
# llm-analysis reads a model config JSON (its own key names); this is Llama-2-7B's shape from its HF config.json
# (0.2.2 insists on an integer ffn/hidden ratio unless expansion_ratio is given too).
LLM_ANALYSIS_LLAMA2_7B = {
    "name": "llama-2-7b", "num_layers": 32, "n_head": 32, "num_key_value_heads": 32, "hidden_dim": 4096,
    "vocab_size": 32000, "max_seq_len": 4096, "ffn_embed_dim": 11008, "expansion_ratio": 11008 / 4096,
}

# The benchmark grid: 4 stages x 71 GPU counts x 64 micro-batches x 3 checkpointing x every valid offload pair.
GRID_GPU_COUNTS = "1-8,16-512:8"
GRID_MICRO_BATCHES = "1-64"
# The same grid over a fine-tune (docs/finetune.md): LoRA bases (memory.tuned) and tuned activations of a preset.
GRID_FINETUNE = {"model": "llama-3.1-8b", "lora_rank": "16", "lora_targets": "all-linear"}


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if zeroplan_command()[0] == sys.executable:  # no console script: run this checkout's package
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def runs_ok(argv: list[str]) -> tuple[bool, str]:
    """(ok, last line of stderr) for one run."""
    done = subprocess.run(argv, capture_output=True, text=True, env=clean_env(), cwd=ROOT)
    lines = (done.stderr or done.stdout).strip().splitlines()
    return done.returncode == 0, lines[-1] if lines else f"exit {done.returncode}"


def instructions(argv: list[str]) -> int | None:
    """Instructions one run executes, counted by valgrind's callgrind: the same number whatever the load.

    None without valgrind. Wall time on a shared machine moves by +-30 % with other jobs; this does not,
    so it is the column to compare two versions by (about 3.5 million instructions a millisecond here
    on a quiet machine)."""
    if shutil.which("valgrind") is None:
        return None
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
                          capture_output=True, text=True, env=clean_env(), cwd=ROOT)  # fmt: skip
    found = [line for line in done.stderr.splitlines() if "Collected :" in line]
    return int(found[-1].split()[-1]) if found else None


def has_module(python: str, module: str) -> bool:
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    return subprocess.run([python, "-c", code], env=clean_env(), capture_output=True).returncode == 0


def zeroplan_command() -> list[str]:
    """The `zeroplan` console script beside this python (what a user runs) when there is one; else `python -m
    zeroplan` on this checkout. Install the checkout into the benchmark's venv (`pip install .`) to time it."""
    script = Path(sys.executable).with_name("zeroplan")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "zeroplan"]


def commands(peers_python: str, scratch: Path, peers: bool = True) -> list[tuple[str, list[str] | None, str]]:
    """(label, argv or None, why not) in report order; without `peers`, zeroplan's rows and the floors only."""
    py = sys.executable
    zp = zeroplan_command()
    rows: list[tuple[str, list[str] | None, str]] = [
        ("python -c pass", [py, "-c", "pass"], ""),
        (IMPORTS, [py, "-c", "import pydantic, typer, rich.table, yaml"], ""),
        (FLOOR, [py, str(ROOT / "benchmarks" / "typer_floor.py"), "run", "--rows", "12"], ""),
        (ESTIMATE, [*zp, "estimate", "--model", "llama-3.1-8b", "--gpus", "8"], ""),
        (f"{ESTIMATE} -f json", [*zp, "estimate", "--model", "llama-3.1-8b", "--gpus", "8", "-f", "json"], ""),
        (ADVISE, [*zp, "advise"], ""),
    ]
    if not peers:
        return rows
    if has_module(peers_python, "deepspeed"):
        rows.append(("DeepSpeed estimate_zero3_..._all_cold (python -c)", [peers_python, "-c", DEEPSPEED_CODE], ""))
    else:
        rows.append(("DeepSpeed estimate_zero3_..._all_cold (python -c)", None, f"deepspeed not importable by {peers_python}"))
    if has_module(peers_python, "llm_analysis"):
        config = scratch / "llama-2-7b.json"
        config.write_text(json.dumps(LLM_ANALYSIS_LLAMA2_7B))
        argv = [peers_python, "-m", "llm_analysis.analysis", "train", "--model_name", str(config),
                "--gpu_name", "h100-sxm-80gb", "--total_num_gpus", "8", "--ds_zero", "3", "--seq_len", "2048",
                "--batch_size_per_gpu", "1", "--log_level", "ERROR"]
        rows.append(("llm-analysis train (python -m)", argv, ""))
    else:
        rows.append(("llm-analysis train (python -m)", None, f"llm_analysis not importable by {peers_python}"))
    return rows


def time_commands(runs: int, peers_python: str, count: bool = False, peers: bool = True) -> dict[str, dict]:
    """Every command `runs` times, interleaved: round r runs each command once, so a change in the machine's
    load during the benchmark (other jobs share its CPUs) falls on all of them alike, not on whichever ran then."""
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        timed: dict[str, list[str]] = {}
        for label, argv, why in commands(peers_python, Path(tmp), peers):
            if argv is not None:
                ok, last = runs_ok(argv)
                if not ok:
                    argv, why = None, f"fails: {last}"
            results[label] = {"why": why} if argv is None else {"samples": []}
            if argv is not None:
                timed[label] = argv
                if count and argv[0] in (sys.executable, zeroplan_command()[0]):  # zeroplan and the floors, not the peers
                    results[label]["instructions"] = instructions(argv)
        env = clean_env()
        for i in range(runs + 1):  # round 0 warms up (and writes the bytecode caches)
            for label, argv in timed.items():
                start = time.perf_counter()
                subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env, cwd=ROOT)
                if i:
                    results[label]["samples"].append(time.perf_counter() - start)
            print(f"  round {i} of {runs}", file=sys.stderr)
    return results


def time_grid(repeats: int, **options: str) -> dict:
    """Median (and best) wall and CPU seconds of sweep_grid over the benchmark grid, in this process (`options`:
    ScenarioArgs fields for another scenario than the bare 9e9 count)."""
    from zeroplan.cli.sweep import GridArgs, grid_axes
    from zeroplan.memory.grid import offload_pairs, sweep_grid
    from zeroplan.scenario import ScenarioArgs, scenario

    options = options or {"params": "9e9", "largest_layer": "917504000"}
    scn = scenario(ScenarioArgs(hardware="h100-sxm-80gb", **options))
    axes = grid_axes(GridArgs(gpu_counts=GRID_GPU_COUNTS, micro_batches=GRID_MICRO_BATCHES))
    offloads = offload_pairs(axes.offload_optimizers, axes.offload_params)
    walls, cpus, count = [], [], 0
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        count = len(sweep_grid(scn, axes.stages, axes.gpu_counts, axes.micro_batches, axes.checkpointings, offloads))
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return {"configs": count, "wall": walls, "cpu": cpus}


def median(results: dict[str, dict], label: str) -> float | None:
    r = results.get(label, {})
    return statistics.median(r["samples"]) if "samples" in r else None


def report(results: dict[str, dict], grid: dict | None, runs: int, load: tuple[float, float]) -> str:
    floor = median(results, FLOOR)
    out = [f"{runs} interleaved rounds after one warm-up round; wall-clock seconds; load average "
           f"{load[0]:.2f} before, {load[1]:.2f} after, on {os.cpu_count()} CPUs; zeroplan run as "
           f"`{' '.join(zeroplan_command())}`.", "",
           "| command | median s | min | max | x floor | instructions (M) |", "|---|---:|---:|---:|---:|---:|"]
    for label, r in results.items():
        if "samples" not in r:
            out.append(f"| {label} | not available: {r['why']} | | | | |")
            continue
        s, ir = r["samples"], r.get("instructions")
        ratio = f"{statistics.median(s) / floor:.2f}" if floor else "-"
        out.append(f"| {label} | {statistics.median(s):.3f} | {min(s):.3f} | {max(s):.3f} | {ratio} "
                   f"| {f'{ir / 1e6:,.0f}' if ir else '-'} |")
    out += ["", *targets(results, grid)]
    return "\n".join(out)


def verdict(ok: bool) -> str:
    return "pass" if ok else "FAIL"


def targets(results: dict[str, dict], grid: dict | None) -> list[str]:
    floor = median(results, FLOOR)
    floor_ir = results.get(FLOOR, {}).get("instructions")
    lines = ["Budget:", f"- floor, {FLOOR}: {floor:.3f} s" + (f", {floor_ir / 1e6:,.0f} M instructions" if floor_ir else "")
             if floor else f"- floor, {FLOOR}: not available"]
    for label, budget in BUDGET.items():
        seconds = median(results, label)
        if seconds is None or not floor:
            lines.append(f"- {label}: not available: FAIL")
            continue
        counted = results[label].get("instructions")
        if counted and floor_ir:  # load-independent: the budget is judged on this when it was counted
            ratio, how = counted / floor_ir, f"{counted / floor_ir:.2f}x in instructions ({seconds / floor:.2f}x wall)"
        else:
            ratio, how = seconds / floor, f"{seconds / floor:.2f}x wall"
        lines.append(f"- {label}: {seconds:.3f} s, {how} the floor (budget <= {budget}x): {verdict(ratio <= budget)}")
    imports = median(results, IMPORTS)
    if imports is not None and floor:
        counted = results[IMPORTS].get("instructions")
        by_count = f"; {counted / floor_ir:.2f}x in instructions" if counted and floor_ir else ""
        lines.append(f"- the libraries imported alone, {IMPORTS}: {imports / floor:.2f}x the floor{by_count}")
    if grid is None:
        return lines
    wall, cpu = statistics.median(grid["wall"]), statistics.median(grid["cpu"])
    n = grid["configs"]
    lines.append(f"- grid: {n:,} configurations in {wall:.3f} s wall / {cpu:.3f} s CPU, median of {len(grid['wall'])} "
                 f"(best {min(grid['wall']):.3f} s): 100,000 in {GRID_MIN_CONFIGS / n * wall:.2f} s "
                 f"(budget < {GRID_TARGET_S} s on one core, >= {GRID_MIN_CONFIGS:,} configurations): "
                 f"{verdict(n >= GRID_MIN_CONFIGS and GRID_MIN_CONFIGS / n * wall < GRID_TARGET_S)}")
    if "finetune" in grid:
        tuned = grid["finetune"]
        wall, cpu = statistics.median(tuned["wall"]), statistics.median(tuned["cpu"])
        lines.append(f"- grid under LoRA ({', '.join(f'{k} {v}' for k, v in GRID_FINETUNE.items())}): "
                     f"{tuned['configs']:,} configurations in {wall:.3f} s wall / {cpu:.3f} s CPU: 100,000 in "
                     f"{GRID_MIN_CONFIGS / tuned['configs'] * wall:.2f} s: "
                     f"{verdict(GRID_MIN_CONFIGS / tuned['configs'] * wall < GRID_TARGET_S)}")
    estimate, deepspeed = median(results, ESTIMATE), median(results, "DeepSpeed estimate_zero3_..._all_cold (python -c)")
    if deepspeed is not None and estimate:
        ratio = deepspeed / estimate
        lines.append(f"- DeepSpeed's estimator {deepspeed:.3f} s = {ratio:.1f}x zeroplan estimate (target >= "
                     f"{DEEPSPEED_SPEEDUP_TARGET}x): {verdict(ratio >= DEEPSPEED_SPEEDUP_TARGET)}")
    llm = median(results, "llm-analysis train (python -m)")
    if llm is not None and estimate:
        lines.append(f"- llm-analysis {llm:.3f} s = {llm / estimate:.1f}x zeroplan estimate")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--grid-repeats", type=int, default=5)
    parser.add_argument("--peers-python", default=sys.executable, help="a python that can import deepspeed / llm_analysis")
    parser.add_argument("--instructions", action="store_true",
                        help="also count each zeroplan command's instructions under valgrind (deterministic; slow)")
    parser.add_argument("--startup-only", action="store_true", help="the start-up rows only: no peers, no grid")
    args = parser.parse_args()
    before = os.getloadavg()[0]
    results = time_commands(args.runs, args.peers_python, args.instructions, peers=not args.startup_only)
    grid = None
    if not args.startup_only:
        grid = time_grid(args.grid_repeats)
        grid["finetune"] = time_grid(args.grid_repeats, **GRID_FINETUNE)
    print(report(results, grid, args.runs, (before, os.getloadavg()[0])))


if __name__ == "__main__":
    main()
