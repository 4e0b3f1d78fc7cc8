"""Which transfers each ZeRO stage makes in an optimizer step, how big, how often, and under which compute.

Pure: imports neither rich, typer nor yaml and does no I/O. Sources: the ZeRO paper (arXiv:1910.02054) section 7
(volumes), DeepSpeed v0.19.6 runtime/engine.py and runtime/zero/stage_1_and_2.py, stage3.py (when each stage
communicates), ZeRO++ (arXiv:2306.10209; DeepSpeed docs/_tutorials/zeropp.md); docs/throughput.md 2.
"""

from __future__ import annotations

import math
from enum import Enum

from pydantic import Field

from zeroplan.errors import ZeroplanError
from zeroplan.frozen import Frozen
from zeroplan.hardware.spec import HardwareSpec, Topology
from zeroplan.memory.setup import DeepSpeedKnobs, OffloadDevice, Parallelism, ZeroStage
from zeroplan.models.architecture import Architecture, ParamCount
from zeroplan.perf.collectives import (
    Collective,
    Link,
    dp_link,
    host_copy_s,
    node_link,
    ring_factor,
    ring_time_s,
)

QWZ_BYTES = 1  # ZeRO++ qwZ: forward weight all-gather in block-quantized INT8 (arXiv:2306.10209)
QGZ_BYTES = 0.5  # ZeRO++ qgZ: gradients reduced in INT4 (arXiv:2306.10209)


class Window(str, Enum):
    """Which compute a collective can hide under."""

    forward = "forward"
    backward = "backward"
    exposed = "exposed"  # nothing to overlap with: the GPU waits


class CommTerm(Frozen):
    """One kind of transfer in an optimizer step: what, where, how often, how long."""

    name: str
    collective: Collective
    link: str = Field(description="ring label with its busbw, or 'host link'")
    payload_bytes: float = Field(description="full buffer S of one occurrence (AG/RS: the gathered array)")
    wire_bytes_per_gpu: float = Field(description="bytes one GPU sends per occurrence: f(n) x S")
    num_collectives: int = Field(description="collectives (buckets, layers) per occurrence: each pays alpha")
    every_micro_step: bool = Field(description="True: once per micro-step; False: once per optimizer step")
    window: Window
    time_s: float = Field(description="seconds per occurrence")


class CommContext(Frozen):
    """Everything the stage schedules share, resolved once."""

    num_params: int
    # the parameters that have gradients (a fine-tune's trainable ones; all of them for full training): DeepSpeed
    # reduces, and ZeRO-1/2 all-gather after the step, only requires_grad parameters (stage_1_and_2.py builds its
    # flat groups from them); ZeRO-3 still gathers every parameter
    num_grad_params: int
    elem_bytes: float
    dp: Link
    node: Link
    hw: HardwareSpec
    layers: int
    reduce_buckets: int
    allgather_buckets: int
    prefetch: bool
    overlap_reduce: bool
    knobs: DeepSpeedKnobs


def _ring(name: str, coll: Collective, payload: float, link: Link, count: int, micro: bool, window: Window) -> CommTerm:
    return CommTerm(
        name=name,
        collective=coll,
        link=f"{link.label} {link.busbw_gbps:g} GB/s x{link.ranks}",
        payload_bytes=payload,
        wire_bytes_per_gpu=ring_factor(coll, link.ranks) * payload if link.ranks > 1 else 0.0,
        num_collectives=count,
        every_micro_step=micro,
        window=window,
        time_s=ring_time_s(coll, payload, link, count),
    )


def _host(name: str, payload: float, ctx: CommContext, count: int, micro: bool, window: Window) -> CommTerm:
    return CommTerm(
        name=name,
        collective=Collective.host_copy,
        link=f"host link {ctx.hw.host_link_gbps:g} GB/s",
        payload_bytes=payload,
        wire_bytes_per_gpu=payload,
        num_collectives=count,
        every_micro_step=micro,
        window=window,
        time_s=host_copy_s(payload, ctx.hw),
    )


def _reduce_window(ctx: CommContext) -> Window:
    """Reductions hide under the backward only with overlap_comm (else they run on the compute stream)."""
    return Window.backward if ctx.overlap_reduce else Window.exposed


def _gather_window(ctx: CommContext, window: Window) -> Window:
    """Stage-3 gathers hide under the pass that needs them only when prefetching (stage3_prefetch_bucket_size > 0)."""
    return window if ctx.prefetch else Window.exposed


def stage_terms(stage: ZeroStage, ctx: CommContext) -> list[CommTerm]:
    """The collectives of one stage (ZeRO paper section 7; DeepSpeed engine.py, stage_1_and_2.py, stage3.py).

    0: all-reduce 2 Psi at the accumulation boundary. 1: reduce-scatter + all-gather (same 2 Psi) at the
    boundary. 2: reduce-scatter every micro-step + one all-gather per step. 3: all-gather forward,
    all-gather backward and reduce-scatter, every micro-step, one collective per layer per pass.
    """
    size, dp, every = ctx.num_grad_params * ctx.elem_bytes, ctx.dp, stage is not ZeroStage.zero1
    if stage is ZeroStage.zero0:
        return [
            _ring("gradient all-reduce", Collective.all_reduce, size, dp, ctx.reduce_buckets, False, Window.backward)
        ]
    if stage is not ZeroStage.zero3:
        return [
            _ring(
                "gradient reduce-scatter",
                Collective.reduce_scatter,
                size,
                dp,
                ctx.reduce_buckets,
                every,
                _reduce_window(ctx),
            ),
            _ring(
                "parameter all-gather after the step",
                Collective.all_gather,
                size,
                dp,
                ctx.allgather_buckets,
                False,
                Window.exposed,
            ),
        ]
    return _stage3_terms(ctx)


def _stage3_terms(ctx: CommContext) -> list[CommTerm]:
    """Stage 3, with ZeRO++ if asked: qwZ halves the forward gather (INT8), hpZ keeps the backward gather inside
    the node, qgZ quarters the reduction (INT4)."""
    knobs, psi = ctx.knobs, ctx.num_params
    fwd_bytes = psi * (QWZ_BYTES if knobs.zero_quantized_weights else ctx.elem_bytes)
    rs_bytes = ctx.num_grad_params * (QGZ_BYTES if knobs.zero_quantized_gradients else ctx.elem_bytes)
    bwd_link = ctx.node.model_copy(update={"ranks": knobs.zero_hpz_partition_size}) if _hpz(ctx) else ctx.dp
    return [
        _ring(
            "forward parameter all-gather",
            Collective.all_gather,
            fwd_bytes,
            ctx.dp,
            ctx.layers,
            True,
            _gather_window(ctx, Window.forward),
        ),
        _ring(
            "backward parameter all-gather",
            Collective.all_gather,
            psi * ctx.elem_bytes,
            bwd_link,
            ctx.layers,
            True,
            _gather_window(ctx, Window.backward),
        ),
        _ring(
            "gradient reduce-scatter",
            Collective.reduce_scatter,
            rs_bytes,
            ctx.dp,
            ctx.layers,
            True,
            _reduce_window(ctx),
        ),
    ]


def _hpz(ctx: CommContext) -> bool:
    return ctx.knobs.zero_hpz_partition_size > 1


def offload_terms(stage: ZeroStage, ctx: CommContext) -> list[CommTerm]:
    """Host-link copies of one GPU's shard (Psi b / N).

    Optimizer offload: the gradient shard goes down after each reduction (every micro-step in stages 2-3,
    once per step in stage 1) and the updated shard comes up once per step. Param offload (stage 3): the
    shard comes up for the forward and again for the backward, every micro-step.
    """
    shard, terms = ctx.num_grad_params * ctx.elem_bytes / ctx.dp.ranks, []
    if ctx.knobs.offload_optimizer is not OffloadDevice.none and stage is not ZeroStage.zero0:
        count = ctx.layers if stage is ZeroStage.zero3 else ctx.reduce_buckets
        every = stage is not ZeroStage.zero1
        terms.append(_host("gradient shard to host", shard, ctx, count, every, _reduce_window(ctx)))
        terms.append(_host("updated shard from host", shard, ctx, 1, False, Window.exposed))
    if ctx.knobs.offload_param is not OffloadDevice.none and stage is ZeroStage.zero3:
        for name, window in (("forward", Window.forward), ("backward", Window.backward)):
            terms.append(
                _host(f"parameter shard from host ({name})", ctx.num_params * ctx.elem_bytes / ctx.dp.ranks, ctx,
                      ctx.layers, True, _gather_window(ctx, window))
            )
    return terms


def allgather_buckets(psi: int, knobs: DeepSpeedKnobs) -> int:
    """ceil(Psi / allgather_bucket_size) all-gathers; one for 0, which DeepSpeed v0.19.8 accepts (ge=0)."""
    return math.ceil(psi / knobs.allgather_bucket_size) if knobs.allgather_bucket_size else 1


def comm_context(
    params: ParamCount,
    arch: Architecture | None,
    hw: HardwareSpec,
    par: Parallelism,
    stage: ZeroStage,
    knobs: DeepSpeedKnobs,
    topology: Topology,
    elem_bytes: float,
    num_grad_params: int | None = None,
) -> CommContext:
    """Resolve links, layer and bucket counts and overlap switches once for a stage (`num_grad_params`: the
    parameters with gradients, a fine-tune's trainable ones; None: all)."""
    dp = dp_link(hw, par, topology)
    hpz = knobs.zero_hpz_partition_size
    if stage is ZeroStage.zero3 and hpz > 1 and (hpz > par.gpus_per_node or par.gpus_per_node % hpz):
        raise ZeroplanError(f"zero_hpz_partition_size ({hpz}) must divide the GPUs per node ({par.gpus_per_node})")
    psi = params.num_params
    grads = psi if num_grad_params is None else num_grad_params
    return CommContext(
        num_params=psi,
        num_grad_params=grads,
        elem_bytes=elem_bytes,
        dp=dp,
        node=node_link(hw, par.gpus_per_node, topology),
        hw=hw,
        layers=(arch.num_layers + arch.num_encoder_layers) if arch else allgather_buckets(psi, knobs),
        reduce_buckets=max(1, math.ceil(grads / knobs.reduce_bucket_size)),
        allgather_buckets=allgather_buckets(psi, knobs),
        prefetch=knobs.stage3_prefetch_bucket_size > 0,
        overlap_reduce=knobs.overlap_comm_for(stage),
        knobs=knobs,
    )
