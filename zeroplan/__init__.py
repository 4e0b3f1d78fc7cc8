"""zeroplan: per-GPU memory, throughput and advice for DeepSpeed ZeRO / FSDP training runs.

The Python API (docs/api.md): `estimate`, `recommend`, `check_plans`, `count_params`, `model_names`,
`hardware_names`, `load_model`, `load_hardware`, `to_dict`, and the types they take and return. Each name
loads on first use (PEP 562): every `zeroplan.*` import, the CLI's included, runs this file first, so it
imports nothing but the version.
"""

from zeroplan.version import __version__

# name -> the module that defines it; the functions are zeroplan/api/'s (api/__init__.py re-exports them).
_EXPORTS = {
    **dict.fromkeys(("estimate", "recommend", "check_plans", "count_params", "model_names", "hardware_names",
                     "load_model", "load_hardware", "to_dict"), "zeroplan.api"),
    "Estimate": "zeroplan.memory.estimate",
    "StageEstimate": "zeroplan.memory.stage",
    "Advice": "zeroplan.advise.advice",
    "LayoutAdvice": "zeroplan.advise.layouts.result",
    "Schedule": "zeroplan.models.mesh",
    "CheckReport": "zeroplan.check.runner",
    "ParamCount": "zeroplan.models.architecture",
    "ModelSpec": "zeroplan.models.families",
    "HardwareSpec": "zeroplan.hardware.spec",
    "Topology": "zeroplan.hardware.spec",
    **dict.fromkeys(("ZeroStage", "Precision", "Optimizer", "Checkpointing", "Attention", "OffloadDevice", "Engine"),
                    "zeroplan.memory.setup"),
    "Unit": "zeroplan.units",
    "ZeroplanError": "zeroplan.errors",
}
__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'zeroplan' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(_EXPORTS[name]), name)
    globals()[name] = value  # once: later lookups find it without coming here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
