"""`zeroplan calibrate`'s tables, drawn from its JSON view (calibration.result.result_view): what it measured and
predicted, term by term, the suspect, and the calibration it fits."""

from __future__ import annotations

from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from zeroplan.printable import printable
from zeroplan.units import Unit, to_unit


def calibrate_renderables(view: dict, units: Unit) -> list:
    return [_terms(view, units), _verdict(view), _calibration(view)]


def _amount(value: int | None, units: Unit, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{to_unit(value, units):+,.2f}" if signed else f"{to_unit(value, units):,.2f}"


def _terms(view: dict, units: Unit) -> Table:
    record = view["record"]
    table = Table(title=f"predicted vs measured ({units.label}), ZeRO-{view['stage']} on {view['hardware']}; "
                        f"record: {printable(record['kind'])} ({printable(record['origin'])})", title_justify="left")
    for name in ("term", "predicted", "measured", "residual", "within", "how"):
        table.add_column(name, justify="right" if name in ("predicted", "measured", "residual") else "left")
    for row in view["terms"]:
        agrees = row["agrees"]
        mark = Text("-" if agrees is None else ("yes" if agrees else "no"),
                    style="dim" if agrees is None else ("green" if agrees else "red"))
        table.add_row(row["term"], _amount(row["predicted_bytes"], units), _amount(row["measured_bytes"], units),
                      _amount(row["residual_bytes"], units, signed=True), Text.assemble(mark, f" {row['tolerance']:.0%}"),
                      row["how"])
    return table


def _verdict(view: dict) -> Panel:
    lines = [f"most likely: {view['suspect']}"] + [f"- {printable(note)}" for note in view["record"]["notes"]]
    return Panel("\n".join(lines), title="residual", title_align="left")


def _calibration(view: dict) -> Panel:
    cal = view["calibration"]
    alloc = cal["allocator"]
    fraction = "profile's" if alloc["fraction"] is None else f"{alloc['fraction']:.2%}"
    context = "profile's" if cal["cuda_context_gib"] is None else f"{cal['cuda_context_gib']:.3f} GiB"
    body = (f"allocator fraction {fraction}, constant {alloc['constant_gib']:.3f} GiB; CUDA context {context}; "
            f"residual {cal['residual_gib']:.3f} GiB")
    where = f"saved to {printable(view['saved'])}" if view["saved"] else "not saved (--save FILE writes it)"
    return Panel(f"{body}\n{where}; apply with --calibration FILE", title="calibration", title_align="left")
