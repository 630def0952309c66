"""The wheels carried to an offline GPU machine are checked against each other and the machine (scripts/gpu_wheels.py)."""

from __future__ import annotations

import zipfile
from pathlib import Path

from repo_scripts import load_script  # tests/fixtures/repo_scripts.py


def _module():
    return load_script("scripts/gpu_wheels.py")


def _wheel(folder: Path, name: str, version: str, requires: list[str]) -> Path:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    meta = "\n".join([f"Name: {name}", f"Version: {version}", *[f"Requires-Dist: {r}" for r in requires]])
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}-{version}.dist-info/METADATA", meta + "\n")
    return path


def test_requirements_are_met_by_the_fetched_wheels_or_the_machine(tmp_path):
    gw = _module()
    wheels = {
        "app": _wheel(
            tmp_path, "app", "1.0", ["lib>=2", "numpy", "helper; extra == 'dev'", "old; python_version < '3.8'"]
        ),
        "lib": _wheel(tmp_path, "lib", "2.1", ["pyarrow>=21"]),
    }
    problems, unknown = gw.check(wheels, {"numpy", "pyarrow"})
    assert problems == []  # extras and markers for other Pythons are not asked for
    assert unknown == ["lib: pyarrow>=21"]  # the machine has pyarrow, of a version not known here


def test_a_missing_package_a_fetched_version_out_of_range_and_a_machine_version_too_old_are_named(tmp_path):
    gw = _module()
    wheels = {
        "app": _wheel(tmp_path, "app", "1.0", ["lib<2", "gone", "huggingface_hub>=2.0"]),
        "lib": _wheel(tmp_path, "lib", "2.1", []),
    }
    problems, _ = gw.check(wheels, {"huggingface-hub"})
    assert "app needs lib<2, fetched 2.1" in problems
    assert "app needs gone, which is neither fetched nor on the machine" in problems
    assert f"app needs huggingface_hub>=2.0; the machine has {gw.MACHINE['huggingface-hub']}" in problems
    assert len(problems) == 3
