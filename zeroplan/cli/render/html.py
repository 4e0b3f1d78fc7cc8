"""`--html FILE`: one self-contained HTML report of an estimate, an advice or a check, built from the JSON
document the same command prints with --format json (docs/json.md), never from the objects behind it.

Self-contained: inline CSS and SVG, no script, no link, no image or font from anywhere; a
Content-Security-Policy of default-src 'none' makes a browser refuse any fetch the page might still try.
Pure strings (no rich, typer or I/O): cli/files.py writes the result. Lives in cli/ because only the CLI's
--html uses it; it imports nothing above the ground floor, so it could move down if the API wanted it.
"""

from __future__ import annotations

from html import escape

from zeroplan.cli.render.svg import Bar, Point, amount, stacked_bars, timeline_chart

GIB = 2**30
CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1d2329;margin:24px auto;max-width:1100px;padding:0 16px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px;border-bottom:1px solid #dde2e6;padding-bottom:4px}
h3{font-size:14px;margin:16px 0 4px}.sub{color:#5b6670;margin:0 0 12px}
table{border-collapse:collapse;font-size:13px;margin:6px 0}td,th{padding:3px 8px;border-bottom:1px solid #eceff1;text-align:left;vertical-align:top}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}td.rule{white-space:nowrap}tr.total td{font-weight:600}
svg{display:block;margin:6px 0;font-size:12px}svg text{fill:#1d2329}svg .tick,svg .phase{fill:#5b6670;font-size:11px}
.usable{stroke:#1d2329;stroke-width:1.5;stroke-dasharray:4 3}.area{fill:#3f5fb5;fill-opacity:.18}
.line{fill:none;stroke:#3f5fb5;stroke-width:2}.peak{fill:#c9483e}.peak-label{font-weight:600}
.yes{color:#2e7d32}.no{color:#c62828}.error{color:#c62828;font-weight:600}.warning{color:#a66a00}.info{color:#5b6670}
ul{padding-left:20px}li{margin:2px 0}.note{color:#5b6670;font-size:12px}footer{margin-top:32px;color:#8a949c;font-size:12px}
.verdict{font-size:15px;margin:10px 0;padding:10px 14px;border-radius:6px;background:#f4f6f8;border-left:5px solid #8a949c}
.verdict p{margin:3px 0}.verdict.fit{border-left-color:#2e7d32}.verdict.nofit{border-left-color:#c62828}
.cmd{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;background:#f4f6f8;padding:6px 10px;border-radius:4px;overflow-wrap:anywhere}
.brk{stroke:#fff;stroke-width:3}
"""
CSP = "default-src 'none'; style-src 'unsafe-inline'"


def estimate_report(doc: dict, command: str | None = None) -> str:
    """The estimate: the verdict per stage first, the stages as stacked bars on one axis and a table of their
    terms, each stage's timeline on one shared y axis, the assumptions."""
    scale, unit = _unit(doc)
    model, par, hw = doc["model"], doc["parallelism"], doc.get("hardware")
    head = f"{model['name']}: {model['num_params']:,} params on {par['gpus']} GPU(s)"
    head += f" x {hw['name']}" if hw else " (no hardware profile)"
    setup = doc["setup"]
    sub = (f"engine {doc['engine']}, {doc['recipe']['name']}, seq-len {setup['seq_len']}, micro-batch {setup['micro_batch']}, "
           f"checkpointing {setup['checkpointing']}, attention {setup['attention']}")
    stages = doc["stages"]
    bars = [Bar(stage_label(s), s["gpu_bytes"], s["gpu_bytes"]["total"], s.get("usable_bytes")) for s in stages]
    lead = [(stage_label(s), s["verdict"]) for s in stages if s.get("verdict")]
    body = [_verdicts(lead), _section("Memory per GPU", stacked_bars(bars, scale, unit) + _terms_table(stages, scale, unit))]
    top = max([s["timeline"]["peak_bytes"] for s in stages if s.get("timeline")]
              + [s["usable_bytes"] - s["gpu_bytes"]["overhead"] for s in stages if s.get("usable_bytes")], default=0)
    charts = [f"<h3>{escape(stage_label(s))}</h3>" + chart for s in stages if (chart := stage_timeline(s, scale, unit, top))]
    body.append(_section("Through the step", "".join(charts) if charts else
                         '<p class="note">This document has no timeline (its stages carry no "timeline").</p>'))
    body.append(_section("Assumptions", _list(doc["assumptions"])))
    return _page(f"zeroplan estimate: {model['name']}", head, sub, body, doc, command)


def advice_report(doc: dict, command: str | None = None) -> str:
    """The advice: the verdict, the recommendation with its step time and MFU, the alternatives as bars and a
    table, the trace, advisories, assumptions."""
    scale, unit = GIB, "GiB"
    rec, model = doc["recommendation"], doc["model"]
    head = f"{model['name']} on {doc['parallelism']['gpus']} GPU(s) x {doc.get('hardware') or 'no hardware profile'}"
    sub = f"recommendation: {rec['summary']}" if rec.get("fits") else "no configuration fits"
    plans = ([rec["plan"]] if rec.get("plan") else []) + list(doc.get("alternatives") or [])
    seen, bars, shown = set(), [], []
    for i, plan in enumerate(plans):
        label = plan_label(plan)
        if label not in seen:
            seen.add(label)
            shown.append(plan)
            bars.append(Bar(("recommended: " if i == 0 and rec.get("plan") else "") + label, {}, plan["peak_bytes"],
                            plan.get("usable_bytes")))
    verdict = doc.get("verdict")
    body = [_verdicts([(verdict["about"], verdict)] if verdict else [])]
    if rec.get("plan"):
        body.append(_section("Recommendation", _plan_facts(rec, scale, unit)))
    if bars:
        body.append(_section("Peak per GPU: the recommendation and its alternatives", stacked_bars(bars, scale, unit)
                             + _alternatives_table(shown, scale, unit)
                             + '<p class="note">The advice carries each plan\'s peak, not its terms: '
                               "zeroplan estimate draws those.</p>"))
    body.append(_section("Trace", _trace_table(doc["trace"])))
    if doc.get("advisories"):
        body.append(_section("Advisories", _trace_table(doc["advisories"])))
    body.append(_section("Assumptions", _list(doc["assumptions"])))
    return _page(f"zeroplan advise: {model['name']}", head, sub, body, doc, command)


def check_report(doc: dict, command: str | None = None) -> str:
    """The check: failed plans first, each plan's memory as a stacked bar, then each plan's verdict and findings
    (errors first)."""
    scale, unit = GIB, "GiB"
    summary = doc["summary"]
    head = f"zeroplan check: {summary['plans']} plan(s), {summary['failed']} failed"
    sub = (f"{summary['error']} error(s), {summary['warning']} warning(s), {summary['info']} info; "
           f"exit code {doc['exit_code']}" + (" (strict)" if doc.get("strict") else ""))
    plans = sorted(doc["plans"], key=lambda p: p["status"] != "fail")  # failures first
    lead = [(_short(p["file"]), p["memory"]["verdict"]) for p in plans if (p.get("memory") or {}).get("verdict")]
    bars = [Bar(_short(p["file"]), p["memory"]["gpu_bytes"], p["memory"]["peak_bytes"], p["memory"].get("usable_bytes"))
            for p in plans if p.get("memory")]
    body = [_verdicts(lead)] + ([_section("Memory per GPU", stacked_bars(bars, scale, unit))] if bars else [])
    for plan in plans:
        status = plan["status"]
        parts = [f'<p><b class="{"no" if status == "fail" else "yes"}">{escape(status.upper())}</b> {escape(plan["file"])}</p>']
        if plan.get("run") and plan.get("memory"):
            run, mem = plan["run"], plan["memory"]
            parts.append(f'<p class="sub">{escape(str(run["model"]))} on {run["gpus"]} x {escape(str(run["hardware"]))}, '
                         f'ZeRO-{run["stage"]}: peak {amount(mem["peak_bytes"], scale, unit)} ({escape(mem["peak_phase"])})</p>')
        parts.append(_findings_table(sorted(plan["findings"], key=lambda f: SEVERITIES.index(f["severity"])
                                            if f["severity"] in SEVERITIES else len(SEVERITIES))))
        body.append(_section(_short(plan["file"]), "".join(parts)))
    return _page("zeroplan check", head, sub, body, doc, command)


def stage_label(stage: dict) -> str:
    label = f"ZeRO-{stage['stage']}"
    offload = [f"{k}={stage[f'offload_{n}']}" for k, n in (("opt", "optimizer"), ("param", "param"))
               if stage.get(f"offload_{n}", "none") != "none"]
    return label + (f" ({', '.join(offload)})" if offload else "")


def plan_label(plan: dict) -> str:
    offload = [f"{k}={plan[f'offload_{n}']}" for k, n in (("opt", "optimizer"), ("param", "param"))
               if plan.get(f"offload_{n}", "none") != "none"]
    text = f"ZeRO-{plan['stage']} mb {plan['micro_batch']}"
    if plan.get("checkpointing", "none") != "none":
        text += f" ckpt {plan['checkpointing']}"
    return text + (f" {','.join(offload)}" if offload else "")


def timeline_points(timeline: dict) -> tuple[list[Point], int]:
    """The events of a stage's "timeline" (docs/json.md) as chart points, and the index of its peak event."""
    points = [Point(e["name"], e["phase"], e["total"], e["bytes"]) for e in timeline["events"]]
    return points, timeline["peak_index"]


def stage_timeline(stage: dict, scale: int, unit: str, top: int = 0) -> str:
    """One stage's timeline; `top` (bytes) is the y axis's top, shared by every stage of the page."""
    if not stage.get("timeline"):
        return ""
    points, peak = timeline_points(stage["timeline"])
    overhead = stage["gpu_bytes"]["overhead"]
    note = (f'<p class="note">The most alive inside each event, without the overhead of '
            f"{amount(overhead, scale, unit)} (CUDA context, NCCL, fragmentation) the stage's peak adds: "
            f"{amount(stage['timeline']['peak_bytes'], scale, unit)} + {amount(overhead, scale, unit)} = "
            f"{amount(stage['gpu_bytes']['total'], scale, unit)}.</p>")
    usable = stage.get("usable_bytes")  # the events exclude the overhead, so the line they meet is usable - overhead
    return timeline_chart(points, peak, scale, unit, usable - overhead if usable else None,
                          "usable less overhead", top=top) + note


def _unit(doc: dict) -> tuple[int, str]:
    units = doc.get("units") or {}
    return int(units.get("display_bytes", GIB)), str(units.get("display", "GiB"))


TERM_ROWS = (("parameters", "parameters"), ("gradients", "gradients"), ("optimizer_states", "optimizer states"),
             ("activations", "activations"), ("buffers", "buffers"), ("overhead", "overhead"), ("total", "= peak"))


def _terms_table(stages: list[dict], scale: int, unit: str) -> str:
    head = "".join(f'<th class="n">{escape(stage_label(s))}</th>' for s in stages)
    rows = []
    for key, label in TERM_ROWS:
        cells = "".join(f'<td class="n">{s["gpu_bytes"][key] / scale:,.2f}</td>' for s in stages)
        rows.append(f'<tr{" class=total" if key == "total" else ""}><td>{label}</td>{cells}</tr>')
    rows.append("<tr><td>peak phase</td>" + "".join(f'<td class="n">{escape(s["peak_phase"])}</td>' for s in stages) + "</tr>")
    if any(s.get("peak_moment") for s in stages):  # where the timeline puts the peak (docs/json.md)
        rows.append("<tr><td>peak moment</td>" + "".join(f'<td class="n">{escape(str(s.get("peak_moment") or "-"))}</td>'
                                                          for s in stages) + "</tr>")
    fits = []
    for s in stages:
        if s.get("fits") is None:
            fits.append('<td class="n">n/a</td>')
        else:
            word, cls = ("fits", "yes") if s["fits"] else ("does not fit", "no")
            fits.append(f'<td class="n {cls}">{word}, {abs(s["headroom_bytes"]) / scale:,.2f} {"free" if s["fits"] else "over"}</td>')
    rows.append("<tr><td>fit</td>" + "".join(fits) + "</tr>")
    return f"<table><tr><th>per GPU ({escape(unit)})</th>{head}</tr>{''.join(rows)}</table>"


def _trace_table(steps: list[dict]) -> str:
    rows = "".join(
        f"<tr><td class=rule>{escape(s['rule'])}</td><td>{escape(s['question'])}</td><td>{escape(_observed(s))}</td>"
        f"<td><b>{escape(str(s['outcome']))}</b><br><span class=note>{escape(s['reason'])}</span></td></tr>"
        for s in steps)
    return f"<table><tr><th>rule</th><th>question</th><th>observed / threshold</th><th>outcome</th></tr>{rows}</table>"


def _observed(step: dict) -> str:
    def show(value) -> str:
        if step.get("unit") == "bytes" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return amount(value, GIB, "GiB")
        return "-" if value is None else str(value)
    unit = "" if step.get("unit") in (None, "bytes") else f" {step['unit']}"
    return f"{show(step.get('observed'))} / {show(step.get('threshold'))}{unit}"


def _findings_table(findings: list[dict]) -> str:
    if not findings:
        return '<p class="note">No findings.</p>'
    rows = "".join(
        f"<tr><td class=\"{escape(f['severity'])}\">{escape(f['severity'])}</td><td class=rule>{escape(f['rule'])}</td>"
        f"<td>{escape(f['message'])}{_where(f)}</td></tr>" for f in findings)
    return f"<table><tr><th>severity</th><th>rule</th><th>message</th></tr>{rows}</table>"


def _where(finding: dict) -> str:
    bits = [str(finding[k]) for k in ("file", "key") if finding.get(k)]
    if finding.get("line"):
        bits.append(f"line {finding['line']}")
    return f'<br><span class="note">{escape(", ".join(bits))}</span>' if bits else ""


def _short(path: str) -> str:
    return path.rsplit("/", 1)[-1]


SEVERITIES = ("error", "warning", "info")


def _verdicts(lines: list[tuple[str, dict]]) -> str:
    """The verdict lines (docs/json.md "verdict"), first on the page: green edge when all fit, red otherwise."""
    if not lines:
        return ""
    cls = "fit" if all(v["fits"] for _, v in lines) else "nofit"
    rows = "".join(f'<p><b>{escape(label)}</b>: <b class="{"yes" if v["fits"] else "no"}">'
                   f'{escape(v["summary"].split(":", 1)[0])}</b>:{escape(v["summary"].split(":", 1)[1])}</p>'
                   for label, v in lines)
    return f'<div class="verdict {cls}">{rows}</div>'


def _plan_facts(rec: dict, scale: int, unit: str) -> str:
    plan = rec["plan"]
    return (f"<p><b>{escape(rec['summary'])}</b></p><table>"
            f'<tr><td>memory</td><td class="n">{amount(plan["peak_bytes"], scale, unit)} of '
            f'{amount(plan["usable_bytes"], scale, unit)}, {amount(plan["headroom_bytes"], scale, unit)} free</td></tr>'
            f'<tr><td>step time</td><td class="n">{plan["step_time_s"]:,.2f} s</td></tr>'
            f'<tr><td>tokens/s per GPU</td><td class="n">{plan["tokens_per_s_per_gpu"]:,.0f}</td></tr>'
            f'<tr><td>MFU</td><td class="n">{plan["mfu"]:.1%}</td></tr>'
            f'<tr><td>step time vs ZeRO-0</td><td class="n">{plan["overhead_vs_zero0_pct"]:+.1f} %</td></tr></table>')


def _alternatives_table(plans: list[dict], scale: int, unit: str) -> str:
    head = "".join(f'<th class="n">{h}</th>' for h in ("mbs x GA", f"peak {unit}", f"free {unit}", "step s",
                                                        "tok/s/GPU", "MFU", "vs ZeRO-0"))
    rows = "".join(
        f'<tr><td>{escape(plan_label(p))}</td><td class="n">{p["micro_batch"]} x {p["grad_accum"]}</td>'
        f'<td class="n">{p["peak_bytes"] / scale:,.2f}</td><td class="n">{p["headroom_bytes"] / scale:,.2f}</td>'
        f'<td class="n">{p["step_time_s"]:,.2f}</td><td class="n">{p["tokens_per_s_per_gpu"]:,.0f}</td>'
        f'<td class="n">{p["mfu"]:.1%}</td><td class="n">{p["overhead_vs_zero0_pct"]:+.1f} %</td></tr>'
        for p in plans)
    return f"<table><tr><th>plan (first: recommended)</th>{head}</tr>{rows}</table>"


def _list(items: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{escape(str(a))}</li>" for a in items) + "</ul>"


def _section(title: str, inner: str) -> str:
    return f"<section><h2>{escape(title)}</h2>{inner}</section>"


def _page(title: str, head: str, sub: str, body: list[str], doc: dict, command: str | None = None) -> str:
    version = escape(str(doc.get("zeroplan_version", "?")))
    made = f'<p class="cmd">$ {escape(command)}</p>' if command else ""
    foot = (f"zeroplan {version}, JSON schema_version {escape(str(doc.get('schema_version', '?')))}: this page is "
            "drawn from the document --format json prints" + (f" for: {escape(command)}" if command else "") + ".")
    body = [made, *body]
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{escape(title)}</title><style>{CSS}</style></head>\n<body><h1>{escape(head)}</h1>"
            f'<p class="sub">{escape(sub)}</p>\n' + "\n".join(body) + f"\n<footer>{foot}</footer></body></html>\n")
