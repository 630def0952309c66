"""What every command shares: one-line errors (RLRM_DEBUG=1 for the traceback), the console, default folder names."""

from __future__ import annotations

import functools
import os
import sys

import typer

from rlrm.errors import RlrmError


def friendly_errors(fn):
    """Print an RlrmError as one line on stderr and exit 1; RLRM_DEBUG=1 re-raises it."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except RlrmError as exc:
            if os.environ.get("RLRM_DEBUG"):
                raise
            print(f"error: {exc}", file=sys.stderr)
            raise typer.Exit(1) from None

    return wrapper


def console():
    from rich.console import Console

    return Console()


def timestamped(name: str) -> str:
    """`name-YYYYmmdd-HHMMSS`: a default output folder name that a later run does not reuse."""
    import time

    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
