"""Run a command so that it dies with the process that launched it, even when that one is killed with -9.

    python rlrm/launch/fleet/die_with_parent.py OWNER_PID PROGRAM ARGS...   # exec's PROGRAM in place (same pid)

ServerProcess starts every server through this file (run by path: it imports nothing of rlrm, so it costs
a bare interpreter start). Before exec'ing the program it forks a watchdog that waits, without polling, on
two pidfds: the owner's and the program's. When the owner goes first, the watchdog SIGKILLs the program's
whole process group (the program runs in a session of its own, so that is the server and whatever it
started, e.g. vLLM's engine core); when the program goes first, the watchdog just exits.

Why not PR_SET_PDEATHSIG: it fires when the *thread* that forked the child ends, and rlrm starts and
restarts servers from worker threads, which come and go; and it reaches only the direct child.
Where pidfds are missing (Linux < 5.3) the watchdog polls every half second instead.
"""

import os
import select
import signal
import sys
import time


def _pidfd(pid: int):
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner_went_first(owner: int, owner_fd, program: int) -> bool:
    """Block until the owner or the program exits; True when it was the owner."""
    program_fd = _pidfd(program)
    if owner_fd is not None and program_fd is not None:
        poll = select.poll()
        poll.register(owner_fd, select.POLLIN)
        poll.register(program_fd, select.POLLIN)
        return owner_fd in {fd for fd, _ in poll.poll()}
    while _alive(program) and os.getppid() == program:
        if not _alive(owner):
            return True
        time.sleep(0.5)
    return False


def main(argv: list[str]) -> None:
    owner = int(argv[1])
    if os.getppid() != owner:  # the owner died before this started: nothing to serve
        os._exit(1)
    owner_fd = _pidfd(owner)
    program = os.getpid()
    if os.fork() == 0:
        if _owner_went_first(owner, owner_fd, program):
            try:
                os.killpg(program, signal.SIGKILL)  # the program's session: pgid == its pid
            except ProcessLookupError:
                pass
        os._exit(0)
    if owner_fd is not None:
        os.close(owner_fd)
    os.execvp(argv[2], argv[2:])


if __name__ == "__main__":
    main(sys.argv)
