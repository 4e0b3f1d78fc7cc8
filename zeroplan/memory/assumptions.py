"""What every estimate of a scenario assumes, in words: the byte recipe, the engine's storage, the setup, the
sharding, the fine-tune, what a bare count or a missing hardware profile leaves out. Estimate.assumptions starts
with these (memory.estimate), the activation model's and the mesh's own follow. `scn` is a memory.estimate.Scenario,
unannotated here: estimate imports this module, and the floors' test reads every import, TYPE_CHECKING's too.
"""

from __future__ import annotations

from zeroplan.memory.recipes import Recipe
from zeroplan.memory.setup import Engine, OffloadDevice


def scenario_notes(scn, recipe: Recipe) -> list[str]:
    """The assumptions every estimate of `scn` rests on, in words."""
    knobs, model = scn.knobs, scn.model
    setup = scn.setup
    notes = [f"byte recipe {recipe.describe()}"] + engine_notes(scn) + [
        f"setup: seq-len {setup.seq_len}, micro-batch {setup.micro_batch}, gradient accumulation "
        f"{setup.grad_accum}, checkpointing {setup.checkpointing_label}, attention {setup.attention.value}, "
        f"loss {setup.loss.value}",
    ]
    notes += scn.mesh.notes() if scn.mesh is not None else [
        f"sharded over the data-parallel degree N_d = {scn.parallelism.dp} (no TP/PP)"]
    notes += [f"parameter count: {note}" for note in model.count_notes]
    from zeroplan.memory.optimizer_step import describe

    notes.append(describe(recipe, scn.engine, knobs.offload_optimizer is not OffloadDevice.none))
    from zeroplan.memory.reference import reference_assumption

    peft = scn.tuning is not None and scn.tuning.spec.lora_rank > 0
    if line := reference_assumption(setup, scn.engine, peft):
        notes.append(line)
    if getattr(scn, "teacher", None) is not None:
        from zeroplan.memory.teacher import teacher_assumption

        notes.append(teacher_assumption(scn.teacher, scn.engine))
    if scn.tuning is not None:
        from zeroplan.memory.tuned import tuning_notes

        notes += tuning_notes(scn.tuning, scn.engine, scn.engine_options)
        from zeroplan.hardware.kernels import check_bnb_kernels

        notes += check_bnb_kernels(scn.hardware, scn.tuning.spec.quant.value)  # bitsandbytes on this GPU
    if model.largest_layer_params == 0:
        notes.append("largest layer unknown (bare --params): ZeRO-3 gathered-layer buffers use 0; pass --largest-layer")
    if knobs.offload_param is not OffloadDevice.none:
        notes.append("parameter offload applies to ZeRO-3 only")
    if knobs.offload_optimizer is not OffloadDevice.none:
        notes.append("optimizer offload applies to ZeRO-1/2 (CPU) and ZeRO-3 (CPU or NVMe) only")
    if scn.arch is None:
        notes.append("activations not modelled for a bare parameter count: give --model for them")
    notes.append("peak = the largest event of the step's timeline (each layer's forward and backward, the loss, "
                 "the optimizer step) + overhead")
    if scn.overheads is None:
        notes.append("no hardware profile: CUDA context, NCCL and fragmentation not counted; fits is null")
    elif scn.overheads.calibration:  # zeroplan.calibration.file.calibrated
        notes.append(f"calibration from {scn.overheads.calibration} applied: "
                     f"{', '.join(scn.overheads.calibration_changes)}")
    return notes


def engine_notes(scn) -> list[str]:
    """How the engine stores the recipe and what its figures mean (none for DeepSpeed)."""
    if scn.engine is Engine.deepspeed:
        return []
    from zeroplan.memory.engines.storage import torch_storage

    store = torch_storage(scn.recipe)
    notes = [f"engine {scn.engine.value}: PyTorch keeps {store.param} B params + {store.grad} B grads + "
             f"{store.optimizer} B optimizer states per parameter (mixed precision: fp32 params are the master, "
             "no persistent 16-bit copy); figures are the busiest rank's (docs/engines.md)"]
    if scn.knobs.offload_param is OffloadDevice.cpu:  # anything else was refused (engines.engine_offload)
        notes.append(f"--engine {scn.engine.value} CPU offload: sharded parameters, gradients and optimizer states "
                     "in host memory; the optimizer step on the CPU")
    return notes
