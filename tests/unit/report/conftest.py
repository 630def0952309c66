"""Small synthetic run, benchmark and parity folders (rlrm/report/synthetic.py), built once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlrm.report.synthetic import write_bench, write_parity, write_run


@pytest.fixture(scope="session")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("report-inputs")
    return {
        "a": write_run(root / "a", steps=12, mode="sync", seed=0),
        "b": write_run(root / "b", steps=10, mode="stream", seed=1),
        "bench": write_bench(root / "bench", modes=("sync", "stream", "one-step-off"), repeats=2, steps=5),
        "parity": write_parity(root / "parity", groups=12, n=4, train_steps=6),
    }


@pytest.fixture
def notes() -> list[str]:
    return []
