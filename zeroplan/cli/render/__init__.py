"""Rich renderables for the CLI. No arithmetic beyond formatting; cli/common.py owns the Console."""

from __future__ import annotations

import re

from typing import TYPE_CHECKING

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from zeroplan.memory.estimate import Estimate
from zeroplan.memory.stage import StageEstimate
from zeroplan.units import Unit, format_bytes, to_unit

if TYPE_CHECKING:  # loaded by the commands that show them (fast start-up)
    from zeroplan.deepspeed.estimator import DeepSpeedEstimate
    from zeroplan.memory.grid import GridResult, GridRow

BAR_WIDTH = 40  # characters of the widest stacked bar
BAR_PARTS = (  # (gpu_bytes key, glyph, style) drawn left to right
    ("parameters", "P", "cyan"),
    ("gradients", "G", "magenta"),
    ("optimizer_states", "O", "yellow"),
    ("activations", "A", "green"),
    ("buffers", "B", "blue"),
    ("overhead", "x", "red"),
)


def _stage_label(s: StageEstimate) -> str:
    label = f"ZeRO-{int(s.stage)}"
    offload = [f"{k}={v.value}" for k, v in (("opt", s.offload_optimizer), ("param", s.offload_param)) if v.value != "none"]
    return label + (f" ({', '.join(offload)})" if offload else "")


def _fits_text(s: StageEstimate, unit: Unit) -> Text:
    if s.fits is None:
        return Text("n/a (no hardware)", style="dim")
    if s.fits:
        return Text(f"fits, {format_bytes(s.headroom_bytes, unit)} free", style="bold green")
    return Text(f"no: {format_bytes(-s.headroom_bytes, unit)} over", style="bold red")


def estimate_table(est: Estimate, unit: Unit) -> Table:
    """Stages side by side: model states, activations, buffers, overhead, peak, fit."""
    tuning = est.scenario.tuning
    trains = f" ({tuning.spec.mode}: {tuning.num_trainable:,} trainable)" if tuning is not None else ""
    title = f"{est.model.name}: {est.model.num_params:,} params{trains} on {est.parallelism.gpus} GPU(s)"
    if est.hardware:
        title += f" x {est.hardware.name} ({est.hardware.memory_gib:g} GiB)"
    table = Table(title=title, title_justify="left", min_width=len(title))
    table.add_column(f"per GPU ({unit.label})", no_wrap=True)
    for s in est.stages:
        table.add_column(_stage_label(s), justify="right")
    views = [s.gpu_bytes() for s in est.stages]

    def row(label: str, values: list[int], style: str = "") -> None:
        table.add_row(label, *[f"{to_unit(v, unit):,.2f}" for v in values], style=style)

    row("parameters", [v["parameters"] for v in views])
    row("gradients", [v["gradients"] for v in views])
    row("optimizer states", [v["optimizer_states"] for v in views])
    row("= model states", [v["parameters"] + v["gradients"] + v["optimizer_states"] for v in views], style="bold")
    row("activations", [v["activations"] for v in views])
    row("buffers", [v["buffers"] for v in views])
    row("overhead", [v["overhead"] for v in views])
    row("= peak", [v["total"] for v in views], style="bold")
    table.add_row("peak phase", *[s.peak_phase.value for s in est.stages], style="dim")
    table.add_row("peak moment", *[s.peak_moment for s in est.stages], style="dim")
    if any(s.cpu_bytes_per_node for s in est.stages):
        row("CPU per node", [s.cpu_bytes_per_node for s in est.stages])
    if any(s.nvme_bytes_per_node for s in est.stages):
        row("NVMe per node", [s.nvme_bytes_per_node for s in est.stages])
    table.add_row("fit", *[_fits_text(s, unit) for s in est.stages])
    return table


def buffers_table(est: Estimate, unit: Unit) -> Table | None:
    """Every engine buffer and overhead line per stage, with its phase and source."""
    # Each stage's lines read once: reserved_beyond_peak walks the stage's timeline on every read.
    lines = [(s.buffers, s.overhead, s.reserved_beyond_peak) for s in est.stages]
    names: dict[str, str] = {}
    for i, group in enumerate(("buffers", "overhead", "reserved_beyond_peak")):
        for stage_lines in lines:
            for t in stage_lines[i]:
                names.setdefault(t.name, "reserved, not in the peak" if group == "reserved_beyond_peak" else t.phase.value)
    if not names:
        return None
    table = Table(title="buffers and overhead", title_justify="left", show_edge=False)
    table.add_column("term", no_wrap=True)
    for s in est.stages:
        table.add_column(_stage_label(s), justify="right")
    table.add_column("alive", style="dim")
    for name, where in names.items():
        cells = []
        for stage_lines in lines:
            match = [t.bytes for group in stage_lines for t in group if t.name == name]
            cells.append(f"{to_unit(match[0], unit):,.2f}" if match else "-")
        table.add_row(name, *cells, where)
    return table


def stacked_bars(est: Estimate, unit: Unit) -> Group:
    """One bar per stage, segment lengths proportional to each term; the widest bar is BAR_WIDTH."""
    widest = max(s.total for s in est.stages) or 1
    lines = []
    for s in est.stages:
        bar = Text()
        for key, glyph, style in BAR_PARTS:
            size = s.gpu_bytes()[key]
            n = max(1, round(size / widest * BAR_WIDTH)) if size else 0  # a part that is there is never dropped
            bar.append(glyph * n, style=style)
        label = f"{_stage_label(s):<12} "
        lines.append(Text(label) + bar + Text(f" {format_bytes(s.total, unit)}"))
    legend = "  ".join(f"{g}={k.replace('_', ' ')}" for k, g, _ in BAR_PARTS)
    lines.append(Text(legend, style="dim"))
    return Group(*lines)


def assumptions_panel(assumptions: tuple[str, ...] | list[str]) -> Panel:
    return Panel("\n".join(f"- {a}" for a in assumptions), title="assumptions", title_align="left", border_style="dim")


ACTIVATION_LINES = (  # (ActivationEstimate field, label); the lines sum to total_bytes
    ("layers_bytes", "layers"),
    ("recompute_bytes", "one layer recomputed"),
    ("embedding_bytes", "embedding output"),
    ("final_norm_bytes", "final norm, LM head input"),
    ("logits_bytes", "logits (b x s x V)"),
    ("logit_softcap_bytes", "logit soft-capping"),
    ("loss_bytes", "loss (fp32 copy, log-softmax, labels)"),
)
LOSS_LABELS = {  # --loss -> what its loss line holds (docs/activations.md, loss variants)
    "no-upcast": "loss (log-softmax, labels)",
    "chunked": "loss (log-softmax, one chunk's fp32 copy, labels)",
    "liger": "loss (Liger grad_input, grad_weight, chunk)",
}


def activations_table(est: Estimate, unit: Unit) -> Table | None:
    """The activation lines of one micro-step (the same at every stage), with the setup they assume."""
    acts = est.activations
    if acts is None:
        return None
    setup = est.setup
    title = (f"activations per GPU: seq-len {setup.seq_len}, micro-batch {setup.micro_batch}, "
             f"checkpointing {setup.checkpointing_label}, attention {setup.attention.value}, loss {setup.loss.value}")
    table = Table(title=title, title_justify="left", show_edge=False, min_width=len(title))
    table.add_column("line", no_wrap=True)
    table.add_column(unit.label, justify="right")
    for field, label in ACTIVATION_LINES:
        if field == "loss_bytes":
            label = LOSS_LABELS.get(acts.loss, label)
        if (value := getattr(acts, field)):
            table.add_row(label, f"{to_unit(value, unit):,.2f}")
    table.add_row("= activations", f"{to_unit(acts.total_bytes, unit):,.2f}", style="bold")
    if acts.carried_bytes:  # --training-loop litgpt (memory.activations.loop): not in the micro-step's own total
        table.add_row("+ the previous micro-step's, alive until this forward returns (training loop)",
                      f"{to_unit(acts.carried_bytes, unit):,.2f}", style="dim")
    return table


def engine_table(est: Estimate) -> Table | None:
    """The engine's own settings per stage (PyTorch engines), each a line with its source, then per-stage notes."""
    if not any(s.base.settings for s in est.stages):
        return None
    table = Table(title=f"engine: {est.stages[0].base.engine}", title_justify="left", show_edge=False)
    table.add_column("stage", no_wrap=True)
    table.add_column("setting", no_wrap=True)
    table.add_column("value")
    table.add_column("source", style="dim")
    for s in est.stages:
        for setting in s.base.settings:
            table.add_row(_stage_label(s), setting.name, setting.value, setting.source)
        for note in s.base.notes:
            table.add_row(_stage_label(s), "note", note, "")
    return table


def timeline_part(est: Estimate, unit: Unit) -> Group | None:
    """The step's timeline per stage (cli/render/timeline.py), drawn from the stages' JSON views (docs/json.md,
    stages[].timeline) as --format json prints them; None when they carry none."""
    from zeroplan.cli.render.timeline import timeline_chart
    from zeroplan.memory.view import stage_view

    views = [(s, stage_view(s)) for s in est.stages]
    usable = est.stages[0].usable_bytes if est.stages else None
    return timeline_chart([(_stage_label(s), v.get("timeline"), v["gpu_bytes"]["overhead"]) for s, v in views], unit,
                          usable)


def estimate_renderables(est: Estimate, unit: Unit) -> list:
    from zeroplan.cli.render.verdict import stage_lines

    parts = [*stage_lines(est, _stage_label, unit), estimate_table(est, unit), stacked_bars(est, unit)]
    if (steps := timeline_part(est, unit)) is not None:
        parts.append(steps)
    if (acts := activations_table(est, unit)) is not None:
        parts.append(acts)
    if (eng := engine_table(est)) is not None:
        parts.append(eng)
    if (buf := buffers_table(est, unit)) is not None:
        parts.append(buf)
    parts.append(assumptions_panel(est.assumptions))
    return parts


def deepspeed_tables(ds: DeepSpeedEstimate) -> list:
    """DeepSpeed's two `_all_cold` tables, printed as DeepSpeed prints them (2^30 units, labelled GiB here)."""
    header = (
        f"DeepSpeed {ds.deepspeed_version} estimators: {ds.num_nodes} node(s), {ds.num_gpus_per_node} GPU(s) per node; "
        f"{int(ds.total_params / 1e6)}M total params, {int(ds.largest_layer_params / 1e6)}M largest layer params"
    )
    out: list = [Text(header)]
    for name, rows in (("ZeRO-2", ds.zero2), ("ZeRO-3", ds.zero3)):
        table = Table(title=f"{name} model states (additional_buffer_factor={ds.additional_buffer_factor:g})", title_justify="left")
        table.add_column("per CPU (GiB)", justify="right")
        table.add_column("per GPU (GiB)", justify="right")
        table.add_column("options")
        for r in rows:
            opts = f"offload_optimizer={r.offload_optimizer}"
            if r.offload_param is not None:
                opts = f"offload_param={r.offload_param}, {opts}, zero_init={int(r.zero_init)}"
            table.add_row(f"{r.cpu_bytes / 2**30:.2f}", f"{r.gpu_bytes / 2**30:.2f}", opts)
        out.append(table)
    out.append(Text("DeepSpeed prints these 2^30-byte values labelled 'GB'; they are GiB. Model states only.", style="dim"))
    return out


def _lineage(name: str) -> str:
    """A preset name's leading word (qwen of qwen2.5-7b, gemma of gemma2-9b): the rows one rule groups."""
    return re.match(r"[a-z]*", name).group(0) or name


def models_table(rows: list[dict]) -> Table:
    """The model presets, one row each, grouped by name (qwen, llama, gemma, ...: a rule between groups), each group by
    family, then smallest first."""
    table = Table(title=f"model presets: {len(rows)} (Hub ids, aliases and sources: zeroplan models -f json)",
                  title_justify="left")
    for col in ("name", "family", "params", "active", "largest layer", "source states"):
        table.add_column(col, justify="left" if col in ("name", "family") else "right")
    ordered = sorted(rows, key=lambda r: (_lineage(r["name"]), r["family"], r["num_params"], r["name"]))
    for i, r in enumerate(ordered):
        ref = r["reference_params"]
        last = i + 1 == len(ordered) or _lineage(ordered[i + 1]["name"]) != _lineage(r["name"])
        table.add_row(r["name"], r["family"], f"{r['num_params']:,}", f"{r['num_active_params']:,}",
                      f"{r['largest_layer_params']:,}", "-" if ref is None else f"{ref:,}", end_section=last)
    return table


def hardware_table(rows: list[dict]) -> Table:
    """The hardware presets, one row each."""
    table = Table(title="hardware presets", title_justify="left")
    for col in ("name", "GiB", "bf16 TFLOPS", "HBM TB/s", "per node", "fabric", "busbw GB/s", "NIC GB/s/GPU"):
        table.add_column(col, justify="left" if col in ("name", "fabric") else "right")
    for r in rows:
        table.add_row(r["name"], f"{r['memory_gib']:g}", f"{r['bf16_tflops']:g}", f"{r['hbm_bandwidth_tbps']:g}",
                      str(r["gpus_per_node"]), r["intra_node_fabric"], f"{r['intra_node_busbw_gbps']:g}",
                      f"{r['nic_gbps_per_gpu']:g}")
    return table


def capacity_renderables(data: dict, unit: Unit) -> list:
    """The capacity answers per stage."""
    title = (f"{data['model']['name']} on {data['hardware']}: {data['gpus']} GPU(s), "
             f"seq {data['setup']['seq_len']}, micro-batch {data['setup']['micro_batch']}")
    table = Table(title=title, title_justify="left")
    tuned = bool(data.get("finetune"))
    columns = ("largest preset that fits", "largest LoRA rank") if tuned else ("largest model (params)",)
    for col in ("stage", "largest micro-batch", "fewest GPUs", *columns):
        table.add_column(col, justify="right")
    cap = data["search"]
    for s in data["stages"]:
        mb = s["max_micro_batch"]
        mb_text = "n/a (bare count)" if mb is None else "none fits" if mb == 0 else (f">= {mb}" if mb == cap["max_micro_batch"] else str(mb))
        gpus = "more than %d" % cap["max_gpus"] if s["min_gpus"] is None else f"{s['min_gpus']} ({s['min_nodes']} node(s))"
        at_least = ">= " if s["max_model_layers"] is not None and s["max_model_layers"] >= cap["max_model_layers"] else ""
        model = "-" if s["max_model_params"] is None else f"{at_least}{s['max_model_params'] / 1e9:,.2f} B"
        if tuned:
            model = "-" if s["largest_preset"] is None else f"{s['largest_preset']} ({s['largest_preset_params'] / 1e9:,.2f} B)"
            rank = s["max_lora_rank"]
            extra = ["-" if rank is None else (">= " if rank >= cap["max_lora_rank"] else "") + str(rank)]
        else:
            extra = []
        table.add_row(f"ZeRO-{s['stage']}", mb_text, gpus, model, *extra)
    if tuned:
        return [table, Text(f"{data['finetune']}: the same mode on every RMSNorm-decoder preset, at micro-batch "
                            f"{data['setup']['micro_batch']} on {data['gpus']} GPU(s)", style="dim")]
    note = Text("largest model: the same architecture with more or fewer layers (embeddings and width fixed), "
                f"at micro-batch {data['setup']['micro_batch']} on {data['gpus']} GPU(s)", style="dim")
    return [table, note]


def _offload_text(row: GridRow) -> str:
    parts = [f"{k}={v}" for k, v in (("opt", row.offload_optimizer), ("param", row.offload_param)) if v != "none"]
    return ", ".join(parts) or "none"


def grid_summary(result: GridResult, unit: Unit) -> list:
    """Per stage: how many configurations were evaluated, how many fit, and the cheapest that fits."""
    from zeroplan.memory.grid import best_per_stage

    scn, rows = result.scenario, result.rows
    where = f"{scn.hardware.name} ({scn.hardware.memory_gib:g} GiB)" if scn.hardware else "no hardware profile"
    table = Table(title=f"{scn.model.name} on {where}: {len(rows):,} configurations, seq {scn.setup.seq_len}",
                  title_justify="left")
    for col in ("stage", "configs", "fit", "GPUs", "offload", "checkpointing", "micro-batch", f"peak ({unit.label})",
                f"free ({unit.label})"):
        table.add_column(col, justify="left" if col in ("offload", "checkpointing") else "right")
    counts: dict[int, list[int]] = {}
    for row in rows:
        seen = counts.setdefault(row.stage, [0, 0])
        seen[0] += 1
        seen[1] += bool(row.fits)
    for stage, best in best_per_stage(rows).items():
        total, fitting = counts[stage]
        fit = "n/a" if scn.hardware is None else f"{fitting:,}"
        if best is None:
            table.add_row(f"ZeRO-{stage}", f"{total:,}", fit, "-", "-", "-", "-", "-", "-")
            continue
        table.add_row(f"ZeRO-{stage}", f"{total:,}", fit, f"{best.gpus} ({best.nodes} node(s))", _offload_text(best),
                      best.checkpointing, str(best.micro_batch), f"{to_unit(best.total_bytes, unit):,.2f}",
                      f"{to_unit(best.headroom_bytes, unit):,.2f}")
    note = Text("cheapest fitting: fewest GPUs, then no offload over CPU over NVMe, then less recomputation, then the "
                "largest micro-batch. The whole grid: --format csv or json.", style="dim")
    if result.skipped_gpu_counts:
        skipped = ", ".join(map(str, result.skipped_gpu_counts))
        per_node = scn.hardware.gpus_per_node if scn.hardware else scn.parallelism.gpus_per_node
        note.append(f"\nskipped GPU counts {skipped}: they do not split evenly over nodes of {per_node}.")
    for why in result.refused:
        note.append(f"\n{why}")
    if scn.tuning is not None:
        note.append(f"\nfine-tuning mode {scn.tuning.spec.mode}: {scn.tuning.num_trainable:,} of "
                    f"{scn.tuning.num_params:,} parameters train (docs/finetune.md).")
    return [table, note]
