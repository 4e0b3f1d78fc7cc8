"""zeroplan's mesh throughput model (perf/mesh.py) beside published tp x pp x cp x dp runs (docs/throughput.md,
"Mesh validation"). Each case names its source; what the source does not state is in the 'assumed' column.

Run from the repository root: python -m benchmarks.mesh_validation
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from zeroplan.hardware.presets import load_hardware
from zeroplan.hardware.spec import HardwareSpec
from zeroplan.memory.mesh import MeshModel, stage_shares
from zeroplan.memory.setup import (
    Checkpointing,
    DeepSpeedKnobs,
    Parallelism,
    Precision,
    TrainingSetup,
    ZeroStage,
)
from zeroplan.models.mesh import Mesh, Schedule
from zeroplan.models.params import count_params
from zeroplan.models.presets import load_model, model_from_data
from zeroplan.perf.mesh import MeshStep, mesh_layout, mesh_step

A100 = load_hardware("a100-sxm-80gb")
H100 = load_hardware("h100-sxm-80gb")
NARAYANAN = "Narayanan et al. 2021, arXiv:2104.04473 Table 1"
LLAMA3 = "Llama 3 paper, arXiv:2407.21783 Table 4"
TITAN = "pytorch/torchtitan@31a17bf:benchmarks/llama3_h100_202412_torchtitan.md"
VOCAB, SEQ = 51200, 2048  # every Table 1 model (arXiv:2104.04473 section 5.1)


def gpt(hidden: int, layers: int, heads: int):
    """A Table 1 GPT: GPT-2's block (learned positions, LayerNorm, GELU 4h MLP, tied head) at that shape."""
    data = {"model_type": "gpt2", "vocab_size": VOCAB, "n_positions": SEQ, "n_embd": hidden, "n_layer": layers,
            "n_head": heads}
    return model_from_data(data, NARAYANAN, hf_name=f"gpt-h{hidden}-l{layers}")


def llama405b_128():
    """Llama 3.1 405B with 128 layers: its 126 on 16 (or 8) even stages, the paper's lighter first and last stages
    (one layer fewer, the embedding or head instead) stood in for by a whole layer each."""
    spec = load_model("llama-3.1-405b")
    return spec.model_copy(update={"config": spec.config.model_copy(update={"num_hidden_layers": 128})})


@dataclass(frozen=True)
class MeshCase:
    label: str
    source: str
    spec: object
    hw: HardwareSpec
    mesh: Mesh
    setup: TrainingSetup
    stage: ZeroStage
    measured: float
    unit: str  # "TFLOP/s/GPU" (Narayanan's eq. 3 FLOPs / step / GPUs), "MFU %" or "tok/s/GPU"
    assumed: str
    mfu_params: object = None  # the real model's count where the layout uses a stand-in (MFU's numerator)

    @cached_property
    def step(self) -> MeshStep:
        decoder = self.spec.config.decoder()
        par = Parallelism(gpus=self.mesh.gpus, nodes=self.mesh.gpus // self.hw.gpus_per_node)
        layout = mesh_layout(MeshModel(self.mesh, stage_shares(decoder, self.mesh)), self.spec.architecture(),
                             self.mfu_params or count_params(self.spec), self.hw, par)
        return mesh_step(layout, self.setup, self.stage, DeepSpeedKnobs())

    def predicted(self) -> float:
        if self.unit == "MFU %":
            return 100 * self.step.mfu
        if self.unit == "tok/s/GPU":
            return self.step.tokens_per_s_per_gpu
        arch = self.spec.architecture()
        h, layers = arch.hidden_size, arch.num_layers
        batch = self.setup.micro_batch * self.setup.grad_accum * self.mesh.dp
        flops = 96 * batch * SEQ * layers * h * h * (1 + SEQ / (6 * h) + VOCAB / (16 * layers * h))  # eq. 3
        return flops / (self.step.step_time_s * self.mesh.gpus) / 1e12


def _narayanan(size: str, heads: int, hidden: int, layers: int, t: int, p: int, gpus: int, batch: int, mbs: int,
               measured: float) -> MeshCase:
    mesh = Mesh(gpus=gpus, tp=t, pp=p)
    micro_batches = batch // (mesh.dp * mbs)
    return MeshCase(
        f"Megatron GPT {size}, {gpus} A100, t{t} p{p} d{mesh.dp}", NARAYANAN, gpt(hidden, layers, heads), A100,
        mesh, TrainingSetup(precision=Precision.fp16_mixed, seq_len=SEQ, micro_batch=mbs, grad_accum=micro_batches,
                            checkpointing=Checkpointing.full),
        ZeroStage.zero0, measured, "TFLOP/s/GPU",
        f"micro-batch {mbs} (not in Table 1); 1F1B; full recompute (eq. 3 counts it); DDP all-reduce")


def _llama3(gpus: int, cp: int, seq: int, per_dp: int, mfu_pct: float) -> MeshCase:
    mesh = Mesh(gpus=gpus, tp=8, pp=16, cp=cp, vpp=2, schedule=Schedule.interleaved, sequence_parallel=True)
    return MeshCase(
        f"Llama 3 405B, {gpus:,} H100, tp8 cp{cp} pp16 d{mesh.dp}, seq {seq:,}", LLAMA3, llama405b_128(), H100, mesh,
        TrainingSetup(seq_len=seq, micro_batch=1, grad_accum=per_dp), ZeroStage.zero1, mfu_pct, "MFU %",
        f"126 layers as 128 on 16 even stages; micro-batch 1 x {per_dp} (batch size/DP); interleaved v = 2; sequence parallel; no "
        "recompute; FSDP w/o reshard as ZeRO-1; their CP all-gathers K/V, ring modelled",
        mfu_params=count_params(load_model("llama-3.1-405b")))


def _titan_405b(schedule: Schedule, measured: float) -> MeshCase:
    mesh = Mesh(gpus=512, tp=8, pp=8, sequence_parallel=True, schedule=schedule,
                vpp=2 if schedule is Schedule.interleaved else None)
    return MeshCase(
        f"torchtitan Llama 3.1 405B, 512 H100, FSDP 8 TP 8 PP 8, {schedule.value}", TITAN, llama405b_128(), H100,
        mesh, TrainingSetup(seq_len=8192, micro_batch=1, grad_accum=32, checkpointing=Checkpointing.full),
        ZeroStage.zero3, measured, "tok/s/GPU",
        "Float8 + compile + AsyncTP run, modelled at bf16 peak x 0.40 with TP exposed; 126 layers as 128; seq 8192; "
        "micro-batch 1 x 32; FSDP as ZeRO-3" + ("; v = 2" if mesh.vpp else ""),
        mfu_params=count_params(load_model("llama-3.1-405b")))


NARAYANAN_CASES = (
    _narayanan("1.7B", 24, 2304, 24, 1, 1, 32, 512, 16, 137),
    _narayanan("3.6B", 32, 3072, 30, 2, 1, 64, 512, 16, 138),
    _narayanan("7.5B", 32, 4096, 36, 4, 1, 128, 512, 16, 142),
    _narayanan("18.4B", 48, 6144, 40, 8, 1, 256, 1024, 8, 135),
    _narayanan("39.1B", 64, 8192, 48, 8, 2, 512, 1536, 4, 138),
    _narayanan("76.1B", 80, 10240, 60, 8, 4, 1024, 1792, 2, 140),
    _narayanan("145.6B", 96, 12288, 80, 8, 8, 1536, 2304, 2, 148),
    _narayanan("310.1B", 128, 16384, 96, 8, 16, 1920, 2160, 1, 155),
    _narayanan("529.6B", 128, 20480, 105, 8, 35, 2520, 2520, 1, 163),
    _narayanan("1008.0B", 160, 25600, 128, 8, 64, 3072, 3072, 1, 163),
)

CASES = NARAYANAN_CASES + (
    _llama3(8192, 1, 8192, 32, 43),
    _llama3(16384, 1, 8192, 16, 41),
    _llama3(16384, 16, 131072, 16, 38),
    MeshCase(
        "torchtitan Llama 3.1 70B, 256 H100, FSDP 32 TP 8", TITAN, load_model("llama-3.1-70b"), H100,
        Mesh(gpus=256, tp=8, sequence_parallel=True),
        TrainingSetup(seq_len=8192, micro_batch=16, checkpointing=Checkpointing.full), ZeroStage.zero3, 829,
        "tok/s/GPU", "Float8 + compile run, modelled at bf16 peak x 0.40; seq 8192; local batch 16 as one micro-batch; "
        "FSDP as ZeRO-3"),
    _titan_405b(Schedule.one_f_one_b, 100),
    _titan_405b(Schedule.interleaved, 128),
)


def table() -> list[tuple[str, str, float, float, str]]:
    """(case, unit, measured, zeroplan, assumed) for every case, as docs/throughput.md shows them."""
    return [(c.label, c.unit, c.measured, c.predicted(), c.assumed) for c in CASES]


def main() -> None:
    print("| case | unit | measured | zeroplan | model / measured | assumed |\n|---|---|---:|---:|---:|---|")
    for label, unit, measured, predicted, assumed in table():
        print(f"| {label} | {unit} | {measured:,.1f} | {predicted:,.1f} | {predicted / measured:.2f} | {assumed} |")


if __name__ == "__main__":
    main()

