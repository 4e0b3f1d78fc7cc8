"""Rich renderables for `zeroplan check`: the summary, then per plan (failed plans first) a verdict line, its memory
verdict (fits or not, headroom, the term that breaks the fit) and its findings, errors first; the summary again.

No arithmetic beyond formatting; cli/common.py owns the Console. Text from input files goes through
`printable` (rich passes an ANSI escape straight to the terminal).
"""

from __future__ import annotations

from rich.padding import Padding
from rich.text import Text

from zeroplan.check.formats import summary_line, where
from zeroplan.check.runner import CheckReport, PlanResult
from zeroplan.printable import printable
from zeroplan.units import Unit

SEVERITY_STYLES = {"error": "bold red", "warning": "yellow", "info": "dim"}


SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def run_text(result: PlanResult) -> Text | None:
    """'llama-3.1-8b on 8 x h100-sxm-80gb (nvlink), ZeRO-3: fits: 45.21 GiB of 79.65 GiB usable, ...', or None."""
    if result.run is None or result.memory is None:
        return None
    from zeroplan.cli.render.verdict import verdict_text
    from zeroplan.memory.verdict import stage_verdict

    scn, mem = result.run.scenario, result.memory
    hardware = scn.hardware.name if scn.hardware else "no hardware"
    label = printable(f"{scn.model.name} on {scn.parallelism.gpus} x {hardware} ({result.run.topology.value}), "
                      f"ZeRO-{int(mem.stage)}")
    if mem.overheads is not None and mem.overheads.calibration:  # the plan's `calibration:` (docs/calibrate.md)
        label += printable(f" (calibration from {mem.overheads.calibration} applied: "
                           f"{', '.join(mem.overheads.calibration_changes)})")
    verdict = stage_verdict(mem)
    if verdict is None:
        return Text(label, style="dim")
    return verdict_text(label, verdict, Unit.gib)


def plan_renderables(report: CheckReport, result: PlanResult) -> list:
    """'PASS file', what was checked, then per finding 'severity rule where key' over its message."""
    verdict = Text("FAIL", style="bold red") if report.plan_failed(result) else Text("PASS", style="bold green")
    parts: list = [verdict + Text(f" {printable(result.file)}", style="bold")]
    if (summary := run_text(result)) is not None:
        parts.append(Padding(summary, (0, 0, 0, 5), expand=False))
    for f in sorted(result.findings, key=lambda f: SEVERITY_ORDER.get(f.severity, len(SEVERITY_ORDER))):
        key = f" {printable(f.key)}" if f.key else ""
        head = Text(f"  {f.severity:<7} ", style=SEVERITY_STYLES[f.severity]) + Text(f.rule) + Text(f"  {where(f)}{key}", style="dim")
        parts += [head, Padding(Text(printable(f.message)), (0, 0, 0, 10), expand=False)]
    return parts


def check_renderables(report: CheckReport) -> list:
    """The summary first (and last, where a CI log's tail shows it), failed plans before the others."""
    results = sorted(report.results, key=lambda result: not report.plan_failed(result))
    parts = [part for result in results for part in plan_renderables(report, result)]
    summary = Text(summary_line(report), style="bold red" if report.exit_code else "bold green")
    return [summary, *parts, summary] if len(report.results) > 1 else [*parts, summary]
