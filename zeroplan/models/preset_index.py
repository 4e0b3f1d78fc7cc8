"""The bundled presets' facts, computed once and committed: configs/index.json, read with `json` alone.

An estimate of `--model gemma2-9b` on the default hardware needs a ParamCount and an Architecture. Computing them costs importing PyYAML, parsing the YAML, importing the twelve family
classes and counting parameters; the index holds the results for every bundled preset, computed by
that same full path (`build_index`). tests/test_preset_index.py keeps the committed file equal to
`build_index()`; regenerate with `python -m zeroplan.models.preset_index --write`. Each entry carries the
CRC-32 of its YAML, so a preset edited since the index was written is loaded from its YAML instead
(a checksum against a forgotten regeneration, not against tampering: zlib's costs nothing to import,
hashlib's OpenSSL ~4 ms of a 0.25 s budget).

Importing this module or calling `load_index` imports neither yaml, pydantic nor the families;
the writer imports them. models/presets.py decides when the index may answer.
"""

from __future__ import annotations

import functools
import json
import zlib
from pathlib import Path
from typing import Any

from zeroplan.readers import read_text
from zeroplan.registry import bundled_config_dir

INDEX_FILE = "index.json"


def file_digest(path: Path) -> str:
    """CRC-32 of a preset file's UTF-8 bytes as 8 hex digits, CRLF read as LF (a Windows checkout sums like the committed file)."""
    return format(zlib.crc32(read_text(path).replace("\r\n", "\n").encode("utf-8")), "08x")


@functools.cache
def load_index() -> dict[str, Any] | None:
    """The bundled configs/index.json, or None when it is absent."""
    path = bundled_config_dir() / INDEX_FILE
    return json.loads(read_text(path)) if path.is_file() else None


def entry(kind: str, name: str, path: Path) -> dict[str, Any] | None:
    """The index's facts for bundled preset `name` ('models' or 'hardware') read from `path`.

    None when there is no index, no entry, or the file's bytes changed since the index was built.
    """
    index = load_index()
    found = index.get(kind, {}).get(name) if index is not None else None
    if found is None or found.get("crc32") != file_digest(path):
        return None
    return found
