"""The optimizer step timed where it runs (perf.optimizer_step): HBM on the GPU, host memory for CPUAdam, NVMe."""

from dataclasses import replace

import pytest

from zeroplan.hardware.presets import load_hardware
from zeroplan.memory.setup import (
    DeepSpeedKnobs,
    Engine,
    OffloadDevice,
    OptimizerImpl,
    Parallelism,
    TrainingSetup,
    ZeroStage,
)
from zeroplan.models.architecture import ParamCount
from zeroplan.perf.optimizer_step import (
    COPY_BYTES,
    DEFAULT_HOST_MEMORY_GBPS,
    DEFAULT_NVME_GBPS,
    FUSED_BYTES,
    NVME_BYTES,
    UNFUSED_BYTES,
    shard_elements,
    step_time,
)
from zeroplan.perf.throughput import estimate_throughput

H100 = load_hardware("h100-sxm-80gb")
N = 8_000_000_000
NONE, CPU, NVME = OffloadDevice.none, OffloadDevice.cpu, OffloadDevice.nvme


def test_gpu_step_is_the_shard_over_hbm():
    shard = shard_elements(N, ZeroStage.zero3, 8)
    assert shard == N // 8 and shard_elements(N, ZeroStage.zero0, 8) == N
    fused = step_time(shard, TrainingSetup(), H100, ZeroStage.zero3, NONE)  # DeepSpeed FusedAdam + the bf16 copy
    assert fused.seconds == pytest.approx(shard * (FUSED_BYTES + COPY_BYTES) / (H100.hbm_bandwidth_tbps * 1e12))
    foreach = step_time(shard, TrainingSetup(), H100, ZeroStage.zero3, NONE, Engine.fsdp2)  # PyTorch's default
    assert foreach.seconds == pytest.approx(shard * UNFUSED_BYTES / (H100.hbm_bandwidth_tbps * 1e12))
    fused_torch = step_time(shard, TrainingSetup(optimizer_impl=OptimizerImpl.fused), H100, ZeroStage.zero3, NONE,
                            Engine.fsdp2)
    assert fused_torch.seconds < foreach.seconds


def test_cpu_adam_shares_the_hosts_memory_bandwidth():
    shard = N // 8
    host = step_time(shard, TrainingSetup(), H100, ZeroStage.zero3, CPU)
    node = shard * H100.gpus_per_node
    assert host.where == "host" and "DeepSpeedCPUAdam" in host.note
    assert host.seconds == pytest.approx(node * FUSED_BYTES / (DEFAULT_HOST_MEMORY_GBPS * 1e9))
    faster = step_time(shard, TrainingSetup(), replace(H100, host_memory_gbps=2 * DEFAULT_HOST_MEMORY_GBPS),
                       ZeroStage.zero3, CPU)
    assert faster.seconds == pytest.approx(host.seconds / 2) and "hardware profile" in faster.note


def test_nvme_reads_and_writes_the_states_every_step():
    shard = N // 8
    host = step_time(shard, TrainingSetup(), H100, ZeroStage.zero3, CPU)
    nvme = step_time(shard, TrainingSetup(), H100, ZeroStage.zero3, NVME)
    node = shard * H100.gpus_per_node
    assert nvme.seconds - host.seconds == pytest.approx(2 * node * NVME_BYTES / (DEFAULT_NVME_GBPS * 1e9))


def test_offload_ranks_where_it_runs():
    params = ParamCount(num_params=N, num_embedding_params=0, largest_layer_params=N // 32, num_active_params=N)
    par, setup = Parallelism(gpus=8), TrainingSetup(seq_len=4096)

    def step(opt, param):
        knobs = DeepSpeedKnobs(offload_optimizer=opt, offload_param=param)
        return estimate_throughput(params, None, H100, setup, par, ZeroStage.zero3, knobs)

    gpu, cpu, nvme = step(NONE, NONE), step(CPU, CPU), step(NVME, NVME)
    assert gpu.step_time_s < cpu.step_time_s < nvme.step_time_s
    assert gpu.optimizer_step_s < cpu.optimizer_step_s < nvme.optimizer_step_s
    for t in (gpu, cpu, nvme):
        assert t.step_time_s == pytest.approx(t.compute_s + t.exposed_comm_s + t.optimizer_step_s)
        assert any(a.startswith("optimizer step ") for a in t.assumptions)
