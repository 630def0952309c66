"""Stopping processes that rlrm spawned itself (actor ranks, legacy DisRM ranks), by their process objects.

stop_spawned(procs, inboxes, grace_s=5.0)   # ask (None in each inbox), then terminate, then kill
threading.Thread(target=exit_when_orphaned, args=(os.getppid(),), daemon=True).start()   # in the spawned one
"""

from __future__ import annotations

import os
import time

from rlrm.engine.executor.mailbox import send


def stop_spawned(procs: list, inboxes: list, grace_s: float = 5.0) -> None:
    """Ask each process to stop (None in its inbox), wait `grace_s`, then terminate, then kill."""
    for inbox in inboxes:
        try:
            send(inbox, None)
        except (OSError, ValueError):  # the queue is already closed
            pass
    for proc in procs:
        proc.join(timeout=grace_s)
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout=5.0)
        if proc.is_alive():
            proc.kill()
            proc.join()


def exit_when_orphaned(parent: int) -> None:
    """Exit when the process that spawned this one is gone (killed with -9: nobody will send the stop)."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)
