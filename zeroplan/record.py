"""Frozen records: the inputs and results on the estimate path, checked without importing pydantic.

Why not pydantic models here: importing pydantic and building its first schemas is ~45 % of a
`zeroplan estimate` process (docs/benchmarks.md), and the estimate must answer in 0.25 s. These are
flat records of numbers, flags, names and enums, so a frozen slotted dataclass plus the checks below
says everything the pydantic model said: unknown keys are errors that name the key, every field is
type-checked (ints are not bools, "80" is not a number), bounds are checked, and the message names
the field. pydantic still reads the files that embed a record (plans, DeepSpeed configs): it
validates a record's fields from its annotations and runs the same checks (`__post_init__`), and
`__pydantic_config__` makes an unknown key an error there too.

Pure: no I/O, imports neither pydantic, rich, typer nor yaml.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from enum import Enum
from typing import Any, Callable, Literal, TypeVar

from zeroplan.errors import SpecError

R = TypeVar("R", bound="Record")
# Type checkers read @record classes as dataclasses (typing.dataclass_transform, Python 3.11+).
dataclass_transform = getattr(typing, "dataclass_transform", lambda **_: lambda obj: obj)


class FieldError(SpecError, ValueError):
    """A record field with a wrong type or out of bounds. A ValueError too, so that pydantic reports it in place."""


def field(default: Any = dataclasses.MISSING, *, gt: float | None = None, ge: float | None = None,
          le: float | None = None, description: str = "", default_factory: Any = dataclasses.MISSING) -> Any:  # fmt: skip
    """A record field with bounds (checked on construction) and a description (for the docs)."""
    bounds = {k: v for k, v in (("gt", gt), ("ge", ge), ("le", le)) if v is not None}
    return dataclasses.field(default=default, default_factory=default_factory,
                             metadata={"bounds": bounds, "description": description})  # fmt: skip


def positive(default: Any = dataclasses.MISSING, description: str = "") -> Any:
    """An integer field that must be >= 1 (pydantic's PositiveInt)."""
    return field(default, gt=0, description=description)


def _checker(kind: Any) -> Callable[[str, Any], Any]:
    """A function (name, value) -> value (an enum's value string becomes the member) that raises FieldError."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        inner = _checker(options[0]) if len(options) == 1 else None
        if inner is None:
            raise TypeError(f"record fields support T | None unions only, not {kind}")
        return lambda name, value: None if value is None else inner(name, value)
    if origin is Literal:
        return lambda name, value: value if value in args else _fail(name, value, " or ".join(map(repr, args)))
    if origin is tuple:
        return lambda name, value: tuple(value) if isinstance(value, (tuple, list)) else _fail(name, value, "a list")
    if isinstance(kind, type) and issubclass(kind, Enum):
        def enum(name: str, value: Any) -> Any:
            try:
                return kind(value)
            except ValueError:
                return _fail(name, value, " | ".join(str(m.value) for m in kind))

        return enum
    if kind is bool:
        return lambda name, value: value if isinstance(value, bool) else _fail(name, value, "true or false")
    if kind is int:
        return lambda name, value: value if type(value) is int else _fail(name, value, "a whole number")
    if kind is float:
        return lambda name, value: (float(value) if type(value) in (int, float) else _fail(name, value, "a number"))
    if kind is str:
        return lambda name, value: value if isinstance(value, str) else _fail(name, value, "a string")
    return lambda name, value: value  # another record or a structured value: checked where it is built


def _fail(name: str, value: Any, expected: str) -> Any:
    raise FieldError(f"{name}: expected {expected}, got {value!r}")


_BOUND_TESTS = {"gt": (lambda v, b: v > b, "> "), "ge": (lambda v, b: v >= b, ">= "), "le": (lambda v, b: v <= b, "<= ")}


def _plan(cls: type) -> tuple[tuple[str, Callable, dict], ...]:
    """Per field: (name, type checker, bounds); built once per class, on its first instance."""
    fields = dataclasses.fields(cls)
    # The modules that declare records keep their annotations evaluated (no `from __future__ import
    # annotations`): resolving strings with get_type_hints compiles each one, ~3 ms a start.
    hints = typing.get_type_hints(cls) if any(isinstance(f.type, str) for f in fields) else {f.name: f.type for f in fields}
    return tuple((f.name, _checker(hints[f.name]), f.metadata.get("bounds", {})) for f in fields)


class Sealed:
    """Frozen once built, with one __setattr__/__repr__/__eq__/__hash__ for every class that derives from it.

    `@dataclass(frozen=True)` compiles a __setattr__ and a __delattr__ per class, and repr/eq/hash three
    more, each with exec: ~0.6 ms a class on this machine, paid on every start for each class the
    estimate loads. Here __init__ may set each slot once; after that any assignment raises
    FrozenInstanceError, as a frozen dataclass does. Subclasses are declared with `@sealed` (slotted).
    """

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        if hasattr(self, name):  # set by __init__ already: the instance is frozen
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def _values(self) -> tuple:
        return tuple(getattr(self, name) for name in type(self).model_fields)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in type(self).model_fields)})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), self._values()))


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(field, positive))
class Record(Sealed):
    """Base of the checked records. Subclasses are declared with `@record`."""

    __slots__ = ()
    __pydantic_config__ = {"extra": "forbid"}  # a record inside a pydantic model: unknown keys are errors there too
    _checks: typing.ClassVar[tuple | None] = None

    def __post_init__(self) -> None:
        cls = type(self)
        checks = cls.__dict__.get("_checks") or _install_checks(cls)
        for name, check, bounds in checks:
            value = getattr(self, name)
            checked = check(name, value)
            if checked is not value:
                object.__setattr__(self, name, checked)
            if bounds and checked is not None:
                for key, bound in bounds.items():
                    test, sign = _BOUND_TESTS[key]
                    if not test(checked, bound):
                        raise FieldError(f"{name}: must be {sign}{bound:g}, got {checked!r}")
        self._check()

    def _check(self) -> None:
        """Cross-field rules; a subclass overrides this and raises FieldError."""

    # -- the part of pydantic's BaseModel API the code and the library's users call --------------------

    @classmethod
    def model_validate(cls: type[R], data: Any) -> R:
        """A record from a mapping, as read from a file: unknown or missing keys and wrong types are FieldErrors."""
        if isinstance(data, cls):
            return data
        if not isinstance(data, dict):
            raise FieldError(f"expected a mapping of keys to values, got {type(data).__name__}")
        known = cls.model_fields
        if unknown := [k for k in data if k not in known]:
            raise FieldError(f"{unknown[0]}: unknown key; {_expected(str(unknown[0]), known)}")
        required = [n for n, f in known.items() if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        if missing := [n for n in required if n not in data]:
            raise FieldError(f"{missing[0]}: missing")
        return cls(**data)

    def model_copy(self: R, *, update: dict[str, Any] | None = None) -> R:
        """A copy with some fields replaced. Like pydantic's model_copy, the new values are not checked."""
        new = object.__new__(type(self))
        for name in type(self).model_fields:
            object.__setattr__(new, name, getattr(self, name))
        for name, value in (update or {}).items():
            if name not in type(self).model_fields:
                raise TypeError(f"{type(self).__name__} has no field {name!r}")
            object.__setattr__(new, name, value)
        return new

    def model_dump(self, *, mode: str = "python", include: set[str] | None = None, exclude: set[str] | None = None,
                   exclude_none: bool = False) -> dict[str, Any]:  # fmt: skip
        """The fields as a dict (mode="json": enums as their values, tuples as lists), nested records too."""
        out = {}
        for name in type(self).model_fields:
            if (include is not None and name not in include) or (exclude and name in exclude):
                continue
            value = getattr(self, name)
            if value is None and exclude_none:
                continue
            out[name] = _dump(value, mode)
        return out


def _expected(key: str, known: dict) -> str:
    import difflib

    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return f"did you mean {close[0]}?" if close else f"expected one of {', '.join(known)}"


def _install_checks(cls: type) -> tuple:
    checks = _plan(cls)
    cls._checks = checks
    return checks


def _dump(value: Any, mode: str) -> Any:
    if isinstance(value, Record):
        return value.model_dump(mode=mode)
    if mode == "json":
        if isinstance(value, Enum):
            return value.value
        if isinstance(value, (tuple, list)):
            return [_dump(v, mode) for v in value]
    elif isinstance(value, tuple):
        return tuple(_dump(v, mode) for v in value)
    return value


class _Fields:
    """`Cls.model_fields`: {name: dataclasses.Field} in declaration order, as pydantic's model_fields."""

    def __get__(self, obj: Any, cls: type) -> dict[str, dataclasses.Field]:
        found = cls.__dict__.get("_fields_by_name")
        if found is None:
            found = {f.name: f for f in dataclasses.fields(cls)}
            cls._fields_by_name = found
        return found


Sealed.model_fields = _Fields()  # type: ignore[attr-defined]

S = TypeVar("S", bound=Sealed)


@dataclass_transform(kw_only_default=True, frozen_default=True)
def sealed(cls: type[S]) -> type[S]:
    """Declare a Sealed subclass: a slotted, keyword-only dataclass, frozen by Sealed."""
    made = dataclasses.dataclass(slots=True, kw_only=True, repr=False, eq=False, match_args=False)(cls)
    made._fields_by_name = None
    return made


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(field, positive))
def record(cls: type[R]) -> type[R]:
    """Declare a Record subclass: a sealed dataclass whose fields are checked on construction."""
    made = sealed(cls)
    made._checks = None
    return made
