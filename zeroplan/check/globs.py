"""`zeroplan check`'s plan arguments as globs, expanded by zeroplan as the shell would, bounded.

glob.glob(recursive=True) follows a symbolic link to a directory inside `**`: a link to a parent (`up -> ..`) makes
the walk loop until ELOOP, and two such links make it exponential (2^40 paths: a hang). pathlib's `**` does not
follow links to directories (Python 3.10-3.12; 3.13's recurse_symlinks=False), so a pattern with `**` is walked by
pathlib from its literal prefix, hidden names skipped as glob's `*` skips them. At most MAX_PLAN_FILES are taken.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path

from zeroplan.errors import UsageError

GLOB_CHARS = "*?["
MAX_PLAN_FILES = 10_000  # plans in one check; a glob matching more is a mistake (a home directory's every YAML)


def expand_plans(patterns: Iterable[str]) -> list[str]:
    """Each argument, a glob expanded (sorted); a glob matching nothing stays, to be reported; duplicates once."""
    out: dict[str, None] = {}
    for pattern in patterns:
        matches = sorted(_bounded(pattern)) if any(c in pattern for c in GLOB_CHARS) else []
        out.update(dict.fromkeys(matches or [pattern]))
        if len(out) > MAX_PLAN_FILES:
            raise UsageError(f"the plan arguments match more than {MAX_PLAN_FILES:,} files; give a narrower glob")
    return list(out)


def _bounded(pattern: str) -> list[str]:
    found = list(islice(_matches(pattern), MAX_PLAN_FILES + 1))
    if len(found) > MAX_PLAN_FILES:
        raise UsageError(f"{pattern}: matches more than {MAX_PLAN_FILES:,} files; give a narrower glob")
    return found


def _matches(pattern: str) -> Iterator[str]:
    if "**" not in pattern:
        return glob.iglob(pattern)
    parts = pattern.replace(os.sep, "/").split("/") if os.altsep else pattern.split("/")
    first = next(i for i, part in enumerate(parts) if any(c in part for c in GLOB_CHARS))
    prefix = "/".join(parts[:first]) or ("/" if pattern.startswith("/") else "")
    rest = [part for part in parts[first:] if part] or ["*"]
    rest += ["*"] if rest[-1] == "**" else []  # glob's trailing ** matches the files below too; pathlib's only dirs
    root = Path(prefix or ".")
    return (os.path.join(prefix, str(match.relative_to(root))) if prefix else str(match.relative_to(root))
            for match in root.glob("/".join(rest))
            if not any(name.startswith(".") for name in match.relative_to(root).parts))
