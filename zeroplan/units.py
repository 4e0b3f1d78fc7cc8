"""Numbers at the edges: bytes to display units and back, and counts as users type them (9e9, 7_000_000_000).

Bytes are integers everywhere else; units exist only at the edges.
"""

import re
from enum import Enum

from zeroplan.errors import ZeroplanError

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


MAX_COUNT = 10**18  # parameter counts and sizes beyond this are typos, not models


class CountTooLargeError(ZeroplanError):
    """A count past MAX_COUNT: past every bound a caller holds a count to (scenario/bounds.py says which)."""


# The usual spellings, parsed with int(): 124439808, 9e9, 7E+09 (exact, as Decimal would give them).
# At most 30 digits and a two-digit exponent, so int() and 10**e stay small (int() refuses 4,300+
# digits); anything longer is past MAX_COUNT anyway and goes to Decimal, which says so.
_PLAIN_COUNT = re.compile(r"([0-9]{1,30})(?:[eE]\+?([0-9]{1,2}))?")


# A comma only between groups of three digits, as in 7,000,000,000 or 1,500.5.
_THOUSANDS = re.compile(r"[+-]?[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?[a-zA-Z]?")


# The suffixes model names use ("Llama-3.1-8B", "Kimi K2 1T"), decimal as in "9B params": K, M, B (or G), T.
# Parameter counts only: "4k" tokens often means 4096, so sequence lengths and batch sizes take none.
COUNT_SUFFIXES = {"k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}


def parse_count(text: str, what: str = "count", *, suffixes: bool = False) -> int:
    """A positive whole number from '9e9', '7_000_000_000', '1.5e9' or '124439808'; with `suffixes` (parameter
    counts) also '9B', '7b', '1.5T', '124M'. ZeroplanError otherwise."""
    if "," in text and not _THOUSANDS.fullmatch(text.strip()):  # '1,2' is a list or a decimal comma, never 12
        raise ZeroplanError(f"{what} {text!r} is not one number (a comma groups thousands: 1,000,000)")
    cleaned = text.strip().replace("_", "").replace(",", "")
    scale = COUNT_SUFFIXES.get(cleaned[-1:].lower(), 1) if suffixes and len(cleaned) > 1 else 1
    if scale > 1:
        cleaned = cleaned[:-1].strip()
    if plain := _PLAIN_COUNT.fullmatch(cleaned):
        digits, exponent = plain.groups()
        value = int(digits) * 10 ** int(exponent or 0) * scale
    else:  # decimals, signs, big exponents, words: Decimal's exact reading (loaded only then)
        value = _decimal_count(cleaned, scale, text, what)
    if value <= 0:
        raise ZeroplanError(f"{what} {text!r} must be positive")
    if value > MAX_COUNT:
        raise CountTooLargeError(f"{what} {text!r} is larger than {MAX_COUNT:.0e}")
    return int(value)


def _decimal_count(cleaned: str, scale: int, text: str, what: str):
    from decimal import Decimal, InvalidOperation

    try:
        value = Decimal(cleaned) * scale
    except InvalidOperation:
        raise ZeroplanError(f"{what} {text!r} is not a number") from None
    if not value.is_finite():
        raise ZeroplanError(f"{what} {text!r} is not finite")
    if value != value.to_integral_value():
        raise ZeroplanError(f"{what} {text!r} is not a whole number")
    return value
