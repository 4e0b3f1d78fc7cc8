"""--html on estimate, advise and check: one self-contained page from the command's own JSON document, written
as every output file is (never over a file unasked, never to a FIFO); the terminal timeline under the estimate;
and, where Chromium is installed, the page rendered headless with its charts laid out at a nonzero size."""

import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from zeroplan.cli.app import app
from zeroplan.cli.render import html as report
from zeroplan.cli.render.timeline import COLUMNS, bins, timeline_chart
from zeroplan.units import Unit

ROOT = Path(__file__).resolve().parent.parent
CATEGORIES = ["parameters", "gradients", "optimizer_states", "buffers", "activations", "temporaries"]


def invoke(runner, *args):
    return runner.invoke(app, [str(a) for a in args])


def estimate_doc(runner, *args) -> dict:
    res = invoke(runner, "estimate", "--model", "llama-3.1-8b", "--gpus", "8", *args, "-f", "json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def hand_timeline(stage: dict, layers: int = 4) -> dict:
    """A timeline in the shape docs/json.md gives stages[].timeline, built from the stage's own
    terms: activations saved layer by layer in the forward, freed in the backward as the gradients grow."""
    g = stage["gpu_bytes"]
    acts, grads, per = g["activations"], g["gradients"], g["activations"] // layers

    def event(name, phase, layer, **b):
        full = {c: b.get(c, 0) for c in CATEGORIES}
        full["parameters"], full["optimizer_states"] = g["parameters"], g["optimizer_states"]
        return {"name": name, "phase": phase, "layer": layer, "total": sum(full.values()), "bytes": full}

    events = [event("start of step", "start", None)]
    events += [event(f"forward of layer {i}", "forward", i, activations=per * (i + 1)) for i in range(layers)]
    events.append(event("end of forward", "forward", None, activations=acts))
    events += [event(f"backward of layer {i}", "backward", i, activations=per * (i + 1), buffers=g["buffers"],
                     gradients=grads * (layers - i) // layers) for i in reversed(range(layers))]
    events.append(event("optimizer step", "step", None, gradients=grads, temporaries=g["buffers"]))
    peak = max(range(len(events)), key=lambda i: (events[i]["total"], -i))
    return {"categories": CATEGORIES, "peak_index": peak, "peak_moment": events[peak]["name"],
            "peak_bytes": events[peak]["total"], "events": events}


def with_timelines(doc: dict) -> dict:
    for stage in doc["stages"]:
        stage["timeline"] = hand_timeline(stage)
    return doc


class Fetches(HTMLParser):
    """Every tag and attribute by which a browser could fetch something, from the parsed page (text is text)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []
        self.styles: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        self._in_style = tag == "style"
        if tag in ("script", "link", "img", "iframe", "object", "embed", "image", "use", "base"):
            self.found.append(tag)
        self.found += [f"{tag} {name}" for name, _ in attrs if name in ("src", "href", "xlink:href", "srcset", "data")]
        self.styles += [value or "" for name, value in attrs if name == "style"]

    def handle_data(self, data):
        if self._in_style:
            self.styles.append(data)


def assert_self_contained(page: str) -> None:
    """Nothing the browser could fetch: no script, link, image or frame tag, no src/href, no url() or @import in
    the CSS; and the CSP forbids whatever else might try."""
    parser = Fetches()
    parser.feed(page)
    assert parser.found == []
    assert not any("url(" in css or "@import" in css for css in parser.styles)
    assert "default-src 'none'; style-src 'unsafe-inline'" in page


def test_estimate_report_draws_the_stages_terms_and_assumptions(runner):
    doc = estimate_doc(runner)
    page = report.estimate_report(doc)
    assert_self_contained(page)
    assert page.count('class="seg"') == sum(1 for s in doc["stages"] for k, v in s["gpu_bytes"].items() if k != "total" and v > 0)
    for stage in doc["stages"]:
        assert f"{stage['gpu_bytes']['total'] / 2**30:,.2f}" in page  # the table's peak, as the terminal prints it
    for line in doc["assumptions"]:
        assert report.escape(line) in page
    for stage in doc["stages"]:
        stage.pop("timeline", None)
    assert "no timeline" in report.estimate_report(doc)  # a document without one: the page says so, draws none


def test_estimate_report_charts_a_timeline_with_its_peak_named():
    doc = {"zeroplan_version": "x", "schema_version": 1, "model": {"name": "m", "num_params": 10},
           "parallelism": {"gpus": 1}, "hardware": None, "engine": "none", "recipe": {"name": "r"},
           "setup": {"seq_len": 8, "micro_batch": 1, "checkpointing": "none", "attention": "flash"}, "assumptions": [],
           "stages": [{"stage": 0, "gpu_bytes": {"parameters": 4, "gradients": 4, "optimizer_states": 8, "activations": 6,
                                                 "buffers": 2, "overhead": 1, "total": 25}, "peak_phase": "backward",
                       "fits": None, "usable_bytes": None}]}
    doc["stages"][0]["timeline"] = tl = hand_timeline(doc["stages"][0], layers=3)
    page = report.estimate_report(doc)
    assert page.count('class="layer"') == 6  # one stacked area per category that holds bytes
    assert page.count('class="peak"') == 1 and f"{tl['peak_moment']}</text>" in page
    assert page.count('class="band"') == 4  # start, forward, backward, step


def test_timeline_points_follow_the_contract():
    tl = hand_timeline({"gpu_bytes": {"parameters": 4, "gradients": 4, "optimizer_states": 8, "activations": 8,
                                      "buffers": 2, "overhead": 1, "total": 27}})
    points, peak = report.timeline_points(tl)
    assert [p.label for p in points] == [e["name"] for e in tl["events"]]
    assert peak == tl["peak_index"] and points[peak].bytes == tl["peak_bytes"]


def test_terminal_timeline_marks_the_peak_column(runner):
    doc = with_timelines(estimate_doc(runner))
    rows = [(report.stage_label(s), s["timeline"], s["gpu_bytes"]["overhead"]) for s in doc["stages"]]
    from rich.console import Console

    console = Console(width=120, no_color=True)
    with console.capture() as out:
        console.print(timeline_chart(rows, Unit.gib))
    lines = out.get().splitlines()
    for label, tl, _ in rows:
        i = next(n for n, line in enumerate(lines) if line.startswith(label))
        bar, mark = lines[i], lines[i + 1]
        column = mark.index("^") - len(label.ljust(max(len(r[0]) for r in rows) + 1))
        events = tl["events"]
        assert column == next(c for c, span in enumerate(bins([e["total"] for e in events])) if tl["peak_index"] in span)
        assert f"at {tl['peak_moment']}" in mark
        assert sum(ch in "▁▂▃▄▅▆▇█" for ch in bar) == len(bins([e["total"] for e in events]))
    assert timeline_chart([("ZeRO-0", None, 0)], Unit.gib) is None


def test_terminal_timelines_share_one_scale_with_the_usable_line_and_name_no_colours(runner):
    """One scale for every stage (a full block is the largest event with its overhead, or usable); a column over
    usable is marked x; the caption names no colour, since output off a terminal has none."""
    from rich.console import Console

    from zeroplan.cli.render.timeline import BLOCKS

    doc = with_timelines(estimate_doc(runner))
    rows = [(report.stage_label(s), s["timeline"], s["gpu_bytes"]["overhead"]) for s in doc["stages"]]
    usable = doc["stages"][0]["usable_bytes"]
    top = max(max(e["total"] for e in tl["events"]) + over for _, tl, over in rows)
    console = Console(width=160, no_color=True)
    with console.capture() as out:
        console.print(timeline_chart(rows, Unit.gib, usable))
    text = out.get()
    assert not any(colour in text for colour in ("cyan", "magenta", "yellow", "red", "green"))
    lines = text.splitlines()
    width = max(len(r[0]) for r in rows) + 1
    for label, tl, over in rows:
        i = next(n for n, line in enumerate(lines) if line.startswith(label))
        events = tl["events"]
        for col, span in enumerate(bins([e["total"] for e in events])):
            value = max(events[k]["total"] for k in span) + over
            assert lines[i][width + col] == BLOCKS[max(1, round(value / top * (len(BLOCKS) - 1)))]
            assert (lines[i + 1][width + col] == "x") == (value > usable and tl["peak_index"] not in span)
    assert sum("█" in line for line in lines) == 1  # only the largest stage reaches the top


def test_bins_cover_every_event_once():
    for n in (1, 7, COLUMNS, COLUMNS + 1, 130):
        spans = bins(list(range(n)))
        assert [i for s in spans for i in s] == list(range(n)) and len(spans) == min(n, COLUMNS) and all(spans)


def test_estimate_html_written_refused_and_forced(runner, tmp_path):
    target = tmp_path / "r.html"
    res = invoke(runner, "estimate", "--params", "1e9", "--html", target)
    assert res.exit_code == 0, res.output
    assert f"wrote {target}" in res.stderr and "per GPU" in res.stdout
    page = target.read_text()
    assert_self_contained(page)
    res = invoke(runner, "estimate", "--params", "1e9", "--html", target)
    assert res.exit_code == 2 and "already exists; pass --force" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    target.write_text("mine\n")
    assert invoke(runner, "estimate", "--params", "1e9", "--html", target, "--force").exit_code == 0
    assert target.read_text().startswith("<!doctype html>")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_html_to_a_fifo_is_refused_even_with_force(runner, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    res = invoke(runner, "estimate", "--params", "1e9", "--html", fifo, "--force")
    assert res.exit_code == 2 and "named pipe (FIFO); refusing" in res.stderr
    assert "Traceback" not in res.output and len(res.stderr.strip().splitlines()) == 1


def test_html_usage_errors(runner, tmp_path):
    assert invoke(runner, "estimate", "--params", "1e9", "--html", "").exit_code == 2
    res = invoke(runner, "estimate", "--params", "1e9", "--method", "deepspeed", "--html", tmp_path / "x.html")
    assert res.exit_code == 2 and "--method deepspeed" in res.stderr and not (tmp_path / "x.html").exists()


def test_advise_html_has_the_trace(runner, tmp_path):
    target = tmp_path / "a.html"
    res = invoke(runner, "advise", "--params", "30e9", "--html", target, "-f", "json")
    assert res.exit_code == 0, res.output
    doc, page = json.loads(res.stdout), target.read_text()
    assert_self_contained(page)
    for step in doc["trace"]:
        assert report.escape(step["question"]) in page
    assert report.escape(doc["recommendation"]["summary"]) in page


def test_check_html_has_every_finding(runner, tmp_path):
    plans = sorted(str(p) for p in (ROOT / "configs" / "plans").glob("*.yaml"))
    target = tmp_path / "c.html"
    res = invoke(runner, "check", *plans, "--html", target, "-f", "json")
    doc, page = json.loads(res.stdout), target.read_text()
    assert res.exit_code == doc["exit_code"]
    assert_self_contained(page)
    findings = [f for p in doc["plans"] for f in p["findings"]]
    assert findings and all(report.escape(f["message"]) in page for f in findings)
    assert page.count('class="seg"') >= sum(1 for p in doc["plans"] if p.get("memory"))


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PROBE = """<script>document.body.setAttribute('data-boxes', JSON.stringify(
  [...document.querySelectorAll('svg')].map(s => [s.getBoundingClientRect().width, s.getBoundingClientRect().height,
    [...s.querySelectorAll('rect.seg, polygon.layer, circle.peak')].map(e => e.getBoundingClientRect().width * e.getBoundingClientRect().height)])));
</script></body>"""


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_chromium_lays_the_charts_out(runner, tmp_path):
    """Headless Chromium renders the page; a probe script (allowed into this copy only, the page itself has none and
    its CSP forbids scripts) reads each SVG's and each drawn shape's box from the laid-out page."""
    page = report.estimate_report(with_timelines(estimate_doc(runner)))
    probe = page.replace("default-src 'none';", "default-src 'none'; script-src 'unsafe-inline';").replace("</body>", PROBE)
    path = tmp_path / "probe.html"
    path.write_text(probe)
    out = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", path.as_uri()],
                         capture_output=True, text=True, timeout=120, check=True)
    boxes = json.loads(re.search(r'data-boxes="([^"]*)"', out.stdout).group(1).replace("&quot;", '"'))
    assert len(boxes) == 1 + 4  # the stacked bars, then one timeline per stage
    for width, height, shapes in boxes:
        assert width > 300 and height > 50 and shapes and all(area > 0 for area in shapes)


def test_text_from_input_files_is_escaped():
    doc = {"summary": {"plans": 1, "failed": 1, "error": 1, "warning": 0, "info": 0}, "exit_code": 1, "strict": False,
           "plans": [{"file": "<img src=x>.yaml", "status": "fail", "run": None, "memory": None,
                      "findings": [{"rule": "r", "severity": "error", "message": "<script>alert(1)</script>",
                                    "file": "a\"b", "key": None, "line": 3}]}]}
    page = report.check_report(doc)
    assert_self_contained(page)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;img src=x&gt;.yaml" in page


def test_the_fetch_check_can_fail():
    parser = Fetches()
    parser.feed('<link rel=stylesheet href="https://cdn.example/x.css"><svg><image href="a.png"/></svg>'
                '<style>body{background:url(a.png)}</style>')
    assert parser.found == ["link", "link href", "image", "image href"] and "url(" in parser.styles[0]


# --- the page worth sending: verdict first, shared axes, the command line, advise's speed, check's failures first ---


def test_every_page_leads_with_its_verdict_and_names_its_command_and_version(runner, tmp_path):
    from zeroplan.version import __version__

    cases = {"estimate": ["--model", "llama-3.1-8b"], "advise": ["--model", "qwen3-32b", "--seq-len", "4096"],
             "check": ["configs/plans/gemma2-9b-zero0-8xh100.yaml", "configs/plans/multinode-zero3.yaml"]}
    for command, args in cases.items():
        target = tmp_path / f"{command}.html"
        invoke(runner, command, *args, "--html", target)
        page = target.read_text()
        body = page[page.index("<body>"):]
        assert body.index('class="verdict') < body.index("<h2>")  # before the first section
        assert f'<p class="cmd">$ zeroplan {command}</p>' in page and f"zeroplan {__version__}" in page
    check = (tmp_path / "check.html").read_text()
    assert check.index("gemma2-9b-zero0-8xh100.yaml</b>: <b class=\"no\">does not fit") < check.index("multinode")


def test_bars_share_one_axis_and_break_where_one_stage_dwarfs_the_rest():
    from zeroplan.cli.render.svg import BREAK_RATIO, Bar, axis_top, stacked_bars

    usable = 80 * 2**30
    even = [Bar("a", {"parameters": 60 * 2**30}, 60 * 2**30, usable), Bar("b", {"parameters": 40 * 2**30}, 40 * 2**30, usable)]
    assert axis_top(even) == (usable, False) and "axis broken" not in stacked_bars(even, 2**30, "GiB")
    huge = [Bar("zero0", {"parameters": 643 * 2**30}, 643 * 2**30, usable), *even]
    top, broken = axis_top(huge)
    assert broken and 643 > BREAK_RATIO * 80 and usable < top < 643 * 2**30
    svg = stacked_bars(huge, 2**30, "GiB")
    assert svg.count('class="brk"') == 1 and "643.00 GiB" in svg and "(axis broken)" in svg
    ticks = [float(t) for t in re.findall(r'class="tick" x="[\d.]+" y="[\d.]+" text-anchor="middle">([\d,.]+)<', svg)]
    assert ticks[0] == 0 and len({b - a for a, b in zip(ticks, ticks[1:])}) == 1  # round, evenly spaced


def test_the_timelines_share_one_y_axis(runner):
    doc = with_timelines(estimate_doc(runner))
    page = report.estimate_report(doc)
    tops = re.findall(r'<text class="tick" x="[\d.]+" y="52.00" text-anchor="end">([\d,.]+)</text>', page)
    assert len(tops) == len(doc["stages"]) and len(set(tops)) == 1


def test_the_advise_page_has_step_time_mfu_and_the_alternatives(runner, tmp_path):
    target = tmp_path / "a.html"
    doc = json.loads(invoke(runner, "advise", "--model", "qwen3-32b", "--seq-len", "4096", "--html", target,
                            "-f", "json").stdout)
    page, plan = target.read_text(), doc["recommendation"]["plan"]
    assert f"{plan['step_time_s']:,.2f} s" in page and f"{plan['mfu']:.1%}" in page
    assert page.count("<tr><td>ZeRO-3 mb") == len({report.plan_label(p) for p in doc["alternatives"]})


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_screenshots_at_1400_px(tmp_path):
    """scripts/report_screenshots.py, as it regenerates docs/shots/ and docs/report.png, into a temporary folder."""
    import importlib.util
    import struct

    spec = importlib.util.spec_from_file_location("shots", Path(__file__).resolve().parent.parent / "scripts" /
                                                  "report_screenshots.py")
    shots = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shots)
    written = shots.shoot(tmp_path / "shots", readme=tmp_path / "report.png")
    assert [p.name for p in written] == ["estimate.png", "report.png", "advise.png", "check.png"]
    for path in written:
        head = path.read_bytes()[:24]
        assert head[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">I", head[16:20])[0] == shots.WIDTH
