"""One process trains a run folder at a time: `<run>/.run.lock`, flock'ed while a process starts, resumes or
trains the run, holding the pid and host of that process.

    hold_run(run_dir)      # RunFolderError naming the other process when one holds it; again in this process: no-op
    ...                    # write config.yaml, train
    release_run(run_dir)   # the run is over (the kernel also drops the lock when the process dies, kill -9 too)

Without it, `--resume` or `--overwrite` on the folder of a run still training went ahead: the first rewrote
config.yaml and replaced metrics.jsonl (the live run appended to the unlinked file, its rows lost), the second
deleted the folder the live run went on writing checkpoints into. A lock the kernel holds cannot go stale: no pid
to check after a crash (a process killed with -9 leaves the file, locked by nobody). A process removes its file
when it lets go; one that opened the file just before finds it gone once locked, and locks the new one.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import socket
from pathlib import Path

from rlrm.errors import RunFolderError

LOCK_NAME = ".run.lock"
_held: dict[str, int] = {}  # resolved run folder -> the open lock file this process holds


def hold_run(run_dir: Path) -> None:
    """Lock `run_dir` (an existing folder) for this process, or raise RunFolderError naming who holds it."""
    key = str(Path(run_dir).resolve())
    path = Path(key) / LOCK_NAME
    if key in _held:
        if _same_file(_held[key], path):
            return
        os.close(_held.pop(key))  # the folder was removed and made again since: lock the new file
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except PermissionError as refused:
            theirs = _stale_of_another_user(run_dir, path, refused)
            if theirs is None:
                continue  # removed: make our own
            fd = theirs
        except OSError as exc:
            raise RunFolderError(f"cannot lock the run folder {run_dir}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _read_holder(fd)
            os.close(fd)
            raise RunFolderError(
                f"{run_dir} is being trained by {holder}; wait for it to end or stop it, or choose another --out"
            ) from None
        if _same_file(fd, path):
            break
        os.close(fd)  # its holder let go and removed it between our open and our lock: lock the file there now
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
    _held[key] = fd


def _stale_of_another_user(run_dir: Path, path: Path, refused: OSError) -> int | None:
    """The lock file is another user's (their run ended with -9, or holds it now), so this one cannot open it to
    write (`refused`: as the open said it). Held: a read-only descriptor of it, for the caller to find it locked and
    name the holder. Locked by nobody: it is removed while locked here (as `release_run` removes one), None; one
    that cannot be removed is named. The probe is a shared lock: NFS refuses an exclusive one on a read-only
    descriptor, and any lock of the holder's excludes it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:  # no lock file: the folder itself refused one
        raise RunFolderError(f"cannot lock the run folder {run_dir}: {refused.strerror or refused}") from None
    except OSError as exc:
        raise RunFolderError(f"cannot lock the run folder {run_dir}: {path}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return fd  # held: the caller's lock attempt fails the same way and names the holder
    try:
        if _same_file(fd, path):
            path.unlink()
    except OSError as exc:
        raise RunFolderError(
            f"{path} is left by another user's run that has ended ({_read_holder(fd)}) and cannot be removed here "
            f"({exc.strerror or exc}); remove it, or choose another --out"
        ) from None
    finally:
        os.close(fd)
    return None


def release_run(run_dir: Path) -> None:
    """Let go of `run_dir`'s lock, if this process holds it, and remove its file (a run that ended leaves none)."""
    key = str(Path(run_dir).resolve())
    fd = _held.pop(key, None)
    if fd is None:
        return
    path = Path(key) / LOCK_NAME
    try:
        if _same_file(fd, path):  # removed while still locked: whoever opened it meanwhile sees it gone and retries
            path.unlink(missing_ok=True)
    except OSError:  # a folder made read-only: the file stays, unlocked (the lock is the flock, not the file);
        pass  # the error that ended the run, if any, is the one to show
    finally:
        os.close(fd)


@atexit.register
def _release_all() -> None:
    """A process that ends holding a run (`--dry-run`, nothing to train) leaves no lock file behind."""
    for key in list(_held):
        release_run(Path(key))


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == path.stat().st_ino
    except OSError:
        return False


def _read_holder(fd: int) -> str:
    try:
        said = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    except OSError:
        said = ""
    return said or "another process"
