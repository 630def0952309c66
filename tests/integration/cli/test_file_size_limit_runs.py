"""A run under a file-size limit (`ulimit -f`, as batch schedulers set one): one line naming the limit, exit 1, and
no half checkpoint. The limit is real (RLIMIT_FSIZE in the child, SIGXFSZ ignored so writes past it fail EFBIG)."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

from small_run import SMALL_RUN, as_set_args


def _limited(nbytes: int):
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))

    return apply


def test_a_checkpoint_past_the_file_size_limit_is_one_line(tmp_path):
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "rlrm", "train", "--profile", "tiny-rule", "--steps", "2", "--out", str(out)]
    argv += as_set_args(*SMALL_RUN, "trainer.save_every=1")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    # the tiny policy's model.safetensors is ~2.2 MB: a 1 MB limit cuts it in the first checkpoint
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, preexec_fn=_limited(1 << 20))
    assert done.returncode == 1, done.stderr[-800:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-800:]
    assert "ulimit -f" in lines[0] and "step_1" in lines[0], lines[0]
    assert not list(out.glob("checkpoints/step_*"))  # nor a half one: it was removed
