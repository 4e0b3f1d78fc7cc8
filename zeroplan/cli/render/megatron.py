"""The table of `zeroplan estimate --method megatron`."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from zeroplan.megatron.theory import MegatronEstimate
from zeroplan.megatron.view import assumptions
from zeroplan.units import Unit, format_bytes


def megatron_tables(found: tuple[MegatronEstimate, ...], units: Unit) -> list:
    a = found[0].args
    mesh = (f"{a.world_size} GPUs: tp {a.tensor_model_parallel_size} x pp {a.pipeline_model_parallel_size} x "
            f"cp {a.context_parallel_size} x dp {a.data_parallel_size}")
    if a.expert_model_parallel_size > 1:
        mesh += f", ep {a.expert_model_parallel_size} (etp {a.expert_tensor_parallel_size})"
    if a.virtual_pipeline_model_parallel_size:
        mesh += f", {a.virtual_pipeline_model_parallel_size} virtual stages per pipeline rank"
    mesh += ", sequence parallel" if a.sequence_parallel else ""
    table = Table(title=f"Megatron-LM theoretical memory, per GPU of the first pipeline stage ({mesh})",
                  title_justify="left")
    for column in ("optimizer", "weights + optimizer", "activations", "total"):
        table.add_column(column, justify="left" if column == "optimizer" else "right")
    for e in found:
        table.add_row("distributed (--stage 1)" if e.args.use_distributed_optimizer else "plain (--stage 0)",
                      format_bytes(e.weight_and_optimizer_bytes, units), format_bytes(e.activation_bytes, units),
                      format_bytes(e.total_bytes, units))
    notes = Text("\n".join(f"- {line}" for line in assumptions(found)), style="dim")
    return [table, notes]
