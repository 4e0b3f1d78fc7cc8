"""`zeroplan check` reports as text for machines: JSON, GitHub Actions workflow commands, JUnit XML.

Pure: strings and dicts out, no I/O (cli/app.py prints or writes them). The JSON keys are documented in
docs/checks.md; the rich text view is cli/render/check.py. Text from input files (paths, names, messages)
goes through `printable`: a control character is written as visible text (\x1b), never sent to a terminal,
a GitHub log or an XML parser (XML 1.0 forbids most C0 controls even as entities).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from zeroplan.check.findings import Finding
from zeroplan.check.rules import failed
from zeroplan.check.runner import CheckReport, PlanResult
from zeroplan.memory.verdict import stage_verdict
from zeroplan.memory.view import verdict_view
from zeroplan.printable import printable
from zeroplan.validate import as_json
from zeroplan.version import SCHEMA_VERSION, __version__

GITHUB_LEVELS = {"error": "error", "warning": "warning", "info": "notice"}  # workflow command per severity


def summary_line(report: CheckReport) -> str:
    """'zeroplan check: 4 plans, 1 failed; 1 error, 0 warnings, 5 info' (strict: warnings fail too)."""
    counts, plans = report.counts, len(report.results)
    failing = sum(report.plan_failed(r) for r in report.results)
    strict = " (strict: warnings fail)" if report.strict else ""
    return (f"zeroplan check: {plans} plan{'s' * (plans != 1)}, {failing} failed; {counts['error']} "
            f"error{'s' * (counts['error'] != 1)}, {counts['warning']} warning{'s' * (counts['warning'] != 1)}, "
            f"{counts['info']} info{strict}")  # fmt: skip


def where(finding: Finding) -> str:
    """'file:line' or 'file', printable."""
    return printable(f"{finding.file}:{finding.line}" if finding.line else str(finding.file))


def keyed_message(finding: Finding) -> str:
    """'key: message', unless the message already starts with its key; printable."""
    if not finding.key or finding.message.startswith(finding.key):
        return printable(finding.message)
    return printable(f"{finding.key}: {finding.message}")


def finding_text(finding: Finding) -> str:
    """One line: 'error does-not-fit ds.json:3 zero_optimization.stage: message'."""
    return f"{finding.severity} {finding.rule} {where(finding)} {keyed_message(finding)}"


# --- JSON -----------------------------------------------------------------------------------------


def plan_view(report: CheckReport, result: PlanResult) -> dict:
    view: dict = {"file": result.file, "status": "fail" if report.plan_failed(result) else "pass", "run": None,
                  "memory": None, "findings": [f.model_dump(mode="json") for f in result.findings]}  # fmt: skip
    if result.run is not None:
        scn, config = result.run.scenario, result.run.config
        view["run"] = {
            "model": scn.model.name, "num_params": scn.model.num_params,
            "hardware": scn.hardware.name if scn.hardware else None, "gpus": scn.parallelism.gpus,
            "nodes": scn.parallelism.nodes, "topology": result.run.topology.value, "stage": int(config.stage),
            "deepspeed_config": config.origin, "recipe": scn.recipe.name, "setup": as_json(scn.setup),
        }  # fmt: skip
    if result.memory is not None:
        mem = result.memory
        view["memory"] = {"peak_bytes": mem.total, "usable_bytes": mem.usable_bytes, "headroom_bytes": mem.headroom_bytes,
                          "fits": mem.fits, "peak_phase": mem.peak_phase.value, "gpu_bytes": mem.gpu_bytes(),
                          "verdict": verdict_view(stage_verdict(mem))}  # fmt: skip
        if mem.overheads is not None and mem.overheads.calibration:  # the plan's `calibration:` (docs/calibrate.md)
            view["memory"]["calibration"] = {"file": mem.overheads.calibration,
                                             "changes": list(mem.overheads.calibration_changes)}
    return view


def check_view(report: CheckReport) -> dict:
    """The report as JSON-ready data: one entry per plan, bytes as integers."""
    counts = report.counts
    return {
        "schema_version": SCHEMA_VERSION,
        "zeroplan_version": __version__,
        "strict": report.strict,
        "exit_code": report.exit_code,
        "summary": {"plans": len(report.results), "failed": sum(report.plan_failed(r) for r in report.results), **counts},
        "plans": [plan_view(report, r) for r in report.results],
    }


# --- GitHub Actions ---------------------------------------------------------------------------------


def _escape_data(text: str) -> str:
    """@actions/core escapeData: % CR LF."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    """@actions/core escapeProperty: escapeData plus : and ,."""
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github_annotation(finding: Finding, plan_file: str) -> str:
    """`::error file=F,line=L,title=zeroplan RULE::key: message`; names the plan when the finding is in another file."""
    file = finding.file or plan_file
    props = [f"file={_escape_property(printable(file))}"]
    if finding.line:
        props.append(f"line={finding.line}")
    props.append(f"title={_escape_property('zeroplan ' + finding.rule)}")
    message = keyed_message(finding)
    if file != plan_file:
        message += f" (plan {printable(plan_file)})"
    return f"::{GITHUB_LEVELS[finding.severity]} {','.join(props)}::{_escape_data(message)}"


def github_report(report: CheckReport) -> str:
    """One workflow command per finding, then the summary as a plain line."""
    lines = [github_annotation(f, r.file) for r in report.results for f in r.findings]
    return "\n".join([*lines, summary_line(report)]) + "\n"


# --- JUnit XML ---------------------------------------------------------------------------------------


def junit_report(report: CheckReport) -> str:
    """One test case per plan; its failing findings (errors, or warnings too with strict) as one <failure>."""
    results = report.results
    totals = {"tests": str(len(results)), "failures": str(sum(report.plan_failed(r) for r in results)), "errors": "0"}
    suites = ET.Element("testsuites", name="zeroplan check", **totals)
    suite = ET.SubElement(suites, "testsuite", name="zeroplan check", skipped="0", **totals)
    for result in results:
        name = printable(result.file)
        case = ET.SubElement(suite, "testcase", classname="zeroplan.check", name=name, file=name)
        failing = [f for f in result.findings if failed([f], strict=report.strict)]
        if failing:
            more = f" (+{len(failing) - 1} more)" if len(failing) > 1 else ""
            failure = ET.SubElement(case, "failure", type=failing[0].rule, message=printable(failing[0].message) + more)
            failure.text = "\n".join(finding_text(f) for f in failing)
        if rest := [f for f in result.findings if f not in failing]:
            ET.SubElement(case, "system-out").text = "\n".join(finding_text(f) for f in rest)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
