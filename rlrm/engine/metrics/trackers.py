"""Experiment trackers beside metrics.jsonl: TensorBoard, Weights & Biases (offline), MLflow (local file store).

    check_trackers(profile.logging)                      # before a run starts: a missing extra is one line
    log = RunLog(run_dir, profile, keep_through_step=0)  # metrics.jsonl + every tracker in logging.trackers
    log.log({"step": 1, "critic/score/mean": 0.5})
    log.close()

Every tracker gets the rows metrics.jsonl gets, under the same names and at the same step, and the
resolved profile as the run's config (TensorBoard: a `config` text; wandb: the run config; MLflow:
flattened params plus `config.yaml` as an artifact). They write under `logging.tracker_dir` (default
the run folder): `tensorboard/`, `wandb/`, `mlruns/`. Nothing here reaches the network unless
`logging.wandb_mode: online`, and no key is ever written: wandb online reads its own
(`WANDB_API_KEY` or `wandb login`), git and code capture are off, and config.yaml already holds
only the names of key variables. A resumed run continues the same tracker runs (TensorBoard purges
the steps after the checkpoint, wandb and MLflow reopen the run of this folder).

The tracker libraries are imported only when a tracker is opened.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import re
import secrets
import sys
import time
from pathlib import Path
from typing import Literal

from rlrm.config.loader import dump_profile
from rlrm.config.schema import LoggingConfig, Profile
from rlrm.engine.metrics.metrics_file import MetricsWriter, read_metrics
from rlrm.errors import ConfigError

# tracker -> (module that must import, the extra that installs it)
EXTRAS = {"tensorboard": ("tensorboard", "tensorboard"), "wandb": ("wandb", "wandb"), "mlflow": ("mlflow", "mlflow")}


def check_trackers(cfg: LoggingConfig) -> None:
    """ConfigError naming the fix when a tracker in `logging.trackers` is not installed or does not import, or
    when `logging.tracker_dir` cannot be written (a file, a read-only folder): before the run folder exists."""
    for name in cfg.trackers:
        module, extra = EXTRAS[name]
        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"logging.trackers has {name}, which is not installed: pip install 'rlrm[{extra}]'")
        try:
            importlib.import_module(module)
        except Exception as exc:  # a broken install raises anything at import
            first = (str(exc).strip().splitlines() or [""])[0]
            raise ConfigError(
                f"logging.trackers has {name}, but `import {module}` fails ({type(exc).__name__}: {first}); "
                f"reinstall it: pip install --force-reinstall 'rlrm[{extra}]', or drop it from logging.trackers"
            ) from None
    if "wandb" in cfg.trackers:
        _check_wandb_project(cfg.project)
    if cfg.trackers and cfg.tracker_dir:
        _check_writable(Path(cfg.tracker_dir))


WANDB_PROJECT_REFUSED = set("/\\#?%:")  # wandb.init refuses a project name holding any of these, or over 128 long


def _check_wandb_project(project: str) -> None:
    bad = sorted(set(project) & WANDB_PROJECT_REFUSED)
    if bad or len(project) > 128:
        why = f"holds {' '.join(repr(c) for c in bad)}" if bad else f"is {len(project)} characters long (at most 128)"
        hint = " (an entity goes in WANDB_ENTITY, not the project)" if "/" in bad else ""
        raise ConfigError(f"logging.project {project!r} {why}, which wandb refuses as a project name{hint}")


def _check_writable(folder: Path) -> None:
    """The folder, or the nearest ancestor that exists, is a folder this process may write into."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"logging.tracker_dir {folder}: {existing} is a file, not a folder; give a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"logging.tracker_dir {folder}: {existing} is not writable; give a folder you can write")


def tracker_root(cfg: LoggingConfig, run_dir: Path) -> Path:
    return Path(cfg.tracker_dir).expanduser() if cfg.tracker_dir else Path(run_dir)


def scalars(row: dict) -> dict[str, float]:
    """The row's finite numbers (bools and text left out), without `step`."""
    out = {}
    for key, value in row.items():
        if key == "step" or isinstance(value, bool):
            continue
        if hasattr(value, "item"):
            value = value.item()
        if isinstance(value, (int, float)) and math.isfinite(value):
            out[key] = float(value)
    return out


RUN_ID_FILE = ".tracker_run"  # in the run folder: what makes this run's tracker id its own (`run_id`)


def run_id(run_dir: Path, fresh: bool = False) -> str:
    """The run's id in wandb and MLflow: the folder's name and a hash of its absolute path and of a token the run
    drew when it started (`fresh`: now), so a resume continues the same tracker run, and a run started again in the
    same folder (--overwrite, or a resume with no checkpoint) gets a new one, not the old run's history and params.
    A run folder from before the token (none in it): the path alone, as then."""
    path = str(Path(run_dir).resolve())
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in Path(path).name)[:48]
    token_file = Path(run_dir) / RUN_ID_FILE
    if fresh:
        token_file.write_text(secrets.token_hex(8) + "\n")
    token = token_file.read_text().strip() if token_file.is_file() else ""
    return f"{safe}-{hashlib.sha1((path + token).encode()).hexdigest()[:8]}"


class TensorBoardTracker:
    def __init__(self, logdir: Path, profile_yaml: str, keep_through_step: int):
        from torch.utils.tensorboard import SummaryWriter

        # purge_step drops the events a resumed run writes again (steps after its checkpoint)
        self.writer = SummaryWriter(str(logdir), purge_step=keep_through_step + 1 if keep_through_step else None)
        if keep_through_step <= 0:  # a run from step 0 (or started over): its config
            self.writer.add_text("config", "```yaml\n" + profile_yaml + "```", 0)

    def log(self, step: int, values: dict[str, float]) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbTracker:
    def __init__(self, root: Path, run_dir: Path, tag: str, profile: Profile, mode: Literal["offline", "online"]):
        import wandb

        settings = wandb.Settings(console="off", silent=True, disable_git=True, disable_code=True, save_code=False)
        self.run = wandb.init(
            project=profile.logging.project,
            name=Path(run_dir).name,
            id=tag,
            resume="allow",
            dir=str(root),
            mode=mode,
            config=profile.model_dump(mode="json"),
            settings=settings,
            reinit="create_new",
        )

    def log(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def close(self) -> None:
        self.run.finish()


class MlflowTracker:
    """MLflow through its client (no global `mlflow.set_tracking_uri`), on a local file store."""

    def __init__(
        self,
        root: Path,
        run_dir: Path,
        tag: str,
        profile: Profile,
        profile_yaml: str,
        history: list[dict] | None = None,
    ):
        """`history`: on a resume, the rows metrics.jsonl keeps (through the checkpoint's step)."""
        # MLflow 3 keeps the file store behind an opt-in, and would send usage telemetry: a local run wants neither.
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self._names: dict[str, str] = {}  # metric key -> the name MLflow takes (`_name`)
        store = (root / "mlruns").resolve()
        self.client = MlflowClient(tracking_uri=store.as_uri())
        name = profile.logging.project
        experiment = self.client.get_experiment_by_name(name)
        if experiment is not None and experiment.lifecycle_stage == "deleted":  # deleted in the UI: runs need it live
            self.client.restore_experiment(experiment.experiment_id)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(name)
        # MLflow keeps every value logged at a step, and has no call that forgets one: a resumed run (which logs
        # the steps after its checkpoint again) goes on in a new MLflow run holding the kept rows, and the old one,
        # with the steps trained twice, is deleted
        old = self.client.search_runs([experiment_id], filter_string=f"tags.`rlrm.run_id` = '{tag}'")
        if old and not history:  # nothing kept to replay (no rows through the checkpoint): the old run goes on
            self.run_id = old[0].info.run_id
            self.client.update_run(self.run_id, status="RUNNING")
            return
        run = self.client.create_run(experiment_id, run_name=Path(run_dir).name, tags={"rlrm.run_id": tag})
        self.run_id = run.info.run_id
        # names as MLflow takes them (a reward component `pass@1` in reward.component_weights was refused)
        params = [Param(_mlflow_name(k), v[:6000]) for k, v in _flatten(profile.model_dump(mode="json")).items()]
        for i in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=params[i : i + 100])
        self.client.log_text(self.run_id, profile_yaml, "config.yaml")
        if old:
            for row in history or ():
                self.log(int(row.get("step", 0)), scalars(row))
            for found in old:
                self.client.delete_run(found.info.run_id)

    def log(self, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(self._name(key), value, now, step) for key, value in values.items()]
        for i in range(0, len(metrics), 1000):
            self.client.log_batch(self.run_id, metrics=metrics[i : i + 1000])

    def _name(self, key: str) -> str:
        """`key` as MLflow takes a metric name (alphanumerics and `_-. :/`): a reward's own reported key such as
        `reward/reported/pass@1/mean` becomes `reward/reported/pass_1/mean`, kept apart from any other name."""
        name = self._names.get(key)
        if name is None:
            name = base = _mlflow_name(key)
            taken, n = set(self._names.values()), 0
            while name in taken:
                n += 1
                name = f"{base}_{n}"
            self._names[key] = name
        return name

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def _mlflow_name(key: str) -> str:
    """`key` with what MLflow refuses in a metric or param name (all but alphanumerics and `_-. :/`) as `_`."""
    return re.sub(r"[^\w\-. :/]", "_", key)


def open_trackers(
    profile: Profile, run_dir: Path, keep_through_step: int = 0, history: list[dict] | None = None
) -> list:
    """The trackers `logging.trackers` names, opened for this run folder: ConfigError for a missing extra, and
    for one that cannot open (wandb online without a key, a store that refuses), naming it. `history`: on a
    resume, the rows kept (MLflow's new run gets them)."""
    cfg = profile.logging
    check_trackers(cfg)
    root = tracker_root(cfg, run_dir)
    root.mkdir(parents=True, exist_ok=True)
    profile_yaml = dump_profile(profile)
    opened: list[TensorBoardTracker | WandbTracker | MlflowTracker] = []
    if not cfg.trackers:
        return opened
    tag = run_id(run_dir, fresh=keep_through_step <= 0)  # a run from step 0 (or started over): a tracker run anew
    # under a shared tracker_dir each run has its own TensorBoard folder (one folder would mix every run's events)
    logdir = root / "tensorboard" if root == Path(run_dir) else root / "tensorboard" / tag
    name = ""
    try:
        for name in cfg.trackers:
            if name == "tensorboard":
                opened.append(TensorBoardTracker(logdir, profile_yaml, keep_through_step))
            elif name == "wandb":
                opened.append(WandbTracker(root, run_dir, tag, profile, cfg.wandb_mode))
            else:
                opened.append(MlflowTracker(root, run_dir, tag, profile, profile_yaml, history))
    except BaseException as exc:
        for tracker in opened:
            tracker.close()
        if isinstance(exc, Exception) and not isinstance(exc, ConfigError):
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            raise ConfigError(
                f"logging.trackers: {name} cannot open ({type(exc).__name__}: {first}); fix that, or drop {name} "
                "from logging.trackers"
            ) from None
        raise
    return opened


class RunLog:
    """metrics.jsonl (always) and the profile's trackers: one `log` per row."""

    def __init__(self, run_dir: Path, profile: Profile, keep_through_step: int | None = None):
        self.writer = MetricsWriter(Path(run_dir) / "metrics.jsonl", keep_through_step=keep_through_step)
        try:
            kept = Path(run_dir) / "metrics.jsonl"
            history = read_metrics(kept) if keep_through_step and kept.exists() else []
            self.trackers = open_trackers(profile, run_dir, keep_through_step or 0, history)
        except BaseException:
            self.writer.close()
            raise

    def log(self, row: dict) -> None:
        self.writer.log(row)
        values = scalars(row)
        for tracker in list(self.trackers):
            try:
                tracker.log(int(row.get("step", 0)), values)
            except Exception as exc:  # metrics.jsonl is the run's record: a tracker's fault does not stop training
                self.trackers.remove(tracker)
                try:
                    tracker.close()  # an MLflow run marked ended, not left RUNNING
                except Exception:
                    pass
                print(
                    f"rlrm: warning: {type(tracker).__name__} failed ({type(exc).__name__}: {str(exc)[:200]}); it "
                    "logs nothing more in this run (metrics.jsonl has every row)",
                    file=sys.stderr,
                    flush=True,
                )

    def close(self) -> None:
        """Close metrics.jsonl and every tracker, each whatever the others did; then raise the first failure."""
        failures = []
        for close in (self.writer.close, *(t.close for t in self.trackers)):
            try:
                close()
            except Exception as exc:
                failures.append(exc)
        if failures:
            raise failures[0]


def _flatten(data: dict, prefix: str = "") -> dict[str, str]:
    """{"actor": {"lr": 1e-4}} -> {"actor.lr": "0.0001"}: the profile as MLflow params."""
    out = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = str(value)
    return out
