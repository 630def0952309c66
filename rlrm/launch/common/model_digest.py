"""A model folder's digest: which weights, config and tokenizer files a server or a run loads.

    folder_digest(Path("/root/.cache/rlrm/models/judge-v5-seed0"))   # "sha256:..."

Every file is read in full up to SAMPLED_FROM bytes; a larger file (a multi-GB weight shard) is digested by its size
and its first and last SAMPLE_BYTES, so a 16 GB model is fingerprinted in well under a second. Two checkpoints of one
architecture differ there: the first bytes hold the safetensors header and the embedding rows, the last the final
tensors. Weights re-saved in place with both ends unchanged (an MLP-only fine-tune) are not told apart; a copy or a
second download is the same model (a file's time is no part of it).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

SAMPLED_FROM = 64 * 2**20
SAMPLE_BYTES = 4 * 2**20


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
