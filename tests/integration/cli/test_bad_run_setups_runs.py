"""Round 3 of bad inputs through the real CLI (issue 23), in the same table form as test_bad_inputs.py: each case
exits with its code and one line naming what is wrong, and leaves nothing behind under the test's folder (a
refused --resume leaves its config.yaml as it was).

A few cases need the environment changed (a broken tracker install, ray missing): they follow the table.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest
from small_run import SMALL_RUN, as_set_args
from typer.testing import CliRunner

from rlrm.cli.main import app
from rlrm.config.loader import dump_profile, load_profile
from tests.unit.cli.test_bad_run_setups import _write

TRAIN = ["train", "--profile", "tiny-rule", "--console", "none"]
SIMULATE = ["bench", "simulate", "--spec", str(Path(__file__).resolve().parents[3] / "examples" / "cluster-gpu.yaml")]
WRONG_SIGNATURE = "def compute_score(solution_str, ground_truth):\n    return 1.0\n"


def _two_rank_run(tmp):
    """A run folder configured for 2 actor ranks whose last checkpoint one rank wrote."""
    run = tmp / "run"
    _write(run / "config.yaml", dump_profile(load_profile("tiny-rule", ["actor.world_size=2"])))
    _write(run / "metrics.jsonl", '{"step": 1}\n')
    _write(run / "checkpoints" / "step_1" / "shards" / "__0_0.distcp", b"\0")
    return run


NOT_UTF8 = b'{"prompt": "2 + 3?", "response": "5"}\n{"prompt": "caf\xe9", "response": "5"}\n'
NOT_UTF8_PAIRS = (
    b'{"prompt": "2 + 3?", "chosen": "5", "rejected": "6"}\n{"prompt": "caf\xe9", "chosen": "5", "rejected": "6"}\n'
)

CASES = [
    (
        "simulate --steps 1e9",
        lambda t: [*SIMULATE, "--steps", "1000000000", "--out", str(t / "sim")],
        1,
        "samples per mode; the simulator holds at most 50,000,000",
    ),
    (
        "simulate --steps 1e5",
        lambda t: [*SIMULATE, "--steps", "100000", "--out", str(t / "sim")],
        1,
        "lower workload.steps to 9,765 or fewer",
    ),
    (
        "actor.ray_address without a port",
        lambda t: [*TRAIN, "--out", str(t / "run"), "--set", "actor.ray_address=10.0.0.5"],
        1,
        "'10.0.0.5' is not a Ray address: give host:port",
    ),
    (
        "reward.ray_address with port 99999",
        lambda t: [*TRAIN, "--out", str(t / "run"), "--set", "reward.ray_address=head:99999"],
        1,
        "'head:99999' is not a Ray address",
    ),
    (
        "logging.tracker_dir is a file",
        lambda t: [
            *TRAIN,
            "--out",
            str(t / "run"),
            "--set",
            "logging.trackers=tensorboard",
            "--set",
            f"logging.tracker_dir={_write(t / 'taken', 'x')}/tb",
        ],
        1,
        "is a file, not a folder",
    ),
    (
        "custom reward with the wrong signature",
        lambda t: [
            *TRAIN,
            "--out",
            str(t / "run"),
            "--set",
            "reward.kind=custom",
            "--set",
            f"reward.custom.path={_write(t / 'fn.py', WRONG_SIGNATURE)}",
        ],
        1,
        # verl's own scorer shape, named as the function: refused before it is called with shifted arguments
        "takes solution_str as its parameter 1, where verl's arguments put data_source",
    ),
    (
        "resume at another world size",
        lambda t: ["train", "--resume", str(_two_rank_run(t)), "--steps", "5"],
        1,
        "step_1 was written by 1 actor rank(s) but this run has actor.world_size=2",
    ),
    (
        "inspect --n 1000000",
        lambda t: ["inspect", "reward", "--profile", "tiny-rule", "--n", "1000000"],
        2,
        "--n 1000000: inspect scores at most 4096 samples",
    ),
    (
        "inspect on a non-UTF-8 file",
        lambda t: ["inspect", "reward", "--profile", "tiny-rule", "--input", str(_write(t / "s.jsonl", NOT_UTF8))],
        2,
        "s.jsonl row 2: not UTF-8 text (byte 15 of the line is 0xe9)",
    ),
    (
        "eval rm on a non-UTF-8 file",  # before: 52 lines of UnicodeDecodeError traceback
        lambda t: ["eval", "rm", "--profile", "tiny-rule", "--pairs", str(_write(t / "p.jsonl", NOT_UTF8_PAIRS))],
        1,
        "p.jsonl row 2: not UTF-8 text (byte 15 of the line is 0xe9)",
    ),
    (  # every step trained on nothing ("reward nan", checkpoints of an untouched policy) and the run said "done"
        "every train prompt dropped",
        lambda t: (
            [*TRAIN, "--out", str(t / "run"), "--set", "data.max_prompt_length=40"]
            + ["--set", "data.prompt_too_long=drop"]
        ),
        1,
        "every one of the 4096 train prompts is longer than data.max_prompt_length=40 (the shortest has 41 tokens)",
    ),
]


def _snapshot(root):
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize(("setup", "code", "needle"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_leaves_nothing_behind(tmp_path, setup, code, needle):
    args = setup(tmp_path)
    before = _snapshot(tmp_path)
    result = CliRunner().invoke(app, args)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == code, result.output
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert needle in lines[0], lines[0]
    assert _snapshot(tmp_path) == before


def test_a_sync_timeout_too_short_names_the_setting(tmp_path):
    sets = [
        "rollout.backend=server",
        "rollout.server.router=client",
        "rollout.server.threads=1",
        "rollout.server.sync_timeout_s=0.001",
        f"rollout.server.weights_dir={tmp_path / 'w'}",
        *SMALL_RUN,
        "data.train_batch_size=2",
        "actor.mini_batch_size=2",
        "trainer.val_before_train=false",
    ]
    run = tmp_path / "run"
    result = CliRunner().invoke(app, [*TRAIN, "--out", str(run), "--steps", "1", *as_set_args(*sets)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert "within rollout.server.sync_timeout_s=0.001 s; raise it" in lines[0], lines[0]
    assert not run.exists() and list((tmp_path / "w").iterdir()) == []  # no run folder, no weights left


def _read_only_argv(folder: Path, argv: list[str]) -> list[str]:
    """`argv` run where `folder` cannot be written, even by root: root ignores mode bits, so as root the folder
    is bind-mounted read-only onto itself in a mount namespace of the command's own (the host never sees it)."""
    import os
    import shutil
    import subprocess

    if os.geteuid() != 0:
        folder.chmod(0o555)
        return argv
    probe = ["unshare", "-m", "sh", "-c", 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0"', str(folder)]
    if shutil.which("unshare") is None or subprocess.run(probe, capture_output=True).returncode != 0:
        pytest.skip("running as root without a mount namespace: no folder here is read-only to this process")
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    return ["unshare", "-m", "sh", "-c", script, str(folder), *argv]


def test_a_read_only_tracker_dir_is_one_line_before_the_run_folder(tmp_path):
    import os
    import subprocess

    repo = Path(__file__).resolve().parents[3]
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    sets = ["logging.trackers=tensorboard", f"logging.tracker_dir={read_only}/tb"]
    argv = [
        sys.executable,
        "-m",
        "rlrm",
        *TRAIN,
        "--out",
        str(tmp_path / "run"),
        *as_set_args(*sets),
    ]
    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        _read_only_argv(read_only, argv), env=env, cwd=repo, capture_output=True, text=True, timeout=300
    )
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode == 1 and len(lines) == 1, lines
    assert lines[0] == (
        f"error: logging.tracker_dir {read_only}/tb: {read_only} is not writable; give a folder you can write"
    ), lines
    assert not (tmp_path / "run").exists() and not (read_only / "tb").exists()


def _on_a_small_tmpfs(folder: Path, options: str, argv: list[str]) -> list[str]:
    """`argv` run with a tmpfs mounted on `folder` (mount `options`) in a mount namespace of the command's own; what
    the tmpfs holds when the command ends is listed into `folder`.left (the host never sees the tmpfs itself)."""
    import os
    import shutil
    import subprocess

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to mount a small file system for this process only")
    probe = ["unshare", "-m", "sh", "-c", 'mount -t tmpfs -o size=1m tmpfs "$0"', str(folder)]
    if subprocess.run(probe, capture_output=True).returncode != 0:
        pytest.skip("no mount namespace here: cannot mount a small file system for this process only")
    script = 'mount -t tmpfs -o "$1" tmpfs "$0" || exit 97; shift; "$@"; rc=$?; ls -A "$0" > "$0.left"; exit $rc'
    return ["unshare", "-m", "sh", "-c", script, str(folder), options, *argv]


@pytest.mark.parametrize("short_of", ["space", "inodes"])
def test_a_weights_dir_without_room_for_a_sync_is_one_line_and_leaves_nothing(tmp_path, tiny_policy_path, short_of):
    """rollout.server.weights_dir on a real file system with room for one weight version but not the two a sync
    holds, or with no free inodes: before, a 73-line traceback and an empty run folder that blocked --out."""
    import os
    import subprocess

    repo = Path(__file__).resolve().parents[3]
    weights = tmp_path / "weights"
    weights.mkdir()
    one_version = (tiny_policy_path / "model.safetensors").stat().st_size
    options = f"size={one_version * 3 // 2},mode=0700" if short_of == "space" else "size=64m,nr_inodes=4,mode=0700"
    sets = [
        "rollout.backend=server",
        "rollout.server.router=client",
        "rollout.server.threads=1",
        f"rollout.server.weights_dir={weights}",
        *SMALL_RUN,
        "data.train_batch_size=2",
        "actor.mini_batch_size=2",
        "trainer.val_before_train=false",
    ]
    argv = [sys.executable, "-m", "rlrm", *TRAIN, "--out", str(tmp_path / "run"), "--steps", "2"]
    argv += as_set_args(*sets)
    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        _on_a_small_tmpfs(weights, options, argv), env=env, cwd=repo, capture_output=True, text=True, timeout=300
    )
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode == 1 and len(lines) == 1, lines
    if short_of == "space":
        assert lines[0].startswith(f"error: {weights} has ") and "(two versions: a sync writes" in lines[0], lines
    else:
        assert lines[0].startswith(f"error: {weights} has no free inodes left for the policy weights"), lines
    assert "set rollout.server.weights_dir to" in lines[0], lines
    assert not (tmp_path / "run").exists()  # --out is free for the next try
    assert (tmp_path / "weights.left").read_text() == ""  # no version, no run folder left on the tmpfs


FILLED_AFTER_THE_CHECK = """
import shutil, sys, torch
import rlrm.inference.weight_files as wf
from rlrm.errors import RolloutServerError
real = shutil.disk_usage
wf.shutil.disk_usage = lambda p: real(p)._replace(free=1 << 40)  # another writer fills the disk after the check
files = wf.WeightFiles(sys.argv[1])
try:
    files.write({"w": torch.zeros(1 << 20)}, 1)  # 4 MiB on a 2-MiB file system
except RolloutServerError as exc:
    print(exc)
print(sorted(p.name for p in files.root.iterdir()))  # no partial version left beside the run's lock
"""


def test_a_disk_that_fills_after_the_room_check_is_still_one_line(tmp_path):
    """safetensors' writer reports ENOSPC as a SafetensorError, not an OSError: before, that was the 73-line
    traceback whenever the file system filled between the room check and the write."""
    import os
    import subprocess

    weights = tmp_path / "weights"
    weights.mkdir()
    argv = [sys.executable, "-c", FILLED_AFTER_THE_CHECK, str(weights)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3]), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        _on_a_small_tmpfs(weights, "size=2m,mode=0700", argv), env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    error, left = done.stdout.splitlines()
    assert error.startswith(f"{weights} has ") and "but the policy weights need 4.0 MiB" in error, error
    assert error.endswith("set rollout.server.weights_dir to a local folder with room"), error
    assert left == "['.owner.lock']", left
