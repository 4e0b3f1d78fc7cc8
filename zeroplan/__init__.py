"""zeroplan: per-GPU memory, throughput and advice for DeepSpeed ZeRO / FSDP training runs."""

from zeroplan.version import __version__

__all__ = ["__version__"]
