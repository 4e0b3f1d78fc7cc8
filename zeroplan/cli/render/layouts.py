"""Rich renderables for `zeroplan advise --search-parallelism`: the chosen layout, the trace, the top alternatives.
No arithmetic beyond formatting; cli/app.py owns the Console."""

from __future__ import annotations

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from zeroplan.advise.layouts.result import LayoutAdvice, LayoutPlan
from zeroplan.cli.render import assumptions_panel
from zeroplan.cli.render.advice import _step_node
from zeroplan.units import Unit, format_bytes


def layout_panel(advice: LayoutAdvice, unit: Unit) -> Panel:
    scn, plan = advice.scenario, advice.recommendation
    model = f"{scn.model.name} (assumed)" if advice.model_assumed else scn.model.name
    title = (f"parallelism search: {model} on {advice.gpus} x {scn.hardware.name}, {advice.topology.value}, global "
             f"batch {advice.global_batch}, seq {scn.setup.seq_len}")
    c = advice.counts
    weighed = Text(f"weighed {c.layouts} meshes, {c.configurations} layout x stage x checkpointing combinations "
                   f"({c.evaluations} memory evaluations, {c.timed} timed, {c.pruned} pruned)", style="dim")
    if plan is None:
        return Panel(Group(Text("nothing fits", style="bold red"), Text(advice.trace[-1].reason), weighed),
                     title=title, title_align="left", border_style="red")
    lines = [
        Text(plan.describe(), style="bold green"),
        Text(f"memory: {format_bytes(plan.peak_bytes, unit)} of {format_bytes(plan.usable_bytes, unit)} on the "
             f"busiest rank, {format_bytes(plan.headroom_bytes, unit)} free ({plan.busiest})"),
        Text(f"speed: {plan.step_time_s:.2f} s per step, {plan.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, MFU "
             f"{plan.mfu:.1%}"),
        weighed,
    ]
    return Panel(Group(*lines), title=title, title_align="left", border_style="green")


def layout_trace(advice: LayoutAdvice, unit: Unit) -> Tree:
    tree = Tree(Text("search trace", style="bold"))
    for step in advice.trace:
        _step_node(tree, step, unit)
    return tree


def _mesh(plan: LayoutPlan) -> str:
    return f"{plan.tp} x {plan.pp} x {plan.cp}" + (f" ep {plan.ep}" if plan.ep > 1 else "")


def layouts_table(advice: LayoutAdvice, unit: Unit) -> Table | Text:
    plans = ([advice.recommendation] if advice.recommendation else []) + list(advice.alternatives)
    if not plans:
        return Text("no layout fits on these GPUs", style="red")
    table = Table(title="fastest configuration per mesh (tp x pp x cp), the choice (*) first", title_justify="left")
    for col in ("", "tp x pp x cp", "dp", "stack", "stage", "ckpt", "mbs x GA", f"peak {unit.label}", "step s",
                "tok/s/GPU", "MFU"):
        table.add_column(col, justify="left" if col in ("", "tp x pp x cp", "stack", "stage", "ckpt") else "right",
                         no_wrap=True, min_width=1 if not col else None)
    for i, p in enumerate(plans):
        table.add_row("*" if i == 0 and advice.recommendation else "", _mesh(p), str(p.dp),
                      p.stack.value + (" SP" if p.sequence_parallel else "") + (f" vpp {p.vpp}" if p.vpp > 1 else ""),
                      f"ZeRO-{int(p.stage)}",
                      p.checkpointing.value, f"{p.micro_batch} x {p.grad_accum}", f"{p.peak_bytes / unit.bytes:,.2f}",
                      f"{p.step_time_s:.2f}", f"{p.tokens_per_s_per_gpu:,.0f}", f"{p.mfu:.1%}")
    return table


def layout_renderables(advice: LayoutAdvice, unit: Unit) -> list:
    return [layout_panel(advice, unit), layout_trace(advice, unit), layouts_table(advice, unit),
            assumptions_panel(advice.assumptions)]
