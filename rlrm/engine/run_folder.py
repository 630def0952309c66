"""A run folder's life outside the loop: created with its resolved profile, read back on resume (with the checks
a resume needs before anything loads), and removed when a run stops before it has anything to resume.

    run_dir = start_run(profile, Path("runs/demo"))       # refuses a folder holding another run (or one training)
    profile = load_run_profile(run_dir, total_steps=60)   # --resume, with a new step budget
    discard_unresumable(run_dir)                           # after a failed start: nothing half-made is left

The loop itself is in trainer.py.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import yaml

from rlrm.config.loader import dump_profile, parse_profile
from rlrm.config.schema import Profile
from rlrm.engine.checkpoint import check_resume_model, list_checkpoints
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.run_checks import check_ray_heads
from rlrm.engine.run_lock import LOCK_NAME, hold_run, release_run
from rlrm.errors import ConfigError, RunFolderError, write_whole


def start_run(profile: Profile, run_dir: Path, overwrite: bool = False) -> Path:
    """Create a run folder and write its `config.yaml`, the folder locked for this process (run_lock.py); refuse
    to mix two runs in one folder, and to replace a run another process is training."""
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise RunFolderError(f"{run_dir} is a file, not a folder; choose another --out (or trainer.out_dir)")
    held = _contents(run_dir)
    if held:
        if not is_run_folder(run_dir):  # never removed, --overwrite or not: they are somebody's files
            raise RunFolderError(
                f"{run_dir} is not empty and is not an rlrm run folder (no config.yaml of a run); choose another "
                "--out, or an empty or new folder (--overwrite replaces run folders only)"
            )
        if not overwrite:
            raise RunFolderError(
                f"{run_dir} already holds files of another run; continue it with --resume {shlex.quote(str(run_dir))}, "
                f"replace it with --overwrite, or choose another --out"
            )
    created = locked = False
    try:
        try:
            run_dir.mkdir(parents=True)
            created = True
        except FileExistsError:  # (another start of the same folder may have made it just now: its lock decides)
            pass
        hold_run(run_dir)  # before anything of the run there is removed: a run still training there refuses
        locked = True
        for entry in held:  # --overwrite: the folder's contents, not the folder (an --out may be a symlink to it)
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        _write_config(run_dir / "config.yaml", profile)
    except (OSError, RunFolderError) as exc:
        release_run(run_dir)
        if created and locked:  # never a folder another process holds
            shutil.rmtree(run_dir, ignore_errors=True)
        if isinstance(exc, RunFolderError):
            raise
        raise RunFolderError(
            f"cannot write the run folder {run_dir}: {exc.strerror or exc}; choose a writable --out or trainer.out_dir"
        ) from None
    return run_dir


def _contents(run_dir: Path) -> list[Path]:
    """What a folder holds, its lock file aside (left by a run that ended: no run of its own)."""
    return sorted(p for p in run_dir.iterdir() if p.name != LOCK_NAME) if run_dir.is_dir() else []


def is_run_folder(path: Path) -> bool:
    """Whether `path` was made by `rlrm train`: its config.yaml is a resolved profile (every section rlrm writes,
    and nothing else: another tool's config with a `trainer:` and a `model:` is not one), whatever else the run
    wrote there so far."""
    try:
        raw = yaml.safe_load((Path(path) / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return False
    if not isinstance(raw, dict):
        return False
    return _RUN_SECTIONS <= raw.keys() <= Profile.model_fields.keys()


_RUN_SECTIONS = {"model", "data", "rollout", "reward", "actor", "trainer"}  # what dump_profile always writes


def load_run_profile(run_dir: Path, total_steps: int | None = None, write: bool = True) -> Profile:
    """The profile a run folder was started with (optionally with a new step budget, written to its config.yaml
    unless `write` is False: `--dry-run` changes nothing)."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise RunFolderError(
            f"{run_dir} is not an rlrm run folder (no config.yaml); pass the folder `rlrm train` wrote"
        )
    hold_run(run_dir)  # before config.yaml changes: a run still training there refuses; held until the run ends
    try:
        raw = _read_run_config(path)
        if total_steps is not None:
            raw.setdefault("trainer", {})["total_steps"] = total_steps
        profile = parse_profile(raw, source=str(path))
        ckpts = list_checkpoints(run_dir)
        if ckpts:
            check_resume_world_size(ckpts[-1], profile.actor.world_size)  # before config.yaml changes or ranks start
            check_resume_model(ckpts[-1], profile.model.model_dump(mode="json"))  # before any model loads
        check_ray_heads(profile)  # a head that went down since: one line, before config.yaml changes
        if total_steps is not None and write:
            _write_config(path, profile)
    except BaseException:
        release_run(run_dir)
        raise
    return profile


def _write_config(path: Path, profile: Profile) -> None:
    """config.yaml whole or not at all (a cut one would make the folder no run at all): written beside, renamed."""
    text = dump_profile(profile)
    write_whole(path, lambda tmp: tmp.write_text(text))


def check_resume_world_size(ckpt_dir: Path, world_size: int) -> None:
    """ConfigError unless `ckpt_dir` was written by `world_size` actor ranks: read from its file names (the
    ranks' torch.distributed.checkpoint files, `shards/__<rank>_<n>.distcp`; none: one rank), nothing loaded."""
    shards = Path(ckpt_dir) / "shards"
    ranks = {m.group(1) for m in (re.match(r"__(\d+)_\d+\.distcp$", p.name) for p in shards.glob("*")) if m}
    saved = len(ranks) if shards.is_dir() else 1
    if saved and saved != world_size:
        raise ConfigError(
            f"{Path(ckpt_dir).name} was written by {saved} actor rank(s) but this run has actor.world_size={world_size}; "
            f"resume with actor.world_size={saved} (edit the run folder's config.yaml): optimizer shards are "
            "not resharded across world sizes"
        )


def _read_run_config(path: Path) -> dict:
    """A run folder's config.yaml as a mapping; a damaged one is a RunFolderError of one line."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise RunFolderError(
            f"{path} is not valid YAML{where}: {problem}; the run's resolved profile is damaged: restore it, or start "
            "a new run with --profile"
        ) from None
    if not isinstance(raw, dict):
        raise RunFolderError(f"{path} does not hold a profile (a mapping of sections); the run folder is damaged")
    return raw


def discard_unresumable(run_dir: Path) -> bool:
    """Remove a run folder that holds no checkpoint and no trained step: a run that stopped before its first
    step has nothing to resume or read, and a half-made folder would only block the next `--out`. A folder with
    trained steps logged stays (its metrics and trace are the run's record), checkpoint or not, and so does one with
    reward calls that hung (hung_rewards.jsonl: the samples to replay when step 1's rewards failed). Whether it went."""
    run_dir = Path(run_dir)
    hung = run_dir / "hung_rewards.jsonl"
    if not run_dir.is_dir() or list_checkpoints(run_dir) or last_logged_step(run_dir):
        return False
    if hung.is_file() and hung.stat().st_size > 0:
        return False
    try:
        hold_run(run_dir)  # a --resume or --overwrite that took the folder meanwhile keeps it
    except RunFolderError:
        return False
    shutil.rmtree(run_dir, ignore_errors=True)
    release_run(run_dir)
    return True


def last_logged_step(run_dir: Path) -> int:
    """The last step metrics.jsonl holds a row of (0: none trained, or no file)."""
    metrics = Path(run_dir) / "metrics.jsonl"
    return max((row.get("step", 0) for row in read_metrics(metrics)), default=0) if metrics.is_file() else 0
