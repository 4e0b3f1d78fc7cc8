"""`zeroplan throughput`: step time, MFU and communication overhead per ZeRO stage, on a tp x pp x cp x dp (x ep)
mesh when --tp and the rest are given."""

from dataclasses import dataclass

from zeroplan.cli.common import mesh_args, print_warning, run, scenario_args, show
from zeroplan.cli.groups import takes
from zeroplan.cli.options import (
    DEEPSPEED,
    FINETUNE,
    HARDWARE,
    MESH,
    MODEL,
    NETWORK,
    OFFLOAD,
    OUTPUT,
    TRAINING,
    MaxMicroOpt,
    MfuOpt,
    SweepOpt,
)
from zeroplan.errors import ZeroplanError
from zeroplan.hardware.spec import Topology
from zeroplan.memory.estimate import Scenario
from zeroplan.memory.setup import ZeroStage
from zeroplan.scenario import ScenarioArgs, needs_hardware, scenario
from zeroplan.validate import as_json


# throughput reads the DeepSpeed knobs that move its communication.
@takes(MODEL, HARDWARE, NETWORK, TRAINING.without("fp32_grad_accum"), FINETUNE, OFFLOAD,
       DEEPSPEED.without("reduce_bucket_size", "max_live_parameters", "param_persistence_threshold", "sub_group_size"),
       MESH, OUTPUT.without("units", "html", "force"))
def throughput(
    mfu: MfuOpt = None,
    sweep: SweepOpt = None,
    max_micro_batch: MaxMicroOpt = None,
    **options,
) -> None:
    """Per stage: step time, tokens/s per GPU, MFU and overhead over ZeRO-0; --sweep over global batch; with --tp
    --pp --cp --ep, on that mesh (docs/throughput.md, "Mesh")."""
    args, fmt = scenario_args(options), options["fmt"]
    opts = ThroughputArgs(topology=options["topology"], mfu=mfu, sweep=sweep, max_micro_batch=max_micro_batch)

    def go() -> None:
        from zeroplan.cli.render import advice as render_advice

        mesh = mesh_args(options)
        if mesh.given:
            from zeroplan.cli.render.mesh_throughput import mesh_throughput_renderables
            from zeroplan.scenario.mesh_throughput import mesh_throughput_report

            found = mesh_throughput_report(args, mesh, opts.topology, opts.mfu, sweep=opts.sweep)
            for warning in found["warnings"]:
                print_warning(warning)
            show(lambda: found, lambda: mesh_throughput_renderables(found), fmt)
            return
        result = throughput_report(args, opts)
        show(lambda: result, lambda: render_advice.throughput_renderables(result), fmt)

    run(go, fmt)


SWEEP_PER_GPU = tuple(2**k for k in range(10))  # `--sweep auto`: 1..512 sequences per GPU
MAX_SWEEP_POINTS = 1_000  # global batches in one --sweep: about 1 s each thousand; a longer list runs for minutes


def _count(text: str, what: str) -> int:
    from zeroplan.units import parse_count

    return parse_count(text, what)


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
    parts = [part for part in text.split(",") if part.strip()]
    if len(parts) > MAX_SWEEP_POINTS:
        raise ZeroplanError(f"--sweep has {len(parts):,} global batches, more than {MAX_SWEEP_POINTS:,}: give fewer")
    return [_count(part, "--sweep") for part in parts]


def _throughput_row(t) -> dict:
    return {key: getattr(t, key) for key in (
        "step_time_s", "compute_s", "comm_s", "exposed_comm_s", "optimizer_step_s", "tokens_per_step_per_gpu", "tokens_per_s_per_gpu",
        "mfu", "overhead_vs_zero0_pct", "wire_bytes_per_gpu")} | {"stage": int(t.stage)}  # fmt: skip


def _sweep(scn: Scenario, opts: ThroughputArgs, topology: Topology, knobs) -> dict:
    from zeroplan.advise.policy import DEFAULT
    from zeroplan.memory.capacity import max_micro_batch
    from zeroplan.memory.summary import param_count
    from zeroplan.perf.sweep import find_overhead_crossing, sweep_global_batch

    batches = _sweep_batches(opts.sweep, scn.parallelism.dp)
    if opts.max_micro_batch is not None:
        cap, why = _count(opts.max_micro_batch, "--max-micro-batch"), "--max-micro-batch"
    else:
        limit = max(batches) // scn.parallelism.dp or 1
        cap, why = max(1, max_micro_batch(scn, ZeroStage.zero3, limit=limit)), "largest ZeRO-3 micro-batch in memory"
    points = sweep_global_batch(param_count(scn.model), scn.arch, scn.hardware, scn.setup, scn.parallelism, knobs,
                                batches, topology, opts.mfu, max_micro_batch=cap, tuning=scn.tuning)
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


def throughput_report(args: ScenarioArgs, opts: ThroughputArgs) -> dict:
    """Per stage: step time, tokens/s/GPU, MFU, overhead over ZeRO-0; with --sweep, over global batch. Plain data."""
    from zeroplan.memory.summary import param_count
    from zeroplan.perf.collectives import default_topology
    from zeroplan.memory.view import finetune_view
    from zeroplan.perf.throughput import throughput_by_stage

    scn = needs_hardware(scenario(args), "throughput")
    topology = opts.topology or default_topology(scn.hardware, scn.parallelism)
    rows = throughput_by_stage(param_count(scn.model), scn.arch, scn.hardware, scn.setup, scn.parallelism,
                               scn.knobs, topology, opts.mfu, tuning=scn.tuning)
    return {
        "model": as_json(scn.model), "hardware": scn.hardware.name,
        "gpus": scn.parallelism.gpus, "nodes": scn.parallelism.nodes, "topology": topology.value,
        "setup": as_json(scn.setup), "finetune": finetune_view(scn.tuning),
        "compute_efficiency": rows[0].compute_efficiency,
        "stages": [_throughput_row(t) for t in rows],
        "sweep": _sweep(scn, opts, topology, scn.knobs) if opts.sweep else None,
        "assumptions": list(dict.fromkeys(a for t in rows for a in t.assumptions)),
    }
