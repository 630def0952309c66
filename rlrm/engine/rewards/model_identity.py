"""Who the reward model is, for the reward contract (rlrm/engine/rewards/contract.py).

    local_identity("tiny:judge", "/root/.cache/rlrm/models/judge-v4-seed0")   # name, folder, weights digest
    await served_identity(balancer, "Qwen/Qwen3-8B")     # name and what the servers' /v1/models reports
    source_digest("/path/reward.py")                      # a custom function's file

A folder's digest reads every file in full up to SAMPLED_FROM bytes; larger files (multi-GB weight shards) are
digested by their size and their first and last SAMPLE_BYTES, so a 16 GB model is fingerprinted in well under
a second. Two checkpoints of one architecture differ there: the first bytes hold the safetensors header and the
embedding rows, the last the final tensors.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

SAMPLED_FROM = 64 * 2**20
SAMPLE_BYTES = 4 * 2**20


def local_identity(name: str, folder: str) -> dict:
    """A model rlrm loads from `folder` (reward.server.model `name`): its path and the digest of its files."""
    return {"name": name, "path": str(folder), "weights": folder_digest(Path(folder))}


def folder_digest(folder: Path) -> str:
    """sha256 over each file's relative path, size and content (sampled past SAMPLED_FROM bytes)."""
    total = hashlib.sha256()
    files = [folder] if folder.is_file() else sorted(p for p in folder.rglob("*") if p.is_file())
    for path in files:
        rel = path.name if path == folder else path.relative_to(folder).as_posix()
        if any(part.startswith(".") for part in Path(rel).parts):
            continue  # locks and caches beside the weights
        size = path.stat().st_size
        total.update(f"{rel}\0{size}\0".encode())
        total.update(_file_digest(path, size))
    return "sha256:" + total.hexdigest()


def _file_digest(path: Path, size: int) -> bytes:
    h = hashlib.sha256()
    with path.open("rb") as f:
        if size <= SAMPLED_FROM:
            for block in iter(lambda: f.read(2**20), b""):
                h.update(block)
        else:
            h.update(f.read(SAMPLE_BYTES))
            f.seek(size - SAMPLE_BYTES)
            h.update(f.read(SAMPLE_BYTES))
    return h.digest()


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
