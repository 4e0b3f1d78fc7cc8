"""One battery case in its own process: build the model from a config dict, train two steps, print one JSON line.

Run by battery.py (python validation/gpu/worker.py CASE_JSON); not meant to be called by hand.
"""

from __future__ import annotations

import json
import os
import sys
import time

STEPS = 2  # the second step is the steady state (optimizer states exist, the allocator has warmed)


def main() -> None:
    spec = json.loads(sys.argv[1])
    case, dry, model_cfg, shape = spec["case"], spec["dry_run"], spec["model"], spec["shape"]
    import torch

    out = {"context_used_bytes": None}
    device = torch.device("cpu" if dry else "cuda")
    if not dry:
        torch.cuda.init()
        free, total = torch.cuda.mem_get_info()
        out["context_used_bytes"] = total - free  # everything on the GPU right after init: context + others
        torch.cuda.memory._record_memory_history(max_entries=200_000)
    model, optimizer, engine = build(case, model_cfg, device, dry, shape)
    started = time.perf_counter()
    for _ in range(STEPS):
        step(case, model, optimizer, engine, shape, model_cfg["vocab_size"], device)
    out["step_seconds"] = (time.perf_counter() - started) / STEPS
    if not dry:
        torch.cuda.synchronize()
        out.update(counters(torch))
    print("BATTERY-RESULT " + json.dumps(out))


def build(case: dict, cfg: dict, device, dry: bool, shape: dict):
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("model_type", "architectures", "torch_dtype")})
    config._attn_implementation = case["attention"]
    if case["tuning"].startswith("qlora"):
        model = quantized(config)  # bitsandbytes 4-bit, loaded onto the GPU
    else:
        with device:  # initialised where it trains: no host copy, no host-side init time
            model = AutoModelForCausalLM.from_config(config)
    if case["checkpointing"] == "full":
        model.activation_checkpointing_enable()  # transformers 5: use_reentrant=False by default
    if case["tuning"] == "qlora-prep":
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model)
    if case["tuning"] != "full":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear",
                                                 use_dora=case["tuning"] == "dora", task_type="CAUSAL_LM"))
    if case["float8"]:
        from torchao.float8 import convert_to_float8_training

        convert_to_float8_training(model)
    if case["compile"]:
        model = torch.compile(model)
    params = [p for p in model.parameters() if p.requires_grad]
    engine = None
    if case["engine"].startswith("deepspeed"):
        return deepspeed_engine(case, model, params, shape)
    if case["engine"] == "fsdp2":
        fsdp2(model, device)
        params = [p for p in model.parameters() if p.requires_grad]
    return model, optimizer_of(case["optimizer"], params), engine


def quantized(config):
    """The random-weight model saved to a scratch folder and loaded back 4-bit (quantization happens in
    from_pretrained): peft's QLoRA recipe, NF4 with bf16 compute, nothing downloaded."""
    import tempfile

    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    with tempfile.TemporaryDirectory() as folder:
        AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).save_pretrained(folder)
        quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16)
        return AutoModelForCausalLM.from_pretrained(folder, quantization_config=quant, device_map={"": 0},
                                                    attn_implementation=config._attn_implementation)


def optimizer_of(name: str, params):
    import torch

    if name == "adamw-foreach":
        return torch.optim.AdamW(params, lr=1e-4, foreach=True)
    if name == "adamw-fused":
        return torch.optim.AdamW(params, lr=1e-4, fused=True)
    import bitsandbytes as bnb

    return {"adamw-8bit": bnb.optim.AdamW8bit, "paged-adamw": bnb.optim.PagedAdamW32bit}[name](params, lr=1e-4)


def init_process_group(backend: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("BATTERY_PORT", "29533"),
                      RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    if not dist.is_initialized():
        dist.init_process_group(backend, rank=0, world_size=1)


def fsdp2(model, device) -> None:
    """fully_shard per decoder layer and the root, bf16 parameters and reductions: zeroplan's --engine fsdp2
    bf16-mixed (MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=bf16); docs/engines.md)."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    init_process_group("gloo" if device.type == "cpu" else "nccl")
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
    for layer in model.base_model.model.model.layers if hasattr(model, "peft_config") else model.model.layers:
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)


def deepspeed_engine(case: dict, model, params, shape: dict):
    """deepspeed.initialize at world size 1, bf16, the stage's defaults; torch's AdamW (torch_adam: no JIT build of
    FusedAdam on the device)."""
    import deepspeed

    init_process_group("nccl")
    stage = int(case["engine"].split("-")[1])
    config = {"train_micro_batch_size_per_gpu": shape["micro_batch"], "gradient_accumulation_steps": 1,
              "bf16": {"enabled": True}, "zero_optimization": {"stage": stage},
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "torch_adam": True}}}
    engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=params, config=config)
    return engine, optimizer, engine


def step(case: dict, model, optimizer, engine, shape: dict, vocab: int, device) -> None:
    import torch

    ids = torch.randint(0, vocab, (shape["micro_batch"], shape["seq_len"]), device=device)
    dtype = torch.bfloat16
    with torch.autocast(device.type, dtype=dtype, enabled=engine is None and case["engine"] != "fsdp2"):
        if case["loss"] == "hf":  # transformers' own ForCausalLMLoss, as a Trainer computes it
            loss = model(input_ids=ids, labels=ids).loss
        else:
            loss = loss_of(case["loss"], model(input_ids=ids).logits, ids)
    if engine is not None:
        engine.backward(loss)
        engine.step()
        return
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


CHUNKS = 8  # torchtune's CEWithChunkedOutputLoss num_output_chunks default


def loss_of(kind: str, logits, ids):
    """no-upcast: cross-entropy on the 16-bit logits; chunked: the logits in 8 chunks along the sequence, each
    upcast on its own (torchtune's CEWithChunkedOutputLoss, over chunks of the whole logits here rather than the
    model's chunked output)."""
    import torch.nn.functional as F

    logits, labels = logits[:, :-1], ids[:, 1:]
    if kind == "chunked":
        total = sum(F.cross_entropy(lg.float().reshape(-1, lg.shape[-1]), lb.reshape(-1), reduction="sum")
                    for lg, lb in zip(logits.chunk(CHUNKS, dim=1), labels.chunk(CHUNKS, dim=1)))
        return total / labels.numel()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def counters(torch) -> dict:
    """The allocator's peaks, and the snapshot's segments with the gap at the allocated peak (replayed trace)."""
    from zeroplan.calibration.snapshot import replay

    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    segments = snap["segments"]
    allocated_now = sum(s["allocated_size"] for s in segments)
    reserved_now = sum(s["total_size"] for s in segments)
    trace = [(e["action"], e["size"]) for e in snap["device_traces"][0] if "size" in e]
    peak, reserved_peak, gap = replay(trace, allocated_now, reserved_now)
    at_peak = segments_at_allocated_peak(snap["device_traces"][0], allocated_now, len(segments))
    stats = torch.cuda.memory_stats()
    free, total = torch.cuda.mem_get_info()
    return {
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "device_used_after": total - free,
        "memory_stats": {k: stats[k] for k in ("allocated_bytes.all.peak", "reserved_bytes.all.peak",
                                               "active_bytes.all.peak", "num_alloc_retries") if k in stats},
        "segments_at_end": {"count": len(segments), "reserved": reserved_now, "allocated": allocated_now,
                            "large": sum(1 for s in segments if s["segment_type"] == "large")},
        "trace_replay": {"allocated_peak": peak, "reserved_peak": reserved_peak, "gap_at_allocated_peak": gap,
                         "segments_at_allocated_peak": at_peak},
    }


def segments_at_allocated_peak(trace: list, allocated_end: int, segments_end: int) -> int:
    """How many segments were mapped when allocated bytes peaked, walking the trace back from the snapshot."""
    allocated, count, peak, found = allocated_end, segments_end, allocated_end, segments_end
    for entry in reversed(trace):
        action, size = entry["action"], entry.get("size", 0)
        allocated -= {"alloc": size, "free_completed": -size}.get(action, 0)
        count -= {"segment_alloc": 1, "segment_free": -1}.get(action, 0)
        if allocated > peak:
            peak, found = allocated, count
    return found


if __name__ == "__main__":
    main()
