"""Plain-dict views of the CLI-only results (DeepSpeed's estimator, the grid): what --format json|yaml|csv
prints. The estimate's view is memory/view.py, the advice's advise/view.py. Same data the tables are built from.

Pure: no rich, typer or yaml. Bytes stay integers; schema documented in docs/json.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from zeroplan.validate import as_json
from zeroplan.version import SCHEMA_VERSION, __version__

if TYPE_CHECKING:  # DeepSpeed's tables and the grid load with the commands that show them (fast start-up)
    from zeroplan.deepspeed.estimator import DeepSpeedEstimate
    from zeroplan.memory.grid import GridResult, GridRow


def deepspeed_view(ds: DeepSpeedEstimate) -> dict:
    """`{"zero2": [...], "zero3": [...]}` with DeepSpeed's options and integer bytes per row."""
    return {
        "deepspeed_version": ds.deepspeed_version,
        "total_params": ds.total_params,
        "largest_layer_params": ds.largest_layer_params,
        "num_gpus_per_node": ds.num_gpus_per_node,
        "num_nodes": ds.num_nodes,
        "additional_buffer_factor": ds.additional_buffer_factor,
        "zero2": [as_json(r, exclude_none=True) for r in ds.zero2],
        "zero3": [as_json(r) for r in ds.zero3],
    }


def grid_header(result: GridResult) -> dict:
    """The grid's document without its rows and their summary: the scenario and the axes."""
    from zeroplan.memory.grid import gpus_per_node
    from zeroplan.memory.view import finetune_view

    scn, axes = result.scenario, result.axes
    return {
        "schema_version": SCHEMA_VERSION,
        "zeroplan_version": __version__,
        "model": as_json(scn.model),
        "recipe": scn.recipe.name,
        "setup": as_json(scn.setup, include={"precision", "optimizer", "fp32_grad_accum", "seq_len", "attention"}),
        "hardware": scn.hardware.name if scn.hardware else None,
        "usable_bytes": scn.usable_bytes,
        "gpus_per_node": gpus_per_node(scn),
        "axes": {
            "stages": [int(s) for s in axes.stages],
            "gpu_counts": list(axes.gpu_counts),
            "micro_batches": list(axes.micro_batches),
            "checkpointing": [c.value for c in axes.checkpointings],
            "offload_optimizer": [d.value for d in axes.offload_optimizers],
            "offload_param": [d.value for d in axes.offload_params],
        },
        "skipped_gpu_counts": list(result.skipped_gpu_counts),  # not evenly split over the nodes they need
        "refused_stages": list(result.refused),  # stages a fine-tune's base cannot run at, and why
        "finetune": finetune_view(scn.tuning),  # null for full training
    }


def grid_json(result: GridResult) -> Iterator[str]:
    """The whole grid as one JSON document, written as its rows are made (constant memory for any size): the
    header, every row, then num_configurations and the cheapest fitting row per stage (best_per_stage)."""
    import json

    from zeroplan.memory.grid import keep_best

    header = json.dumps(grid_header(result), indent=2)
    yield header[:-2] + ',\n  "rows": ['
    best: dict[int, GridRow | None] = {}
    count = 0
    for row in result.rows:
        yield ("," if count else "") + "\n    " + json.dumps(row._asdict())
        count += 1
        keep_best(best, row)
    tail = {"num_configurations": count, "best": {str(s): r._asdict() if r else None for s, r in best.items()}}
    yield "\n  ],\n" + json.dumps(tail, indent=2)[2:] + "\n"


def grid_csv(rows: Iterable[GridRow]) -> Iterator[str]:
    """One header line (GridRow's fields) and one line per configuration, each made as it is read; fits is
    true/false, empty when unknown."""
    def cell(value: object) -> str:
        if value is None:
            return ""
        return ("true" if value else "false") if isinstance(value, bool) else str(value)

    from zeroplan.memory.grid import GridRow

    yield ",".join(GridRow._fields) + "\n"
    for row in rows:
        yield ",".join(map(cell, row)) + "\n"
