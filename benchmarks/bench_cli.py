"""Time zeroplan commands as whole processes (median of repeated runs, with min and max).

Usage: python benchmarks/bench_cli.py [--runs 15]
Compares against `python -c pass`, the floor any Python CLI pays.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "zeroplan estimate --params 9e9 --gpus 8": [sys.executable, "-m", "zeroplan", "estimate", "--params", "9e9", "--gpus", "8"],
    "zeroplan estimate ... -f json": [sys.executable, "-m", "zeroplan", "estimate", "--params", "9e9", "--gpus", "8", "-f", "json"],
}


def time_command(argv: list[str], runs: int) -> list[float]:
    # As a user's install runs: bytecode cached (pip compiles on install), so unset DONTWRITEBYTECODE.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env)  # warm-up
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env)
        samples.append(time.perf_counter() - start)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    if shutil.which("zeroplan"):
        COMMANDS["zeroplan (console script)"] = ["zeroplan", "estimate", "--params", "9e9", "--gpus", "8"]
    base = None
    print(f"{'command':<45} {'median s':>9} {'min':>7} {'max':>7} {'x pass':>7}")
    for name, argv in COMMANDS.items():
        samples = time_command(argv, args.runs)
        med = statistics.median(samples)
        base = base or med
        print(f"{name:<45} {med:9.3f} {min(samples):7.3f} {max(samples):7.3f} {med / base:7.1f}")


if __name__ == "__main__":
    main()
