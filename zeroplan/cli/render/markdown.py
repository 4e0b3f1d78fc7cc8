"""Markdown rendering of the plain-dict views (for PR comments and docs). No arithmetic beyond formatting."""

from __future__ import annotations

from zeroplan.units import GIB

ROWS = ("parameters", "gradients", "optimizer_states", "activations", "buffers", "overhead", "total")


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / GIB:,.2f}"


def _stages_table(data: dict) -> list[str]:
    stages = data["stages"]
    head = ["per GPU (GiB)"] + [f"ZeRO-{s['stage']}" for s in stages]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key in ROWS:
        lines.append("| " + " | ".join([key.replace("_", " ")] + [_gib(s["gpu_bytes"][key]) for s in stages]) + " |")
    lines.append("| fits | " + " | ".join("-" if s["fits"] is None else ("yes" if s["fits"] else "**no**") for s in stages) + " |")
    return lines


def _rows_table(rows: list[dict]) -> list[str]:
    keys = list(rows[0]) if rows else []
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(f"{r[k]:,}" if isinstance(r[k], int) and not isinstance(r[k], bool) else str(r[k]) for k in keys) + " |" for r in rows]
    return lines


def to_markdown(data: dict) -> str:
    """A markdown document for an estimate view, an advice view, or any view holding lists of rows."""
    if "stages" in data and isinstance(data.get("recipe"), dict):  # the estimate view
        model = data["model"]
        lines = [f"### {model['name']}: {model['num_params']:,} parameters", "", f"Recipe: `{data['recipe']['name']}`", ""]
        lines += _stages_table(data)
        lines += ["", "Assumptions:", *[f"- {a}" for a in data["assumptions"]]]
        return "\n".join(lines)
    parts = []
    if isinstance(data.get("recommendation"), dict):  # the advice view
        parts += [f"**recommendation**: {data['recommendation']['summary']}", ""]
    for key, value in data.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            parts += [f"### {key}", "", *_rows_table(value), ""]
    return "\n".join(parts).rstrip()
