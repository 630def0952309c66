"""A tiny model's first-use build is never silent: a progress line at least every 10 s, with an estimate."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import torch

from rlrm.engine.models import sft, tiny
from rlrm.engine.models.sft import StepProgress


def fake_clock(monkeypatch, step_s: float) -> None:
    """sft's own `time` reads a clock that advances `step_s` a read. Only sft's: patching time.monotonic itself
    would let any thread of the process (an event loop left by an earlier test) take readings off the clock."""
    clock = itertools.count(start=0.0, step=step_s)
    monkeypatch.setattr(sft, "time", SimpleNamespace(monotonic=lambda: next(clock)))


def test_a_slow_build_prints_a_line_at_least_every_ten_seconds(monkeypatch):
    fake_clock(monkeypatch, 3.0)  # 3 s a step: a busy machine
    lines: list[str] = []
    progress = StepProgress("judge", 1000, lines.append, every=100)
    for step in range(20):
        progress.step(step, torch.tensor(0.5))
    # 10 s pass every 4 steps (12 s): steps 4, 8, ..., 20
    assert [line.split("/")[0] for line in lines] == [f"  judge step {k}" for k in (4, 8, 12, 16, 20)]
    assert lines[0] == "  judge step 4/1000  loss 0.500  (12 s, ~50 min left)"  # 996 steps left at 3 s


def test_a_fast_build_prints_every_n_steps(monkeypatch):
    fake_clock(monkeypatch, 0.01)
    lines: list[str] = []
    progress = StepProgress("policy", 200, lines.append, every=50)
    for step in range(200):
        progress.step(step, torch.tensor(1.25))
    assert [line.split("  loss")[0] for line in lines] == [f"  policy step {k}/200" for k in (50, 100, 150, 200)]
    assert lines[-1].endswith("~0 s left)")


def test_first_use_shows_the_build_and_its_progress_on_stderr(capsys):
    tiny._build_notice("building tiny judge (seed 3) into /x")
    tiny._build_notice("  judge step 4/1000  loss 0.500  (12 s, ~50 min left)")
    tiny._build_notice("tiny judge is ready at /x")  # the caller says where it is; no duplicate
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "building tiny judge (seed 3) into /x (first use; `rlrm models prepare` builds ahead of time)",
        "  judge step 4/1000  loss 0.500  (12 s, ~50 min left)",
    ]
