"""Writing the files a user asked for (--emit-deepspeed, --output): atomically, never over a file unasked.

The only module that writes to disk. A write goes to a temp file beside the target, then is linked
(no --force: fails if the target appeared meanwhile) or renamed (--force) into place, so an interrupted
run leaves either the old file or the whole new one, never half of one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from zeroplan.errors import ZeroplanError


def write_new_file(path: Path, text: str, *, force: bool) -> None:
    """Write `text` to `path` atomically (temp file in the same directory, then rename); never overwrite an
    existing file unless `force` (without it the final step is a hard link, which fails if the path exists)."""
    if path.exists() and not force:
        raise ZeroplanError(f"{path}: already exists; pass --force to overwrite it")
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise ZeroplanError(f"{path}: cannot write ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        if force:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    except FileExistsError:
        raise ZeroplanError(f"{path}: already exists; pass --force to overwrite it") from None
    except OSError as exc:
        raise ZeroplanError(f"{path}: cannot write ({exc.strerror or exc})") from None
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
