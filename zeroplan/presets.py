"""Find, load and list presets (configs/models, configs/hardware) and user files (YAML specs, HF config.json).

The only module besides cli.py that reads files (with preset_index.py, the precomputed facts of the
bundled presets). YAML is read with the safe loader only. Neither yaml nor pydantic's errors are
imported until a file is parsed: a bundled preset answered from the index needs neither.
"""

from __future__ import annotations

import difflib
import functools
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zeroplan import preset_index
from zeroplan.errors import PresetNotFoundError, SpecError
from zeroplan.record import FieldError
from zeroplan.preset_index import bundled_config_dir
from zeroplan.spec import Architecture, HardwareSpec, ParamCount

if TYPE_CHECKING:  # the families load on first use: a bare --params or an indexed preset never needs them
    from pydantic import ValidationError

    from zeroplan.families import ModelSpec

CONFIG_DIR_ENV = "ZEROPLAN_CONFIG_DIR"  # extra preset directory, searched before the bundled ones
MAX_FILE_BYTES = 16 * 2**20  # no model, hardware or plan file is this large; refuse before parsing


def _search_dirs(kind: str) -> list[Path]:
    dirs = []
    if extra := os.environ.get(CONFIG_DIR_ENV):
        dirs.append(Path(extra) / kind)
    dirs.append(bundled_config_dir() / kind)
    return [d for d in dirs if d.is_dir()]


@functools.cache
def _registry(kind: str) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for directory in reversed(_search_dirs(kind)):
        found.update({p.stem: p for p in sorted(directory.glob("*.yaml"))})
    return dict(sorted(found.items()))


def preset_names(kind: str) -> list[str]:
    """Names of the presets of one kind ('models', 'hardware', 'plans')."""
    return list(_registry(kind))


def read_text(path: Path) -> str:
    """A user file's text, with every failure turned into one SpecError line."""
    if "\x00" in str(path):
        raise SpecError(f"{str(path)!r}: a file name cannot contain a NUL byte")
    try:
        if path.is_dir():
            raise SpecError(f"{path}: is a directory, not a file")
        if path.stat().st_size > MAX_FILE_BYTES:
            raise SpecError(f"{path}: larger than {MAX_FILE_BYTES // 2**20} MiB; not a config file")
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise SpecError(f"{path}: no such file") from None
    except PermissionError:
        raise SpecError(f"{path}: permission denied") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read ({exc.strerror or exc})") from None


@functools.cache
def _loader() -> type:
    """A safe loader that rejects duplicate keys instead of silently keeping the last one.

    libyaml's CSafeLoader where PyYAML was built with it (the pure-Python scanner is quadratic in
    nesting depth), else SafeLoader. Built on first use so commands that read no YAML never import yaml.
    """
    import yaml

    class UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
        pass

    def construct_mapping(loader: UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)
            if isinstance(key, (list, dict)):
                raise yaml.constructor.ConstructorError(None, None, "a mapping key must be a scalar", key_node.start_mark)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return loader.construct_mapping(node, deep=deep)

    UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    return UniqueKeyLoader

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
        return data
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
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"{origin}: invalid JSON (line {exc.lineno}): {exc.msg}") from None
    except RecursionError:
        raise SpecError(f"{origin}: JSON nested too deeply") from None


def validation_message(origin: str, exc: ValidationError, prefix: str = "") -> str:
    """One line per pydantic error: 'origin: dotted.path: reason', joined by '; '."""
    parts = []
    for err in exc.errors():
        path = ".".join(str(p) for p in ((prefix,) if prefix else ()) + tuple(err["loc"])) or "(top level)"
        reason = err["msg"].removeprefix("Value error, ")
        parts.append(f"{path}: {reason}")
    return f"{origin}: " + "; ".join(parts)


def _require_mapping(data: Any, origin: str) -> dict:
    if not isinstance(data, dict):
        kind = "empty" if data is None else type(data).__name__
        raise SpecError(f"{origin}: expected a mapping of keys to values, got {kind}")
    return data


def _unknown(kind: str, name: str) -> PresetNotFoundError:
    names = preset_names(kind)
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; run `zeroplan {kind}` for the list"
    return PresetNotFoundError(f"unknown {kind.rstrip('s') if kind != 'hardware' else 'hardware'} preset {name!r}{hint}")


def looks_like_path(ref: str) -> bool:
    """A reference that names a file (has a path separator or a config suffix), not a preset."""
    return ref.endswith((".yaml", ".yml", ".json")) or os.sep in ref or "/" in ref


def model_from_data(data: Any, origin: str, *, hf_name: str | None = None) -> ModelSpec:
    """A ModelSpec from a zeroplan YAML spec mapping, or from an HF config.json mapping (hf_name given)."""
    from pydantic import ValidationError

    from zeroplan.families import ModelSpec, parse_family_config

    data = _require_mapping(data, origin)
    try:
        if hf_name is not None:
            config = parse_family_config(data, strict=False)
            config.architecture()
            return ModelSpec(name=hf_name, source=origin, config=config)
        body = dict(data)
        config_data = _require_mapping(body.pop("config", None), f"{origin}: config")
        try:
            config = parse_family_config(config_data, strict=True)
            config.architecture()  # cross-field checks run here; fail at load, naming the file
        except ValidationError as exc:
            raise SpecError(validation_message(origin, exc, prefix="config")) from None
        return ModelSpec.model_validate({**body, "config": config})
    except ValidationError as exc:
        raise SpecError(validation_message(origin, exc)) from None


def _is_file(ref: str) -> bool:
    """Whether `ref` names an existing file; False for names the OS refuses (too long, NUL bytes)."""
    try:
        return Path(ref).is_file()
    except (OSError, ValueError):
        return False


def load_model_file(path: Path) -> ModelSpec:
    """A model from a zeroplan YAML spec or a Hugging Face config.json."""
    text = read_text(path)
    if path.suffix == ".json":
        return model_from_data(parse_json(text, str(path)), str(path), hf_name=path.parent.name or path.stem)
    return model_from_data(parse_yaml(text, str(path)), str(path))


def load_model(ref: str) -> ModelSpec:
    """A model by preset name, YAML spec path or HF config.json path."""
    if (path := _registry("models").get(ref)) is not None:
        return load_model_file(path)
    if looks_like_path(ref) or _is_file(ref):
        return load_model_file(Path(ref))
    raise _unknown("models", ref)


def _indexed(kind: str, ref: str) -> dict[str, Any] | None:
    """The preset index's facts for `ref` when it names a bundled preset, else None.

    None for files, and for a preset of the same name in ZEROPLAN_CONFIG_DIR: it shadows the bundled one
    and is read from its YAML, as every user file is.
    """
    path = _registry(kind).get(ref)
    if path is None or path != bundled_config_dir() / kind / path.name:
        return None
    return preset_index.entry(kind, ref, path)


def model_facts(ref: str) -> tuple[str, ParamCount, Architecture]:
    """A model's name, exact counts and architecture: from the preset index for a bundled preset, else loaded."""
    if (facts := _indexed("models", ref)) is not None:
        return facts["name"], ParamCount(**facts["counts"]), Architecture(**facts["architecture"])
    from zeroplan.params import count_params

    spec = load_model(ref)
    return spec.name, count_params(spec.config), spec.architecture()


def load_hardware_file(path: Path) -> HardwareSpec:
    text = read_text(path)
    data = _require_mapping(parse_yaml(text, str(path)), str(path))
    try:
        return HardwareSpec.model_validate(data)
    except FieldError as exc:
        raise SpecError(f"{path}: {exc}") from None


def load_hardware(ref: str) -> HardwareSpec:
    """A hardware profile by preset name (from the preset index when bundled) or YAML path."""
    if (facts := _indexed("hardware", ref)) is not None:
        return HardwareSpec(**facts["spec"])
    if (path := _registry("hardware").get(ref)) is not None:
        return load_hardware_file(path)
    if looks_like_path(ref) or _is_file(ref):
        return load_hardware_file(Path(ref))
    raise _unknown("hardware", ref)


def all_models() -> list[ModelSpec]:
    return [load_model_file(p) for p in _registry("models").values()]


def all_hardware() -> list[HardwareSpec]:
    return [load_hardware_file(p) for p in _registry("hardware").values()]
