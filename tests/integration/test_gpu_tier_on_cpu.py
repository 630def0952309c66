"""The gpu tier (tests/gpu, `-m gpu`) run on the CPU (RLRM_GPU_TIER_DEVICE=cpu), in the default tier: a GPU is lent
to few sessions and for minutes, so the tier's own code must not rot between them (a judge canary row added at
step 0 once broke two of its tests (tiny-genrm, tiny-fapo), unseen until this check ran).

    RLRM_GPU_TIER_DEVICE=cpu .venv/bin/python -m pytest -m gpu tests/gpu
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_the_gpu_tier_passes_on_the_cpu(tmp_path):
    env = {**os.environ, "RLRM_GPU_TIER_DEVICE": "cpu", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "pytest", "-m", "gpu", "tests/gpu", "-q", "-p", "no:cacheprovider"]
    argv += ["--basetemp", str(tmp_path / "tier"), "--durations=0"]
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    tail = done.stdout[-3000:]
    assert done.returncode == 0, tail
    passed = re.search(r"(\d+) passed", tail)
    skipped = re.search(r"(\d+) skipped", tail)
    assert passed and int(passed.group(1)) >= 20, tail  # the tier's runs, ranks and numbers, not a collection slip
    assert not skipped or int(skipped.group(1)) <= 2, tail  # only the two CUDA memory-cap tests need CUDA itself


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_a_cpu_run_that_leaves_the_gpu_tier_out_names_it_in_its_summary(tmp_path, workers):
    """The README's test command deselects the tier with -m on two xdist workers, whose controller collects nothing:
    the workers count what they left out."""
    argv = [sys.executable, "-m", "pytest", *workers, "-m", "not slow and not gpu and not sglang", "tests/gpu"]
    argv += ["tests/unit/test_gpu_check.py", "-q", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "run")]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:]
    named = re.search(r"gpu tier: (\d+) tests deselected in this run; on a CUDA machine", done.stdout)
    assert named and int(named.group(1)) >= 20, done.stdout[-2000:]
