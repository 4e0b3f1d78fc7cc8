"""Rich renderables for `zeroplan advise` and `zeroplan throughput`. No arithmetic beyond formatting.

The recommendation panel, the trace as a tree, the advisories, the alternatives table; the per-stage
throughput table and the global-batch sweep. cli/app.py owns the Console.
"""

from __future__ import annotations

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from zeroplan.advise.advice import Advice, Plan, Step
from zeroplan.advise.steps import describe
from zeroplan.cli.render import assumptions_panel
from zeroplan.memory.engines import strategy_label
from zeroplan.memory.setup import Engine
from zeroplan.units import Unit, format_bytes

OUTCOME_STYLES = {"yes": "green", "ok": "green", "no": "red", "none": "red", "warn": "yellow", "change": "yellow",
                  "corrected": "yellow", "skipped": "dim", "applies": "cyan"}


def _value(value, unit: str, display: Unit) -> str:
    """A step's observed or threshold value by its unit."""
    if value is None:
        return "-"
    if unit == "bytes":
        return format_bytes(value, display)
    if unit == "percent":
        return f"{value:.1f} %"
    if unit == "fraction":
        return f"{value:.0%}"
    if unit == "seconds":
        return f"{value:.3f} s"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _offload(plan: Plan) -> str:
    """'cpu/-': optimizer / parameter offload device, '-' for none."""
    return "/".join("-" if d.value == "none" else d.value for d in (plan.offload_optimizer, plan.offload_param))


def advice_verdict_line(advice: Advice, unit: Unit) -> list:
    """The line that leads: the recommendation fits with its headroom, or the closest and what breaks it."""
    from zeroplan.advise.verdict import advice_verdict
    from zeroplan.cli.render.verdict import verdict_text

    found = advice_verdict(advice)
    if found is None:
        return []
    label, verdict = found
    if advice.model_assumed:  # no --model: which one was planned belongs in the line that leads
        label = f"{advice.scenario.model.name} (assumed), {label}"
    return [verdict_text(label, verdict, unit)]


def recommendation_panel(advice: Advice, unit: Unit) -> Panel:
    rec, scn = advice.recommendation, advice.scenario
    model = f"{scn.model.name} (assumed)" if advice.model_assumed else scn.model.name  # no --model: the default
    title = (f"recommendation ({advice.policy.name} policy): {model} on {rec.gpus} x {scn.hardware.name}, "
             f"{rec.topology.value}, global batch {rec.global_batch}")
    if not rec.fits:
        lines = [Text("nothing fits", style="bold red"), Text(rec.summary)]
        if rec.change is not None:
            lines.append(Text(f"smallest change: {rec.change.description}", style="yellow"))
        return Panel(Group(*lines), title=title, title_align="left", border_style="red")
    plan, engine = rec.plan, rec.engine
    lines = [Text(describe(plan, engine) + f" x {rec.gpus} GPUs, " + _settings_words(advice), style="bold green")]
    if rec.summary != describe(plan, engine):
        lines.append(Text(f"{advice.policy.name}: {rec.summary}"))
    lines += [
        Text(f"memory: {format_bytes(plan.peak_bytes, unit)} of {format_bytes(plan.usable_bytes, unit)} per GPU, "
             f"{format_bytes(plan.headroom_bytes, unit)} free"
             + (f"; CPU {format_bytes(plan.cpu_bytes_per_node, unit)} per node" if plan.cpu_bytes_per_node else "")),
        Text(f"speed: {plan.step_time_s:.2f} s per step, {plan.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, MFU "
             f"{plan.mfu:.1%}, {plan.overhead_vs_zero0_pct:+.1f} % step time over ZeRO-0"),
        Text(f"precision {scn.setup.precision.value}, recipe {scn.recipe.name}", style="dim"),
    ]
    return Panel(Group(*lines), title=title, title_align="left", border_style="green")


def _settings_words(advice: Advice) -> str:
    """'overlap_comm on' (DeepSpeed) or the engine's settings: 'engine fsdp: sharding_strategy=FULL_SHARD'."""
    rec = advice.recommendation
    if rec.engine is Engine.deepspeed:
        return "overlap_comm " + ("on" if rec.plan.overlap_comm else "off")
    settings = ", ".join(f"{k}={v}" for k, v in rec.engine_settings.items())
    return f"engine {rec.engine.value}: {settings}"


def _step_node(tree: Tree, step: Step, unit: Unit) -> None:
    style = OUTCOME_STYLES.get(step.outcome, "")
    head = Text(f"[{step.rule}] ", style="bold") + Text(step.question + " ") + Text(step.outcome, style=f"bold {style}")
    node = tree.add(head)
    seen = _value(step.observed, step.unit, unit)
    against = "" if step.threshold is None else f" vs {_value(step.threshold, step.unit, unit)}"
    node.add(Text(f"{seen}{against}: {step.reason}"))
    node.add(Text(f"source: {step.source}", style="dim"))


def trace_tree(advice: Advice, unit: Unit) -> Tree:
    """Every question the policy asked, in order, with observed vs threshold, the reason and the source."""
    tree = Tree(Text(f"decision trace ({advice.policy.name} policy, {advice.policy.tree.value} tree)", style="bold"))
    for step in advice.trace:
        _step_node(tree, step, unit)
    return tree


def advisories_tree(advice: Advice, unit: Unit) -> Tree | None:
    if not advice.advisories:
        return None
    tree = Tree(Text("advisories: the article's other rules, applied and corrected", style="bold"))
    for step in advice.advisories:
        _step_node(tree, step, unit)
    return tree


def _stage_cell(advice: Advice, plan: Plan) -> str:
    """The stage in the engine's words, short enough for a column: 'FULL_SHARD', 'reshard=True', 'DDP + ZeRO'."""
    label = strategy_label(advice.scenario.engine, plan.stage)
    return label.replace("reshard_after_forward=", "reshard=").replace("ZeroRedundancyOptimizer", "ZeRO")


def alternatives_table(advice: Advice, unit: Unit) -> Table | Text:
    """Every stage x offload that fits, the recommendation first."""
    if not advice.alternatives:
        return Text("no stage x offload fits on these GPUs", style="red")
    table = Table(title="alternatives that fit, recommendation (*) first, then by preference; offload = "
                  "optimizer/parameters", title_justify="left")
    for col in ("", "stage", "offload", "ckpt", "mbs x GA", f"peak {unit.label}", f"free {unit.label}", "step s",
                "tok/s/GPU", "MFU", "vs ZeRO-0"):
        table.add_column(col, justify="left" if col in ("", "stage", "offload", "ckpt") else "right", no_wrap=True,
                         min_width=1 if not col else None)
    chosen = advice.recommendation.plan.key if advice.recommendation.plan else None
    for plan in advice.alternatives:
        table.add_row("*" if plan.key == chosen else "", _stage_cell(advice, plan), _offload(plan),
                      plan.checkpointing.value, f"{plan.micro_batch} x {plan.grad_accum}",
                      f"{plan.peak_bytes / unit.bytes:,.2f}", f"{plan.headroom_bytes / unit.bytes:,.2f}",
                      f"{plan.step_time_s:.2f}", f"{plan.tokens_per_s_per_gpu:,.0f}", f"{plan.mfu:.1%}",
                      f"{plan.overhead_vs_zero0_pct:+.1f} %")
    return table


def advice_renderables(advice: Advice, unit: Unit) -> list:
    parts = [*advice_verdict_line(advice, unit), recommendation_panel(advice, unit), trace_tree(advice, unit)]
    if (notes := advisories_tree(advice, unit)) is not None:
        parts.append(notes)
    parts += [alternatives_table(advice, unit), assumptions_panel(advice.assumptions)]
    return parts


def throughput_renderables(data: dict) -> list:
    """Per-stage speed, and the sweep over global batch when asked."""
    title = (f"{data['model']['name']} on {data['gpus']} x {data['hardware']} ({data['topology']}), seq "
             f"{data['setup']['seq_len']}, micro-batch {data['setup']['micro_batch']} x accumulation "
             f"{data['setup']['grad_accum']}, compute at {data['compute_efficiency']:.0%} of peak")
    table = Table(title=title, title_justify="left")
    for col in ("stage", "step s", "compute s", "comm s", "exposed s", "tok/s/GPU", "MFU", "vs ZeRO-0"):
        table.add_column(col, justify="right")
    for s in data["stages"]:
        table.add_row(f"ZeRO-{s['stage']}", f"{s['step_time_s']:.3f}", f"{s['compute_s']:.3f}", f"{s['comm_s']:.3f}",
                      f"{s['exposed_comm_s']:.3f}", f"{s['tokens_per_s_per_gpu']:,.0f}", f"{s['mfu']:.1%}",
                      f"{s['overhead_vs_zero0_pct']:+.1f} %")
    parts: list = [table]
    if data["sweep"] is not None:
        parts += _sweep_parts(data["sweep"])
    return parts + [assumptions_panel(data["assumptions"])]


def _sweep_parts(sweep: dict) -> list:
    table = Table(title=f"overhead vs ZeRO-0 by global batch (micro-batch up to {sweep['max_micro_batch']}: "
                  f"{sweep['max_micro_batch_from']})", title_justify="left")
    for col in ("global batch", "micro x accum", "tokens/micro-step", "ZeRO-1", "ZeRO-2", "ZeRO-3", "ZeRO-3 tok/s/GPU"):
        table.add_column(col, justify="right")
    for p in sweep["points"]:
        pct = p["overhead_vs_zero0_pct"]
        table.add_row(f"{p['global_batch']:,}", f"{p['micro_batch']} x {p['grad_accum']}",
                      f"{p['tokens_per_micro_step']:,}", *[f"{v:+.1f} %" for v in pct[1:]],
                      f"{p['tokens_per_s_per_gpu'][3]:,.0f}")
    at = sweep["crossing_global_batch"]
    line = (f"ZeRO-3 overhead <= {sweep['threshold_pct']:g} % from global batch {at:,} on" if at is not None
            else f"ZeRO-3 overhead stays above {sweep['threshold_pct']:g} % within the sweep")
    return [table, Text(line + "; accumulation does not amortize ZeRO-3's gathers, tokens per micro-step do",
                        style="dim")]
