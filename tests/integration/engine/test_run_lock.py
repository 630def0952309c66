"""One process trains a run folder at a time (rlrm/engine/run_lock.py).

Before, `rlrm train --resume RUN` while another process trained RUN rewrote its config.yaml and replaced its
metrics.jsonl (the live run appended to the unlinked file: its rows were lost), and `--out RUN --overwrite`
deleted the folder the live run went on writing checkpoints into. The other process here holds the lock as a
training process does (hold_run, then it lives on); the lock is the kernel's, so a holder killed with -9 leaves none.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlrm.cli.main import app
from rlrm.config.loader import load_profile
from rlrm.engine.run_folder import load_run_profile, start_run
from rlrm.engine.run_lock import release_run
from rlrm.errors import RunFolderError

REPO = Path(__file__).resolve().parents[3]
HOLDER = "import sys, time; from rlrm.engine.run_lock import hold_run; hold_run(sys.argv[1]); print('held', flush=True); time.sleep(600)"


@pytest.fixture
def run_held_elsewhere(tmp_path):
    """A run folder (config.yaml, a metrics row) and another process holding it, as a run still training."""
    run = start_run(load_profile("tiny-rule"), tmp_path / "run")
    release_run(run)  # this process made it; the other one trains it
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)], stdout=subprocess.PIPE, text=True, env=env)
    assert holder.stdout.readline().strip() == "held"
    yield run, holder
    if holder.poll() is None:
        holder.kill()
    holder.wait()


def _contents(run: Path) -> dict:
    return {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != ".run.lock"}


def test_resume_and_overwrite_of_a_run_another_process_trains_are_refused(run_held_elsewhere):
    run, holder = run_held_elsewhere
    before = _contents(run)
    with pytest.raises(RunFolderError, match=rf"is being trained by pid {holder.pid} on "):
        load_run_profile(run, total_steps=4)
    with pytest.raises(RunFolderError, match=rf"is being trained by pid {holder.pid} on "):
        start_run(load_profile("tiny-rule"), run, overwrite=True)
    assert _contents(run) == before  # config.yaml and metrics.jsonl as the live run left them


def test_the_cli_says_it_in_one_line(run_held_elsewhere):
    run, holder = run_held_elsewhere
    result = CliRunner().invoke(app, ["train", "--resume", str(run), "--steps", "4"])
    assert result.exit_code == 1
    assert f"is being trained by pid {holder.pid}" in result.output and "Traceback" not in result.output


def test_a_holder_killed_with_minus_9_leaves_no_lock(run_held_elsewhere):
    run, holder = run_held_elsewhere
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert load_run_profile(run, total_steps=4).trainer.total_steps == 4  # taken over at once: nothing stale
    release_run(run)


def test_overwrite_through_a_symlink_replaces_the_run_it_points_at(tmp_path):
    real = start_run(load_profile("tiny-rule"), tmp_path / "real")
    (real / "metrics.jsonl").write_text('{"step": 1}\n')
    release_run(real)
    link = tmp_path / "latest"
    link.symlink_to(real)  # runs/latest, as people keep one
    start_run(load_profile("tiny-rule", ["actor.lr=3e-4"]), link, overwrite=True)
    release_run(link)
    assert link.is_symlink() and not (real / "metrics.jsonl").exists()
    assert "0.0003" in (real / "config.yaml").read_text()


def test_resume_dry_run_changes_nothing_in_the_run_folder(tmp_path):
    # `--resume RUN --steps 10 --dry-run` wrote total_steps: 10 into RUN/config.yaml: a later plain --resume trained
    # to step 10, and the folder's record of the run said 10
    run = start_run(load_profile("tiny-rule", ["trainer.total_steps=3"]), tmp_path / "run")
    release_run(run)
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    result = CliRunner().invoke(app, ["train", "--resume", str(run), "--steps", "10", "--dry-run"])
    assert result.exit_code == 0 and "total_steps: 10" in result.output
    release_run(run)  # the CLI ran in this process: its lock ends with it, as a process's would at exit
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before


AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
TAKE = (
    "import sys; from pathlib import Path; from rlrm.engine.run_lock import hold_run, release_run\n"
    "try:\n    hold_run(Path(sys.argv[1]))\nexcept Exception as exc:\n    print('refused:', exc); raise SystemExit(3)\n"
    "release_run(Path(sys.argv[1])); print('held')"
)


def _take_as_nobody(run: Path) -> str:
    if os.geteuid() != 0:
        pytest.skip("needs root to leave a lock file of another user (runs as root in CI)")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([*AS_NOBODY, sys.executable, "-c", TAKE, str(run)], env=env, cwd="/", capture_output=True)
    return (done.stdout.decode() + done.stderr.decode()[-300:]).strip()


@pytest.fixture
def nobodys_run():
    """The user's run folder in a folder anyone may enter (pytest's tmp_path lies under root's own 0700 one)."""
    base = Path(tempfile.mkdtemp(prefix="rlrm-lock-"))
    base.chmod(0o755)
    run = base / "run"
    run.mkdir()
    os.chown(run, 65534, 65534)  # the user's folder
    yield run
    shutil.rmtree(base, ignore_errors=True)


def test_a_lock_file_left_by_another_users_run_killed_with_9_does_not_block_the_folders_owner(nobodys_run):
    """root's run in the user's folder was killed with -9: its lock file (0644, root's) stays, locked by nobody.
    The user cannot open it to write, but may replace it: the folder is theirs."""
    (nobodys_run / ".run.lock").write_text("pid 999999 on elsewhere\n")
    assert _take_as_nobody(nobodys_run) == "held"
    assert not (nobodys_run / ".run.lock").exists()


def test_a_run_another_user_trains_is_named_to_the_folders_owner(nobodys_run):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(nobodys_run)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        said = _take_as_nobody(nobodys_run)
        assert said.startswith("refused:") and f"pid {holder.pid}" in said and "is being trained by" in said
    finally:
        holder.kill()
        holder.wait()
