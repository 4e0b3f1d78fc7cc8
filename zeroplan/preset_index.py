"""The bundled presets' facts, computed once and committed: configs/index.json, read with `json` alone.

An estimate of `--model gemma2-9b` on the default hardware needs a ParamCount, an Architecture and a
HardwareSpec. Computing them costs importing PyYAML, parsing the YAML, importing the twelve family
classes and counting parameters; the index holds the results for every bundled preset, computed by
that same full path (`build_index`). tests/test_preset_index.py keeps the committed file equal to
`build_index()`; regenerate with `python -m zeroplan.preset_index --write`. Each entry carries the
CRC-32 of its YAML, so a preset edited since the index was written is loaded from its YAML instead
(a checksum against a forgotten regeneration, not against tampering: zlib's costs nothing to import,
hashlib's OpenSSL ~4 ms of a 0.25 s budget).

Importing this module or calling `load_index` imports neither yaml, pydantic nor the families;
`build_index` imports them when called. presets.py decides when the index may answer.
"""

from __future__ import annotations

import functools
import json
import sys
import zlib
from pathlib import Path
from typing import Any

INDEX_FILE = "index.json"
REGENERATE = "python -m zeroplan.preset_index --write"


def bundled_config_dir() -> Path:
    """configs/ inside the wheel (zeroplan/_configs), or the repository's configs/ in a source checkout."""
    here = Path(__file__).resolve().parent  # the package is files on disk (pip installs it so); no importlib.resources
    packaged = here / "_configs"
    return packaged if packaged.is_dir() else here.parent / "configs"


def file_digest(path: Path) -> str:
    """CRC-32 of a preset file as 8 hex digits, CRLF read as LF (a Windows checkout sums like the committed file)."""
    return format(zlib.crc32(path.read_bytes().replace(b"\r\n", b"\n")), "08x")


@functools.cache
def load_index() -> dict[str, Any] | None:
    """The bundled configs/index.json, or None when it is absent."""
    try:
        text = (bundled_config_dir() / INDEX_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return json.loads(text)


def entry(kind: str, name: str, path: Path) -> dict[str, Any] | None:
    """The index's facts for bundled preset `name` ('models' or 'hardware') read from `path`.

    None when there is no index, no entry, or the file's bytes changed since the index was built.
    """
    index = load_index()
    found = index.get(kind, {}).get(name) if index is not None else None
    if found is None or found.get("crc32") != file_digest(path):
        return None
    return found


def _as_json(obj: Any) -> dict[str, Any]:
    """A spec record's fields as plain JSON values."""
    return obj.model_dump(mode="json")


def build_index(config_dir: Path | None = None) -> dict[str, Any]:
    """Every preset in `config_dir` (default: the bundled one) through the full loader: YAML -> config -> counts."""
    from zeroplan import presets
    from zeroplan.params import count_params

    config_dir = config_dir or bundled_config_dir()
    models = {}
    for path in sorted((config_dir / "models").glob("*.yaml")):
        spec = presets.load_model_file(path)
        models[path.stem] = {
            "name": spec.name, "source": spec.source, "crc32": file_digest(path),
            "architecture": _as_json(spec.architecture()), "counts": _as_json(count_params(spec.config)),
        }
    hardware = {
        path.stem: {"crc32": file_digest(path), "spec": _as_json(presets.load_hardware_file(path))}
        for path in sorted((config_dir / "hardware").glob("*.yaml"))
    }
    return {"hardware": hardware, "models": models}


def dumps(index: dict[str, Any]) -> str:
    """The index as committed: sorted keys, indented, so a changed preset is a readable diff."""
    return json.dumps(index, indent=2, sort_keys=True) + "\n"


def write_index(path: Path) -> None:
    """Write the index of the presets beside `path` (its directory holds models/ and hardware/)."""
    path.write_text(dumps(build_index(path.parent)), encoding="utf-8")


def checkout_index_path() -> Path:
    """configs/index.json of the source checkout this module runs from; SystemExit when installed."""
    root = Path(__file__).resolve().parent.parent
    if "site-packages" in root.parts or not (root / "pyproject.toml").is_file() or not (root / "configs").is_dir():
        raise SystemExit(f"zeroplan runs from {root}, not a source checkout with configs/: refusing to write the index")
    return root / "configs" / INDEX_FILE


def main(argv: list[str]) -> int:
    if argv == ["--write"]:
        path = checkout_index_path()
        write_index(path)
        print(f"wrote {path}")
        return 0
    if argv:
        print(f"usage: {REGENERATE}  (without --write: print the index)", file=sys.stderr)
        return 2
    sys.stdout.write(dumps(build_index()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
