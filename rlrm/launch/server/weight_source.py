"""Where a policy replica may load weights from, and how every file is checked before any is read.

    source = WeightSource(weights_dir="/dev/shm/rlrm-weights-1-ab12cd34", model_path="/models/policy")
    source.is_own_model("/models/policy")         # True: a load from there resets the replica to version 0
    tensors = source.read("/dev/shm/rlrm-weights-1-ab12cd34/v3", load_format=None)   # ValueError when refused

The rules (`/update_weights_from_disk`, rlrm/launch/server/weight_routes.py):
- A load comes from inside the weights folder the server was started with (`--weights-dir`, which the fleet
  sets to the run's own folder), or is the server's own model folder (`--model`: back to the base weights).
  A server started without `--weights-dir` loads only its own model folder.
- Anything else, and anything missing, gets one and the same message: whether a path outside the folder
  exists is not told. Whether a path is inside is decided on the path as written before anything on disk is
  looked at (against either folder as the server was given it or as it really lies: a weights folder or model
  reached through a link is its own); symbolic links inside the folder must stay inside it.
- Every file is opened without blocking (a named pipe would otherwise hold the process: safetensors opens
  files holding the GIL), and must be a regular file holding a whole safetensors header and the data it
  declares, before any of them is read; the checked files are then read through their open descriptors.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

MAX_HEADER_BYTES = 100 * 2**20  # safetensors' own limit on the JSON header


class WeightSource:
    """The folders a replica loads weights from (see the module docstring)."""

    def __init__(self, weights_dir: str | None, model_path: str):
        self.weights_dir = os.path.realpath(weights_dir) if weights_dir else None
        self.model_dir = os.path.realpath(model_path) if os.path.isdir(model_path) else None
        self._model_given = model_path
        # the folders as given too: the client names them so (a /scratch -> /mnt/nvme/scratch, a models/current link)
        self._forms = [
            (root, (root, _lexical(given)))
            for root, given in ((self.weights_dir, weights_dir), (self.model_dir, model_path))
            if root is not None and given
        ]

    def refused(self, model_path: str) -> str:
        """The one message for a path that is missing, outside the allowed folders, or holds no weights."""
        if self.weights_dir is None:
            return (
                f"no weights loadable from {model_path!r}: this server was started without --weights-dir, so it "
                "loads only its own model folder; restart it with --weights-dir FOLDER to load from FOLDER"
            )
        return f"no safetensors weights at {model_path!r} inside this server's weights folder {self.weights_dir}"

    def is_own_model(self, model_path: str) -> bool:
        """A load of the folder the server started from (back to the base weights): by either of its names, while
        the link it was given by still leads there."""
        if self.model_dir is None:
            return False
        named = _lexical(model_path) in (self.model_dir, _lexical(self._model_given))
        return named and os.path.realpath(model_path) == self.model_dir

    def read(self, model_path: str, load_format: str | None) -> dict:
        """Every tensor of the safetensors at `model_path` (a file or a folder of them); ValueError when refused."""
        if load_format not in (None, "auto", "safetensors"):
            raise ValueError(f"load_format {load_format!r} is not served here; use safetensors (or auto)")
        files = self._files(model_path)
        descriptors: list[int] = []
        try:
            for file in files:
                descriptors.append(_open_checked(file))
            return _load(descriptors, files)
        finally:
            for fd in descriptors:
                os.close(fd)

    def _files(self, model_path: str) -> list[Path]:
        """The safetensors files to load, each inside an allowed folder; ValueError(`refused`) otherwise."""
        root = self._root_of(_lexical(model_path))
        if root is None:
            raise ValueError(self.refused(model_path))
        real = os.path.realpath(model_path)
        own_model = root == self.model_dir
        # the real folder, the own model's too: a link it was given by (models/current) may point elsewhere by now;
        # a file of the own model is judged by its folder (a hub snapshot's files link to ../../blobs)
        anchor = real if not own_model or os.path.isdir(model_path) else os.path.realpath(os.path.dirname(model_path))
        if not _inside(anchor, root):
            raise ValueError(self.refused(model_path))
        path = Path(real)
        files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path] if path.exists() else []
        # files linked from elsewhere: allowed in the server's own model folder only (a hub cache links blobs)
        if not files or not (own_model or all(_inside(os.path.realpath(f), root) for f in files)):
            raise ValueError(self.refused(model_path))
        return files

    def _root_of(self, lexical: str) -> str | None:
        """The allowed folder (as it really lies) that the path as written is inside, in either of its forms."""
        for root, forms in self._forms:
            if any(_inside(lexical, form) for form in forms):
                return root
        return None


def _lexical(path: str) -> str:
    """The absolute path as written, `..` folded, no link followed (nothing on disk is looked at)."""
    return os.path.normpath(os.path.abspath(path))


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([path, root]) == root


def _open_checked(file: Path) -> int:
    """A descriptor of `file`, checked to be a regular file with a whole safetensors header; ValueError if not."""
    try:
        # O_NONBLOCK: opening a named pipe returns at once instead of waiting for a writer
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ValueError(f"cannot open {file.name}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{file.name} is not a regular file")
        _check_header(fd, info.st_size, file.name)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_header(fd: int, size: int, name: str) -> None:
    """A safetensors file: 8 bytes of header length, a JSON header, then the data every tensor's offsets name."""
    if size < 8:
        raise ValueError(f"{name} is {size} bytes, too short for a safetensors file")
    length = int.from_bytes(os.pread(fd, 8, 0), "little")
    if not 2 <= length <= min(MAX_HEADER_BYTES, size - 8):
        raise ValueError(f"{name} is not a safetensors file (its header length {length} does not fit {size} bytes)")
    try:
        header = json.loads(os.pread(fd, length, 8))
    except (UnicodeDecodeError, ValueError):
        raise ValueError(f"{name} is not a safetensors file (its header is not JSON)") from None
    data_bytes = size - 8 - length
    if not isinstance(header, dict):
        raise ValueError(f"{name} is not a safetensors file (its header is not a JSON object)")
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and 0 <= offsets[0] <= offsets[1] <= data_bytes):
            raise ValueError(
                f"{name} is cut short or malformed: tensor {key!r} lies outside its {data_bytes} data bytes"
            )


def _load(descriptors: list[int], files: list[Path]) -> dict:
    """The tensors of the checked files, read through their descriptors (never reopened by name)."""
    from safetensors import SafetensorError
    from safetensors.torch import load, load_file

    tensors: dict = {}
    for fd, file in zip(descriptors, files):
        via = f"/proc/self/fd/{fd}"
        try:
            if os.path.exists(via):  # the very file checked above, whatever its name points at now
                tensors.update(load_file(via))
            else:
                tensors.update(load(os.pread(fd, os.fstat(fd).st_size, 0)))
        except SafetensorError as exc:
            raise ValueError(f"{file.name} is not a readable safetensors file: {exc}") from None
    return tensors
