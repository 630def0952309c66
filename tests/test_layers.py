"""The package's layers hold: cli -> bench/parity/report -> engine -> launch/config -> inference -> errors.

The contract is `[tool.importlinter]` in pyproject.toml; import-linter reads every import, the ones
inside functions included, so a cycle cannot hide behind a lazy import.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_import_layers_are_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 kept, 0 broken" in done.stdout
