"""`zeroplan check`: the rule registry and the runner. Pure: no I/O.

Rules live by concept: check/rules/config.py (the DeepSpeed config itself), check/rules/mesh.py (the parallel
mesh), check/rules/memory.py (the memory
estimate of the configured stage), check/rules/fabric.py (ZeRO-3's communication on the plan's fabric).
A rule that needs a calculator result declares it in `Rule.needs` and takes it as a keyword argument;
the runner passes what the caller supplies in `evidence` ("memory": a StageEstimate, "throughput": a
FabricEvidence, "mesh": the mesh's problems; check/runner.py computes them) and skips the rule when something it needs is missing.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

from zeroplan.check.findings import SEVERITIES, Finding, Rule, RunContext
from zeroplan.check.rules.config import CONFIG_RULES
from zeroplan.check.rules.fabric import FABRIC_RULES
from zeroplan.check.rules.memory import MEMORY_RULES
from zeroplan.check.rules.mesh import MESH_RULES
from zeroplan.deepspeed.reader import DeepSpeedConfig
from zeroplan.errors import ZeroplanError

RULES: tuple[Rule, ...] = CONFIG_RULES + MESH_RULES + MEMORY_RULES + FABRIC_RULES
RULES_BY_ID: dict[str, Rule] = {rule.id: rule for rule in RULES}


def check_rule_ids(ids: Iterable[str]) -> None:
    """Raise ZeroplanError naming the first id that is not a rule, with close matches (for --ignore)."""
    for rule_id in ids:
        if rule_id not in RULES_BY_ID:
            close = difflib.get_close_matches(rule_id, list(RULES_BY_ID), n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(close)}?" if close else f"; rules: {', '.join(RULES_BY_ID)}"
            raise ZeroplanError(f"unknown rule {rule_id!r}{hint}")


def run_checks(
    config: DeepSpeedConfig,
    run: RunContext,
    *,
    evidence: Mapping[str, object] | None = None,
    ignore: Iterable[str] = (),
    rules: Iterable[Rule] = RULES,
) -> tuple[Finding, ...]:
    """Every finding of every rule not ignored, in registry order, each with the config's file and the key's line."""
    skipped = set(ignore)
    check_rule_ids(skipped)
    evidence = evidence or {}
    found: list[Finding] = []
    for rule in rules:
        extra = {name: evidence.get(name) for name in rule.needs}
        if rule.id in skipped or any(value is None for value in extra.values()):
            continue
        found.extend(_locate(finding, config) for finding in rule.check(config, run, **extra))
    return tuple(found)


def _locate(finding: Finding, config: DeepSpeedConfig) -> Finding:
    """The config's file unless the rule named another; a key's line only from the file it is in."""
    file = finding.file or config.origin
    line = finding.line or (config.line_of(finding.key) if file == config.origin else None)
    return finding.model_copy(update={"file": file, "line": line})


def count_by_severity(findings: Iterable[Finding]) -> dict[str, int]:
    """{'error': n, 'warning': n, 'info': n}, for the summary line."""
    counts = dict.fromkeys(SEVERITIES, 0)
    for finding in findings:
        counts[finding.severity] += 1
    return counts


def failed(findings: Iterable[Finding], *, strict: bool = False) -> bool:
    """Exit 1? Any error, or with strict any warning too."""
    failing = {"error", "warning"} if strict else {"error"}
    return any(finding.severity in failing for finding in findings)
