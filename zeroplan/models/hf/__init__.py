"""Any model transformers can build: counted on the meta device, its activations measured by one meta forward.

The `zeroplan[hf]` extra (torch and transformers). This `__init__` imports neither: it is what the rest of
zeroplan calls, and it loads `hf.build` / `hf.probe` (which import torch) only inside its functions, only for
a config whose model_type zeroplan does not describe. `import zeroplan` and every command on a described
family stay torch-free (tests/test_architecture.py holds both rules). Offline always: the model is built
from the config dict through transformers' config classes (AutoConfig.for_model), never from the Hub,
never with trust_remote_code. Formulas and validation: docs/hf.md.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import logging
import sys
from collections.abc import Callable

from zeroplan.errors import SpecError
from zeroplan.printable import printable
from zeroplan.models.hf.records import HFConfig, HFModel, MeasuredActivations

EXTRA = "zeroplan[hf]"
MISSING_EXTRA = "model_type {model_type!r} is not described by zeroplan; install " + EXTRA + \
    " to count it with transformers"


# Where progress lines go while torch loads and a model is built or measured (seconds each): the CLI's progress
# display sets it (set_progress); unset, a line goes to stderr when stderr is a terminal, and nowhere otherwise.
_progress_hook: Callable[[str], None] | None = None


def set_progress(hook: Callable[[str], None] | None) -> None:
    """Send the extra's progress lines to `hook` (None: the default, stderr when it is a terminal)."""
    global _progress_hook
    _progress_hook = hook


def progress(message: str) -> None:
    """One progress line (its outside strings escaped): to the hook, or to a terminal's stderr."""
    line = printable(message)
    if _progress_hook is not None:
        _progress_hook(line)
    elif sys.stderr.isatty():
        print(f"zeroplan: {line}", file=sys.stderr, flush=True)


def has_extra() -> bool:
    """torch and transformers are importable (found, not imported)."""
    return all(importlib.util.find_spec(name) is not None for name in ("torch", "transformers"))


def count_with_transformers(data: dict, name: str, origin: str) -> HFModel:
    """An HF config.json mapping of a model_type zeroplan does not describe, built and counted by transformers.

    Without the extra: one SpecError line naming it.
    """
    if not has_extra():
        raise SpecError(f"{origin}: " + MISSING_EXTRA.format(model_type=data.get("model_type")))
    config_json = json.dumps(dict(data), sort_keys=True)
    if config_json not in _COUNTED:
        progress(f"model_type {data.get('model_type')!s}: loading torch and transformers to count it on the meta "
                 "device")
        with quiet_imports():
            from zeroplan.models.hf.build import describe

        _COUNTED[config_json] = describe(json.loads(config_json), origin)
    return HFModel(name=name, source=origin, config=_COUNTED[config_json])


_COUNTED: dict[str, HFConfig] = {}  # config JSON -> its count: a model is built once per process
# Loggers that speak while transformers imports its quantizers (torchao's "Failed to load <its C extension>" where
# the wheel's ABI is another Python's; torch's pytree "Enum subclass ... register_constant" deprecation): library
# notes about the installation, not about the user's input; an error stays one line on stderr.
IMPORT_NOISE = ("torchao", "torch.utils._pytree")


@contextlib.contextmanager
def quiet_imports():
    """IMPORT_NOISE's loggers at ERROR while torch and transformers import, their levels restored after."""
    loggers = [logging.getLogger(name) for name in IMPORT_NOISE]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def measure_activations(config_json: str, *, micro_batch: int, seq_len: int, dtype: str,
                        flash: bool) -> MeasuredActivations:  # fmt: skip
    """What a training forward of the model in `config_json` saves, measured on the meta device (cached)."""
    if not has_extra():
        raise SpecError(MISSING_EXTRA.format(model_type=json.loads(config_json).get("model_type")))
    return _measure(config_json, micro_batch, seq_len, dtype, flash)


@functools.lru_cache(maxsize=64)
def _measure(config_json: str, micro_batch: int, seq_len: int, dtype: str, flash: bool) -> MeasuredActivations:
    model_type = json.loads(config_json).get("model_type")
    progress(f"model_type {model_type!s}: measuring activations (b {micro_batch}, s {seq_len}, {dtype}) on the meta "
             "device")
    with quiet_imports():
        from zeroplan.models.hf.probe import measure

    return measure(json.loads(config_json), micro_batch=micro_batch, seq_len=seq_len, dtype=dtype, flash=flash)


__all__ = ["EXTRA", "MISSING_EXTRA", "HFConfig", "HFModel", "MeasuredActivations",
           "count_with_transformers", "has_extra", "measure_activations", "progress", "set_progress"]
