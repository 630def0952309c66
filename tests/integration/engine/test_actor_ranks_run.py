"""Training runs on two actor ranks: resume equals an uninterrupted run, a changed world size is refused,
a rank killed with kill -9 stops the run (named) with its last checkpoint intact, and the run resumes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from small_run import as_set_args  # tests/fixtures/small_run.py

from rlrm.config.loader import load_profile
from rlrm.engine.checkpoint import check_checkpoint, list_checkpoints
from rlrm.engine.trainer import load_run_profile, start_run, train
from rlrm.errors import ConfigError

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
SMALL = [
    "data.train_batch_size=4",
    "actor.mini_batch_size=2",
    "rollout.n=4",
    "trainer.val_every=0",
    "trainer.num_threads=1",
    "trainer.save_every=2",
    "actor.world_size=2",
    "logging.console=none",
]
TIMING = ("timing_s/", "cpu_s/", "perf/", "idle/", "reward/latency")


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _same_rows(a: list[dict], b: list[dict]) -> None:
    assert [r["step"] for r in a] == [r["step"] for r in b]
    for x, y in zip(a, b):
        for key, value in x.items():
            if key.startswith(TIMING) or not isinstance(value, (int, float)):
                continue
            assert y[key] == pytest.approx(value, abs=1e-5), (x["step"], key)


def _run(tmp: Path, name: str, steps: int) -> Path:
    profile = load_profile("tiny-rule", overrides=[*SMALL, f"trainer.total_steps={steps}"])
    run = start_run(profile, tmp / name)
    train(run)
    return run


def test_resume_at_two_ranks_equals_an_uninterrupted_run_and_a_changed_world_size_is_refused(tmp_path):
    whole = _run(tmp_path, "whole", 4)
    part = _run(tmp_path, "part", 2)
    assert (list_checkpoints(part)[-1] / "shards" / ".metadata").is_file()  # torch.distributed.checkpoint
    assert (list_checkpoints(part)[-1] / "model" / "model.safetensors").is_file()  # the HF export
    load_run_profile(part, total_steps=4)
    train(part)
    _same_rows(_rows(whole), _rows(part))
    assert len(_rows(part)) == 4
    assert all(r["perf/actor_max_memory_gb"] > 0.05 for r in _rows(part))  # the ranks' own peak memory

    config = part / "config.yaml"
    raw = yaml.safe_load(config.read_text())
    raw["actor"]["world_size"] = 1
    raw["trainer"]["total_steps"] = 6
    config.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"written by 2 actor rank\(s\).*actor\.world_size=1.*actor\.world_size=2"):
        train(part)
    assert len(_rows(part)) == 4  # nothing written by the refused run


def _rank_pids(parent: int) -> list[int]:
    out = subprocess.run(
        ["ps", "-ww", "-o", "pid=,args=", "--ppid", str(parent)], capture_output=True, text=True
    ).stdout
    return [int(line.split()[0]) for line in out.splitlines() if "spawn_main" in line]


def test_a_killed_rank_stops_the_run_named_and_the_run_resumes(tmp_path):
    run = tmp_path / "run"
    sets = as_set_args(*SMALL)
    argv = [
        sys.executable,
        "-m",
        "rlrm",
        "train",
        "--profile",
        "tiny-rule",
        "--out",
        str(run),
        "--steps",
        "50",
        "--console",
        "plain",
        *sets,
    ]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line.rstrip())
            if line.startswith("step 3/"):
                break
        pids = _rank_pids(proc.pid)
        assert len(pids) == 2, lines
        os.kill(pids[1], signal.SIGKILL)
        killed = time.monotonic()
        rest, _ = proc.communicate(timeout=120)
        stopped_s = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = "\n".join(lines) + rest
    assert proc.returncode not in (0, None), output
    assert re.search(r"actor rank 1 on node \S+ died \(killed by SIGKILL\)", output), output
    assert stopped_s < 60, stopped_s  # bounded: no hang in a collective
    assert not any(p for p in _rank_pids(proc.pid))
    ckpts = list_checkpoints(run)
    assert ckpts and ckpts[-1].name in ("step_2", "step_4"), ckpts
    check_checkpoint(ckpts[-1])  # intact
    last = int(ckpts[-1].name.split("_")[1])

    resumed = subprocess.run(
        [sys.executable, "-m", "rlrm", "train", "--resume", str(run), "--steps", str(last + 2), "--console", "plain"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert [r["step"] for r in _rows(run)][-1] == last + 2
