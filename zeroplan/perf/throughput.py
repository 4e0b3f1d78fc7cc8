"""Throughput per ZeRO stage: compute from FLOPs, communication per stage, and what overlap cannot hide.

Pure: imports neither rich, typer nor yaml and does no I/O. Every formula, constant and source is in
docs/throughput.md, the hardware numbers' in docs/hardware.md.
It is a model: bandwidth, latency and an overlap rule, calibrated on nothing but published numbers.
"""

from __future__ import annotations

from pydantic import Field

from zeroplan.errors import ZeroplanError
from zeroplan.frozen import Frozen
from zeroplan.hardware.spec import HardwareSpec, Topology
from zeroplan.memory.setup import (
    DeepSpeedKnobs,
    Engine,
    OffloadDevice,
    Parallelism,
    TrainingSetup,
    ZeroStage,
)
from zeroplan.models.architecture import Architecture, ParamCount
from zeroplan.perf.collectives import default_topology
from zeroplan.perf.flops import (
    TFLOPS,
    dequant_seconds,
    hardware_flops_per_micro_step,
    model_flops_per_micro_step,
    peak_tflops,
    tuned_flops_notes,
)
from zeroplan.perf.optimizer_step import StepTime, shard_elements, step_time
from zeroplan.perf.schedule import (
    CommContext,
    CommTerm,
    Window,
    comm_context,
    offload_terms,
    stage_terms,
)

# Compute lost per second of communication that runs under it: NCCL kernels hold SMs while they run
# (an H100 all-gather took 24 of 132 SMs, 18%, and slowed a concurrent GEMM; NVIDIA developer forum
# thread 337991). A model constant, not a measurement of any one run.
OVERLAP_CONTENTION = 0.2


class Throughput(Frozen):
    """Predicted speed of one ZeRO stage, per GPU and per optimizer step."""

    stage: ZeroStage
    topology: Topology
    step_time_s: float
    compute_s: float = Field(description="forward + backward (+ recompute) of all micro-steps")
    comm_s: float = Field(description="all transfers end to end, as if nothing overlapped")
    exposed_comm_s: float = Field(description="what overlap does not hide: step_time_s - compute_s - optimizer_step_s")
    tokens_per_step_per_gpu: int
    tokens_per_s_per_gpu: float
    mfu: float = Field(description="model FLOPs (6N + causal attention) / (step time x peak)")
    compute_efficiency: float = Field(description="fraction of peak assumed on the work that runs (default_mfu)")
    achieved_tflops: float = Field(description="FLOPs the GPU runs per second, recompute included (HFU x peak)")
    overhead_vs_zero0_pct: float = Field(description="step time less the optimizer step over ZeRO-0's for the same "
                                         "setup, as if ZeRO-0 fitted: the communication overhead")
    wire_bytes_per_gpu: float = Field(description="bytes one GPU sends per optimizer step, host copies included")
    terms: tuple[CommTerm, ...]
    assumptions: tuple[str, ...]
    optimizer_step_s: float = Field(0.0, description="the optimizer step, on the GPU, the host or NVMe (in step_time_s)")


def exposed_in_window(terms: list[CommTerm], window_s: float) -> float:
    """Seconds a window of compute grows by when `terms` run under it.

    exposed = e + max(0, C - e - W) + kappa x hidden, with C the terms' time, e one collective of each
    (the first gather waits before the compute, the last reduction starts after it), W the compute,
    hidden = C - e - overflow, kappa = OVERLAP_CONTENTION.
    """
    comm = sum(t.time_s for t in terms)
    edge = sum(t.time_s / t.num_collectives for t in terms)
    overflow = max(0.0, comm - edge - window_s)
    return edge + overflow + OVERLAP_CONTENTION * (comm - edge - overflow)


def exposed_per_step(terms: list[CommTerm], forward_s: float, backward_s: float, grad_accum: int) -> float:
    """Exposed seconds per optimizer step: every micro-step's forward and backward window, the last
    backward also carrying the boundary reductions, plus what has no window."""
    fwd = [t for t in terms if t.every_micro_step and t.window is Window.forward]
    bwd = [t for t in terms if t.every_micro_step and t.window is Window.backward]
    boundary = [t for t in terms if not t.every_micro_step and t.window is Window.backward]
    waits = sum(t.time_s * (grad_accum if t.every_micro_step else 1) for t in terms if t.window is Window.exposed)
    return (
        grad_accum * exposed_in_window(fwd, forward_s)
        + (grad_accum - 1) * exposed_in_window(bwd, backward_s)
        + exposed_in_window(bwd + boundary, backward_s)
        + waits
    )


def _assumptions(
    stage: ZeroStage, ctx: CommContext, arch: Architecture | None, efficiency: float, topology: Topology
) -> tuple[str, ...]:
    notes = [
        f"compute at {efficiency:.0%} of dense peak (hardware default_mfu unless given); FLOPs 6N per token "
        "(8N with full recompute) + attention (causal with flash/SDPA, full with eager)",
        f"{ctx.dp.label} ring: {ctx.dp.busbw_gbps:g} GB/s busbw, {ctx.dp.alpha_us:g} us per collective "
        "(planning default, docs/hardware.md)",
        f"overlapped communication still costs {OVERLAP_CONTENTION:.0%} of its time in slower compute; one "
        "collective per window (first gather, last reduction) is never hidden",
        "data loading, kernel launch and DeepSpeed's Python overhead are not modelled",
    ]
    if arch is None:
        notes.append(
            f"no architecture: attention FLOPs omitted; {ctx.layers} collectives per stage-3 pass "
            "(one per allgather bucket) instead of one per layer"
        )
    if stage is ZeroStage.zero0:
        notes.append(
            "ZeRO-0 all-reduce overlaps the backward in buckets (PyTorch DDP); DeepSpeed's own stage-0 "
            "path all-reduces after the backward, which is slower"
        )
    if stage is ZeroStage.zero3:
        notes.append(
            "stage 3: one all-gather per layer per pass and one reduce-scatter per layer; gathers hidden "
            "by prefetch" + ("" if ctx.prefetch else " (off: stage3_prefetch_bucket_size = 0)")
        )
    if stage is not ZeroStage.zero3 and _uses_zeropp(ctx.knobs):
        notes.append(f"ZeRO++ knobs ignored: they act on stage 3 only, not stage {int(stage)}")
    if ctx.knobs.offload_optimizer is not OffloadDevice.none or ctx.knobs.offload_param is not OffloadDevice.none:
        notes.append("offload: host-link copies at host-link speed (NVMe parameter reads too); the optimizer step "
                     "on the host and its NVMe reads and writes timed (perf.optimizer_step)")
    if topology is Topology.multinode:
        notes.append("multinode busbw = min(intra-node, 0.92 x GPUs per node x NIC per GPU), flat ring over all ranks")
    return tuple(notes)


def _uses_zeropp(knobs: DeepSpeedKnobs) -> bool:
    return knobs.zero_quantized_weights or knobs.zero_quantized_gradients or knobs.zero_hpz_partition_size > 1


def _step(
    params, arch, hw, setup, par, stage, knobs, topology, efficiency, elem_bytes, tuning=None, engine=Engine.deepspeed
) -> tuple[float, float, list, CommContext]:
    """(step time, compute time, terms, context) for one stage."""
    forward_flops, backward_flops = hardware_flops_per_micro_step(params, arch, setup, tuning)
    per_s = peak_tflops(hw, setup.precision) * TFLOPS * efficiency
    forward_s, backward_s = forward_flops / per_s, backward_flops / per_s
    if tuning is not None:  # a 4-bit base's dequantization, memory-bound, on the compute stream
        dequant = dequant_seconds(tuning, setup, arch, hw.hbm_bandwidth_tbps)
        forward_s, backward_s = forward_s + dequant[0], backward_s + dequant[1]
    ctx = comm_context(params, arch, hw, par, stage, knobs, topology, elem_bytes,
                       None if tuning is None else tuning.num_trainable)  # a fine-tune reduces its trainable gradients
    terms = stage_terms(stage, ctx) + offload_terms(stage, ctx)
    compute_s = setup.grad_accum * (forward_s + backward_s)
    opt = optimizer_step(ctx, setup, hw, par, stage, knobs, engine)
    return (compute_s + exposed_per_step(terms, forward_s, backward_s, setup.grad_accum) + opt.seconds, compute_s,
            terms, ctx)


def optimizer_step(ctx: CommContext, setup: TrainingSetup, hw: HardwareSpec, par: Parallelism, stage: ZeroStage,
                   knobs: DeepSpeedKnobs, engine: Engine = Engine.deepspeed) -> StepTime:
    """The optimizer step over one GPU's shard of the parameters with gradients (perf.optimizer_step)."""
    offload = knobs.offload_optimizer if stage is not ZeroStage.zero0 else OffloadDevice.none
    return step_time(shard_elements(ctx.num_grad_params, stage, ctx.dp.ranks), setup, hw, stage, offload, engine)


def estimate_throughput(
    params: ParamCount,
    arch: Architecture | None,
    hw: HardwareSpec,
    setup: TrainingSetup,
    par: Parallelism,
    stage: ZeroStage,
    knobs: DeepSpeedKnobs,
    topology: Topology | None = None,
    mfu: float | None = None,
    *,
    comm_dtype_bytes: float | None = None,
    tuning=None,
    engine: Engine = Engine.deepspeed,
) -> Throughput:
    """Step time, tokens/s/GPU and MFU of one ZeRO stage, and its overhead over ZeRO-0.

    t_step = GA (t_fwd + t_bwd) + exposed comm;  t = FLOPs / (peak x eta);  FLOPs = T (6N + 6 L d s) (8N with
    full recompute); exposed comm per docs/throughput.md (ring cost f(n) S / B_bus + k alpha, overlap rule).
    GA = gradient accumulation steps, T = tokens per micro-step, eta = mfu or hw.default_mfu,
    S = Psi x bytes of the communication dtype (default: the compute dtype, DeepSpeed's default).
    Sources: docs/throughput.md (model) and docs/hardware.md (hardware numbers). `tuning` (a fine-tune,
    zeroplan.memory.finetune.Tuning): its FLOPs and a 4-bit base's dequantization (perf/flops.py, 1.1 there).
    """
    if setup.post_training.value != "sft":  # memory.reference models its memory; the step's time is SFT's
        raise ZeroplanError(f"--post-training {setup.post_training.value}: its batch and its reference or teacher "
                            "forward are not timed (throughput models a supervised step); estimate its memory instead")
    topology = topology or default_topology(hw, par)
    efficiency = hw.default_mfu if mfu is None else mfu
    if not 0 < efficiency <= 1:
        raise ZeroplanError(f"mfu ({efficiency}) must be in (0, 1]")
    elem_bytes = comm_dtype_bytes or setup.precision.compute_bytes
    step_s, compute_s, terms, ctx = _step(params, arch, hw, setup, par, stage, knobs, topology, efficiency, elem_bytes,
                                          tuning, engine)
    zero0 = DeepSpeedKnobs(overlap_comm=knobs.overlap_comm, reduce_bucket_size=knobs.reduce_bucket_size)
    base_s, _, _, base_ctx = _step(params, arch, hw, setup, par, ZeroStage.zero0, zero0, topology, efficiency,
                                   elem_bytes, tuning, engine)
    opt = optimizer_step(ctx, setup, hw, par, stage, knobs, engine)
    base_opt = optimizer_step(base_ctx, setup, hw, par, ZeroStage.zero0, zero0, engine)
    tokens = setup.tokens_per_micro_step * setup.grad_accum
    per_step = [t.time_s * (setup.grad_accum if t.every_micro_step else 1) for t in terms]
    wire = [t.wire_bytes_per_gpu * (setup.grad_accum if t.every_micro_step else 1) for t in terms]
    model_flops = setup.grad_accum * model_flops_per_micro_step(params, arch, setup, tuning)
    run_flops = setup.grad_accum * sum(hardware_flops_per_micro_step(params, arch, setup, tuning))
    return Throughput(
        stage=stage,
        topology=topology,
        step_time_s=step_s,
        compute_s=compute_s,
        comm_s=sum(per_step),
        exposed_comm_s=step_s - compute_s - opt.seconds,
        tokens_per_step_per_gpu=tokens,
        tokens_per_s_per_gpu=tokens / step_s,
        mfu=model_flops / (step_s * peak_tflops(hw, setup.precision) * TFLOPS),
        compute_efficiency=efficiency,
        achieved_tflops=run_flops / step_s / TFLOPS,
        # the communication overhead the article's 11 % speaks of: the optimizer steps (ZeRO-0's whole, this stage's
        # shard, on the GPU, the host or NVMe) are in step_time_s, tokens/s and MFU, not in this ratio
        overhead_vs_zero0_pct=100 * ((step_s - opt.seconds) / (base_s - base_opt.seconds) - 1),
        wire_bytes_per_gpu=sum(wire),
        terms=tuple(terms),
        optimizer_step_s=opt.seconds,
        assumptions=_assumptions(stage, ctx, arch, efficiency, topology) + tuned_flops_notes(tuning)
        + (f"optimizer step {opt.seconds:.3f} s on the {opt.where}, exposed after the backward: {opt.note} "
           "(memory-bound: bytes moved / bandwidth, docs/throughput.md)",),
    )


def throughput_by_stage(
    params: ParamCount,
    arch: Architecture | None,
    hw: HardwareSpec,
    setup: TrainingSetup,
    par: Parallelism,
    knobs: DeepSpeedKnobs,
    topology: Topology | None = None,
    mfu: float | None = None,
    *,
    comm_dtype_bytes: float | None = None,
    tuning=None,
) -> tuple[Throughput, ...]:
    """estimate_throughput for stages 0-3 with the same inputs (each stage's own overlap_comm default)."""
    return tuple(
        estimate_throughput(
            params, arch, hw, setup, par, stage, knobs, topology, mfu, comm_dtype_bytes=comm_dtype_bytes, tuning=tuning
        )
        for stage in ZeroStage
    )
