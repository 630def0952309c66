"""The package's layers hold (cli -> bench/parity/report -> engine -> launch/config -> inference -> errors, and the
layers inside `launch`), the code is formatted and linted as pyproject.toml configures ruff, and mypy finds no
type error in rlrm/ as `[tool.mypy]` configures it (strict for the config, the launch specs and the reward contract).

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
    contracts = (REPO / "pyproject.toml").read_text().count("[[tool.importlinter.contracts]]")
    assert f"{contracts} kept, 0 broken" in done.stdout


def test_code_is_formatted_and_linted():
    ruff = Path(sys.executable).with_name("ruff")
    for args in (["format", "--check"], ["check"]):
        done = subprocess.run([str(ruff), *args, "."], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"ruff {' '.join(args)} (fix: ruff {args[0]} .):\n" + done.stdout[-3000:]


def test_types_check():
    mypy = Path(sys.executable).with_name("mypy")
    # the files, plugin, per-module imports and strict modules come from [tool.mypy] in pyproject.toml
    done = subprocess.run([str(mypy)], cwd=REPO, capture_output=True, text=True, timeout=600)
    errors = "\n".join(line for line in done.stdout.splitlines() if ": error:" in line)
    assert done.returncode == 0, (
        f"mypy rlrm/ (run: mypy):\n{errors[-6000:] or done.stdout[-3000:]}{done.stderr[-2000:]}"
    )
    assert "Success: no issues found" in done.stdout


def test_test_file_names_are_unique():
    """Test files are imported by basename (no packages under tests/): two files of one name in different tiers
    stop the whole collection with "import file mismatch"."""
    from collections import Counter

    names = Counter(p.name for p in (REPO / "tests").rglob("test_*.py"))
    assert not [name for name, count in names.items() if count > 1]
