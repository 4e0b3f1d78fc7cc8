"""Plain Python values -> the options as the CLI holds them (ScenarioArgs, MeshArgs): what the API's functions
take (ints, floats, text, enum members or values, paths) becomes the text and members typer would have parsed, so
one path computes both, and a wrong value is refused in the CLI's words, naming its option."""

from __future__ import annotations

import functools
import inspect
import numbers
import types
import typing
from collections import abc
from enum import Enum
from pathlib import Path, PurePath
from typing import Any, Callable, TypeVar, Union

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
    PostTraining,
    Precision,
    TrainingLoop,
    ZeroStage,
    checkpointing_label,
    parse_checkpointing,
)
from zeroplan.models.mesh import CpComm, Schedule
from zeroplan.scenario.parallel import MESH_OPTIONS, MeshArgs
from zeroplan.units import MAX_COUNT, CountTooLargeError

Count = Union[int, float, str]  # 8, 9e9, "9e9", "7_000_000_000": a positive whole number
E = TypeVar("E", bound=Enum)
T = TypeVar("T")
_RUN_DEFAULTS = scenarios.ScenarioArgs()
_COUNTS = ("params", "largest_layer", "gpus", "nodes", "seq_len", "micro_batch", "grad_accum", *scenarios.KNOB_OPTIONS)
_ENUMS = {"precision": Precision, "optimizer": Optimizer, "optimizer_impl": OptimizerImpl, "attention": Attention, "loss": Loss,
          "post_training": PostTraining, "training_loop": TrainingLoop,
          "offload_optimizer": OffloadDevice, "offload_param": OffloadDevice, "engine": Engine}  # fmt: skip
_AMOUNTS = ("cuda_context_gib", "nccl_gib", "fragmentation")
_PATHS = ("model", "deepspeed_config", "from_file", "calibration", "teacher")
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
        raise ZeroplanError(f"{option} {_shown(value)} is not a number")
    if isinstance(value, numbers.Integral):
        if abs(int(value)) > MAX_COUNT:  # refused here: str() fails on 4,300+ digits
            raise CountTooLargeError(f"{option} {_shown(value)} is larger than {MAX_COUNT:.0e}")
        return str(int(value))
    return repr(float(value))  # 9e9 -> '9000000000.0'; parse_count refuses fractions, nan and inf


def _amount(value: Any, option: str) -> float | None:
    if value is None:
        return None
    if not _is_number(value):
        raise ZeroplanError(f"{option} {_shown(value)} is not a number")
    if isinstance(value, numbers.Integral) and abs(int(value)) > MAX_COUNT:  # float() overflows past 10^308
        raise ZeroplanError(f"{option} {_shown(value)} is larger than {MAX_COUNT:.0e}")
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
        raise UsageError(f"{option} {_shown(value)} is not one of: {', '.join(str(m.value) for m in kind)}") from None


def stage_number(value: int | None) -> int | None:
    """None (every stage) or 0-3, as --stage takes it."""
    if value is None:
        return None
    if _is_number(value) and isinstance(value, numbers.Integral) and min(ZeroStage) <= value <= max(ZeroStage):
        return int(value)
    raise UsageError(f"--stage {_shown(value)} is not one of: {', '.join(str(int(s)) for s in ZeroStage)}")


def typed(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn` with each argument held to its annotation before anything runs: a None where none is allowed, a bool
    where a count is meant, a number where a name is, is one ZeroplanError naming the argument (docs/api.md)."""
    signature = inspect.signature(fn)
    kinds = {name: _annotation(fn, param) for name, param in signature.parameters.items()}

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:  # an unknown keyword, a positional where only keywords are taken
            raise ZeroplanError(f"{fn.__name__}(): {exc}") from None
        for name, value in bound.arguments.items():
            kind = kinds[name]
            values = value if signature.parameters[name].kind is inspect.Parameter.VAR_POSITIONAL else (value,)
            for item in values:
                if kind is not None and not _accepts(item, kind):
                    raise ZeroplanError(f"{_named(fn, name)} {_shown(item)} is not {_described(kind)}")
        return fn(*args, **kwargs)

    return wrapper


def _annotation(fn: Callable, param: inspect.Parameter) -> Any:
    """The parameter's annotation, evaluated in its module; None (not checked) where it names a type-checking-only
    import."""
    annotation = param.annotation
    if annotation is inspect.Parameter.empty:
        return None
    try:
        return eval(annotation, fn.__globals__) if isinstance(annotation, str) else annotation  # noqa: S307
    except NameError:
        return None


def _named(fn: Callable, name: str) -> str:
    """An argument as the message names it: the CLI's option for a run's arguments, as the other messages do."""
    cli = fn.__module__.endswith(".runs") and inspect.signature(fn).parameters[name].kind is not inspect.Parameter.VAR_POSITIONAL
    return "--" + name.replace("_", "-") if cli else f"{fn.__name__}({name}=)"  # the plan files have no option


def _shown(value: Any) -> str:
    from zeroplan.printable import brief

    return brief(value)  # bounded however long the value, control characters escaped


def _accepts(value: Any, kind: Any) -> bool:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (Union, types.UnionType):
        return any(_accepts(value, arg) for arg in args)
    if kind is type(None):
        return value is None
    if kind is Any:
        return True
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if kind is float:
        return _is_number(value)
    if kind is Path:
        return isinstance(value, PurePath)
    if origin in (list, tuple, abc.Iterable):
        return isinstance(value, (list, tuple, set, frozenset)) and all(_accepts(v, args[0]) for v in value) or (
            origin is abc.Iterable and isinstance(value, str))
    if origin is abc.Mapping:
        return isinstance(value, abc.Mapping)
    return isinstance(value, kind) if isinstance(kind, type) else True


def _described(kind: Any) -> str:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if set(args) >= set(typing.get_args(Count)):
        return "a number"  # as count_text says it: an int, a float or text such as '9e9'
    if origin in (Union, types.UnionType):  # None is named only where None alone is allowed
        return " or ".join(dict.fromkeys(_described(arg) for arg in args if arg is not type(None)))
    if isinstance(kind, type) and issubclass(kind, Enum):
        return "one of " + ", ".join(repr(m.value) for m in kind)
    names = {type(None): "None", bool: "True or False", int: "an int", float: "a number", str: "text", Path: "a path"}
    if kind in names:
        return names[kind]
    if origin in (list, tuple, abc.Iterable):
        return f"a list of {_described(args[0])}"
    if origin is abc.Mapping:
        return "a mapping"
    return getattr(kind, "__name__", str(kind))


def check_needs(fn: Callable, options: dict[str, Any]) -> None:
    """The arguments given (not equal to their defaults) without the one they need refused, as the CLI refuses the
    options (zeroplan/scenario/requires.py): `estimate(pp_schedule="zbv")` without `pp` is a UsageError."""
    from zeroplan.scenario.bounds import check_bounds
    from zeroplan.scenario.requires import check_needs as needs

    defaults = {name: p.default for name, p in inspect.signature(fn).parameters.items()}
    given = {name for name, value in options.items() if value != defaults.get(name)}
    check_bounds(options, given)
    needs(options, given)
