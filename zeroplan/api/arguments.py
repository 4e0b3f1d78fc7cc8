"""Plain Python values -> the options as the CLI holds them (ScenarioArgs, MeshArgs): what the API's functions
take (ints, floats, text, enum members or values, paths) becomes the text and members typer would have parsed, so
one path computes both, and a wrong value is refused in the CLI's words, naming its option."""

from __future__ import annotations

import numbers
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar, Union

from zeroplan import scenario as scenarios
from zeroplan.errors import UsageError, ZeroplanError
from zeroplan.memory.setup import (
    Attention,
    Checkpointing,
    Engine,
    Loss,
    OffloadDevice,
    Optimizer,
    OptimizerImpl,
    Precision,
    ZeroStage,
    checkpointing_label,
    parse_checkpointing,
)
from zeroplan.models.mesh import CpComm, Schedule
from zeroplan.scenario.parallel import MESH_OPTIONS, MeshArgs

Count = Union[int, float, str]  # 8, 9e9, "9e9", "7_000_000_000": a positive whole number
E = TypeVar("E", bound=Enum)
_RUN_DEFAULTS = scenarios.ScenarioArgs()
_COUNTS = ("params", "largest_layer", "gpus", "nodes", "seq_len", "micro_batch", "grad_accum", *scenarios.KNOB_OPTIONS)
_ENUMS = {"precision": Precision, "optimizer": Optimizer, "optimizer_impl": OptimizerImpl, "attention": Attention, "loss": Loss,
          "offload_optimizer": OffloadDevice, "offload_param": OffloadDevice, "engine": Engine}  # fmt: skip
_AMOUNTS = ("cuda_context_gib", "nccl_gib", "fragmentation")
_PATHS = ("model", "deepspeed_config", "from_file", "calibration")
_NAME_LISTS = ("freeze", "lora_targets", "modules_to_save")


def scenario_args(options: dict[str, Any]) -> scenarios.ScenarioArgs:
    """The options as text and enum members; `given` the ones that differ from the defaults."""
    values = {name: _option(name, value) for name, value in options.items()}
    given = frozenset(name for name, value in values.items() if value != getattr(_RUN_DEFAULTS, name))
    return scenarios.ScenarioArgs(**values, given=given)


def mesh_args(options: dict[str, Any]) -> MeshArgs:
    """The mesh arguments, popped from `options`, as --tp --pp --cp --ep --vpp --pp-schedule --sequence-parallel
    --cp-comm --pp-first-layers --pp-last-layers."""
    degrees = {name: count_text(options.pop(name), f"--{name}") for name in MESH_OPTIONS}
    schedule = member(Schedule, options.pop("pp_schedule"), "--pp-schedule")
    comm = member(CpComm, options.pop("cp_comm"), "--cp-comm")
    uneven = {name: count_text(options.pop(name), "--" + name.replace("_", "-"))
              for name in ("pp_first_layers", "pp_last_layers")}
    return MeshArgs(**degrees, schedule=schedule, sequence_parallel=options.pop("sequence_parallel"), cp_comm=comm,
                    **uneven)


def _option(name: str, value: Any) -> Any:
    option = "--" + name.replace("_", "-")
    if name in _COUNTS:
        return count_text(value, option)
    if name in _ENUMS:
        return member(_ENUMS[name], value, option)
    if name == "checkpointing":  # an enum member or its text, or every:N
        mode, every = parse_checkpointing(value if isinstance(value, Checkpointing) else str(value))
        return checkpointing_label(mode, every) if every > 1 else mode
    if name in _AMOUNTS:
        return _amount(value, option)
    if name in _PATHS:
        return path_text(value)
    if name == "hardware":
        return "none" if value is None else str(value)
    if name in _NAME_LISTS and isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if name == "lora_rank":
        return count_text(value, option)
    if name == "adapter_config":
        return path_text(value)
    if name == "from_kind":
        from zeroplan.frameworks.kinds import FromKind

        return member(FromKind, value, option)
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)  # True is an int, not a count


def count_text(value: Any, option: str) -> str | None:
    """A count as the CLI reads it: text stays text; an int or float becomes its digits, for parse_count."""
    if value is None or isinstance(value, str):
        return value
    if not _is_number(value):
        raise ZeroplanError(f"{option} {value!r} is not a number")
    if isinstance(value, numbers.Integral):
        return str(int(value))
    return repr(float(value))  # 9e9 -> '9000000000.0'; parse_count refuses fractions, nan and inf


def _amount(value: Any, option: str) -> float | None:
    if value is None:
        return None
    if not _is_number(value):
        raise ZeroplanError(f"{option} {value!r} is not a number")
    return float(value)


def path_text(value: str | Path | None) -> str | None:
    return None if value is None else str(value)


def member(kind: type[E], value: E | str | None, option: str) -> E | None:
    """An enum member from itself or its value; UsageError listing the values otherwise (click's exit 2)."""
    if value is None or isinstance(value, kind):
        return value
    try:
        return kind(value)
    except (ValueError, TypeError):
        raise UsageError(f"{option} {value!r} is not one of: {', '.join(str(m.value) for m in kind)}") from None


def stage_number(value: int | None) -> int | None:
    """None (every stage) or 0-3, as --stage takes it."""
    if value is None:
        return None
    if _is_number(value) and isinstance(value, numbers.Integral) and min(ZeroStage) <= value <= max(ZeroStage):
        return int(value)
    raise UsageError(f"--stage {value!r} is not one of: {', '.join(str(int(s)) for s in ZeroStage)}")
