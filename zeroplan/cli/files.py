"""Writing the files a user asked for (--emit-deepspeed, --emit-accelerate, --output, --html): atomically, never over
a file unasked, never over anything but a regular file.

The only module that writes to disk. A write goes to a temp file beside the target, then is linked
(no --force: fails if the target appeared meanwhile) or renamed (--force) into place, so an interrupted
run leaves either the old file or the whole new one, never half of one. --force replaces a regular file
only: a symbolic link, device, FIFO, socket or directory at the path is refused, never replaced or written
through (renaming over a link would silently cut it; the user can name the file it points to).

A path the command may not write to (an existing file without --force, anything but a regular file) is the
user's choice of path: a UsageError, exit 2, as an empty path is. A write that fails (a full disk, no
permission) is exit 1.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from zeroplan.errors import UsageError, ZeroplanError

_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))  # fmt: skip


def write_new_file(path: Path, text: str, *, force: bool) -> None:
    """Write `text` (ending in a newline) to `path` atomically, mode 0666 less the umask; never overwrite an
    existing file unless `force`, and never anything but a regular file (without force the final step is a
    hard link, which fails if the path exists)."""
    check_target(path, force)
    text = text if text.endswith("\n") else text + "\n"
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise ZeroplanError(f"{path}: cannot write ({exc.strerror or exc})") from None
    try:
        # backslashreplace: a lone surrogate (an argv or file-name byte that is not UTF-8) is written as \udcff text
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a file the user asked for gets the usual mode
        if force:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    except FileExistsError:  # it appeared since check_target
        raise UsageError(f"{path}: already exists; pass --force to overwrite it") from None
    except OSError as exc:
        raise ZeroplanError(f"{path}: cannot write ({exc.strerror or exc})") from None
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def html_target(value: str | None, force: bool) -> Path | None:
    """The --html path, checked before any work (an empty value is a UsageError; an existing file needs --force)."""
    if value is None:
        return None
    if not value.strip():
        raise UsageError(f"--html needs a file path, got {value!r}")
    path = Path(value)
    check_target(path, force)
    return path


def command_line(command: str) -> str:
    """The command as typed, for the HTML page ('zeroplan estimate --model ...'): sys.argv when this process is
    zeroplan's console script or `python -m zeroplan`, else 'zeroplan COMMAND' alone (a caller that runs the app
    in-process, a test, has an argv of its own)."""
    import shlex
    import sys

    first = sys.argv[0] if sys.argv else ""
    if os.path.basename(first).startswith("zeroplan") or first.endswith(os.path.join("zeroplan", "__main__.py")):
        from zeroplan.printable import printable

        return shlex.join(["zeroplan", *map(printable, sys.argv[1:])])  # typed text, shown: control bytes escaped
    return f"zeroplan {command}"


def write_report(path: Path | None, text: str, force: bool) -> None:
    """Write the HTML report asked for with --html, and say so on stderr (stdout stays the result)."""
    if path is None:
        return
    from zeroplan.cli.common import console

    write_new_file(path, text, force=force)
    console(stderr=True).print(f"wrote {path}: HTML report", soft_wrap=True)


def check_target(path: Path, force: bool) -> None:
    """UsageError if `path` exists and may not be replaced: anything without force, a non-regular file ever."""
    if "\x00" in str(path):  # os.lstat raises ValueError on it, outside OSError
        raise ZeroplanError(f"{str(path)!r}: a file name cannot contain a NUL byte")
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ZeroplanError(f"{path}: cannot write ({exc.strerror or exc})") from None
    if not stat.S_ISREG(mode):
        kind = next((words for test, words in _KINDS if test(mode)), "something other than a regular file")
        raise UsageError(f"{path}: is {kind}; refusing to replace it, even with --force")
    if not force:
        raise UsageError(f"{path}: already exists; pass --force to overwrite it")


def _umask() -> int:
    mask = os.umask(0o022)  # reading the umask means setting it; put it straight back
    os.umask(mask)
    return mask
