"""A long fuzz campaign over every zeroplan parser; prints inputs tried and outcomes per parser.

Usage: python benchmarks/fuzz.py [--rounds 20000] [--seed N]
The test suite runs the same engine (tests/fuzzkit.py) for 1,700 rounds with a fixed seed. Any input
that makes a parser raise something other than a one-line ZeroplanError stops the run with its traceback.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # run from a checkout, installed or not

from fuzzkit import campaign  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    start = time.perf_counter()
    tally = campaign(args.seed, args.rounds)
    elapsed = time.perf_counter() - start
    print(f"seed {args.seed}: {sum(tally.values()):,} inputs in {elapsed:.1f} s, no crash")
    for name in sorted({n for n, _ in tally}):
        print(f"  {name:<11} ok {tally[name, 'ok']:>8,}   clean error {tally[name, 'error']:>8,}")


if __name__ == "__main__":
    main()
