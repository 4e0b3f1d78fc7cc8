"""The GPU battery's table for docs/calibrate.md: each committed GPU result's cases, measured against zeroplan.

    python validation/gpu/table.py            # markdown on stdout; "no GPU result yet" when there is none

Run from the repository root. Predicted allocated = the estimate's total less its overhead terms; predicted reserved
= that + the fragmentation (and any allocator constant) term; the same arithmetic as tests/test_gpu_battery.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
GIB = 2**30


def predicted(args: list[str]) -> tuple[int, int]:
    sys.path.insert(0, str(ROOT))
    from typer.testing import CliRunner

    from zeroplan.cli.app import app

    stage = json.loads(CliRunner().invoke(app, [*args, "-f", "json"]).output)["stages"][0]
    allocated = stage["gpu_bytes"]["total"] - stage["gpu_bytes"]["overhead"]
    gap = sum(t["bytes"] for t in stage["overhead"] if t["name"].startswith(("fragmentation", "allocator constant")))
    return allocated, allocated + gap


def rows(path: Path) -> list[str]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if data["dry_run"]:
        return []
    env, out = data["environment"], []
    for case in data["cases"]:
        if case["status"] != "ok":
            out.append(f"| {env['gpu']} | {case['name']} | {case['status']}: {case['error'][:80]} | | | | |")
            continue
        c = case["counters"]
        if case["unmodelled"]:
            out.append(f"| {env['gpu']} | {case['name']} | {c['max_memory_allocated'] / GIB:.2f} | "
                       f"{c['max_memory_reserved'] / GIB:.2f} | not modelled ({', '.join(case['unmodelled'])}) | | |")
            continue
        args = [str(path.parent / "battery-model.json") if a.endswith("battery-model.json") else a
                for a in case["zeroplan_args"]]
        alloc, reserved = predicted(args)
        out.append(f"| {env['gpu']} | {case['name']} | {c['max_memory_allocated'] / GIB:.2f} | "
                   f"{c['max_memory_reserved'] / GIB:.2f} | {alloc / GIB:.2f} | {reserved / GIB:.2f} | "
                   f"{(alloc / c['max_memory_allocated'] - 1):+.1%} / {(reserved / c['max_memory_reserved'] - 1):+.1%} |")
    return out


def main() -> int:
    results = sorted(p for p in (HERE / "results").glob("*.json") if not p.name.startswith("battery-model"))
    body = [row for path in results for row in rows(path)]
    if not body:
        print("No GPU result yet: validation/gpu/results/ holds none (no GPU has been at hand).")
        return 0
    print("| GPU | case | allocated GiB | reserved GiB | zeroplan allocated | zeroplan reserved | error alloc / res |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(body))
    return 0


if __name__ == "__main__":
    sys.exit(main())
