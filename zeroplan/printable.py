"""Text from input files made safe to show: control characters escaped as visible text.

A plan path, a model name or a YAML value echoed in a message could carry an ANSI escape (\x1b[31m), a
carriage return that overwrites the line, a bidi override that reorders it, or a character XML 1.0 forbids
even as an entity. Every text, GitHub and JUnit report, and the CLI's error line, passes through `printable`.
"""

import reprlib
import unicodedata

# Beyond the control characters (Cc: C0, DEL, C1) and lone surrogates (Cs, from undecodable file names):
# line and paragraph separators, the bidi embeddings, overrides and isolates, XML's non-characters, the bidi marks
# (LRM, RLM, ALM: they reorder what follows, as in "Trojan Source", CVE-2021-42574) and the invisible characters
# that hide text inside a name (zero width space, word joiner, a BOM mid-text), so 'gp\u200bt2' never shows as gpt2.
# The zero width (non-)joiners stay: scripts and emoji need them.
_ALSO = frozenset("\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\ufffe\uffff"
                  "\u200e\u200f\u061c\u200b\u2060\ufeff")


def printable(text: str) -> str:
    """`text` with each control character written as Python writes it in a string literal: \\x1b, \\r, \\u202e."""
    if text.isprintable():  # the usual case, in C; isprintable() is False for every character escaped below
        return text
    return "".join(_escape(ch) if ch in _ALSO or unicodedata.category(ch) in ("Cc", "Cs") else ch for ch in text)


def _escape(ch: str) -> str:
    return ascii(ch)[1:-1]


# Drawing characters zeroplan prints, as ASCII for a terminal whose encoding lacks them (LANG=C, PYTHONIOENCODING=
# ascii or latin-1): the timeline's blocks, sparklines, rules and arrows. Anything else it cannot encode is written
# as Python writes it in a literal (\u2265), so an output never fails to encode.
ASCII_DRAWING = str.maketrans({
    " ": " ", "▁": ".", "▂": ":", "▃": "-", "▄": "=", "▅": "+", "▆": "*", "▇": "#", "█": "#",
    "─": "-", "━": "-", "│": "|", "┃": "|", "·": ".", "•": "*", "×": "x", "→": "->", "←": "<-", "≥": ">=",
    "≤": "<=", "≈": "~", "…": "...", "—": "-", "–": "-", "±": "+/-", "✓": "ok", "✗": "x", "▏": "|", "░": ".",
    "▒": ":", "▓": "#", "’": "'", "‘": "'", "“": '"', "”": '"', "µ": "u", "°": "deg",
})  # fmt: skip


def terminal_text(text: str, encoding: str | None = "utf-8") -> str:
    """`text` as it may reach a terminal: every control character but the newline escaped (`printable`), and, when
    `encoding` cannot hold a character, the drawing characters as ASCII and the rest escaped as in a literal.

    The one function the CLI's output boundary (cli/common.py: the consoles, the plain writes) applies to all it
    prints, whatever the string's origin: an option, a file name, a value read from a file."""
    lines = text.split("\n")
    safe = "\n".join(printable(line) for line in lines) if not text.isprintable() else text
    try:
        safe.encode(encoding or "utf-8")
        return safe
    except LookupError:  # an encoding Python does not know: ASCII holds in every terminal
        encoding = "ascii"
    except UnicodeEncodeError:
        pass
    return safe.translate(ASCII_DRAWING).encode(encoding, "backslashreplace").decode(encoding)


class _Brief(reprlib.Repr):
    """reprlib's bounded repr (a few items of each list, the first characters of a string), with an integer too long
    for Python to write as digits (4,300+: repr raises ValueError) described by its size instead."""

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > _LONGEST_INT_BITS:
            return f"<an integer of {x.bit_length():,} bits>"
        return super().repr_int(x, level)


_LONGEST_INT_BITS = 256
_BRIEF = _Brief()
_BRIEF.maxstring = _BRIEF.maxother = _BRIEF.maxlong = 40


def brief(value: object, width: int = 60) -> str:
    """A value read from a file, as an error message shows it: a bounded repr (however long or deep the value),
    control characters escaped, at most `width` characters."""
    text = printable(_BRIEF.repr(value))
    return text if len(text) <= width else text[: width - 3] + "..."
