"""The policy's weights as files a rollout server can load: one folder per version, written atomically.

    files = WeightFiles(weights_dir=None)          # /dev/shm when it exists, else the temp folder
    path = files.write(state_dict, version=3)      # <dir>/rlrm-weights-<pid>-<id>/v3/model.safetensors
    ...every replica loads `path`...
    files.keep_only(path)                          # older versions deleted
    files.close()                                  # the whole folder removed at the end of the run

A version is written into a temporary folder and renamed into place, so a replica (or a replica
restarted later) never sees half a file. The run's folder holds `.owner.lock`, flock'ed by the run for as
long as it lives: a new WeightFiles removes every `rlrm-weights-*` folder in its parent whose lock nobody
holds (a run killed with -9), never a live run's (its lock is held, on this machine or, on a file system
that shares locks, another). Space is checked before writing: a full /dev/shm is one
clear error naming the folder, the bytes needed and the key to change, and nothing is left behind.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from rlrm.errors import RolloutServerError

SHM = Path("/dev/shm")
LOCK = ".owner.lock"


def default_weights_dir() -> Path:
    return SHM if SHM.is_dir() and os.access(SHM, os.W_OK) else Path(tempfile.gettempdir())


def check_weights_dir(weights_dir: str | None) -> None:
    """Refuse (RolloutServerError) a rollout.server.weights_dir that is a file or lies under one: said at start, in
    words, not as mkdir's "File exists" after the policy has loaded."""
    if not weights_dir:
        return
    path = Path(weights_dir).expanduser()
    for folder in (path, *path.parents):
        if folder.exists():
            if not folder.is_dir():
                where = "is a file" if folder == path else f"lies under {folder}, a file"
                raise RolloutServerError(
                    f"rollout.server.weights_dir {weights_dir} {where}, not a folder; set it to a writable local folder"
                )
            return


def untied(state_dict: dict) -> dict:
    """`state_dict` without the names that share one tensor with an earlier name (lm_head tied to the embeddings):
    sent and written once, as `save_pretrained` does, to replicas that fill the tied name back in (rlrm's server;
    for Qwen2.5-0.5B the tied matrix is about a quarter of the weights). vLLM's CPU build kept its lm_head stale
    when a sync left it out: engines other than rlrm's get both names (`ServingCast.tied_once`)."""
    out, seen = {}, set()
    for name, value in state_dict.items():
        key = _storage_key(value)
        if key is not None and key in seen:
            continue
        seen.add(key)
        out[name] = value
    return out


def _storage_key(value) -> tuple | None:
    """What makes two names one tensor: the same memory (on the same device), viewed alike; None for a tensor with
    no memory of its own to compare (empty, or on the meta device, where every data_ptr is 0)."""
    if not value.numel() or value.data_ptr() == 0:
        return None
    return (value.device, value.data_ptr(), tuple(value.shape), tuple(value.stride()), value.dtype)


@dataclass(frozen=True)
class ServingCast:
    """What a sync sends each tensor as: floats wider than the replicas' `dtype` (bfloat16, float16) in that dtype,
    as verl sends them (fp32 master weights, with mixed precision, went at twice the bytes only for each replica to
    round them on load, as this does), but for the modules a transformers model keeps in fp32 when loaded in that
    dtype (`keep_fp32`: its class's `_keep_in_fp32_modules_strict`, for bf16 and fp16; `keep_fp32_in_fp16`: its
    `_keep_in_fp32_modules`, for fp16 only; patterns searched in the name as transformers does). One tensor at a
    time, as it is sent: no second copy of the model is held (on the GPU, for a broadcast)."""

    dtype: str | None = None  # None: as the trainer holds them (running servers that do not say theirs)
    keep_fp32: tuple[str, ...] = ()
    keep_fp32_in_fp16: tuple[str, ...] = ()
    tied_once: bool = False  # a tied embedding sent once (`untied`): for replicas that fill the tie in themselves

    def names(self, state_dict: dict) -> dict:
        """The names (and tensors) to send: a tied one once where the replicas take it so, else every one."""
        return untied(state_dict) if self.tied_once else state_dict

    def target(self, name: str, value):
        """The dtype `value` (named `name`) is sent as."""
        import torch

        narrow = getattr(torch, self.dtype, None) if self.dtype else None
        if not isinstance(narrow, torch.dtype) or not narrow.is_floating_point or not value.is_floating_point():
            return value.dtype
        if value.element_size() <= narrow.itemsize:
            return value.dtype  # as narrow: the replica converts it, if it must
        kept = self.keep_fp32 + (self.keep_fp32_in_fp16 if narrow == torch.float16 else ())
        if any(re.search(re.escape(pattern).replace(r"\*", ".*"), name) for pattern in kept):  # a glob, searched
            return value.dtype
        return narrow

    def __call__(self, name: str, value):
        return value.to(self.target(name, value))


class WeightFiles:
    """Versioned safetensors folders under one run-owned folder.

    Args:
        weights_dir: parent folder (None: `default_weights_dir()`).
        config_from: a model folder whose config.json (and generation_config.json) each version gets a
            copy of, for engines that read the model config next to the weights.
    """

    def __init__(self, weights_dir: str | None = None, config_from: str | None = None):
        self.parent = Path(weights_dir).expanduser() if weights_dir else default_weights_dir()
        self.root = self.parent / f"rlrm-weights-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.config_from = Path(config_from) if config_from and Path(config_from).is_dir() else None
        self.current: Path | None = None
        self._lock_fd: int | None = None  # held while the run lives; set once this object made `root`
        sweep_dead_runs(self.parent)

    def create(self) -> None:
        """Make the run's folder, readable and writable by this user only and already locked. Made before any server
        names it on its command line, so that nobody else can have put weights there first: it is made under a
        temporary name (0700, refused if it exists), locked, then renamed into place (a sweep never sees it
        unlocked; a folder someone else made at `root` with anything in it makes the rename fail)."""
        if self._lock_fd is not None:
            return
        check_weights_dir(str(self.parent))
        try:
            self._make_root()
        except OSError as exc:
            raise RolloutServerError(
                f"cannot create {self.root} for the policy weights: {exc.strerror or exc}; set rollout.server.weights_dir "
                "to a writable local folder"
            ) from None

    def write(self, state_dict: dict, version: int, cast: ServingCast = ServingCast()) -> Path:
        """Write `state_dict` as version `version`, each tensor as `cast` says; returns its folder
        (RolloutServerError when it cannot)."""
        from safetensors import SafetensorError
        from safetensors.torch import save_file

        tensors, storages = {}, set()
        for name, value in cast.names(state_dict).items():
            t = cast(name, value.detach()).cpu().contiguous()  # cast where it lies: half the bytes to copy off a GPU
            if t.untyped_storage().data_ptr() in storages:  # other views of memory kept already: safetensors refuses
                t = t.clone()
            storages.add(t.untyped_storage().data_ptr())
            tensors[name] = t
        need = sum(t.numel() * t.element_size() for t in tensors.values())
        self.create()
        # a sync writes the new version beside the one being served: the first write needs room for both
        held = 1 if self.current is not None else 2
        free = shutil.disk_usage(self.root).free
        if free < held * need * 1.05 + (1 << 20):
            raise self._full(held * need, free, held)
        if _free_inodes(self.root) < _INODES_PER_VERSION * held:
            raise RolloutServerError(
                f"{self.parent} has no free inodes left for the policy weights (each version takes a folder and up to "
                f"{_INODES_PER_VERSION - 1} files); free some there or set rollout.server.weights_dir to another file system"
            )
        final = self.root / f"v{version}"
        tmp = self.root / f".v{version}.tmp-{uuid.uuid4().hex[:6]}"
        try:
            tmp.mkdir()
            save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt", "rlrm_version": str(version)})
            if self.config_from is not None:
                for name in ("config.json", "generation_config.json"):
                    if (self.config_from / name).is_file():
                        shutil.copyfile(self.config_from / name, tmp / name)
            if final.exists():
                shutil.rmtree(final)
            tmp.rename(final)
        except (OSError, SafetensorError) as exc:  # safetensors' writer reports an I/O error as SafetensorError
            shutil.rmtree(tmp, ignore_errors=True)
            os_error = exc if isinstance(exc, OSError) else None
            if (os_error and os_error.errno == errno.ENOSPC) or f"(os error {errno.ENOSPC})" in str(exc):
                raise self._full(need, shutil.disk_usage(self.root).free) from None
            raise RolloutServerError(
                f"cannot write the policy weights to {tmp}: {(os_error and os_error.strerror) or exc}"
            ) from None
        self.current = final
        return final

    def _full(self, need: int, free: int, versions: int = 1) -> RolloutServerError:
        held = " (two versions: a sync writes the new one beside the one served)" if versions == 2 else ""
        return RolloutServerError(
            f"{self.parent} has {free / 2**20:.1f} MiB free but the policy weights need {need / 2**20:.1f} MiB{held}; "
            "free space there or set rollout.server.weights_dir to a local folder with room"
        )

    def keep_only(self, keep: Path | None) -> None:
        """Delete every version folder but `keep` (None: all of them)."""
        if not self.root.is_dir():
            return
        for entry in self.root.iterdir():
            if entry != keep and entry.name != LOCK:
                shutil.rmtree(entry, ignore_errors=True)

    def _make_root(self) -> None:
        """Create the run's folder already locked: made under a name no sweep matches, renamed once locked."""
        self.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.parent / f".{self.root.name}.tmp"
        tmp.mkdir(mode=0o700)
        fd = os.open(tmp / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            tmp.rename(self.root)
        except OSError:
            os.close(fd)
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._lock_fd = fd

    def close(self) -> None:
        if self._lock_fd is not None:  # only a folder this run made is removed
            shutil.rmtree(self.root, ignore_errors=True)
            os.close(self._lock_fd)
            self._lock_fd = None
        self.current = None


_INODES_PER_VERSION = 5  # the version folder, model.safetensors, config.json, generation_config.json, the temp name


def _free_inodes(folder: Path) -> int:
    stats = os.statvfs(folder)
    return stats.f_favail if stats.f_files else 1 << 30  # f_files 0: the file system does not count inodes


def sweep_dead_runs(parent: Path) -> list[Path]:
    """Remove the `rlrm-weights-*` folders under `parent` whose run is gone (their lock is free); returns them.

    A folder without a lock (an older rlrm's, or one whose file system refuses locks) is left alone."""
    removed: list[Path] = []
    try:
        folders = sorted(Path(parent).glob("rlrm-weights-*"))
    except OSError:
        return removed
    for folder in folders:
        try:
            fd = os.open(folder / LOCK, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: the run is alive
            os.close(fd)
            continue
        shutil.rmtree(folder, ignore_errors=True)
        os.close(fd)
        removed.append(folder)
    return removed
