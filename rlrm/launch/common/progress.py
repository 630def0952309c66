"""Progress lines for the slow parts before training: servers and engines starting, step-0 validation.

    progress.enable()                                        # the CLI, when a live display is asked for
    progress.say("reward servers: starting 1 embedded replica of tiny:judge")
    with progress.waiting("waiting for http://127.0.0.1:8123 (log: /tmp/x.log)"):
        ...                                                  # a line every 10 s while the block runs

Lines go to stderr, so stdout stays what a command answers. Off unless enabled: tests and `--console none` runs
see nothing from here.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

EVERY_S = 10.0
_enabled = False


def enable(on: bool = True) -> None:
    global _enabled
    _enabled = on


def say(line: str) -> None:
    if _enabled:
        print(line, file=sys.stderr, flush=True)


@contextmanager
def waiting(what: str, every_s: float = EVERY_S) -> Iterator[None]:
    """Say `what` with the seconds elapsed every `every_s` while the block runs (nothing when it ends sooner)."""
    if not _enabled:
        yield
        return
    done = threading.Event()
    start = time.monotonic()

    def tick() -> None:
        while not done.wait(every_s):
            say(f"  ... {what} ({time.monotonic() - start:.0f} s)")

    thread = threading.Thread(target=tick, name="progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
