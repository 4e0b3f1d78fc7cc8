"""Rich renderables for `zeroplan check`: per plan a verdict line and its findings, then the summary.

No arithmetic beyond formatting; cli/common.py owns the Console. Text from input files goes through
`printable` (rich passes an ANSI escape straight to the terminal).
"""

from __future__ import annotations

from rich.padding import Padding
from rich.text import Text

from zeroplan.check.formats import summary_line, where
from zeroplan.check.runner import CheckReport, PlanResult
from zeroplan.printable import printable
from zeroplan.units import Unit, format_bytes

SEVERITY_STYLES = {"error": "bold red", "warning": "yellow", "info": "dim"}


def run_text(result: PlanResult) -> str:
    """'9.24B params on 8 x h100-sxm-80gb (nvlink), ZeRO-3: peak 45.21 GiB of 79.65 GiB', or ''."""
    if result.run is None or result.memory is None:
        return ""
    scn, mem = result.run.scenario, result.memory
    hardware = scn.hardware.name if scn.hardware else "no hardware"
    text = f"{scn.model.name} on {scn.parallelism.gpus} x {hardware} ({result.run.topology.value}), ZeRO-{int(mem.stage)}"
    if mem.usable_bytes is not None:
        text += f": peak {format_bytes(mem.total, Unit.gib)} of {format_bytes(mem.usable_bytes, Unit.gib)}"
    if mem.overheads is not None and mem.overheads.calibration:  # the plan's `calibration:` (docs/calibrate.md)
        text += f"; calibration from {mem.overheads.calibration} applied: {', '.join(mem.overheads.calibration_changes)}"
    return printable(text)


def plan_renderables(report: CheckReport, result: PlanResult) -> list:
    """'PASS file', what was checked, then per finding 'severity rule where key' over its message."""
    verdict = Text("FAIL", style="bold red") if report.plan_failed(result) else Text("PASS", style="bold green")
    parts: list = [verdict + Text(f" {printable(result.file)}", style="bold")]
    if summary := run_text(result):
        parts.append(Padding(Text(summary, style="dim"), (0, 0, 0, 5), expand=False))
    for f in result.findings:
        key = f" {printable(f.key)}" if f.key else ""
        head = Text(f"  {f.severity:<7} ", style=SEVERITY_STYLES[f.severity]) + Text(f.rule) + Text(f"  {where(f)}{key}", style="dim")
        parts += [head, Padding(Text(printable(f.message)), (0, 0, 0, 10), expand=False)]
    return parts


def check_renderables(report: CheckReport) -> list:
    parts = [part for result in report.results for part in plan_renderables(report, result)]
    style = "bold red" if report.exit_code else "bold green"
    return [*parts, Text(summary_line(report), style=style)]
