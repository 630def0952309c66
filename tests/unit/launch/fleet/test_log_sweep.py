"""The sweep of dead runs' server logs leaves what it may not delete."""

from __future__ import annotations

from pathlib import Path

from rlrm.launch.fleet import process
from rlrm.launch.fleet.process import sweep_dead_logs


def test_another_users_log_in_a_sticky_tmp_is_left_and_ours_removed(tmp_path, monkeypatch):
    # both launchers are gone; in a sticky /tmp only the owner may unlink, so the other user's unlink is refused.
    # before: that PermissionError escaped and the first server launch of the run failed with a traceback
    theirs, ours = tmp_path / "rlrm-server-11-a.log", tmp_path / "rlrm-server-12-b.log"
    theirs.write_text("x")
    ours.write_text("y")

    def kill(pid, sig):
        raise ProcessLookupError(pid)

    real_unlink = Path.unlink

    def unlink(path, missing_ok=False):
        if path == theirs:
            raise PermissionError(1, "Operation not permitted", str(path))
        real_unlink(path, missing_ok=missing_ok)

    monkeypatch.setattr(process.os, "kill", kill)
    monkeypatch.setattr(Path, "unlink", unlink)
    assert sweep_dead_logs(tmp_path) == 1
    assert theirs.exists() and not ours.exists()
