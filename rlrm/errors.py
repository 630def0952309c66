"""Errors a user can act on. The CLI prints them as one line (RLRM_DEBUG=1 shows the traceback)."""

import errno
import shutil
from contextlib import contextmanager
from pathlib import Path


class RlrmError(Exception):
    """Base of every error rlrm reports to a user as one clear line."""


class ConfigError(RlrmError):
    """A profile, override or flag is invalid."""


class DataError(RlrmError):
    """A dataset is missing, malformed or has unusable rows."""


class ModelError(RlrmError):
    """A model path is missing or a checkpoint cannot be loaded."""


class RunFolderError(RlrmError):
    """An output folder cannot be used as asked (holds another run, is not a run, ...)."""


class TrainingError(RlrmError):
    """Training cannot go on (e.g. too many non-finite losses in a row)."""


class RolloutServerError(RlrmError):
    """Rollout servers cannot generate or take new weights (named replica, and what to do)."""


def clipped(text: str, keep: int = 80) -> str:
    """`text` as an error line may repeat it: whole when short, else its first `keep` characters and its length
    (a 10 MB value pasted into a profile must not become a 10 MB error line)."""
    if len(text) <= 2 * keep:
        return text
    return f"{text[:keep]}... ({len(text)} characters)"


def require_extra(module: str, extra: str, purpose: str) -> None:
    """ConfigError naming the optional extra to install when `module` cannot be imported."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise ConfigError(
            f"{purpose} needs {module}, which is not installed: pip install 'rlrm[{extra}]' (or bash scripts/setup.sh)"
        )


class OutOfDeviceMemory(TrainingError):
    """The GPU ran out of memory in one phase of a step; the message names the setting to lower."""


@contextmanager
def out_of_memory_named(phase: str, lower: str):
    """Turn torch's out-of-memory error inside the block into an `OutOfDeviceMemory` naming `phase` and what to
    `lower`; other errors pass unchanged. The step it happened in is not committed: no metrics row, no
    checkpoint, no weights published."""
    try:
        yield
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "out of memory"
        if type(exc).__name__ == "OutOfMemoryError":  # torch.OutOfMemoryError (torch.cuda.OutOfMemoryError)
            said = first.split(". ")[0]
            raise OutOfDeviceMemory(
                f"out of GPU memory {phase} ({said}): lower {lower}; the step was not committed"
            ) from None
        if isinstance(exc, MemoryError) or _CPU_ALLOCATOR_FAILED in str(exc):  # torch's CPU allocator: a RuntimeError
            raise OutOfDeviceMemory(
                f"out of memory (CPU) {phase}: lower {lower}, or raise the process's memory limit (ulimit -v, a "
                "container's or a job's); the step was not committed"
            ) from None
        raise


_CPU_ALLOCATOR_FAILED = "DefaultCPUAllocator: can't allocate memory"

# what a failed write's torch or safetensors error says where the OSError it wraps is not kept: a full disk
_WRITE_FAILED = (
    "unexpected pos",
    "file write failed",
    "No space left on device",
    "os error 28",
    "failed writing",
    "File too large",  # a file-size limit (ulimit -f): safetensors says "os error 27"
    "os error 27",
)


@contextmanager
def writing_to(path):
    """A write inside the block cut by the file system (a full disk, a quota, an I/O error) raises an OSError
    naming `path`, which the CLI prints as one line: `f.write` and `flush` raise theirs without a file name, and
    torch.save and safetensors raise RuntimeErrors that name nothing (`unexpected pos 1188928 vs 1188880`)."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None or exc.errno is None:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    except Exception as exc:
        if type(exc).__name__ not in ("RuntimeError", "SafetensorError") or not any(
            said in str(exc) for said in _WRITE_FAILED
        ):
            raise
        said = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else type(exc).__name__
        if _free_bytes(path) < 2**20:
            raise OSError(errno.ENOSPC, "No space left on device", str(path)) from exc
        if "os error 27" in said or "File too large" in said or _file_size_limited():
            raise OSError(errno.EFBIG, f"File too large ({said})", str(path)) from exc
        raise OSError(errno.EIO, f"write failed ({said})", str(path)) from exc


def write_whole(path, write) -> None:
    """Write `path` through `write(tmp)` to a file beside it, then rename it into place: a full disk or an error
    meanwhile leaves the old file as it was and no temporary file taking space (`writing_to` names the path)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with writing_to(tmp):
            write(tmp)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _file_size_limited() -> bool:
    """Whether this process may write only files up to a size (`ulimit -f`): torch.save's error then names no errno."""
    try:
        import resource
    except ImportError:  # not on Unix
        return False
    return resource.getrlimit(resource.RLIMIT_FSIZE)[0] != resource.RLIM_INFINITY


def _free_bytes(path) -> int:
    for folder in (Path(path), *Path(path).parents):
        if folder.exists():
            return shutil.disk_usage(folder).free
    return 2**62
