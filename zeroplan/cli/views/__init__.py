"""Plain-dict views of results: what --format json|yaml prints. Same data the tables are built from.

Pure: no rich, typer or yaml. Bytes stay integers; schema documented in docs/json.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zeroplan.memory.estimate import Estimate
from zeroplan.memory.stage import StageEstimate
from zeroplan.memory.terms import Term
from zeroplan.units import Unit
from zeroplan.version import __version__

if TYPE_CHECKING:  # DeepSpeed's tables and the grid load with the commands that show them (fast start-up)
    from zeroplan.deepspeed.estimator import DeepSpeedEstimate
    from zeroplan.memory.grid import GridResult, GridRow

SCHEMA_VERSION = 1


def _term(t: Term) -> dict:
    return {"name": t.name, "bytes": t.bytes, "phase": t.phase.value, "source": t.source}


def stage_view(s: StageEstimate) -> dict:
    return {
        "stage": int(s.stage),
        "offload_optimizer": s.offload_optimizer.value,
        "offload_param": s.offload_param.value,
        "gpu_bytes": s.gpu_bytes(),
        "model_states_bytes": s.states.total,
        "peak_phase": s.peak_phase.value,
        "phases": {"backward": s.backward_bytes, "step": s.step_bytes},
        "buffers": [_term(t) for t in s.buffers],
        "overhead": [_term(t) for t in s.overhead],
        "cpu_bytes_per_node": s.cpu_bytes_per_node,
        "cpu_terms_per_gpu": [_term(t) for t in s.cpu_terms],
        "nvme_bytes_per_node": s.nvme_bytes_per_node,
        "usable_bytes": s.usable_bytes,
        "fits": s.fits,
        "headroom_bytes": s.headroom_bytes,
        **engine_keys(s),
    }


def engine_keys(s: StageEstimate) -> dict:
    """`engine`, `engine_settings` and `notes` for the PyTorch engines; absent for DeepSpeed (its JSON is unchanged)."""
    if s.base.engine == "deepspeed":
        return {}
    return {"engine": s.base.engine,
            "engine_settings": [{"name": x.name, "value": x.value, "source": x.source} for x in s.base.settings],
            "notes": list(s.base.notes)}


def estimate_view(est: Estimate, unit: Unit) -> dict:
    """The estimate as JSON-ready data; bytes are integers, `units` only says how tables display them."""
    recipe = est.recipe
    acts = est.activations
    return {
        "schema_version": SCHEMA_VERSION,
        "zeroplan_version": __version__,
        "units": {"bytes": "B", "display": unit.label, "display_bytes": unit.bytes},
        "model": est.model.model_dump(mode="json"),
        "recipe": {
            "name": recipe.name,
            "precision": recipe.precision.value,
            "optimizer": recipe.optimizer.value,
            "fp32_grad_accum": recipe.fp32_grad_accum,
            "bytes_per_param": {
                "parameters": recipe.param_bytes,
                "gradients": recipe.grad_bytes,
                "optimizer_states": recipe.optimizer_bytes,
                "master_copy": recipe.master_bytes,
                "total": recipe.total_bytes,
            },
        },
        "setup": est.setup.model_dump(mode="json"),
        "parallelism": {**est.parallelism.model_dump(mode="json"), "dp": est.parallelism.dp,
                        "gpus_per_node": est.parallelism.gpus_per_node},
        "engine": est.scenario.engine.value,
        "deepspeed_knobs": est.knobs.model_dump(mode="json"),
        "hardware": est.hardware.model_dump(mode="json") if est.hardware else None,
        "activations": acts.model_dump(mode="json") if acts is not None else None,
        "stages": [stage_view(s) for s in est.stages],
        "assumptions": list(est.assumptions),
    }


def deepspeed_view(ds: DeepSpeedEstimate) -> dict:
    """`{"zero2": [...], "zero3": [...]}` with DeepSpeed's options and integer bytes per row."""
    return {
        "deepspeed_version": ds.deepspeed_version,
        "total_params": ds.total_params,
        "largest_layer_params": ds.largest_layer_params,
        "num_gpus_per_node": ds.num_gpus_per_node,
        "num_nodes": ds.num_nodes,
        "additional_buffer_factor": ds.additional_buffer_factor,
        "zero2": [r.model_dump(mode="json", exclude_none=True) for r in ds.zero2],
        "zero3": [r.model_dump(mode="json") for r in ds.zero3],
    }


def grid_view(result: GridResult) -> dict:
    from zeroplan.memory.grid import best_per_stage, gpus_per_node

    """The whole grid: the scenario, the axes, the cheapest fitting row per stage, then every row."""
    scn, axes = result.scenario, result.axes
    best = best_per_stage(result.rows)
    return {
        "schema_version": SCHEMA_VERSION,
        "zeroplan_version": __version__,
        "model": scn.model.model_dump(mode="json"),
        "recipe": scn.recipe.name,
        "setup": scn.setup.model_dump(mode="json", include={"precision", "optimizer", "fp32_grad_accum", "seq_len", "attention"}),
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
        "num_configurations": len(result.rows),
        "best": {str(stage): row._asdict() if row else None for stage, row in best.items()},
        "rows": [row._asdict() for row in result.rows],
    }


def grid_csv(rows: list[GridRow]) -> str:
    """One header line (GridRow's fields) and one line per configuration; fits is true/false, empty when unknown."""
    def cell(value: object) -> str:
        if value is None:
            return ""
        return ("true" if value else "false") if isinstance(value, bool) else str(value)

    from zeroplan.memory.grid import GridRow

    lines = [",".join(GridRow._fields)]
    lines += [",".join(map(cell, row)) for row in rows]
    return "\n".join(lines) + "\n"
