"""Where presets live (configs/ inside the wheel, or the checkout's; ZEROPLAN_CONFIG_DIR before them), their
names, and the did-you-mean for a name that is not one.
"""

from __future__ import annotations

import difflib
import functools
import os
from pathlib import Path

from zeroplan.errors import PresetNotFoundError


def bundled_config_dir() -> Path:
    """configs/ inside the wheel (zeroplan/_configs), or the repository's configs/ in a source checkout."""
    here = Path(__file__).resolve().parent  # zeroplan/; the package is files on disk (pip installs it so); no importlib.resources
    packaged = here / "_configs"
    return packaged if packaged.is_dir() else here.parent / "configs"


MAX_SUGGESTIONS = 4  # names a did-you-mean lists
CONFIG_DIR_ENV = "ZEROPLAN_CONFIG_DIR"  # extra preset directory, searched before the bundled ones


def search_dirs(kind: str) -> list[Path]:
    """ZEROPLAN_CONFIG_DIR's `kind` folder (when it has one), then the bundled one. A ZEROPLAN_CONFIG_DIR that is not
    a folder is refused: ignored, its presets would silently give way to the bundled ones of the same name."""
    dirs = []
    if extra := os.environ.get(CONFIG_DIR_ENV):
        if not Path(extra).is_dir():
            from zeroplan.errors import ZeroplanError
            from zeroplan.printable import printable

            raise ZeroplanError(f"{CONFIG_DIR_ENV}={printable(extra)}: not a directory (it holds models/ and hardware/"
                                " presets); fix or unset it")
        dirs.append(Path(extra) / kind)
    dirs.append(bundled_config_dir() / kind)
    return [d for d in dirs if d.is_dir()]


@functools.cache
def preset_paths(kind: str) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for directory in reversed(search_dirs(kind)):
        found.update({p.stem: p for p in sorted(directory.glob("*.yaml"))})
    return dict(sorted(found.items()))


def preset_names(kind: str) -> list[str]:
    """Names of the presets of one kind ('models', 'hardware', 'plans')."""
    return list(preset_paths(kind))


def unknown_preset(kind: str, name: str) -> PresetNotFoundError:
    names = preset_names(kind)
    # Spelling slips, and the short names people type for a preset ('h100' for h100-sxm-80gb, h100-pcie-80gb...).
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    close += [n for n in names if name.lower() in n and n not in close][: MAX_SUGGESTIONS - len(close)]
    hint = f"; did you mean {', '.join(close)}?" if close else f"; run `zeroplan {kind}` for the list"
    return PresetNotFoundError(f"unknown {kind.rstrip('s') if kind != 'hardware' else 'hardware'} preset {name!r}{hint}")


def looks_like_path(ref: str) -> bool:
    """A reference that names a file (has a path separator or a config suffix), not a preset."""
    return ref.endswith((".yaml", ".yml", ".json")) or os.sep in ref or "/" in ref


def is_file(ref: str) -> bool:
    """Whether `ref` names an existing file; False for names the OS refuses (too long, NUL bytes)."""
    try:
        return Path(ref).is_file()
    except (OSError, ValueError):
        return False
