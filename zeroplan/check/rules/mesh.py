"""CI rules over the plan's parallel mesh (its `mesh:`, the config's tensor_parallel.autotp_size or pipeline.stages): each way the
model does not lay out on it is one finding with the numbers (models/mesh.py mesh_problems). Pure: no I/O."""

from __future__ import annotations

from collections.abc import Iterator

from zeroplan.check.findings import Finding, Rule, RunContext
from zeroplan.deepspeed.reader import DeepSpeedConfig
from zeroplan.memory.pipeengine import PIPE_ZERO_ASSERTION, pipe_zero_refusal

MESH_SOURCE = ("Megatron-LM megatron/training/arguments.py (world size, heads, layers, experts divisibility); "
               "torch.distributed.pipelining schedules.py (model chunks per rank)")


def _mesh_does_not_divide(config: DeepSpeedConfig, run: RunContext, mesh: tuple[str, ...]) -> Iterator[Finding]:
    for problem in mesh:
        yield Finding(rule="mesh-does-not-divide", severity="error",
                      message=f"{problem}; memory not estimated on this mesh")


def _pipeline_zero_stage(config: DeepSpeedConfig, run: RunContext) -> Iterator[Finding]:
    if problem := pipe_zero_refusal(int(config.stage), config.pipeline_stages):
        if config.pipeline_stages > 1:
            yield Finding(rule="pipeline-zero-stage", severity="error", message=f"{problem}; memory not estimated",
                          key="zero_optimization.stage", line=config.line_of("zero_optimization.stage"))


MESH_RULES: tuple[Rule, ...] = (
    Rule(id="mesh-does-not-divide", severity="error",
         summary="the model does not lay out on the mesh: tp x pp x cp not dividing the GPUs, heads or kv heads "
                 "not divisible by tp, experts by ep, layers not splitting into the pipeline stages",
         source=MESH_SOURCE, check=_mesh_does_not_divide, needs=("mesh",)),
    Rule(id="pipeline-zero-stage", severity="error",
         summary="ZeRO-2 or ZeRO-3 with DeepSpeed's PipelineEngine (pipeline.stages above 1), which asserts "
                 f"'{PIPE_ZERO_ASSERTION}'",
         source="deepspeedai/DeepSpeed@edaa7221 deepspeed/runtime/pipe/engine.py PipelineEngine.__init__",
         check=_pipeline_zero_stage),
)
