"""Who the reward model is, for the reward contract (rlrm/engine/rewards/contract.py).

    local_identity("tiny:judge", "/root/.cache/rlrm/models/judge-v4-seed0")   # name, folder, weights digest
    await served_identity(balancer, "Qwen/Qwen3-8B")     # name and what the servers' /v1/models reports
    source_digest("/path/reward.py")                      # a custom function's file

A folder's digest: rlrm/launch/common/model_digest.py (rlrm's embedded server reports it too).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from rlrm.launch.common.model_digest import SAMPLE_BYTES, SAMPLED_FROM, folder_digest  # noqa: F401 (re-exported)


def local_identity(name: str, folder: str) -> dict:
    """A model rlrm loads from `folder` (reward.server.model `name`): its path and the digest of its files."""
    return {"name": name, "path": str(folder), "weights": folder_digest(Path(folder))}


def source_digest(path: str | None) -> str | None:
    """sha256 of a custom reward function's file (None without one)."""
    return None if path is None else "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()


async def served_identity(balancer, name: str | None, timeout_s: float) -> dict:
    """A model served at running addresses: the name requests use and the entry /v1/models gives for it (its
    `root`, `max_model_len`, ...: what says which weights answer). An API without /v1/models: the name alone."""
    from rlrm.call_errors import CallError

    reported = None
    try:
        status, body, _, _ = await balancer.forward("GET", "/v1/models", b"", timeout_s)
        if status == 200:
            entries = json.loads(body).get("data") or []
            reported = next((_stable(e) for e in entries if isinstance(e, dict) and e.get("id") == name), None)
    except (CallError, ValueError, AttributeError):
        reported = None  # the name alone identifies it
    return {"name": name, "served": reported}


def _stable(entry: dict) -> dict:
    """A /v1/models entry without what changes from one server start to the next."""
    return {k: v for k, v in entry.items() if k not in ("created", "permission")}
