"""Bytes to display units and back. Bytes are integers everywhere else; units exist only at the edges."""

from enum import Enum

GIB = 2**30  # binary gibibyte; what nvidia-smi and torch report, and zeroplan's default unit
GB = 10**9  # decimal gigabyte; the article's and the ZeRO paper's unit


class Unit(str, Enum):
    """A display unit: its label is printed next to every number."""

    gib = "gib"
    gb = "gb"

    @property
    def label(self) -> str:
        return "GiB" if self is Unit.gib else "GB"

    @property
    def bytes(self) -> int:
        return GIB if self is Unit.gib else GB


def to_unit(num_bytes: int | float, unit: Unit) -> float:
    """num_bytes expressed in `unit` (a float for display only)."""
    return num_bytes / unit.bytes


def format_bytes(num_bytes: int | float, unit: Unit, digits: int = 2) -> str:
    """'12.34 GiB'-style text."""
    return f"{to_unit(num_bytes, unit):,.{digits}f} {unit.label}"
