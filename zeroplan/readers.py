"""Reading input files safely: size-capped UTF-8 text, YAML with the safe loader only (no duplicate keys,
no alias bombs), JSON with DeepSpeed's comments.

The readers in models/, hardware/, deepspeed/ and check/ read through these, and validate what they read with
zeroplan.validate (one error format for every file).
"""

from __future__ import annotations

import functools
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

from zeroplan.errors import SpecError

MAX_FILE_BYTES = 16 * 2**20  # no model, hardware or plan file is this large; refuse before parsing
# Opened without blocking (a FIFO opens at once instead of waiting for a writer) and without becoming the
# controlling terminal; O_BINARY on Windows. fstat then refuses what os.stat let through if the path changed.
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
_KINDS = ((stat.S_ISDIR, "is a directory"), (stat.S_ISFIFO, "is a named pipe (FIFO)"), (stat.S_ISSOCK, "is a socket"),
          (stat.S_ISCHR, "is a character device"), (stat.S_ISBLK, "is a block device"))  # fmt: skip


def read_text(path: Path) -> str:
    """A user file's text, with every failure turned into one SpecError line.

    Only a regular file is opened (a FIFO, device or socket could block or never end), and at most
    MAX_FILE_BYTES + 1 bytes are read, whatever its size says (/proc files say 0).
    """
    data = read_bytes(path, MAX_FILE_BYTES, "not a config file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def read_bytes(path: Path, limit: int, what: str) -> bytes:
    """A regular file's bytes, at most `limit` of them: a larger file is one SpecError line ("larger than N MiB;
    `what`"), as is a FIFO, device, socket or directory (refused before reading) and any OS failure."""
    if "\x00" in str(path):
        raise SpecError(f"{str(path)!r}: a file name cannot contain a NUL byte")
    try:
        _require_regular(path, os.stat(path).st_mode)
        fd = os.open(path, _OPEN_FLAGS)
        with os.fdopen(fd, "rb") as file:
            _require_regular(path, os.fstat(fd).st_mode)
            data = file.read(limit + 1)
    except FileNotFoundError:
        raise SpecError(f"{path}: no such file") from None
    except PermissionError:
        raise SpecError(f"{path}: permission denied") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise SpecError(f"{path}: larger than {limit // 2**20} MiB; {what}")
    return data


def _require_regular(path: Path, mode: int) -> None:
    if not stat.S_ISREG(mode):
        kind = next((words for test, words in _KINDS if test(mode)), "is a special file")
        raise SpecError(f"{path}: {kind}, not a regular file")


MERGE_TAG = "tag:yaml.org,2002:merge"


@functools.cache
def _loader() -> type:
    """A safe loader that rejects duplicate keys instead of silently keeping the last one.

    libyaml's CSafeLoader where PyYAML was built with it (the pure-Python scanner is quadratic in
    nesting depth), else SafeLoader. Built on first use so commands that read no YAML never import yaml.
    """
    import yaml

    class UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
        def flatten_mapping(self, node: yaml.MappingNode) -> None:
            """PyYAML's merge keys (`<<: *base`), as yaml.safe_load reads them, bounded: each merge copies the
            merged mapping's pairs, so nested merges of merges grow like an alias bomb and are refused as one."""
            super().flatten_mapping(node)  # recurses through this method: every level is bounded
            if len(node.value) > MAX_YAML_NODES:
                raise yaml.constructor.ConstructorError(
                    None, None, f"merge keys expand a mapping past {MAX_YAML_NODES:,} keys", node.start_mark)

    def construct_mapping(loader: UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG:  # `<<`: merged keys are overridden by the mapping's own, as YAML says
                if MERGE_TAG in seen:
                    raise yaml.constructor.ConstructorError(None, None, "duplicate key '<<'", key_node.start_mark)
                seen.add(MERGE_TAG)
                continue
            key = loader.construct_object(key_node, deep=deep)
            if isinstance(key, (list, dict)):
                raise yaml.constructor.ConstructorError(None, None, "a mapping key must be a scalar", key_node.start_mark)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return loader.construct_mapping(node, deep=deep)

    def construct_int(loader: UniqueKeyLoader, node: yaml.ScalarNode) -> int | LongInteger:
        try:
            return yaml.constructor.SafeConstructor.construct_yaml_int(loader, node)
        except ValueError:
            return LongInteger(node.value)

    UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", construct_int)
    return UniqueKeyLoader


class LongInteger:
    """An integer literal longer than Python converts from text (4,300 digits by default: int() raises
    ValueError), left in the parsed data so that reject_long_integers can name its key."""

    def __init__(self, literal: str) -> None:
        self.digits = sum(ch.isdigit() for ch in literal)


def int_or_long(literal: str) -> int | LongInteger:
    """An integer from JSON text; a LongInteger where Python refuses the digits (json.loads parse_int)."""
    try:
        return int(literal)
    except ValueError:
        return LongInteger(literal)


def reject_long_integers(data: Any, origin: str) -> Any:
    """`data`, or a SpecError naming the key of the first LongInteger in it ('file: a.b: an integer of ...')."""
    stack, seen = [(data, "")], set()
    while stack:
        value, path = stack.pop()
        if isinstance(value, LongInteger):
            limit = f"; Python reads at most {sys.get_int_max_str_digits():,}" if hasattr(sys, "get_int_max_str_digits") else ""
            raise SpecError(f"{origin}: {path or '(top level)'}: an integer of {value.digits:,} digits{limit}")
        if isinstance(value, (dict, list)) and id(value) not in seen:
            seen.add(id(value))
            items = list(value.items() if isinstance(value, dict) else enumerate(value))
            for key, child in reversed(items):  # the stack pops them in document order
                name = f"{path}.{key}" if path else str(key)
                stack.append((child, name))
                if isinstance(key, LongInteger):
                    stack.append((key, f"{path + ': ' if path else ''}a key"))
    return data


MAX_YAML_NODES = 100_000  # values in a document once aliases are expanded; 'billion laughs' bombs exceed it


def _expanded_size(value: Any, memo: dict[int, int]) -> int:
    """Values in `value` with every alias expanded, counted in linear time (shared objects memoized)."""
    if not isinstance(value, (dict, list)):
        return 1
    if (key := id(value)) in memo:
        return memo[key]
    memo[key] = MAX_YAML_NODES + 1  # a self-referencing alias is unbounded
    children = value.values() if isinstance(value, dict) else value
    memo[key] = size = 1 + sum(_expanded_size(c, memo) for c in children)
    return size


MAX_YAML_FLOW_DEPTH = 64  # [ and { nesting; real configs stay under 10, deep nesting only slows the parser


def _flow_depth(text: str) -> int:
    depth = deepest = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(depth - 1, 0)
    return deepest


def parse_yaml(text: str, origin: str) -> Any:
    """Safe-load YAML, rejecting duplicate keys, alias bombs and deep nesting, errors as one SpecError line."""
    import yaml

    if _flow_depth(text) > MAX_YAML_FLOW_DEPTH:
        raise SpecError(f"{origin}: YAML nested more than {MAX_YAML_FLOW_DEPTH} brackets deep; refusing it")

    try:
        data = yaml.load(text, Loader=_loader())  # noqa: S506 - a SafeLoader subclass
        if _expanded_size(data, {}) > MAX_YAML_NODES:
            raise SpecError(f"{origin}: YAML expands to more than {MAX_YAML_NODES:,} values (aliases); refusing it")
        return reject_long_integers(data, origin)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"{origin}: invalid YAML{where}: {problem}") from None
    except RecursionError:
        raise SpecError(f"{origin}: YAML nested too deeply") from None


def yaml_key_lines(text: str) -> dict[str, int]:
    """1-based line of every mapping key in a YAML text, by dotted path through mappings; {} if it does not parse.

    Call after parse_yaml accepted the text (aliases are bounded there); a shared node is walked once.
    """
    import yaml

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    lines: dict[str, int] = {}
    stack, seen = [(root, "")], set()
    while stack:
        node, prefix = stack.pop()
        if not isinstance(node, yaml.MappingNode) or id(node) in seen:
            continue
        seen.add(id(node))
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                lines.setdefault(prefix + key.value, key.start_mark.line + 1)
                stack.append((value, f"{prefix}{key.value}."))
    return lines


def parse_json(text: str, origin: str) -> Any:
    """Parse JSON, errors as one SpecError line."""
    try:
        data = json.loads(text, parse_int=int_or_long)
    except json.JSONDecodeError as exc:
        raise SpecError(f"{origin}: invalid JSON (line {exc.lineno}): {exc.msg}") from None
    except RecursionError:
        raise SpecError(f"{origin}: JSON nested too deeply") from None
    return reject_long_integers(data, origin)


def parse_toml(text: str, origin: str) -> dict:
    """TOML through the standard library's tomllib (Python 3.11+), errors as one SpecError line: a syntax error, an
    integer longer than Python converts (tomllib's int() raises ValueError), nesting past Python's recursion limit."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: no tomllib, and zeroplan adds no dependency for it
        raise SpecError(f"{origin}: reading TOML needs Python 3.11 or later (the standard library's tomllib)") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{origin}: invalid TOML: {exc}") from None
    except ValueError:  # after TOMLDecodeError, its subclass: int() on 4,300+ digits
        import re

        digits = max((len(run.replace("_", "")) for run in re.findall(r"[0-9][0-9_]*", text)), default=0)
        limit = f"; Python reads at most {sys.get_int_max_str_digits():,}" if hasattr(sys, "get_int_max_str_digits") else ""
        raise SpecError(f"{origin}: an integer of {digits:,} digits{limit}") from None
    except RecursionError:
        raise SpecError(f"{origin}: TOML nested too deeply") from None


def require_mapping(data: Any, origin: str) -> dict:
    if not isinstance(data, dict):
        kind = "empty" if data is None else type(data).__name__
        raise SpecError(f"{origin}: expected a mapping of keys to values, got {kind}")
    return data
