"""zeroplan's throughput model beside published measurements (each case names its source; docs/throughput.md 6).

Run from the repository root: python -m benchmarks.perf_validation
FSDP FULL_SHARD is modelled as ZeRO-3 (same 3 Psi per micro-step; docs/throughput.md 2). Where a run's
micro-batch or accumulation is not in the reference row, the value used is stated in the 'assumed' column.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from benchmarks.cases import (
    GRANITE_7B,
    GRANITE_7B_ARCH,
    LLAMA31_8B,
    LLAMA31_8B_ARCH,
    MPT_7B,
    MPT_7B_ARCH,
    dense,
)
from zeroplan.hardware.presets import load_hardware
from zeroplan.hardware.spec import HardwareSpec
from zeroplan.memory.setup import (
    Checkpointing,
    DeepSpeedKnobs,
    Parallelism,
    Precision,
    TrainingSetup,
    ZeroStage,
)
from zeroplan.models.architecture import Architecture, ParamCount
from zeroplan.perf.throughput import Throughput, estimate_throughput

H100 = load_hardware("h100-sxm-80gb")
H200 = load_hardware("h200-141gb")
A100_80 = load_hardware("a100-sxm-80gb")
V100 = load_hardware("v100-sxm-32gb")
ZEROPP = DeepSpeedKnobs(zero_quantized_weights=True, zero_quantized_gradients=True, zero_hpz_partition_size=16)


@dataclass(frozen=True)
class Case:
    """One published run: what ran, what was measured, and the unit compared."""

    label: str
    source: str
    params: ParamCount
    arch: Architecture | None
    hw: HardwareSpec
    par: Parallelism
    setup: TrainingSetup
    stage: ZeroStage
    measured: float
    unit: str  # "tok/s/GPU" or "TFLOPS/GPU" (achieved, recompute included)
    assumed: str
    knobs: DeepSpeedKnobs = DeepSpeedKnobs()

    def predict(self) -> Throughput:
        return estimate_throughput(self.params, self.arch, self.hw, self.setup, self.par, self.stage, self.knobs)

    def predicted(self) -> float:
        t = self.predict()
        return t.tokens_per_s_per_gpu if self.unit == "tok/s/GPU" else t.achieved_tflops


def _v100_nic(per_node_gbit: int) -> HardwareSpec:
    return replace(V100, nic_gbps_per_gpu=per_node_gbit / 8 / V100.gpus_per_node)


def _zeropp_case(size: str, psi: float, gbit: int, knobs: DeepSpeedKnobs, measured: float) -> Case:
    which = "ZeRO++" if knobs.zero_quantized_weights else "ZeRO-3"
    return Case(
        f"{which} {size} GPT, 384 V100, {gbit} Gb/s/node, 1K tok/GPU",
        "deepspeedai/DeepSpeed@edaa7221:blogs/zeropp/assets/images/eval1.png, eval2.png",
        dense(int(psi), 0),
        None,
        _v100_nic(gbit),
        Parallelism(gpus=384, nodes=24),
        TrainingSetup(precision=Precision.fp16_mixed, seq_len=1024, checkpointing=Checkpointing.full),
        ZeroStage.zero3,
        measured,
        "TFLOPS/GPU",
        "seq 1024 x mbs 1; no architecture (layers from buckets)",
        knobs,
    )


CASES = (
    Case(
        "llm-foundry MPT-7B, 8x H100, FULL_SHARD",
        "mosaicml/llm-foundry@8c8dd48:scripts/train/benchmarking/README.md",
        MPT_7B,
        MPT_7B_ARCH,
        H100,
        Parallelism(gpus=8),
        TrainingSetup(seq_len=2048, micro_batch=6),
        ZeroStage.zero3,
        10_643,
        "tok/s/GPU",
        "as stated (mbs 6, no AC)",
    ),
    Case(
        "llm-foundry MPT-7B, 128 H100, FULL_SHARD",
        "mosaicml/llm-foundry@8c8dd48:scripts/train/benchmarking/README.md",
        MPT_7B,
        MPT_7B_ARCH,
        H100,
        Parallelism(gpus=128, nodes=16),
        TrainingSetup(seq_len=2048, micro_batch=6),
        ZeroStage.zero3,
        10_475,
        "tok/s/GPU",
        "mbs 6 as on 8 GPUs; 8x400G per node",
    ),
    Case(
        "llm-foundry MPT-7B, 8x A100-80GB, FULL_SHARD",
        "mosaicml/llm-foundry@8c8dd48:scripts/train/benchmarking/README.md",
        MPT_7B,
        MPT_7B_ARCH,
        A100_80,
        Parallelism(gpus=8),
        TrainingSetup(seq_len=2048, micro_batch=6),
        ZeroStage.zero3,
        4_641,
        "tok/s/GPU",
        "mbs 6 (not in row)",
    ),
    Case(
        "torchtitan Llama-3.1-8B, 8x H100, FSDP",
        "pytorch/torchtitan@b5bcd76:benchmarks/llama3_h100_202412_torchtitan.md",
        LLAMA31_8B,
        LLAMA31_8B_ARCH,
        H100,
        Parallelism(gpus=8),
        TrainingSetup(seq_len=8192, micro_batch=2, checkpointing=Checkpointing.selective),
        ZeroStage.zero3,
        5_762,
        "tok/s/GPU",
        "their H100 is the 96 GB / 500 W part; SXM5 preset used",
    ),
    Case(
        "torchtitan Llama-3.1-8B, 128 H100, FSDP",
        "pytorch/torchtitan@b5bcd76:benchmarks/llama3_h100_202412_torchtitan.md",
        LLAMA31_8B,
        LLAMA31_8B_ARCH,
        H100,
        Parallelism(gpus=128, nodes=16),
        TrainingSetup(seq_len=8192, micro_batch=2, checkpointing=Checkpointing.selective),
        ZeroStage.zero3,
        5_605,
        "tok/s/GPU",
        "400 Gb/s per GPU as preset",
    ),
    Case(
        "HF Granite-7B, 4x A100, DeepSpeed ZeRO-3",
        "https://huggingface.co/blog/deepspeed-to-fsdp-and-back",
        GRANITE_7B,
        GRANITE_7B_ARCH,
        A100_80,
        Parallelism(gpus=4),
        TrainingSetup(seq_len=4096, micro_batch=8, checkpointing=Checkpointing.full),
        ZeroStage.zero3,
        3_094.5,
        "tok/s/GPU",
        "seq 4096 x bs 8 (= 3094.5 x 10.6 s), full AC, A100-80GB",
    ),
    Case(
        "HF Granite-7B, 4x A100, FSDP FULL_SHARD",
        "https://huggingface.co/blog/deepspeed-to-fsdp-and-back",
        GRANITE_7B,
        GRANITE_7B_ARCH,
        A100_80,
        Parallelism(gpus=4),
        TrainingSetup(seq_len=4096, micro_batch=8, checkpointing=Checkpointing.full),
        ZeroStage.zero3,
        3_158.7,
        "tok/s/GPU",
        "as the ZeRO-3 row",
    ),
    Case(
        "DeepSpeed ZeRO-2 Llama-3.1-8B, 8x H200",
        "stas00/ml-engineering@744d01e:insights/when-to-upgrade-gpus/README.md",
        LLAMA31_8B,
        LLAMA31_8B_ARCH,
        H200,
        Parallelism(gpus=8),
        TrainingSetup(seq_len=8192, micro_batch=1),
        ZeroStage.zero2,
        461,
        "TFLOPS/GPU",
        "GA 1, overlap_comm true (not in row)",
        DeepSpeedKnobs(overlap_comm=True),
    ),
    _zeropp_case("18B", 18e9, 400, DeepSpeedKnobs(), 25),
    _zeropp_case("18B", 18e9, 400, ZEROPP, 35),
    _zeropp_case("18B", 18e9, 100, DeepSpeedKnobs(), 14),
    _zeropp_case("18B", 18e9, 100, ZEROPP, 31),
    _zeropp_case("138B", 138e9, 400, DeepSpeedKnobs(), 23),
    _zeropp_case("138B", 138e9, 400, ZEROPP, 36),
    _zeropp_case("138B", 138e9, 100, DeepSpeedKnobs(), 11),
    _zeropp_case("138B", 138e9, 100, ZEROPP, 22),
)


def main() -> None:
    print("| case | unit | measured | zeroplan | model / measured | assumed |\n|---|---|---:|---:|---:|---|")
    for case in CASES:
        predicted = case.predicted()
        print(
            f"| {case.label} | {case.unit} | {case.measured:,.1f} | {predicted:,.1f} | "
            f"{predicted / case.measured:.2f} | {case.assumed} |"
        )


if __name__ == "__main__":
    main()
