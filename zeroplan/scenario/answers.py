"""The answers a Scenario gives the CLI and the API: the per-stage estimate (with what a --deepspeed-config
added, stated once), DeepSpeed's own estimator on the same inputs, and the capacity questions."""

from __future__ import annotations

from typing import TYPE_CHECKING

from zeroplan.errors import ZeroplanError
from zeroplan.memory.estimate import (
    Estimate,
    estimate_memory,
)
from zeroplan.memory.setup import (
    DeepSpeedKnobs,
    OffloadDevice,
    TrainingSetup,
    ZeroStage,
)
from zeroplan.validate import as_json

if TYPE_CHECKING:  # imported where used: `estimate` never loads the DeepSpeed-config code
    from zeroplan.deepspeed.estimator import DeepSpeedEstimate
    from zeroplan.deepspeed.reader import DeepSpeedConfig

from zeroplan.scenario import (
    ScenarioArgs,
    engine_stages,
    from_framework,
    hardware_from,
    parallelism_from,
    resolve_model,
    scenario,
    scenario_config_and_file,
)


def config_notes(config: DeepSpeedConfig, setup: TrainingSetup) -> tuple[str, ...]:
    """What an estimate took from a DeepSpeed config, and the value assumed for each "auto"; the precision once,
    as the estimate uses it (it differs from the config's only by --precision)."""
    precision = setup.precision.value
    if setup.precision is not config.precision:
        precision += f" (--precision; the config makes DeepSpeed run {config.precision.value})"
    notes = [f"DeepSpeed config {config.origin}: ZeRO-{int(config.stage)}, {precision}, batch, offload and "
             "zero_optimization knobs from the file; options given on the command line override it"]  # fmt: skip
    notes += [f"{auto.key} = {auto.value}, not in the file ({auto.how})" if auto.added
              else f'"auto" {auto.key} = {auto.value} ({auto.how})' for auto in config.autos]  # fmt: skip
    return tuple(notes) + config.pipeline_notes


def config_warnings(config: DeepSpeedConfig) -> tuple[str, ...]:
    """What `check` reports about the file's keys, for `estimate` to warn about: unknown and duplicate keys."""
    from zeroplan.deepspeed.keys import duplicate_key_message

    def at(line: int | None) -> str:
        return f"{config.origin}:{line}" if line else config.origin

    found = [f"{at(config.line_of(unknown.key))}: {unknown.message}" for unknown in config.unknown_keys]
    found += [f"{at(line)}: {duplicate_key_message(key, config.line_of(key))}" for key, line in config.duplicate_keys]
    return tuple(found)


def estimate(args: ScenarioArgs, stage: int | None = None) -> Estimate:
    """Every stage, or `stage`; with a DeepSpeed config and no stage, the config's stage (a --from file's FSDP or
    DDP strategy likewise), and what the file and the config gave, in the assumptions."""
    scn, config, found = scenario_config_and_file(args)
    notes = found.notes if found else ()
    if config is None:
        chosen = stage if stage is not None else (found.stage if found else None)
        offload = scn.knobs.offload_param is not OffloadDevice.none or scn.knobs.offload_optimizer is not OffloadDevice.none
        return estimate_memory(scn, stages=engine_stages(scn.engine, chosen, offload), assumptions=notes)
    stages = engine_stages(scn.engine, stage if stage is not None else int(config.stage))
    return estimate_memory(scn, stages=stages, assumptions=notes + config_notes(config, scn.setup),
                           warnings=config_warnings(config))  # fmt: skip


# DeepSpeed's additional_buffer_factor scales its CPU-memory estimate (default 1.5, deepspeed/runtime/zero/
# stage3.py estimate_zero3_model_states_mem_needs_all_cold); far past any real buffer, and 1e308 overflows the bytes.
MAX_BUFFER_FACTOR = 100


def deepspeed_estimate(args: ScenarioArgs, buffer_factor: float) -> DeepSpeedEstimate:
    from zeroplan.deepspeed.estimator import estimate_deepspeed

    args, _ = from_framework(args)
    par = parallelism_from(args.gpus, args.nodes, hardware_from(args.hardware))
    summary, _ = resolve_model(args.model, args.params, args.largest_layer, DeepSpeedKnobs())
    if not 0 < buffer_factor <= MAX_BUFFER_FACTOR:
        raise ZeroplanError(f"--buffer-factor {buffer_factor} must be above 0 and at most {MAX_BUFFER_FACTOR} "
                            "(DeepSpeed's default is 1.5)")
    return estimate_deepspeed(summary.num_params, summary.largest_layer_params, par.gpus_per_node, par.nodes,
                              buffer_factor)


def capacity(args: ScenarioArgs) -> dict:
    """Per stage: largest micro-batch, fewest GPUs, largest model. Plain data (it is also the JSON)."""
    from zeroplan.memory.capacity import (
        MAX_GPUS,
        MAX_MICRO_BATCH,
        MAX_SCAN_LAYERS,
        max_micro_batch,
        max_model,
        min_gpus,
    )

    scn = scenario(args)
    if scn.hardware is None:
        raise ZeroplanError("capacity questions need a hardware profile: pass --hardware NAME")
    stages = []
    from zeroplan.memory.estimate import refused_stages
    from zeroplan.scenario.finetune import MAX_LORA_RANK

    runnable, _ = refused_stages(scn, tuple(ZeroStage))
    for stage in runnable:
        fewest = min_gpus(scn, stage)
        largest = max_model(scn, stage) if scn.tuning is None else None
        tuned = {}
        if scn.tuning is not None:
            from zeroplan.scenario.finetune import tuned_capacity

            tuned = tuned_capacity(args, scn, stage, scenario)
        stages.append({
            "stage": int(stage),
            "max_micro_batch": max_micro_batch(scn, stage) if scn.arch is not None else None,
            "min_gpus": fewest.gpus if fewest else None,
            "min_nodes": fewest.nodes if fewest else None,
            "max_model_params": largest.num_params if largest else None,
            "max_model_layers": largest.num_layers if largest and scn.arch else None,
            **tuned,
        })
    return {
        "model": {**as_json(scn.model), "num_trainable_params": scn.tuning.num_trainable if scn.tuning else scn.model.num_params},
        "finetune": scn.tuning.spec.mode if scn.tuning else None, "hardware": scn.hardware.name,
        "gpus": scn.parallelism.gpus, "nodes": scn.parallelism.nodes,
        "setup": as_json(scn.setup),
        "search": {"max_micro_batch": MAX_MICRO_BATCH, "max_gpus": MAX_GPUS, "max_model_layers": MAX_SCAN_LAYERS,
                   "max_lora_rank": MAX_LORA_RANK},  # a search's upper end: an answer equal to it means "at least"
        "stages": stages,
    }
