"""The article's setup through zeroplan's throughput model: ZeRO-3 overhead vs global batch, and where it crosses 11%.

Run from the repository root: python -m benchmarks.article_sweep
Setup (the source article, 3.1; docs/advisor.md):
8x H100 SXM on NVLink, Gemma2-9B (9,241,705,984 params, 42 layers, hidden 3584),
sequence 2048, bf16 mixed precision, flash attention, no activation checkpointing.
"""

from __future__ import annotations

from dataclasses import replace

from benchmarks.cases import GEMMA2_9B, GEMMA2_9B_ARCH
from zeroplan.hardware.presets import load_hardware
from zeroplan.hardware.spec import Topology
from zeroplan.memory.setup import DeepSpeedKnobs, Parallelism, TrainingSetup, ZeroStage
from zeroplan.perf.sweep import find_overhead_crossing, sweep_global_batch
from zeroplan.perf.throughput import estimate_throughput, throughput_by_stage

ARTICLE_THRESHOLD_PCT = 11.0  # "with a batch size above 512 the ZeRO-3 loss stays within 11%"
GLOBAL_BATCHES = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
MICRO_BATCH_CAPS = (1, 2, 4, 8, None)  # the memory limit on sequences per GPU per micro-step; None = no limit
HW = load_hardware("h100-sxm-80gb")
PAR = Parallelism(gpus=8, nodes=1)
SETUP = TrainingSetup(seq_len=2048)
DEFAULTS = DeepSpeedKnobs()  # DeepSpeed defaults: overlap_comm on for stage 3 only, prefetch on
NO_OVERLAP = DeepSpeedKnobs(overlap_comm=False, stage3_prefetch_bucket_size=0)
LADDER_ZEROPP = DeepSpeedKnobs(
    overlap_comm=True, zero_quantized_weights=True, zero_quantized_gradients=True, zero_hpz_partition_size=8
)


def sweep(knobs: DeepSpeedKnobs, cap: int | None):
    return sweep_global_batch(
        GEMMA2_9B, GEMMA2_9B_ARCH, HW, SETUP, PAR, knobs, GLOBAL_BATCHES, Topology.nvlink, max_micro_batch=cap
    )


def cap_label(cap: int | None) -> str:
    return "mbs<=" + (str(cap) if cap else "inf")


def overhead_table(title: str, knobs: DeepSpeedKnobs) -> None:
    sweeps = {cap: sweep(knobs, cap) for cap in MICRO_BATCH_CAPS}
    print(f"\n{title}\nZeRO-3 overhead vs ZeRO-0 (%), by global batch and micro-batch cap (mbs x GA per GPU)")
    print(f"{'global':>7} | " + " | ".join(f"{cap_label(c):>17}" for c in MICRO_BATCH_CAPS))
    for i, batch in enumerate(GLOBAL_BATCHES):
        cells = []
        for cap in MICRO_BATCH_CAPS:
            p = sweeps[cap][i]
            cells.append(f"{p.overhead_pct():6.1f} ({p.micro_batch:>3}x{p.grad_accum:<3})")
        print(f"{batch:>7} | " + " | ".join(f"{c:>17}" for c in cells))
    for cap in MICRO_BATCH_CAPS:
        hit = find_overhead_crossing(sweeps[cap], ARTICLE_THRESHOLD_PCT)
        where = (
            f"global batch {hit.global_batch} ({hit.tokens_per_micro_step} tokens per micro-step)"
            if hit
            else "never within the sweep"
        )
        print(f"  {cap_label(cap)}: overhead <= {ARTICLE_THRESHOLD_PCT:g}% from {where}")


def stage_table(knobs: DeepSpeedKnobs, micro_batch: int, global_batch: int) -> None:
    (point,) = sweep_global_batch(
        GEMMA2_9B, GEMMA2_9B_ARCH, HW, SETUP, PAR, knobs, [global_batch], Topology.nvlink, max_micro_batch=micro_batch
    )
    print(
        f"\nAll stages at global batch {global_batch}, micro-batch {point.micro_batch} x GA {point.grad_accum}, "
        "DeepSpeed defaults"
    )
    heads = ("stage", "step s", "compute", "comm", "exposed", "tok/s/GPU", "MFU", "overhead")
    print(" ".join(f"{h:>{w}}" for h, w in zip(heads, (5, 7, 8, 7, 8, 10, 6, 9), strict=True)))
    for t in point.stages:
        print(
            f"{int(t.stage):>5} {t.step_time_s:7.3f} {t.compute_s:8.3f} {t.comm_s:7.3f} {t.exposed_comm_s:8.3f} "
            f"{t.tokens_per_s_per_gpu:10.0f} {t.mfu:6.1%} {t.overhead_vs_zero0_pct:8.1f}%"
        )


LADDER = (
    ("ZeRO-3, no overlap (overlap_comm false, prefetch 0)", NO_OVERLAP),
    ("+ reduce-scatter overlap (overlap_comm true)", replace(NO_OVERLAP, overlap_comm=True)),
    ("ZeRO-3, reductions serialised, gathers prefetched", DeepSpeedKnobs(overlap_comm=False)),
    ("+ 8-bit weights (qwZ)", DeepSpeedKnobs(overlap_comm=False, zero_quantized_weights=True)),
    (
        "+ 8-bit weights + 4-bit gradients (qwZ + qgZ)",
        DeepSpeedKnobs(overlap_comm=False, zero_quantized_weights=True, zero_quantized_gradients=True),
    ),
    ("+ qwZ + qgZ + overlap_comm", DeepSpeedKnobs(zero_quantized_weights=True, zero_quantized_gradients=True)),
    ("DeepSpeed defaults (prefetch + overlap_comm)", DEFAULTS),
)


def ladder(micro_batch: int, global_batch: int) -> None:
    print(f"\nThe article's 21.5% -> 13% (section 6), global batch {global_batch}, micro-batch {micro_batch}:")
    for label, knobs in LADDER:
        (p,) = sweep_global_batch(
            GEMMA2_9B,
            GEMMA2_9B_ARCH,
            HW,
            SETUP,
            PAR,
            knobs,
            [global_batch],
            Topology.nvlink,
            max_micro_batch=micro_batch,
        )
        print(f"  {label:<55} ZeRO-3 overhead {p.overhead_pct():5.1f}%")


TOPOLOGIES = (
    ("h100-sxm-80gb", Parallelism(gpus=8), Topology.nvlink),
    ("h100-sxm-80gb", Parallelism(gpus=8), Topology.pcie),
    ("h100-sxm-80gb", Parallelism(gpus=32, nodes=4), Topology.multinode),
    ("a100-sxm-80gb", Parallelism(gpus=8), Topology.nvlink),
    ("a100-sxm-80gb", Parallelism(gpus=32, nodes=4), Topology.multinode),
)


def topology_table(micro_batch: int, grad_accum: int) -> None:
    knobs = DeepSpeedKnobs(overlap_comm=True)
    setup = replace(SETUP, micro_batch=micro_batch, grad_accum=grad_accum)
    print(f"\nC. Topology, Gemma2-9B, micro-batch {micro_batch} x GA {grad_accum}, overlap_comm true for every stage")
    print(f"{'hardware':>14} {'topology':>9} {'GPUs':>5} | overhead vs ZeRO-0 (%) z1 / z2 / z3 | ZeRO-3 tok/s/GPU")
    for name, par, topology in TOPOLOGIES:
        stages = throughput_by_stage(GEMMA2_9B, GEMMA2_9B_ARCH, load_hardware(name), setup, par, knobs, topology)
        cells = " / ".join(f"{t.overhead_vs_zero0_pct:5.1f}" for t in stages[1:])
        print(f"{name:>14} {topology.value:>9} {par.gpus:>5} | {cells:>33} | {stages[3].tokens_per_s_per_gpu:16.0f}")
    slow = replace(load_hardware("a100-sxm-80gb"), nic_gbps_per_gpu=12.5 / 8)
    par = Parallelism(gpus=32, nodes=4)
    for label, zknobs in (("ZeRO-3", knobs), ("ZeRO++ (qwZ+qgZ+hpZ 8)", LADDER_ZEROPP)):
        t = estimate_throughput(GEMMA2_9B, GEMMA2_9B_ARCH, slow, setup, par, ZeroStage.zero3, zknobs)
        print(
            f"  A100 x32 on one 100 Gb/s NIC per node, {label}: {t.tokens_per_s_per_gpu:.0f} tok/s/GPU, "
            f"overhead {t.overhead_vs_zero0_pct:.1f}%"
        )


def main() -> None:
    print(
        f"{HW.name} x{PAR.gpus} ({HW.intra_node_busbw_gbps:g} GB/s busbw, MFU {HW.default_mfu:.0%}), Gemma2-9B, "
        f"seq {SETUP.seq_len}, {SETUP.precision.value}"
    )
    overhead_table("A. DeepSpeed defaults (stage 3: prefetch and overlap_comm on)", DEFAULTS)
    overhead_table("B. No overlap (overlap_comm false, stage3_prefetch_bucket_size 0)", NO_OVERLAP)
    stage_table(DEFAULTS, micro_batch=2, global_batch=512)
    for mbs in (1, 2):
        ladder(micro_batch=mbs, global_batch=512)
    for mbs in (1, 4):
        topology_table(micro_batch=mbs, grad_accum=8)


if __name__ == "__main__":
    main()
