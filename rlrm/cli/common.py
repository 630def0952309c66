"""What every command shares: one-line errors (RLRM_DEBUG=1 for the traceback), the console, default folder names."""

from __future__ import annotations

import errno
import functools
import os
import sys
from contextlib import contextmanager
from pathlib import Path

import typer

from rlrm.errors import RlrmError


def friendly_errors(fn):
    """Print an RlrmError, or a file-system error on a path (a file where a folder goes, a read-only or full
    disk), as one line on stderr and exit 1; RLRM_DEBUG=1 re-raises it."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (RlrmError, OSError) as exc:
            line = str(exc) if isinstance(exc, RlrmError) else path_error(exc)
            if os.environ.get("RLRM_DEBUG") or line is None:
                raise
            print(f"error: {line}", file=sys.stderr)
            raise typer.Exit(1) from None

    return wrapper


# what to do about a path the file system refused, by errno
_PATH_FIXES = {
    errno.EEXIST: "a file is where a folder should be: move it, or choose another path",
    errno.ENOTDIR: "a file is where a folder should be: move it, or choose another path",
    errno.EISDIR: "a folder is where a file should be: choose another path",
    errno.EROFS: "the file system is read-only: choose a folder you can write to",
    errno.EACCES: "choose a folder you can write to",
    errno.EPERM: "choose a folder you can write to",
    errno.ENOSPC: "the disk is full: free some space, or choose a folder on another disk",
    errno.EDQUOT: "the disk quota is used up: free some space, or choose another folder",
    errno.ENOENT: "check the path",
    errno.ENAMETOOLONG: "choose a shorter path",
    errno.EIO: "the disk failed the write (an I/O error): check it, or choose a folder on another disk",
    errno.EFBIG: "a file-size limit refused it (ulimit -f): raise the limit",
}
# a failed write that names no file (rlrm's writers name theirs: rlrm.errors.writing_to): still one line
_UNNAMED = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG)


def path_error(exc: OSError) -> str | None:
    """One line for a file-system error on a named path, or None for another OSError (a socket's, a
    process's: a bug to show whole)."""
    if exc.errno not in _PATH_FIXES or (exc.filename is None and exc.errno not in _UNNAMED):
        return None
    where = exc.filename if exc.filename is not None else "a write"
    fix = _PATH_FIXES[exc.errno]
    if exc.errno in (errno.EACCES, errno.EPERM) and exc.filename is not None and _unreadable(exc.filename):
        fix = "this user cannot read it: check its permissions, or give a path you can read"  # not a write at all
    return f"{where}: {exc.strerror}; {fix}"


def _unreadable(path) -> bool:
    """Whether `path` is there and this user may not read it (or may not look into its folder)."""
    try:
        Path(path).stat()
    except PermissionError:
        return True
    except OSError:
        return False  # not there: a file to be made
    return not os.access(path, os.R_OK)


def console():
    from rich.console import Console

    return Console()


def fresh_folder(parent: Path, name: str = "") -> Path:
    """A default output folder, `parent/name-YYYYmmdd-HHMMSS` (`-2`, `-3`, ... after it when taken), made empty
    here: two commands started in the same second (two seeds, a report per run in a shell loop) each get their own,
    where both took one name and the second was refused, or crashed."""
    parent.mkdir(parents=True, exist_ok=True)
    stamp = timestamped(name)
    for suffix in ["", *(f"-{i}" for i in range(2, 1000))]:
        folder = parent / f"{stamp}{suffix}"
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder
    raise FileExistsError(errno.EEXIST, "every default name of this second is taken", str(parent / stamp))


@contextmanager
def out_or_fresh(out: Path | None, parent: Path, name: str = ""):
    """`out`, or a `fresh_folder` of `parent` when it is None, removed again if the command leaves it empty."""
    if out is not None:
        yield out
        return
    folder = fresh_folder(parent, name)
    try:
        yield folder
    finally:
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def timestamped(name: str) -> str:
    """`name-YYYYmmdd-HHMMSS` (`YYYYmmdd-HHMMSS` for no name): the default output folder's name, as `--dry-run`
    shows it (`fresh_folder` makes it, with a suffix when a command started in the same second took it)."""
    import time

    stamp = time.strftime("%Y%m%d-%H%M%S")
    return f"{name}-{stamp}" if name else stamp
