"""What a framework file asks zeroplan to plan, as plain values: the keys taken and what each one sets.

Pure: no I/O. The readers (accelerate.py, llamafactory.py, axolotl.py) build these; scenario.py applies them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from zeroplan.errors import SpecError
from zeroplan.frameworks.kinds import FromKind
from zeroplan.validate import validation_message

Positive = Annotated[int, Field(ge=1)]  # a count in a trainer's YAML, read as leniently as pydantic's lax int


class FileKeys(BaseModel):
    """The keys one kind of file holds that zeroplan uses: strictly typed; every other key is ignored."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


def validate_keys(model: type[FileKeys], data: Mapping, origin: str, prefix: str = "") -> Any:
    """`data` as `model`, or one SpecError line naming each bad key."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise SpecError(validation_message(origin, exc, model, prefix)) from None


@dataclass(frozen=True)
class Taken:
    """One key zeroplan takes from the file, and what it sets.

    `option` is the ScenarioArgs field it sets ("stage": the engine's strategy; "deepspeed_config": the DeepSpeed
    config, a path as written or an inline mapping; None: noted only). `default`: the key is absent and the
    tool's own default applies; a default, like Accelerate's mixed_precision beside a DeepSpeed config file,
    only fills what a DeepSpeed config leaves open.
    """

    key: str
    written: Any
    option: str | None
    value: Any
    means: str
    default: bool = False


def taker(keys: BaseModel) -> Callable[[str, str | None, Any, str], Taken]:
    """`take(key, option, value, means)`: the Taken for one of `keys`' fields, marked as the tool's default when
    the file leaves the key out (the readers' one way of recording what they take)."""
    stated = keys.model_fields_set

    def take(key: str, option: str | None, value: Any, means: str) -> Taken:
        return Taken(key, getattr(keys, key), option, value, means, key not in stated)

    return take


@dataclass(frozen=True)
class FrameworkRun:
    """One file, read: its kind, where it is, the keys taken, and the memory savings it asks for that are not counted."""

    kind: FromKind
    origin: str
    taken: tuple[Taken, ...]
    uncounted: tuple[str, ...] = field(default=())
    # the keys not taken: (no effect on memory, unknown to zeroplan), filled by frameworks/source.py
    unused: tuple[tuple[str, ...], tuple[str, ...]] = field(default=((), ()))
    # what the file leaves to the command line (the trainer a shared key belongs to): (the option that settles it,
    # the one-line error when it is not typed); scenario.from_framework raises it unless the option was given
    asks: tuple[tuple[str, str], ...] = field(default=())

    def get(self, option: str) -> Taken | None:
        """The last key that sets `option`, if any."""
        return next((t for t in reversed(self.taken) if t.option == option), None)


def shown(value: Any) -> str:
    """A value as YAML writes it: true/false, null, lists with commas."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    return str(value)


class NotModelled:
    """The keys of one file that ask for what zeroplan does not model yet; raised together, as one line."""

    def __init__(self, origin: str) -> None:
        self.origin, self.problems, self.asks = origin, [], []

    def add(self, key: str, value: Any, what: str) -> None:
        self.problems.append(f"{key}: {shown(value)} ({what}) is not modelled yet")

    def ask(self, option: str, key: str, value: Any, what: str) -> None:
        """A key whose meaning the command line settles: an error naming it unless `option` is typed."""
        self.asks.append((option, f"{self.origin}: {key}: {shown(value)}: {what}"))

    def raise_any(self) -> None:
        if self.problems:
            raise SpecError(f"{self.origin}: " + "; ".join(self.problems))
