"""The parallelism search's speed: `zeroplan advise --search-parallelism` for a 405B model over 8..1024 GPUs.

Usage: python benchmarks/search_parallelism.py [--model llama-3.1-405b] [--hardware h100-sxm-80gb]
                                               [--seq-len 8192] [--global-batch 512] [--repeats 3]

In-process, one core: for each GPU count 8, 16, ..., 1024 the whole search (enumeration, fit, pruning, timing,
ranking, trace) runs as `zeroplan.advise.layouts.search.search_parallelism`; the first pass of each repeat starts
from empty caches (the caches are cleared before it), so every repeat measures the full sweep cold. It prints a
markdown table per GPU count (meshes, layout x stage x checkpointing combinations weighed, memory evaluations,
configurations timed, interleaved-1f1b variants weighed, wall seconds) and the total, with evaluations per CPU second. The budget
(docs/benchmarks.md): the whole sweep under 2 s of CPU time (process_time: on a shared machine the wall clock
also counts other processes' turns; both are printed, with the load average). No test asserts on time; this
script does and exits 1 when the median sweep is over.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

BUDGET_S = 2.0
GPU_COUNTS = (8, 16, 32, 64, 128, 256, 512, 1024)


def sweep(model: str, hardware: str, seq_len: int, global_batch: int) -> tuple[float, float, list[tuple]]:
    from zeroplan.advise.layouts import fit
    from zeroplan.advise.layouts.search import search_parallelism
    from zeroplan.scenario import ScenarioArgs, scenario

    from zeroplan.memory.activations import mesh as mesh_activations

    fit._SHARES.clear()
    fit._ACTIVATIONS.clear()
    mesh_activations._rank_once.cache_clear()
    rows, start, cpu = [], time.perf_counter(), time.process_time()
    for gpus in GPU_COUNTS:
        t = time.perf_counter()
        scn = scenario(ScenarioArgs(model=model, gpus=str(gpus), hardware=hardware, seq_len=str(seq_len)))
        advice = search_parallelism(scn, model, global_batch=global_batch)
        c, rec = advice.counts, advice.recommendation
        rows.append((gpus, c.layouts, c.configurations, c.evaluations, c.timed, c.interleaved,
                     time.perf_counter() - t, rec.describe() if rec else "nothing fits"))
    return time.perf_counter() - start, time.process_time() - cpu, rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-3.1-405b")
    parser.add_argument("--hardware", default="h100-sxm-80gb")
    parser.add_argument("--seq-len", type=int, default=8192)
    parser.add_argument("--global-batch", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import zeroplan.advise.layouts.search  # noqa: F401  imports are not the search's time

    runs = [sweep(args.model, args.hardware, args.seq_len, args.global_batch) for _ in range(args.repeats)]
    total, cpu, rows = sorted(runs, key=lambda r: r[1])[len(runs) // 2]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{args.model} on {args.hardware}, seq {args.seq_len}, global batch {args.global_batch}; median of "
          f"{args.repeats} cold sweeps\n")
    print("| GPUs | meshes | combinations | evaluations | timed | interleaved | seconds | choice |")
    print("|---|---|---|---|---|---|---|---|")
    for gpus, meshes, combos, evals, timed, inter, secs, choice in rows:
        print(f"| {gpus} | {meshes} | {combos} | {evals:,} | {timed} | {inter} | {secs:.3f} | {choice} |")
    evals = sum(r[3] for r in rows)
    combos = sum(r[2] for r in rows)
    print(f"\ntotal: {combos:,} combinations, {evals:,} memory evaluations, {sum(r[4] for r in rows):,} timed, in "
          f"{cpu:.2f} s of CPU ({total:.2f} s wall; {evals / cpu:,.0f} evaluations per CPU second); sweeps "
          f"{', '.join(f'{r[1]:.2f}' for r in runs)} s CPU; load average {load:.1f} on {os.cpu_count()} cores; "
          f"budget {BUDGET_S} s of CPU: {'within' if cpu <= BUDGET_S else 'OVER'}")
    return 0 if statistics.median(r[1] for r in runs) <= BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
