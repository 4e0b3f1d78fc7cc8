"""CI rules over the plan's parallel mesh (its `mesh:` or the config's tensor_parallel.autotp_size): each way the
model does not lay out on it is one finding with the numbers (models/mesh.py mesh_problems). Pure: no I/O."""

from __future__ import annotations

from collections.abc import Iterator

from zeroplan.check.findings import Finding, Rule, RunContext
from zeroplan.deepspeed.reader import DeepSpeedConfig

MESH_SOURCE = ("Megatron-LM megatron/training/arguments.py (world size, heads, layers, experts divisibility); "
               "torch.distributed.pipelining schedules.py (model chunks per rank)")


def _mesh_does_not_divide(config: DeepSpeedConfig, run: RunContext, mesh: tuple[str, ...]) -> Iterator[Finding]:
    for problem in mesh:
        yield Finding(rule="mesh-does-not-divide", severity="error",
                      message=f"{problem}; memory not estimated on this mesh")


MESH_RULES: tuple[Rule, ...] = (
    Rule(id="mesh-does-not-divide", severity="error",
         summary="the model does not lay out on the mesh: tp x pp x cp not dividing the GPUs, heads or kv heads "
                 "not divisible by tp, experts by ep, layers not splitting into the pipeline stages",
         source=MESH_SOURCE, check=_mesh_does_not_divide, needs=("mesh",)),
)
