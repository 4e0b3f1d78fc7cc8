"""`zeroplan models` and `zeroplan hardware`: the presets with their counts, capacities and sources."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from zeroplan.cli.common import render, run, show
from zeroplan.cli.options import Format, FormatOpt
from zeroplan.hardware.presets import all_hardware
from zeroplan.models.presets import all_models
from zeroplan.validate import as_json

if TYPE_CHECKING:  # imported where used: `estimate` never loads the DeepSpeed-config code
    pass


def hardware_output() -> dict:
    return {"hardware": [as_json(hw) for hw in all_hardware()]}


def models_output() -> tuple[dict, Callable]:
    from zeroplan.models.params import count_params

    rows = []
    for spec in all_models():
        counts = count_params(spec.config)
        rows.append({
            "name": spec.name, "family": spec.architecture().family, "num_params": counts.num_params,
            "reference_params": spec.reference_params, "largest_layer_params": counts.largest_layer_params,
            "num_active_params": counts.num_active_params, "not_counted": list(counts.notes), "source": spec.source,
            "hf_id": spec.hf_id, "aliases": dict(spec.aliases),
        })
    from zeroplan.cli import render

    return {"models": rows}, lambda: render.models_table(rows)


def list_hardware(fmt: FormatOpt = Format.table) -> None:
    """List the hardware presets: capacity, TFLOPS, fabric, sources."""
    def go() -> None:
        data = hardware_output()
        show(lambda: data, lambda: [render.hardware_table(data["hardware"])], fmt)

    run(go, fmt)


def list_models(fmt: FormatOpt = Format.table) -> None:
    """List the model presets with their parameter counts and sources."""
    def go() -> None:
        data, table = models_output()
        show(lambda: data, lambda: [table()], fmt)

    run(go, fmt)
