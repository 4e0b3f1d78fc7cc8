"""The parallel mesh a ds_config states, beyond data parallelism: DeepSpeed AutoTP training's
`tensor_parallel.autotp_size` is modelled as a tensor-parallel mesh, `sequence_parallel_size` as Ulysses' context
parallelism by all-to-all; what zeroplan does not model is refused in
one line, never read as data parallelism.

- `tensor_parallel` (deepspeed/runtime/tensor_parallel/config.py, TPTrainingConfig): `autotp_size` > 1 shards the
  model's linears over a tensor-parallel group of that size (deepspeed/runtime/engine.py builds it with
  groups._init_tp_mesh_device(tensor_model_parallel_size=autotp_size)); the data-parallel group, which ZeRO shards
  over and the batch keys count, is GPUs / autotp_size. DeepSpeed v0.19.8 trains AutoTP with every ZeRO stage 0-3
  (engine.py: "AutoTP + ZeRO stage 3 is supported for training"; https://www.deepspeed.ai/tutorials/autotp-training/).
  AutoTP replaces linears only: the token embedding stays whole; the head's weight is split, and its logits are
  whole on every rank unless `vocab_parallel_lm_head` is true.
- `sequence_parallel_size` (DeepSpeed-Ulysses / ALST, a top-level key): modelled as context parallelism by
  all-to-all, Mesh(cp=sp, cp_comm=a2a) (docs/parallelism.md, measured by validation/measure_ulysses.py). The batch
  keys count GPUs / sp ranks (deepspeed/runtime/config.py divides the world size by it, or by the mpu's
  sequence-parallel world size); ZeRO shards over the sequence-data-parallel group of dp x sp ranks
  (deepspeed/runtime/engine.py passes dp_process_group=self.seq_data_parallel_group to every ZeRO optimizer;
  deepspeed/utils/groups.py _get_sequence_data_parallel_group: "the process group for zero sharding ... must be
  across both dimensions of data and sequence parallelism"), which is zeroplan's dp x cp. With DeepCompile's
  `autosp` pass (deepspeed/compile/passes/sp_compile.py: the all-to-alls inserted into a torch.compile graph) it
  is refused: the compiled graph's saved tensors are not the eager modules' zeroplan measured. Ulysses with AutoTP
  or PipelineEngine is refused (not modelled).
- `pipeline` (DeepSpeed's PipelineEngine; deepspeedai/DeepSpeed@edaa7221:deepspeed/runtime/config.py
  get_pipeline_config: stages "auto", partition "best", seed_layers false, activation_checkpoint_interval 0,
  pipe_partitioned and grad_partitioned true). DeepSpeed itself never reads `stages` or `partition`: the stage
  count is PipelineModule's `num_stages` (or its topology's pipe axis) and the split its `partition_method`
  (pipe/module.py). zeroplan reads a whole `stages` above 1 as the pipeline degree the module was built with, and
  `partition`, where it names one of PipelineModule's methods ('parameters', 'uniform', 'type:REGEX'), as that
  method (else 'parameters', PipelineModule's default); both stated in the output. PipelineEngine reads
  `activation_checkpoint_interval` (pipe/engine.py: > 0 sets the module's interval): 1 is a checkpoint per layer,
  zeroplan's full checkpointing. The schedule is TrainSchedule (pipe/schedule.py), 1F1B over
  gradient_accumulation_steps micro-batches (PipelineEngine: micro_batches = gradient_accumulation_steps()).
  ZeRO-2/3 are refused with DeepSpeed's own assertion; AutoTP with PipelineEngine is refused (not modelled).
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from zeroplan.errors import SpecError
from zeroplan.memory.setup import Checkpointing, TrainingSetup
from zeroplan.models.mesh import CpComm, Mesh, Schedule

AUTOTP_SOURCE = "DeepSpeed AutoTP training, deepspeed/runtime/tensor_parallel/config.py autotp_size"
PIPE_METHODS = ("parameters", "uniform")  # and "type:REGEX" (pipe/module.py _partition_layers)


def _count(value: Any) -> int | None:
    """An integer degree as written (bools, "auto" and the rest: None)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        return None
    return int(value)


def autotp_size(data: object) -> int:
    """tensor_parallel.autotp_size as written (0 and 1: no tensor parallelism)."""
    block = data.get("tensor_parallel") if isinstance(data, Mapping) else None
    size = _count(block.get("autotp_size", 0)) if isinstance(block, Mapping) else None
    return size or 1


def refused(data: object) -> list[str]:
    """What the config asks beyond data and AutoTP tensor parallelism, one phrase each."""
    if not isinstance(data, Mapping):
        return []
    found = []
    sp = sequence_parallel_size(data)
    passes = data.get("compile", {}).get("passes") if isinstance(data.get("compile"), Mapping) else None
    if sp > 1 and isinstance(passes, list) and "autosp" in passes:
        found.append(f"sequence_parallel_size: {sp} with compile.passes autosp (DeepCompile's AutoSP inserts the "
                     "all-to-alls into a compiled graph, whose saved tensors zeroplan does not model) is not modelled yet")
    beside = [f"tensor_parallel.autotp_size {autotp_size(data)}"] * (autotp_size(data) > 1) \
        + [f"pipeline.stages {pipeline_stages(data)}"] * (pipeline_stages(data) > 1)
    if sp > 1 and beside:
        found.append(f"sequence_parallel_size {sp} with {' and '.join(beside)}: Ulysses beside AutoTP or "
                     "PipelineEngine is not modelled")
    pp = pipeline_stages(data)
    if pp > 1 and autotp_size(data) > 1:
        found.append(f"pipeline.stages {pp} with tensor_parallel.autotp_size {autotp_size(data)}: AutoTP under "
                     "DeepSpeed's PipelineEngine is not modelled")
    return found


def sequence_parallel_size(data: object) -> int:
    """sequence_parallel_size as written (absent, 0, 1 and what is not a whole number: no sequence parallelism)."""
    size = _count(data.get("sequence_parallel_size", 1)) if isinstance(data, Mapping) else None
    return size or 1


def pipeline_block(data: object) -> Mapping:
    """The `pipeline` block as written ({} when absent or not a mapping)."""
    block = data.get("pipeline") if isinstance(data, Mapping) else None
    return block if isinstance(block, Mapping) else {}


def pipeline_stages(data: object) -> int:
    """pipeline.stages as the pipeline degree (1: absent, "auto", DeepSpeed's default, or 1); SpecError otherwise."""
    value = pipeline_block(data).get("stages", "auto")
    if value == "auto":
        return 1
    stages = _count(value)
    if stages is None or stages < 1:
        raise SpecError(f"pipeline.stages: expected a whole number of stages or \"auto\", got {value!r}")
    return stages


def pipeline_partition(data: object) -> tuple[str, str]:
    """The partition_method zeroplan splits by, and how it was chosen (in words, for the assumptions)."""
    value = pipeline_block(data).get("partition")
    if isinstance(value, str) and (value.lower() in PIPE_METHODS or value.lower().startswith("type:")):
        return value.lower(), (f"pipeline.partition {value!r} read as the PipelineModule's partition_method "
                               "(DeepSpeed itself does not read pipeline.partition)")
    said = f"pipeline.partition {value!r} is no PipelineModule method and " if value is not None else ""
    return "parameters", f"{said}PipelineModule's default partition_method 'parameters' assumed"


def checkpoint_interval(data: object) -> int:
    """pipeline.activation_checkpoint_interval (0: DeepSpeed's default, no checkpointing set by the config)."""
    value = pipeline_block(data).get("activation_checkpoint_interval", 0)
    interval = _count(value)
    if interval is None or interval < 0:
        raise SpecError(f"pipeline.activation_checkpoint_interval: expected a whole number of layers, got {value!r}")
    return interval


def pipeline_notes(data: object) -> tuple[str, ...]:
    """What zeroplan assumed reading the pipeline block, in words (empty without pipeline stages)."""
    pp = pipeline_stages(data)
    if pp == 1:
        return ()
    _, how = pipeline_partition(data)
    return (f"pipeline.stages {pp} read as DeepSpeed's PipelineEngine with PipelineModule(num_stages={pp}) (DeepSpeed "
            "itself does not read pipeline.stages: the module's num_stages or topology sets the stages); TrainSchedule "
            "1F1B over gradient_accumulation_steps micro-batches",
            how)


def with_pipeline_checkpointing(data: object, setup: TrainingSetup, given: frozenset[str]) -> TrainingSetup:
    """`setup` with PipelineEngine's activation_checkpoint_interval (1: each layer checkpointed, zeroplan's full
    checkpointing) unless --checkpointing was given; an interval above 1 is refused (not modelled on a mesh)."""
    interval = checkpoint_interval(data)
    if interval == 0 or "checkpointing" in given:
        return setup
    if interval > 1:
        raise SpecError(f"pipeline.activation_checkpoint_interval {interval} checkpoints {interval} layers as one unit: "
                        "not modelled on a pipeline mesh (1, a layer a unit, is --checkpointing full)")
    return replace(setup, checkpointing=Checkpointing.full, checkpoint_every=1)


def config_mesh(data: object, origin: str, gpus: int) -> Mesh | None:
    """The AutoTP, Ulysses or PipelineEngine mesh of a ds_config over `gpus` (None: data parallelism only); SpecError for what
    is refused or does not divide."""
    try:
        return _config_mesh(data, origin, gpus)
    except SpecError as exc:
        message = str(exc)
        raise SpecError(message if message.startswith(f"{origin}: ") else f"{origin}: {message}") from None


def _config_mesh(data: object, origin: str, gpus: int) -> Mesh | None:
    if problems := refused(data):
        raise SpecError(f"{origin}: " + "; ".join(problems))
    if (pp := pipeline_stages(data)) > 1:
        return _pipeline_mesh(data, origin, gpus, pp)
    if (sp := sequence_parallel_size(data)) > 1:
        if gpus % sp:
            raise SpecError(f"{origin}: sequence_parallel_size {sp} does not divide the {gpus} GPUs (DeepSpeed: "
                            "'world_size ... is not divisible by sequence_parallel_size')")
        return Mesh(gpus=gpus, cp=sp, cp_comm=CpComm.a2a)
    tp = autotp_size(data)
    if tp == 1:
        return None
    if gpus % tp:
        raise SpecError(f"{origin}: tensor_parallel.autotp_size {tp} does not divide the {gpus} GPUs "
                        "(DeepSpeed: 'Total world size must be divisible by autotp_size')")
    block = data["tensor_parallel"]
    head = block.get("vocab_parallel_lm_head") is True
    return Mesh(gpus=gpus, tp=tp, vocab_parallel_embedding=False, vocab_parallel_logits=head)


def _pipeline_mesh(data: Mapping, origin: str, gpus: int, pp: int) -> Mesh:
    """DeepSpeed's PipelineEngine over `gpus`: pp stages, 1F1B (TrainSchedule), the module's partition_method."""
    checkpoint_interval(data)  # a bad value is one line here; scenario reads it into the setup
    method, _ = pipeline_partition(data)
    return Mesh(gpus=gpus, pp=pp, schedule=Schedule.one_f_one_b, pipe_partition=method)
