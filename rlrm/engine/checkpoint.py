"""Save and resume: `<run>/checkpoints/step_<k>/` holds everything a run needs to continue.

    step_<k>/model/          the policy in HF format (loadable with from_pretrained)
    step_<k>/state.pt        optimizer, scheduler, data cursor, RNG states, step, counters

A checkpoint is written to `step_<k>.tmp` and renamed when complete, so a crash mid-save never
leaves a half-written checkpoint that resume would pick up.
"""

from __future__ import annotations

import random
import re
import shutil
from pathlib import Path

_STEP_DIR = re.compile(r"^step_(\d+)$")


def save_checkpoint(run_dir: Path, step: int, model, tokenizer, state: dict, keep: int) -> Path:
    """Write checkpoint `step` atomically and prune older ones beyond `keep`.

    Args:
        run_dir: the run folder.
        step: the last completed step.
        model: the policy (saved with save_pretrained).
        tokenizer: saved next to the model so the folder loads on its own.
        state: trainer state (actor, loader, counters); RNG states are added here.
        keep: how many checkpoints to keep.

    Returns:
        The checkpoint folder.
    """
    import torch

    root = Path(run_dir) / "checkpoints"
    final = root / f"step_{step}"
    tmp = root / f"step_{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp / "model")
    tokenizer.save_pretrained(tmp / "model")
    payload = dict(state, step=step, rng=_rng_state())
    torch.save(payload, tmp / "state.pt")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found)]


def load_state(ckpt_dir: Path) -> dict:
    """The trainer state of a checkpoint; restores the RNG states as a side effect."""
    import torch

    state = torch.load(Path(ckpt_dir) / "state.pt", weights_only=False)
    _set_rng_state(state.pop("rng"))
    return state


def _rng_state() -> dict:
    import numpy as np
    import torch

    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def _set_rng_state(rng: dict) -> None:
    import numpy as np
    import torch

    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
