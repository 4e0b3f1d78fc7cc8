"""What `zeroplan advise` and `zeroplan throughput` do between parsing and printing, beyond the advice itself
(zeroplan/advise/request.py, shared with the Python API): the text of the configs advise writes, and the
throughput table's data. Raises ZeroplanError for bad input; never prints, writes or exits (cli/ does).
"""

from __future__ import annotations

from dataclasses import dataclass

from zeroplan.advise.advice import Advice
from zeroplan.errors import UsageError
from zeroplan.hardware.spec import Topology
from zeroplan.memory.estimate import Scenario
from zeroplan.memory.setup import Engine, ZeroStage
from zeroplan.scenario import ScenarioArgs, needs_hardware, scenario

SWEEP_PER_GPU = tuple(2**k for k in range(10))  # `--sweep auto`: 1..512 sequences per GPU


def _count(text: str, what: str) -> int:
    from zeroplan.units import parse_count

    return parse_count(text, what)


def deepspeed_config_text(advice: Advice) -> str:
    """The emitted ds_config.json, as the file will hold it."""
    import json

    from zeroplan.advise.emit import deepspeed_config

    return json.dumps(deepspeed_config(advice), indent=2) + "\n"


def accelerate_config_text(advice: Advice) -> tuple[str, tuple[str, ...]]:
    """The emitted Accelerate config YAML, headed by its notes as comments, and the notes."""
    import yaml

    from zeroplan.advise.accelerate import accelerate_config

    config, notes = accelerate_config(advice)
    rec = advice.recommendation
    head = [f"# zeroplan advise --engine {rec.engine.value}: {rec.summary}"] + [f"# note: {n}" for n in notes]
    return "\n".join(head) + "\n" + yaml.safe_dump(config, sort_keys=False), notes


def check_emit(engine: Engine, emit_deepspeed: bool, emit_accelerate: bool) -> None:
    """The emit options the engine can take, before anything is computed: UsageError (exit 2) otherwise."""
    if emit_deepspeed and engine is not Engine.deepspeed:
        raise UsageError(f"--emit-deepspeed writes a DeepSpeed config, and --engine {engine.value} runs no DeepSpeed: "
                         "use --emit-accelerate PATH for its Accelerate config")
    if emit_accelerate and engine is Engine.deepspeed:
        raise UsageError("--emit-accelerate writes the Accelerate config of --engine fsdp, fsdp2 or ddp; for "
                         "DeepSpeed use --emit-deepspeed PATH")


def emit_note(advice: Advice) -> str:
    """What the emitted config cannot say: activation checkpointing lives in the training script."""
    ckpt = advice.recommendation.checkpointing
    if ckpt is None or ckpt.value == "none":
        return ""
    return (f"; turn on {ckpt.value} activation checkpointing in the training script (e.g. Hugging Face "
            "model.gradient_checkpointing_enable()): a DeepSpeed config does not switch it on")


@dataclass(frozen=True)
class ThroughputArgs:
    """throughput's own options, as typed."""

    topology: Topology | None = None
    mfu: float | None = None
    sweep: str | None = None
    max_micro_batch: str | None = None


def _sweep_batches(text: str, dp: int) -> list[int]:
    if text.strip() == "auto":
        return [dp * n for n in SWEEP_PER_GPU]
    return [_count(part, "--sweep") for part in text.split(",") if part.strip()]


def _throughput_row(t) -> dict:
    return {key: getattr(t, key) for key in (
        "step_time_s", "compute_s", "comm_s", "exposed_comm_s", "tokens_per_step_per_gpu", "tokens_per_s_per_gpu",
        "mfu", "overhead_vs_zero0_pct", "wire_bytes_per_gpu")} | {"stage": int(t.stage)}  # fmt: skip


def _sweep(scn: Scenario, opts: ThroughputArgs, topology: Topology, knobs) -> dict:
    from zeroplan.advise.policy import DEFAULT
    from zeroplan.memory.capacity import max_micro_batch
    from zeroplan.memory.estimate import param_count
    from zeroplan.perf.sweep import find_overhead_crossing, sweep_global_batch

    batches = _sweep_batches(opts.sweep, scn.parallelism.dp)
    if opts.max_micro_batch is not None:
        cap, why = _count(opts.max_micro_batch, "--max-micro-batch"), "--max-micro-batch"
    else:
        limit = max(batches) // scn.parallelism.dp or 1
        cap, why = max(1, max_micro_batch(scn, ZeroStage.zero3, limit=limit)), "largest ZeRO-3 micro-batch in memory"
    points = sweep_global_batch(param_count(scn.model), scn.arch, scn.hardware, scn.setup, scn.parallelism, knobs,
                                batches, topology, opts.mfu, max_micro_batch=cap)
    threshold = DEFAULT.max_zero3_overhead_pct
    crossing = find_overhead_crossing(points, threshold)
    return {
        "max_micro_batch": cap, "max_micro_batch_from": why, "threshold_pct": threshold,
        "threshold_source": DEFAULT.source("max_zero3_overhead_pct"),
        "crossing_global_batch": crossing.global_batch if crossing else None,
        "points": [{"global_batch": p.global_batch, "micro_batch": p.micro_batch, "grad_accum": p.grad_accum,
                    "tokens_per_micro_step": p.tokens_per_micro_step,
                    "overhead_vs_zero0_pct": [s.overhead_vs_zero0_pct for s in p.stages],
                    "tokens_per_s_per_gpu": [s.tokens_per_s_per_gpu for s in p.stages]} for p in points],
    }


def throughput(args: ScenarioArgs, opts: ThroughputArgs) -> dict:
    """Per stage: step time, tokens/s/GPU, MFU, overhead over ZeRO-0; with --sweep, over global batch. Plain data."""
    from zeroplan.memory.estimate import param_count
    from zeroplan.perf.collectives import default_topology
    from zeroplan.perf.throughput import throughput_by_stage

    scn = needs_hardware(scenario(args), "throughput")
    topology = opts.topology or default_topology(scn.hardware, scn.parallelism)
    rows = throughput_by_stage(param_count(scn.model), scn.arch, scn.hardware, scn.setup, scn.parallelism,
                               scn.knobs, topology, opts.mfu)
    return {
        "model": scn.model.model_dump(mode="json"), "hardware": scn.hardware.name,
        "gpus": scn.parallelism.gpus, "nodes": scn.parallelism.nodes, "topology": topology.value,
        "setup": scn.setup.model_dump(mode="json"), "compute_efficiency": rows[0].compute_efficiency,
        "stages": [_throughput_row(t) for t in rows],
        "sweep": _sweep(scn, opts, topology, scn.knobs) if opts.sweep else None,
        "assumptions": list(dict.fromkeys(a for t in rows for a in t.assumptions)),
    }
