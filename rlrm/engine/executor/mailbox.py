"""Messages between rlrm and the rank processes it spawns (actor ranks, legacy DisRM ranks), never lost in silence.

    short_socket_folder()                      # before spawning, and first thing in each spawned process
    send(inbox, ("train", args))               # pickled here: what cannot be sent raises here
    job = receive(inbox, timeout_s=1.0)        # queue.Empty when nothing came in time
    packed = [pack(m) for m in messages]       # several at once: all pickled before any is put

`multiprocessing.Queue.put` pickles in a background thread; when pickling fails, that thread prints a traceback
and drops the message, and the side waiting for it waits forever (a trainer hung at its first update, its
ranks idle). `send` pickles in the caller, so the failure is an exception where the message was sent.

Tensors travel as shared memory (torch's reductions): each one's file descriptor is passed over a Unix socket
that multiprocessing makes in its temp folder under TMPDIR. A socket path holds at most 107 bytes, so with a
long TMPDIR (a cluster job's scratch folder) every message carrying a tensor failed. `short_socket_folder` gives
multiprocessing a temp folder on a short path when TMPDIR's is too long.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

# sun_path is 108 bytes with its NUL; multiprocessing names the socket <tempdir>/pymp-XXXXXXXX/listener-XXXXXXXX
SOCKET_PATH_MAX = 107
_LISTENER = len("/listener-xxxxxxxx")
_SOCKET_TAIL = len("/pymp-xxxxxxxx") + _LISTENER
_SHORT_BASES = ("/dev/shm", "/tmp", "/var/tmp")


def pack(message: Any) -> bytes:
    """`message` pickled now, as `send` would send it (torch's reductions: tensors as shared memory)."""
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401 - registers torch's reductions on ForkingPickler

    return bytes(ForkingPickler.dumps(message))


def send(queue, message: Any) -> None:
    """Put `message` on a multiprocessing queue, pickled in this thread (raises here when it cannot be)."""
    queue.put(pack(message))


def receive(queue, timeout_s: float | None) -> Any:
    """The next message `send` (or a put of `pack`) left on `queue`; queue.Empty after `timeout_s`."""
    from multiprocessing.reduction import ForkingPickler

    return ForkingPickler.loads(queue.get(timeout=timeout_s))


def socket_room(folder: str) -> bool:
    """Whether multiprocessing's socket path under `folder` fits a Unix socket address."""
    return len(os.fsencode(folder)) + _SOCKET_TAIL <= SOCKET_PATH_MAX


def short_socket_folder() -> str | None:
    """Make multiprocessing keep its sockets in a folder on a short path when TMPDIR's is too long; returns the
    folder it chose (None: TMPDIR's is fine, or multiprocessing already has a folder where a socket fits). The
    folder is this process's own (0700) and is removed at exit, as multiprocessing's own would be; spawned children
    inherit it."""
    from multiprocessing import process, util

    # where multiprocessing.util.get_temp_dir keeps its folder (a private dict, the same from Python 3.4 to 3.13)
    config: dict = process.current_process()._config  # type: ignore[attr-defined]
    made = config.get("tempdir")  # made already (anything that needed it earlier): kept when a socket fits in it
    if made is not None and len(os.fsencode(made)) + _LISTENER <= SOCKET_PATH_MAX:
        return None
    if made is None and socket_room(tempfile.gettempdir()):
        return None
    for base in _SHORT_BASES:
        if os.path.isdir(base) and os.access(base, os.W_OK | os.X_OK) and socket_room(base):
            folder = tempfile.mkdtemp(prefix="pymp-", dir=base)
            util.Finalize(None, shutil.rmtree, args=(folder,), kwargs={"ignore_errors": True}, exitpriority=-100)
            config["tempdir"] = folder
            return folder
    from rlrm.errors import ConfigError

    raise ConfigError(
        f"TMPDIR {tempfile.gettempdir()} is too long a path for the Unix sockets rank processes pass tensors over "
        f"(at most {SOCKET_PATH_MAX - _SOCKET_TAIL} characters), and none of {', '.join(_SHORT_BASES)} is writable: "
        "set TMPDIR to a shorter folder"
    )
