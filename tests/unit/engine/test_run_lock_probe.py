"""A lock file of another user's in a run folder of this user's (rlrm/engine/run_lock.py), as root simulated: the
open for writing refused. A stale one (its run killed with -9) is replaced on NFS too, where an exclusive lock on a
read-only descriptor fails (EBADF): the probe is a shared lock. A folder that refuses a lock file says so."""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

import pytest

import rlrm.engine.run_lock as run_lock
from rlrm.errors import RunFolderError

_real_open, _real_flock = os.open, fcntl.flock


def _as_other_user(monkeypatch, nfs: bool, folder_writable: bool = True):
    def fake_open(path, flags, *args, **kwargs):
        theirs = os.path.exists(path) or not folder_writable  # their file; or a folder we cannot make one in
        if str(path).endswith(run_lock.LOCK_NAME) and theirs and flags & (os.O_RDWR | os.O_WRONLY | os.O_CREAT):
            raise PermissionError(errno.EACCES, "Permission denied")
        return _real_open(path, flags, *args, **kwargs)

    def fake_flock(fd, op):
        if nfs and op & fcntl.LOCK_EX and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY:
            raise OSError(errno.EBADF, "Bad file descriptor")
        return _real_flock(fd, op)

    monkeypatch.setattr(run_lock.os, "open", fake_open)
    monkeypatch.setattr(run_lock.fcntl, "flock", fake_flock)


def test_stale_lock_of_another_user_on_nfs_is_not_reported_as_held(tmp_path: Path, monkeypatch):
    (tmp_path / run_lock.LOCK_NAME).write_text("pid 1 on otherhost\n")  # left by a run killed with -9
    _as_other_user(monkeypatch, nfs=True)
    try:
        run_lock.hold_run(tmp_path)  # local fs: removed and replaced, as a2d7741 intends
    except RunFolderError as exc:
        pytest.fail(f"stale lock refused on NFS semantics: {exc}")
    finally:
        monkeypatch.undo()
        run_lock.release_run(tmp_path)


def test_unwritable_folder_without_lock_file_says_permission_denied(tmp_path: Path, monkeypatch):
    _as_other_user(monkeypatch, nfs=False, folder_writable=False)
    with pytest.raises(RunFolderError, match="Permission denied"):
        run_lock.hold_run(tmp_path)


def test_a_lock_file_that_cannot_be_removed_does_not_hide_the_runs_own_error(tmp_path: Path, monkeypatch):
    # a run folder made read-only mid-run: the checkpoint's EACCES was replaced by the lock file's unlink error
    # ("<run>/.run.lock: Permission denied"), and the descriptor stayed open
    run_lock.hold_run(tmp_path)
    fd = run_lock._held[str(tmp_path.resolve())]

    def refused(self, missing_ok=False):
        raise PermissionError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(Path, "unlink", refused)
    with pytest.raises(ValueError, match="the run's own"):
        try:
            raise ValueError("the run's own error")
        finally:
            run_lock.release_run(tmp_path)
    with pytest.raises(OSError):
        os.fstat(fd)  # closed
    assert str(tmp_path.resolve()) not in run_lock._held
