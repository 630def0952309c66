"""The `rlrm` command: wires the command groups together, nothing else.

    rlrm --help

Import rule of the `cli` package (and only of it): a command imports the module that implements it
inside its own function, so `rlrm --help` and a mistyped option cost ~0.25 s instead of loading the
whole engine graph (~0.55 s, measured on 2 cores with `python -X importtime -m rlrm --help`).
Everywhere below the CLI, rlrm's own imports sit at module top; only heavy libraries (torch,
transformers, ray, matplotlib, pandas) and modules that import them at top are imported lazily.
"""

from __future__ import annotations

import os
import sys

import typer

from rlrm.cli import audit, bench, doctor, evaluate, inspect, launch, models, parity, profiles, report, train

app = typer.Typer(
    name="rlrm",
    help="Launch, benchmark and validate reward setups for LLM reinforcement learning.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command("train", short_help="Train a policy with GRPO (a profile, or --resume a run).")(train.train)
app.command("doctor")(doctor.doctor)
app.command("report", short_help="Plot curves, idle ratios, timelines and parity checks.")(report.report)
app.add_typer(profiles.app, name="profiles")
app.add_typer(models.app, name="models")
app.add_typer(launch.app, name="launch")
app.add_typer(bench.app, name="bench")
app.add_typer(parity.app, name="parity")
app.add_typer(inspect.app, name="inspect")
app.add_typer(evaluate.app, name="eval")
app.add_typer(audit.app, name="audit")


def main() -> None:
    quiet_native_warnings()
    # Typer 0.29 vendors Click: its usage errors are only importable from there.
    from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError

    try:
        result = app(prog_name="rlrm", standalone_mode=False)
    except NoArgsIsHelpError as exc:
        exc.show()  # `rlrm bench` alone: the group's help, as Typer prints it
        raise SystemExit(exc.exit_code) from None
    except UsageError as exc:
        # A bad option value gets rlrm's one line, like every other bad input, not Typer's box.
        command = exc.ctx.command_path if exc.ctx is not None else "rlrm"
        print(f"error: {exc.format_message()} (see `{command} --help`)", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None
    except ClickException as exc:
        print(f"error: {exc.format_message()}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None
    except typer.Abort:
        print("aborted", file=sys.stderr)
        raise SystemExit(130) from None
    raise SystemExit(result if isinstance(result, int) else 0)


def quiet_native_warnings() -> None:
    """Keep torch's C++ log lines off the user's terminal (RLRM_DEBUG=1, or TORCH_CPP_LOG_LEVEL set, keeps them).

    c10d (TCPStore, gloo) writes raw `[W ... socket.cpp] [c10d] ...` warnings, and `[E ...]` errors with a C++
    stack, to stderr when a weight-update group or a rank fails to connect, just before the exception that
    rlrm turns into one line saying the same in the user's terms. Only FATAL ones stay: torch reads the level
    once, when it loads: here, before any command imports it; processes rlrm starts (ranks, replicas) inherit it.
    """
    if not os.environ.get("RLRM_DEBUG"):
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
