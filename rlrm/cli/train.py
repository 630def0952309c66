"""`rlrm train`: run GRPO with a profile, or resume a stopped run."""

from __future__ import annotations

import shlex
import signal
import threading
from pathlib import Path
from typing import Annotated, Optional

import typer

from rlrm.cli.common import friendly_errors, out_or_fresh, timestamped
from rlrm.cli.options import DryRunOption, ProfileOption, SeedOption, SetOption, StepsOption
from rlrm.errors import ConfigError, RunFolderError

CONSOLES = ("rich", "plain", "none")  # logging.console's values


@friendly_errors
def train(
    profile: ProfileOption = None,
    set_: SetOption = [],
    steps: StepsOption = None,
    out: Annotated[
        Optional[Path],
        typer.Option("--out", help="Output folder (default: runs/<profile>-<time>, -2 after it if taken)."),
    ] = None,
    seed: SeedOption = None,
    mode: Annotated[
        Optional[str],
        typer.Option(help="Scheduling mode (trainer.mode): sync, stream, pipeline, one-step-off or fully-async."),
    ] = None,
    dry_run: DryRunOption = False,
    resume: Annotated[Optional[Path], typer.Option(help="Continue the run in this folder.")] = None,
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite",
            metavar="",
            help="Replace the run that --out holds (never a folder that is not a run, nor a run still training).",
        ),
    ] = False,
    console: Annotated[
        Optional[str], typer.Option(help="Live display: rich, plain or none (default: logging.console).")
    ] = None,
) -> None:
    """Train a policy with GRPO; metrics, trace and checkpoints go to the run folder (--out, default
    runs/<profile>-<time>). --steps, --seed and --mode override trainer.total_steps, trainer.seed and
    trainer.mode; --dry-run prints the resolved profile and the command line of every server it would start, then
    checks the inputs as a run would (files, local actor ranks against the devices, Ray heads: exit 1 and one line
    if one fails; not trainer.device, so a GPU profile can be checked anywhere), and starts nothing."""
    from rlrm.allocator import use_one_malloc_arena
    from rlrm.open_files import raise_open_files_limit

    use_one_malloc_arena()  # before any thread starts: see rlrm/allocator.py
    raise_open_files_limit()  # soft := hard, for this process and the servers it launches: see rlrm/open_files.py
    from rlrm.config.loader import dump_profile, load_profile
    from rlrm.engine.checkpoint import checkpoint_step, list_checkpoints
    from rlrm.engine.run_checks import check_inputs
    from rlrm.engine.run_folder import discard_unresumable, load_run_profile, start_run
    from rlrm.engine.trainer import RunResult

    if console is not None and console not in CONSOLES:
        raise ConfigError(f"--console {console!r} is not a live display; use one of {', '.join(CONSOLES)}")
    allow_contract_change = False
    if resume is not None:
        allow_contract_change, set_ = _resume_overrides(set_)
        if profile or set_ or seed is not None or out or mode:
            raise ConfigError(
                "--resume continues a run exactly as it was configured; drop --profile/--set/--seed/--mode/--out "
                "(the one --set it takes is reward.allow_contract_change=true)"
            )
        saved = list_checkpoints(Path(resume))
        done = checkpoint_step(saved[-1]) if saved else 0
        nothing = f"nothing to train: {resume} has {done} steps already; continue it with --steps N above {done}"
        if saved and steps is not None and steps <= done:  # before config.yaml takes the smaller budget
            typer.echo(nothing)
            return
        resolved = load_run_profile(resume, total_steps=steps, write=not dry_run)
        run_dir = resume
        if saved and resolved.trainer.total_steps <= done and not dry_run:
            typer.echo(nothing)
            return
        if dry_run:
            typer.echo(dump_profile(resolved), nl=False)
            return
    else:
        if profile is None:
            raise ConfigError("pass --profile NAME (see `rlrm profiles list`) or --resume RUN_DIR")
        overrides = list(set_)
        if steps is not None:
            overrides.append(f"trainer.total_steps={steps}")
        if seed is not None:
            overrides.append(f"trainer.seed={seed}")
        if mode is not None:
            from rlrm.config.schema import MODES

            if mode not in MODES:  # named as --mode, not as the --set it becomes
                raise ConfigError(f"--mode {mode!r} is not a scheduling mode; use one of {', '.join(MODES)}")
            overrides.append(f"trainer.mode={mode}")
        resolved = load_profile(profile, overrides)
        name = Path(profile).stem
        default = out is None and not resolved.trainer.run_name  # made below, unless --dry-run
        run_dir = out or Path(resolved.trainer.out_dir) / (resolved.trainer.run_name or timestamped(name))
        if dry_run:
            from rlrm.engine.processes import planned_processes

            typer.echo(f"# run folder: {run_dir}")
            typer.echo(dump_profile(resolved), nl=False)
            for line in planned_processes(resolved):  # the command line of every server and router it would start
                typer.echo(line)
            check_inputs(resolved)  # and, after the plan, the one line that would stop the run on this machine
            return
        check_inputs(resolved)
    # from here until the run's loop takes it over, SIGTERM stops as Ctrl-C does: the default ended the process
    # with the new folder left behind, which the same command then refused
    before = _take_sigterm()
    try:
        if resume is None:
            try:  # the default folder is made here (-2 after a name of this second), and removed if left empty
                with out_or_fresh(None if default else Path(run_dir), Path(resolved.trainer.out_dir), name) as made:
                    run_dir = made
                    start_run(resolved, run_dir, overwrite=overwrite)
            except OSError as exc:  # start_run names its own: this is the default folder's
                raise RunFolderError(
                    f"cannot write the run folder {run_dir}: {exc.strerror or exc}; choose a writable --out or "
                    "trainer.out_dir"
                ) from None
        result = _run(run_dir, resolved, resume, console, allow_contract_change, before)
    except KeyboardInterrupt as exc:  # before the run took the signal over: nothing trained
        result = RunResult(Path(run_dir), last_step=0, interrupted=True, signal=_name(exc))
    finally:
        _give_back_sigterm(before)
    if result.interrupted:
        code = 143 if result.signal == "SIGTERM" else 130  # 128 + the signal's number, as a shell reports it
        saved = list_checkpoints(Path(run_dir))
        if saved:
            typer.echo(
                f"interrupted ({result.signal}): checkpoint saved at step {checkpoint_step(saved[-1])}; "
                f"continue with: rlrm train --resume {shlex.quote(str(run_dir))}"
            )
        elif resume is None and discard_unresumable(run_dir):
            typer.echo(
                f"interrupted ({result.signal}) before the first step finished: nothing to resume, and the run "
                f"folder {run_dir} is removed; start again with the same command"
            )
        else:  # steps logged (a new run), or a resumed one that had no checkpoint either
            typer.echo(
                f"interrupted ({result.signal}) before a checkpoint was written: rlrm train --resume "
                f"{shlex.quote(str(run_dir))} trains from step 0"
            )
        raise typer.Exit(code)
    from rlrm.engine.metrics.metrics_file import read_metrics
    from rlrm.report.closing import closing_lines

    rows = read_metrics(Path(run_dir) / "metrics.jsonl")  # the whole run, resumed parts included
    acc = result.metrics.get("val/accuracy")
    tail = f", val/accuracy {acc:.3f}" if acc is not None else ""
    # what the reward model cost over the whole run (reward.genrm.price_per_mtok_*)
    cost = sum(row.get("reward/cost", 0.0) for row in rows)
    tail += f", reward cost {cost:.4f}" if cost else ""
    if result.stopped:
        typer.echo(f"{result.stopped} (run folder {run_dir})")
    else:
        typer.echo(f"done: {result.last_step} steps in {run_dir}{tail}")
    for line in closing_lines(rows, run_dir):
        typer.echo(line)
    if result.stopped:
        raise typer.Exit(1)


def _resume_overrides(set_: list[str]) -> tuple[bool, list[str]]:
    """reward.allow_contract_change=true taken out of --set (the one override --resume accepts), and the rest."""
    allow, rest = False, []
    for item in set_:
        key, _, value = item.partition("=")
        if key.strip() == "reward.allow_contract_change" and value.strip().lower() in ("true", "false"):
            allow = value.strip().lower() == "true"
        else:
            rest.append(item)
    return allow, rest


class _Terminated(KeyboardInterrupt):
    """SIGTERM before the run's loop took it over."""


def _terminated(signum, frame) -> None:
    raise _Terminated()


_NOT_TAKEN = object()  # not in the main thread: SIGTERM left as it was


def _take_sigterm():
    """SIGTERM raises `_Terminated` from here on (the main thread only: signals are taken there); what it did
    (None: a handler set from C, put back as the default)."""
    if threading.current_thread() is not threading.main_thread():
        return _NOT_TAKEN
    return signal.signal(signal.SIGTERM, _terminated)


def _give_back_sigterm(before) -> None:
    if before is not _NOT_TAKEN and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.SIG_DFL if before is None else before)


def _name(interrupt: KeyboardInterrupt) -> str:
    return "SIGTERM" if isinstance(interrupt, _Terminated) else "SIGINT"


def _run(run_dir, resolved, resume, console, allow_contract_change: bool, sigterm_before):
    """The run, with progress lines while it starts; a new run that failed leaves no folder it cannot resume."""
    from rlrm.engine.rewards.budget import RewardBudgetExceeded
    from rlrm.engine.run_folder import discard_unresumable
    from rlrm.engine.trainer import train as run_training
    from rlrm.launch.common import progress

    progress.enable((console or resolved.logging.console) != "none")  # lines on stderr while servers start
    progress.say(f"run folder: {run_dir} (follow it: tail -f {Path(run_dir) / 'metrics.jsonl'})")
    try:
        result = run_training(run_dir, console=console, allow_contract_change=allow_contract_change)
        _give_back_sigterm(sigterm_before)  # the run is over: a SIGTERM now is no interrupt of it
        return result
    except Exception as exc:  # RlrmError, OSError (a path the run cannot write), or a fault nobody foresaw
        if resume is None and not isinstance(exc, RewardBudgetExceeded):  # that one says: fix, then --resume
            discard_unresumable(run_dir)
        raise
    finally:
        progress.enable(False)
