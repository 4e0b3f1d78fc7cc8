"""The JSON of `zeroplan estimate --method megatron`: Megatron's arguments, its two figures per optimizer, and
the assumptions its formula makes. Pure: no rich, typer or yaml. Schema: docs/json.md."""

from __future__ import annotations

from dataclasses import asdict

from zeroplan.megatron.theory import MEGATRON_COMMIT, MegatronEstimate
from zeroplan.version import SCHEMA_VERSION, __version__

SOURCE = f"NVIDIA/Megatron-LM@{MEGATRON_COMMIT[:7]}:megatron/training/theoretical_memory_usage.py"
FORMULAS = {
    "with_sp": "activations: Korthikanti et al. 2022, Table 2 (sequence parallelism and selective recompute): "
               "s b d (18 + 4 f/d) per layer, L/pp layers x pp micro-batches in flight on the first stage, / tp",
    "without_sp": "activations: Megatron's formula without sequence parallelism: s b d (10 + 24/tp) per layer for "
                  "every recompute setting (full recompute is not modelled by it), x 1.05",
}


def assumptions(found: tuple[MegatronEstimate, ...]) -> list[str]:
    first = found[0]
    a = first.args
    return [
        f"Megatron-LM's theoretical memory formula ({SOURCE}), reproduced to the byte",
        "bf16 params, fp32 main gradients, fp32 main params and Adam states: 18 B/param, or 6 + 12/dp B with the "
        "distributed optimizer (--stage 1)",
        "the most loaded pipeline stage: the first, with the embedding (and the output layer when pp = 1)",
        FORMULAS[first.activation_formula],
        f"vocabulary padded to {a.padded_vocab_size:,} (a multiple of 128 x tp)",
        "Megatron's formula does not see biases, qk-norms or extra norms in the parameters, nor GQA, context "
        "parallelism or the attention kernel in the activations (docs/megatron.md)",
    ]


def megatron_view(found: tuple[MegatronEstimate, ...]) -> dict:
    """Bytes rounded to the byte (Megatron's own are floats: 12/dp and the 1.05 factor are not whole)."""
    a = found[0].args
    return {
        "schema_version": SCHEMA_VERSION,
        "zeroplan_version": __version__,
        "method": "megatron",
        "source": SOURCE,
        "mesh": {"gpus": a.world_size, "tp": a.tensor_model_parallel_size, "pp": a.pipeline_model_parallel_size,
                 "cp": a.context_parallel_size, "ep": a.expert_model_parallel_size,
                 "etp": a.expert_tensor_parallel_size, "vpp": a.virtual_pipeline_model_parallel_size,
                 "dp": a.data_parallel_size, "sequence_parallel": a.sequence_parallel},
        "num_microbatches": found[0].num_microbatches,
        "megatron_args": {k: v for k, v in asdict(a).items() if k != "use_distributed_optimizer"},
        "estimates": [{
            "use_distributed_optimizer": e.args.use_distributed_optimizer,
            "weight_and_optimizer_bytes": round(e.weight_and_optimizer_bytes),
            "activation_bytes": round(e.activation_bytes),
            "total_bytes": round(e.total_bytes),
            "activation_formula": e.activation_formula,
        } for e in found],
        "assumptions": assumptions(found),
    }
