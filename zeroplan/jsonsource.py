"""JSON text as DeepSpeed reads it: comments blanked out, each key's line, duplicate keys.

DeepSpeed loads a config *file* with hjson (`deepspeed/runtime/config.py`, `hjson.load(...,
object_pairs_hook=dict_raise_error_on_duplicate_keys)`), so `//`, `#` and `/* */` comments work
there and a duplicate key is an error ("Duplicate keys in DeepSpeed config"). Hugging Face
Trainer and Accelerate read the same file with `json.load` (`accelerate/utils/deepspeed.py`,
`HfDeepSpeedConfig`), where a comment is a syntax error and a duplicate silently keeps the last.
zeroplan accepts comments (and reports them, see the `json-comments` rule) but nothing else of
hjson: no trailing commas, unquoted keys or strings.

Pure: text in, facts out; the caller reads the file (presets.read_text) and parses the JSON.
"""

from __future__ import annotations

import json
import re

from pydantic import Field

from zeroplan.frozen import Frozen

# A JSON string first, so comment markers inside strings are left alone; then the three comment forms.
# An unclosed string or /* comment runs to the end of the text (the JSON parser then reports it), so the
# scan stays linear: a form that must close would be retried from every later quote and cost O(n^2).
_STRING = r'"(?:[^"\\\n]++|\\.)*+(?:"|\Z|(?=\n))'
_COMMENT_OR_STRING = re.compile(_STRING + r'|//[^\n]*|#[^\n]*|/\*(?:.*?\*/|.*\Z)', re.DOTALL)
_TOKEN = re.compile(_STRING + r'|[{}\[\]:,]|\n')
MAX_KEY_DEPTH = 64  # key nesting whose lines are kept; DeepSpeed configs nest 3 deep, and a deeper bomb would cost O(depth^2)


class JsonSource(Frozen):
    """Facts about a JSON text that a parsed mapping no longer carries."""

    text: str = Field(description="the text with comments replaced by spaces: same lines, same columns")
    has_comments: bool
    key_lines: dict[str, int] = Field(description="dotted key path -> 1-based line of its first occurrence")
    duplicate_keys: tuple[tuple[str, int], ...] = Field(description="(dotted key path, line) of each repeat")


def _blank(match: re.Match[str]) -> str:
    token = match.group(0)
    if token.startswith('"'):
        return token
    return re.sub(r"[^\n]", " ", token)


def strip_comments(text: str) -> tuple[str, bool]:
    """The text with `//`, `#` and `/* */` comments blanked (newlines kept), and whether it had any."""
    stripped = _COMMENT_OR_STRING.sub(_blank, text)
    return stripped, stripped != text


def _decode_key(token: str) -> str:
    try:
        return json.loads(token)
    except json.JSONDecodeError:
        return token.strip('"')


def locate_keys(text: str) -> tuple[dict[str, int], tuple[tuple[str, int], ...]]:
    """Line of every key path reachable through objects only (keys inside arrays are skipped), and repeats.

    Expects comment-free text. Tolerates invalid JSON (the JSON parser reports that): it never raises.
    """
    lines: dict[str, int] = {}
    duplicates: list[tuple[str, int]] = []
    stack: list[list] = []  # frames: [kind '{' or '[', current key, keys seen in this object]
    line, expect_key = 1, False
    for match in _TOKEN.finditer(text):
        token = match.group(0)
        if token == "\n":
            line += 1
        elif token in "{[":
            if len(stack) == MAX_KEY_DEPTH:  # no config is this deep: leave the rest to the parser
                break
            stack.append([token, None, set()])
            expect_key = token == "{"
        elif token in "}]":
            if stack:
                stack.pop()
        elif token == ",":
            expect_key = bool(stack) and stack[-1][0] == "{"
        elif token == ":":
            expect_key = False
        elif expect_key and stack and stack[-1][0] == "{":
            frame = stack[-1]
            frame[1] = _decode_key(token)
            if all(f[0] == "{" for f in stack):
                path = ".".join(str(f[1]) for f in stack)
                if frame[1] in frame[2]:
                    duplicates.append((path, line))
                lines.setdefault(path, line)
            frame[2].add(frame[1])
    return lines, tuple(duplicates)


def scan_json_text(text: str) -> JsonSource:
    """Blank the comments of a DeepSpeed config text and locate its keys; parse `.text` with presets.parse_json."""
    stripped, has_comments = strip_comments(text)
    key_lines, duplicates = locate_keys(stripped)
    return JsonSource(text=stripped, has_comments=has_comments, key_lines=key_lines, duplicate_keys=duplicates)
