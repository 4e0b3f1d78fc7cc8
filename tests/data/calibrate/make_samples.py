"""Writes the calibrate sample records: one synthetic single-GPU run (model.json, a full fine-tune, plain PyTorch
AdamW, seq 1024, micro-batch 2), in each record format zeroplan reads. SYNTHETIC: the numbers are chosen, not
measured; the structure follows each format's source (docs/calibrate.md, "Records"). No GPU was at hand.

    /work/venv/bin/python tests/data/calibrate/make_samples.py
"""

import json
import pickle
from pathlib import Path

HERE = Path(__file__).resolve().parent
GIB, MIB = 2**30, 2**20


def mib2(gib: float) -> int:
    """bytes, rounded to the caching allocator's 2 MiB granularity for large blocks"""
    return round(gib * GIB / (2 * MIB)) * 2 * MIB


PARAMS, STATES, GRADS, TEMPS = mib2(2.504), mib2(5.008), mib2(2.504), mib2(2.934)
END_ALLOCATED = PARAMS + STATES
PEAK = END_ALLOCATED + GRADS + TEMPS  # during the optimizer step
RESERVED = mib2(13.90)
SMI_MIB = 14970  # nvidia-smi memory.used: reserved + context


def frame(name: str, line: int) -> dict:
    return {"filename": "train.py", "line": line, "name": name}


def snapshot() -> dict:
    """torch.cuda.memory._snapshot()'s shape (torch==2.13.0:torch/cuda/memory.py, `_snapshot` docstring)."""
    sizes = [mib2(4.0), mib2(4.0), mib2(3.0), RESERVED - mib2(11.0)]
    used = [mib2(4.0), mib2(3.512), 0, END_ALLOCATED - mib2(7.512)]
    segments, address = [], 0x7F0000000000
    for total, allocated in zip(sizes, used):
        blocks = [{"address": address, "size": allocated, "requested_size": allocated, "state": "active_allocated",
                   "frames": [frame("step", 42)]}] if allocated else []
        if total > allocated:
            blocks.append({"address": address + allocated, "size": total - allocated, "requested_size": 0,
                           "state": "inactive", "frames": []})
        segments.append({"device": 0, "address": address, "total_size": total, "stream": 0, "segment_type": "large",
                         "segment_pool_id": (0, 0), "allocated_size": allocated, "active_size": allocated,
                         "requested_size": allocated, "is_expandable": False, "frames": [], "blocks": blocks})
        address += total
    trace = [("segment_alloc", mib2(3.0)), ("alloc", GRADS), ("alloc", TEMPS), ("free_requested", TEMPS),
             ("free_completed", TEMPS), ("free_requested", GRADS), ("free_completed", GRADS)]
    entries = [{"action": a, "addr": 0x7F0000000000, "size": s, "stream": 0, "time_us": 1000 + i,
                "frames": [frame("step", 40 + i)]} for i, (a, s) in enumerate(trace)]
    return {"segments": segments, "device_traces": [entries],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1}}


def memory_stats() -> dict:
    """torch.cuda.memory_stats() keys (torch==2.13.0:torch/cuda/memory.py, `memory_stats` docstring), a subset."""
    out = {}
    for stat, current, peak in (("allocated_bytes", END_ALLOCATED, PEAK), ("reserved_bytes", RESERVED, RESERVED),
                                ("active_bytes", END_ALLOCATED, PEAK), ("requested_bytes", END_ALLOCATED, PEAK)):
        for pool in ("all", "large_pool", "small_pool"):
            share = {"all": 1, "large_pool": 1, "small_pool": 0}[pool]
            out.update({f"{stat}.{pool}.current": current * share, f"{stat}.{pool}.peak": peak * share,
                        f"{stat}.{pool}.allocated": peak * share * 2, f"{stat}.{pool}.freed": (peak * 2 - current) * share})
    out.update({"num_alloc_retries": 0, "num_ooms": 0, "num_sync_all_streams": 0, "max_split_size": -1})
    return out


def main() -> None:
    (HERE / "snapshot.pickle").write_bytes(pickle.dumps(snapshot(), protocol=pickle.HIGHEST_PROTOCOL))
    (HERE / "memory_stats.json").write_text(json.dumps(memory_stats(), indent=1) + "\n")
    (HERE / "nvidia-smi.csv").write_text(f"memory.used [MiB]\n{SMI_MIB - 900} MiB\n{SMI_MIB} MiB\n")
    before, init = 0, PARAMS
    train = {"train_runtime": 12.5, "train_loss": 10.4, "epoch": 1.0, "step": 2, "before_init_mem_gpu": before,
             "init_mem_gpu_alloc_delta": init, "init_mem_gpu_peaked_delta": 0,
             "train_mem_gpu_alloc_delta": STATES, "train_mem_gpu_peaked_delta": PEAK - init - STATES}
    state = {"global_step": 2, "epoch": 1.0, "log_history": [{"loss": 10.41, "step": 1}, train]}
    (HERE / "trainer_state.json").write_text(json.dumps(state, indent=2) + "\n")
    lines = ["***** train metrics *****"] + [f"  {k:<26} = {v >> 20}MB" for k, v in train.items() if "_mem_" in k]
    (HERE / "trainer.log").write_text("\n".join(lines) + "\n")
    gib = lambda b: round(b / GIB, 2)  # noqa: E731
    ds = [("After initializing ZeRO optimizer", END_ALLOCATED, END_ALLOCATED, RESERVED - mib2(3.0)),
          ("After step", END_ALLOCATED, PEAK, RESERVED)]
    text = "".join(f"[INFO] {msg}\n[INFO] MA {gib(ma)} GB         Max_MA {gib(mx)} GB         CA {gib(ca)} GB         "
                   f"Max_CA {round(ca / GIB)} GB \n[INFO] CPU Virtual Memory:  used = 21.3 GB, percent = 9.1%\n"
                   for msg, ma, mx, ca in ds)
    (HERE / "deepspeed.log").write_text(text)
    titan = "".join(f"[rank0]:[titan] 2026-12-06 19:0{i}:00,000 - root - INFO - \x1b[31mstep: {i}  \x1b[32mloss: 10.4{i}  "
                    f"\x1b[33mmemory: {RESERVED / GIB:5.2f}GiB({100 * RESERVED / (79.65 * GIB):.2f}%)  \x1b[34mtps: 1,234\n"
                    for i in (1, 2))
    (HERE / "torchtitan.log").write_text(titan)
    prefix = "DeviceStatsMonitor.on_train_batch_end/"
    (HERE / "lightning_metrics.csv").write_text(
        f"epoch,step,{prefix}allocated_bytes.all.peak,{prefix}reserved_bytes.all.peak,train_loss\n"
        f"0,0,{float(PEAK)},{float(RESERVED)},\n0,1,{float(PEAK)},{float(RESERVED)},10.4\n")


if __name__ == "__main__":
    main()
