"""A Ray that is installed but fails to import is one line from a real `python -m rlrm train`, before a run folder
exists (the other bad inputs are in tests/unit/cli/test_bad_inputs.py)."""

from __future__ import annotations

from tests.unit.cli.test_bad_inputs import _write


def test_a_ray_that_fails_to_import_is_one_line_before_a_run_folder(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    fake = tmp_path / "site" / "ray"
    _write(fake / "__init__.py", 'raise ImportError("libray.so: cannot open shared object file")\n')
    repo = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": f"{fake.parent}{os.pathsep}{repo}"}  # the broken ray shadows the real one
    argv = [sys.executable, "-m", "rlrm", "train", "--profile", "tiny-rule", "--set", "reward.executor=ray"]
    done = subprocess.run([*argv, "--out", "run"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode == 1 and len(lines) == 1, lines[-5:]
    assert lines[0].startswith("error: ray is installed but fails to import (ImportError: libray.so: cannot open")
    assert not (tmp_path / "run").exists()
