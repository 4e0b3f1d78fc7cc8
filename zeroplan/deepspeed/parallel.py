"""The parallel mesh a ds_config states, beyond data parallelism: DeepSpeed AutoTP training's
`tensor_parallel.autotp_size` is modelled as a tensor-parallel mesh; what zeroplan does not model is refused in
one line, never read as data parallelism.

- `tensor_parallel` (deepspeed/runtime/tensor_parallel/config.py, TPTrainingConfig): `autotp_size` > 1 shards the
  model's linears over a tensor-parallel group of that size (deepspeed/runtime/engine.py builds it with
  groups._init_tp_mesh_device(tensor_model_parallel_size=autotp_size)); the data-parallel group, which ZeRO shards
  over and the batch keys count, is GPUs / autotp_size. DeepSpeed v0.19.8 trains AutoTP with every ZeRO stage 0-3
  (engine.py: "AutoTP + ZeRO stage 3 is supported for training"; https://www.deepspeed.ai/tutorials/autotp-training/).
  AutoTP replaces linears only: the token embedding stays whole; the head's weight is split, and its logits are
  whole on every rank unless `vocab_parallel_lm_head` is true.
- `sequence_parallel_size` (DeepSpeed-Ulysses / ALST, a top-level key read raw by deepspeed/runtime/config.py, which
  divides the world size by it): refused, Ulysses' all-to-all attention is not modelled (validation/
  measure_ulysses.py measured its saved activations 3.8% above the context-parallel model's, docs/parallelism.md).
- `pipeline.stages` (PipelineEngine): refused when it states a stage count above 1 (the count is PipelineModule's).
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zeroplan.errors import SpecError
from zeroplan.models.mesh import Mesh

AUTOTP_SOURCE = "DeepSpeed AutoTP training, deepspeed/runtime/tensor_parallel/config.py autotp_size"


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
    sp = _count(data.get("sequence_parallel_size", 1))
    if sp is not None and sp > 1:
        found.append(f"sequence_parallel_size: {sp} (sequence parallelism) is not modelled yet")
    pipe = data.get("pipeline")
    stages = _count(pipe.get("stages")) if isinstance(pipe, Mapping) else None
    if stages is not None and stages > 1:
        found.append(f"pipeline.stages: {stages} (DeepSpeed's PipelineEngine) is not modelled yet")
    return found


def config_mesh(data: object, origin: str, gpus: int) -> Mesh | None:
    """The AutoTP mesh of a ds_config over `gpus` (None: data parallelism only); SpecError for what is refused or
    does not divide."""
    if problems := refused(data):
        raise SpecError(f"{origin}: " + "; ".join(problems))
    tp = autotp_size(data)
    if tp == 1:
        return None
    if gpus % tp:
        raise SpecError(f"{origin}: tensor_parallel.autotp_size {tp} does not divide the {gpus} GPUs "
                        "(DeepSpeed: 'Total world size must be divisible by autotp_size')")
    block = data["tensor_parallel"]
    head = block.get("vocab_parallel_lm_head") is True
    return Mesh(gpus=gpus, tp=tp, vocab_parallel_embedding=False, vocab_parallel_logits=head)
