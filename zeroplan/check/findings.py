"""The vocabulary of `zeroplan check`: a Finding, the run a config is checked against, a Rule.

Rule modules (check/rules/config.py, check/rules/memory.py, check/rules/fabric.py) define their rules with these;
check/rules/__init__.py gathers them into the registry and runs them. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from zeroplan.frozen import Frozen
from zeroplan.hardware.spec import HardwareSpec
from zeroplan.memory.setup import Parallelism

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")  # most severe first


class Finding(Frozen):
    """One problem (or note) about one planned run, with the numbers that show it."""

    rule: str = Field(description="stable rule id, e.g. batch-identity; what --ignore takes")
    severity: Severity
    message: str = Field(description="one line, with the values involved")
    file: str | None = Field(None, description="the file the finding concerns (the DeepSpeed config)")
    key: str | None = Field(None, description="dotted key path inside that file, e.g. zero_optimization.stage")
    line: int | None = Field(None, ge=1, description="1-based line of the key, when the text was scanned")


class RunContext(Frozen):
    """The planned run a DeepSpeed config is checked against. A rule needing what is None does not run."""

    parallelism: Parallelism | None = None
    hardware: HardwareSpec | None = None
    min_headroom_pct: float | None = Field(None, ge=0, lt=100, description="low-headroom threshold; None: the rule's default")
    data_parallel: int | None = Field(None, ge=1, description="the data-parallel degree of a tp/pp/cp mesh; None: every GPU")

    @property
    def dp_world(self) -> int | None:
        """DeepSpeed's batch world_size: the data-parallel degree (GPUs / (tp x pp x cp) on a mesh)."""
        if self.data_parallel is not None:
            return self.data_parallel
        return self.parallelism.dp if self.parallelism else None


@dataclass(frozen=True)
class Rule:
    """A registered CI rule.

    `check(config, run, **evidence)` yields Findings. `needs` names the extra evidence it takes as
    keyword arguments (e.g. "memory" for a MemoryEstimate, "throughput" for a Throughput); the runner
    skips the rule when any of them is missing.
    """

    id: str
    severity: Severity  # the usual severity; a finding may differ, and says why in its message
    summary: str  # one line, for --help, the docs table and --ignore listings
    source: str  # where DeepSpeed (or the reference) does what the rule reports
    check: Callable[..., Iterable[Finding]]
    needs: tuple[str, ...] = ()
