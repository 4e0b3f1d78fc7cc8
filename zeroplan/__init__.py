"""zeroplan: per-GPU memory, throughput and advice for DeepSpeed ZeRO / FSDP training runs."""

__version__ = "0.1.0"
