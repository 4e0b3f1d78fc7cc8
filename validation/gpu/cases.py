"""The GPU battery's matrix: each case a single-GPU training step, and the `zeroplan estimate` arguments that describe
the same run (so tests/test_gpu_battery.py can compare them without a GPU)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

# A Llama-architecture model from a config dict, random weights (nothing downloaded). GPU size: ~0.9 B
# parameters, big enough that the terms dwarf the allocator's 2 MiB rounding; dry-run size: a few MiB on CPU.
GPU_MODEL = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 2048,
             "intermediate_size": 5632, "num_hidden_layers": 12, "num_attention_heads": 16, "num_key_value_heads": 4,
             "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
             "torch_dtype": "bfloat16"}
DRY_MODEL = {**GPU_MODEL, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 128}
GPU_SHAPE = {"seq_len": 1024, "micro_batch": 2}
DRY_SHAPE = {"seq_len": 32, "micro_batch": 1}


@dataclass(frozen=True)
class Case:
    name: str
    tuning: str = "full"  # full, lora, dora, qlora, qlora-prep (peft.prepare_model_for_kbit_training)
    optimizer: str = "adamw-foreach"  # adamw-foreach, adamw-fused, adamw-8bit, paged-adamw
    checkpointing: str = "none"  # none, full
    loss: str = "hf"  # hf, no-upcast, chunked
    attention: str = "sdpa"  # eager, sdpa, flash_attention_2
    compile: bool = False
    float8: bool = False
    engine: str = "none"  # none, deepspeed-0..3, fsdp2
    needs_cuda: tuple[str, ...] = field(default=())  # what makes the case GPU-only (skipped in --dry-run)

    def as_dict(self) -> dict:
        return asdict(self)


CASES = (
    Case("full-adamw-foreach"),
    Case("full-adamw-fused", optimizer="adamw-fused", needs_cuda=("fused AdamW",)),
    Case("full-checkpointing", checkpointing="full"),
    Case("full-eager", attention="eager"),
    Case("full-flash", attention="flash_attention_2", needs_cuda=("flash-attn",)),
    Case("full-no-upcast-loss", loss="no-upcast"),
    Case("full-chunked-loss", loss="chunked"),
    Case("full-adamw-8bit", optimizer="adamw-8bit", needs_cuda=("bitsandbytes",)),
    Case("full-paged-adamw", optimizer="paged-adamw", needs_cuda=("bitsandbytes",)),
    Case("lora", tuning="lora"),
    Case("lora-checkpointing", tuning="lora", checkpointing="full"),
    Case("dora", tuning="dora"),
    Case("qlora", tuning="qlora", needs_cuda=("bitsandbytes",)),
    Case("qlora-prepared", tuning="qlora-prep", checkpointing="full", needs_cuda=("bitsandbytes",)),
    Case("deepspeed-zero0", engine="deepspeed-0", needs_cuda=("DeepSpeed's CUDA accelerator",)),
    Case("deepspeed-zero1", engine="deepspeed-1", needs_cuda=("DeepSpeed's CUDA accelerator",)),
    Case("deepspeed-zero2", engine="deepspeed-2", needs_cuda=("DeepSpeed's CUDA accelerator",)),
    Case("deepspeed-zero3", engine="deepspeed-3", needs_cuda=("DeepSpeed's CUDA accelerator",)),
    Case("fsdp2", engine="fsdp2"),
    # last: the slowest to start (inductor compiles), so a spent budget skips them rather than the rest
    Case("full-compile", compile=True, needs_cuda=("torch.compile (inductor, slow on CPU)",)),
    Case("full-float8", float8=True, compile=True, needs_cuda=("torchao float8 (sm89+)",)),
)
DRY_CASES = ("full-adamw-foreach", "full-checkpointing", "lora", "dora", "fsdp2", "qlora")  # qlora: the skip path


def zeroplan_args(case: Case, model_path: str, shape: dict) -> list[str]:
    """`zeroplan estimate` arguments for the same run (docs/calibrate.md, "The GPU battery")."""
    engine, stage = ("deepspeed", case.engine.split("-")[1]) if case.engine.startswith("deepspeed") else (
        case.engine, "3" if case.engine == "fsdp2" else "0")
    optimizer = {"adamw-foreach": "adamw", "adamw-fused": "adamw"}.get(case.optimizer, case.optimizer)
    args = ["estimate", "--model", model_path, "--gpus", "1", "--hardware", "h100-sxm-80gb", "--engine", engine,
            "--stage", stage, "--precision", "bf16-mixed", "--optimizer", optimizer,
            "--seq-len", str(shape["seq_len"]), "--micro-batch", str(shape["micro_batch"]),
            "--checkpointing", case.checkpointing, "--loss", case.loss,
            "--attention", "eager" if case.attention == "eager" else "flash"]
    if case.tuning in ("lora", "dora", "qlora", "qlora-prep"):
        args += ["--lora-rank", "16", "--lora-targets", "all-linear"]
    if case.tuning == "dora":
        args.append("--dora")
    if case.tuning.startswith("qlora"):
        args.append("--qlora")
    return args
