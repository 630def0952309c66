"""The GRPO training loop: steps, validation, metrics, checkpoints, resume and Ctrl-C.

    from rlrm.engine.trainer import start_run, train
    run_dir = start_run(profile, Path("runs/demo"), overwrite=False)
    result = train(run_dir)                   # a new run, or the continuation of a stopped one

A run folder holds `config.yaml` (the resolved profile), `metrics.jsonl` (one row per step),
`trace.json` (timeline spans) and `checkpoints/step_<k>/`. `train` resumes from the newest
checkpoint when there is one, so `rlrm train --resume DIR` and a fresh start share one path.
"""

from __future__ import annotations

import asyncio
import gc
import resource
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from rlrm.config.loader import dump_profile, validate_profile
from rlrm.config.schema import Profile
from rlrm.engine.metrics.timing import Span
from rlrm.errors import RunFolderError


@dataclass
class RunResult:
    run_dir: Path
    last_step: int
    metrics: dict = field(default_factory=dict)
    interrupted: bool = False


def start_run(profile: Profile, run_dir: Path, overwrite: bool = False) -> Path:
    """Create a run folder and write its `config.yaml`; refuse to mix two runs in one folder."""
    run_dir = Path(run_dir)
    if run_dir.exists() and any(run_dir.iterdir()):
        if not overwrite:
            raise RunFolderError(
                f"{run_dir} already holds files of another run; continue it with --resume {run_dir}, "
                f"replace it with --overwrite, or choose another --out"
            )
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / "config.yaml.tmp"
    tmp.write_text(dump_profile(profile))
    tmp.replace(run_dir / "config.yaml")
    return run_dir


def check_inputs(profile: Profile) -> None:
    """Fail before a run folder exists: a missing local model (policy, reference, reward), or an unreadable local dataset."""
    from rlrm.engine.models.tiny import resolve_model_path

    reward_model = profile.reward.server.model if profile.reward.model_kind and not profile.reward.server.addresses else None
    for path in (profile.model.path, profile.model.ref_path, reward_model):
        if path and not path.startswith("tiny:"):
            resolve_model_path(path)
    data = profile.data
    if data.source == "gsm8k" and (Path(data.path).expanduser().exists() or data.path.startswith((".", "/", "~"))):
        from rlrm.engine.data.dataset import load_splits

        load_splits(data)


def load_run_profile(run_dir: Path, total_steps: int | None = None) -> Profile:
    """The profile a run folder was started with (optionally with a new step budget)."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise RunFolderError(f"{run_dir} is not an rlrm run folder (no config.yaml); pass the folder `rlrm train` wrote")
    raw = yaml.safe_load(path.read_text())
    if total_steps is not None:
        raw.setdefault("trainer", {})["total_steps"] = total_steps
    profile = validate_profile(raw, source=str(path))
    if total_steps is not None:
        path.write_text(dump_profile(profile))
    return profile


def train(run_dir: Path, console: str | None = None) -> RunResult:
    """Run (or continue) the training of a run folder until `trainer.total_steps`.

    Ctrl-C saves a checkpoint of the last completed step and returns with `interrupted=True`.
    """
    profile = load_run_profile(run_dir)
    loop = _TrainLoop(profile, Path(run_dir), console or profile.logging.console)
    try:
        asyncio.run(loop.run())
    except KeyboardInterrupt:
        loop.result.interrupted = True
    return loop.result


class _TrainLoop:
    def __init__(self, profile: Profile, run_dir: Path, console: str):
        self.profile = profile
        self.run_dir = run_dir
        self.console = console
        self.result = RunResult(run_dir, last_step=0)
        self.spans: list = []  # every span of the run (trace.json); the rollouter appends too
        self._spans_seen = 0
        self._step_first_span = 0  # where this step's spans start in self.spans
        self.sample_log = None
        self._live: list = []  # spans that may still overlap the next step's window
        self.pending_row: dict | None = None

    async def run(self) -> None:
        from rlrm.engine.checkpoint import list_checkpoints
        from rlrm.engine.components import build_components

        p = self.profile
        ckpts = list_checkpoints(self.run_dir)
        parts = build_components(p, policy_path=str(ckpts[-1] / "model") if ckpts else None)
        # torch, transformers and the models leave ~350k objects that live as long as the run; a full
        # collection walked them all (0.2 s of CPU, every ~18 tiny-rule steps). Frozen, it walks new ones only.
        gc.collect()
        gc.freeze()
        self.parts = parts
        self.scheduler = None
        try:
            await parts.reward.start()
            await self._loop(ckpts)
        finally:
            gc.unfreeze()  # what the run leaves behind is collected as usual again
            if self.scheduler is not None:
                await self.scheduler.close()
            await parts.reward.close()
            await parts.engine.close()

    async def _loop(self, ckpts: list) -> None:
        from rlrm.engine.checkpoint import load_state
        from rlrm.engine.data.loader import PromptLoader
        from rlrm.engine.metrics.display import StepDisplay
        from rlrm.engine.metrics.tracker import MetricsWriter
        from rlrm.engine.scheduling.overlap import make_scheduler

        p, parts = self.profile, self.parts
        loader = PromptLoader(parts.train_examples, p.data.train_batch_size, p.data.shuffle, p.trainer.seed)
        step = 0
        if ckpts:
            state = load_state(ckpts[-1])
            parts.actor.load_state_dict(state["actor"])
            loader.load_state_dict(state["loader"])
            step = state["step"]
            parts.engine.update_weights(parts.actor.policy_state_dict(), version=step)  # same weights, right version
        self.loader, self.result.last_step = loader, step
        self.scheduler = make_scheduler(parts, loader, step, self.spans)
        writer = MetricsWriter(self.run_dir / "metrics.jsonl", keep_through_step=step)
        if p.logging.save_samples:
            from rlrm.engine.metrics.samples import SampleLog

            self.sample_log = SampleLog(self.run_dir / "samples.jsonl", keep_through_step=step)
        val_examples, val_ids = self._validation_set()
        self.t0 = time.perf_counter()
        try:
            with StepDisplay(p.trainer.total_steps, step, self.console) as display:
                if step == 0 and p.trainer.val_before_train and p.trainer.val_every:
                    writer.log({"step": 0, **await self._validate(val_examples, val_ids)})
                while step < p.trainer.total_steps:
                    step += 1
                    row = await self._step(step, val_examples, val_ids)
                    writer.log(row)
                    display.update(step, row)
        except asyncio.CancelledError:
            self.result.interrupted = True
            if self.pending_row is not None:
                writer.log(self.pending_row)
        finally:
            writer.close()
            if self.sample_log is not None:
                self.sample_log.close()
            self._save(force=True)
            self._write_trace()

    async def _step(self, step: int, val_examples: list, val_ids: list) -> dict:
        from rlrm.engine.metrics.timing import StepTimer

        p = self.profile
        timer = StepTimer()
        start = time.perf_counter()
        metrics = await self.scheduler.step(step, timer)
        # From here the step is done: an interrupt below still checkpoints this step.
        self.result.last_step = step
        end = time.perf_counter()
        step_s = end - start
        self.spans.extend(timer.spans)
        timed = len(timer.spans)
        self.spans.extend(Span("rollout", "decode", s, e) for s, e in self.parts.engine.take_busy_intervals())
        row = {"step": step, **{k: v for k, v in metrics.items() if k != "_samples"}, **timer.metrics()}
        row["data/skipped_rows"] = self.parts.data_info["skipped_train"] + self.parts.data_info["skipped_test"]
        row.update(self._perf(row, step_s))
        row.update(self._idle((start, end)))
        if step > p.logging.trace_detail_steps:  # keep the trace (and memory) bounded on long runs
            detail = ("generate", "reward", "minibatch")
            kept = [sp for sp in self.spans[self._step_first_span :] if sp.lane not in detail]
            self.spans[self._step_first_span :] = kept
            self._spans_seen = len(self.spans)
        self._step_first_span = len(self.spans)
        if self.sample_log is not None:
            self.sample_log.write(step, metrics.get("_samples", []))
        if p.trainer.save_every and step % p.trainer.save_every == 0 and step < p.trainer.total_steps:
            with timer("save_checkpoint"):
                self._save()
        if p.trainer.val_every and (step % p.trainer.val_every == 0 or step == p.trainer.total_steps):
            try:
                with timer("testing"):
                    row.update(await self._validate(val_examples, val_ids))
            except asyncio.CancelledError:
                self.pending_row = row  # the step itself is complete: keep its row
                raise
        self.spans.extend(timer.spans[timed:])  # checkpoint and validation
        row.update(timer.metrics())
        row["timing_s/step"] = time.perf_counter() - start
        self.result.metrics = row
        return row

    def _idle(self, window: tuple[float, float]) -> dict[str, float]:
        """idle/* of one step window from every busy interval recorded (see metrics/intervals.py)."""
        from rlrm.engine.metrics.intervals import idle_ratio, union_length

        fresh = self.spans[self._spans_seen :]
        self._spans_seen = len(self.spans)
        self._live = [sp for sp in self._live + fresh if sp.end_s > window[0]]
        lanes: dict[str, list] = {}
        for sp in self._live:
            lanes.setdefault(sp.lane, []).append((sp.start_s, sp.end_s))
        wall = window[1] - window[0]
        waited = union_length(lanes.get("reward_wait", []), window)
        return {
            "idle/trainer": idle_ratio(lanes.get("trainer", []), window),
            "idle/rollout": idle_ratio(lanes.get("rollout", []), window),
            "idle/reward": idle_ratio(lanes.get("reward", []), window),
            "idle/reward_wait": waited / wall if wall > 0 else 0.0,
        }

    def _perf(self, row: dict, step_s: float) -> dict:
        tokens = row.get("perf/total_num_tokens", 0)
        n_samples = row.get("batch/num_samples", 0)
        peak_gb = _peak_memory_gb()
        return {
            "perf/throughput": tokens / step_s,
            "perf/samples_per_s": n_samples / step_s,
            "perf/time_per_step": step_s,
            "perf/max_memory_gb": peak_gb,
            "perf/wall_s": time.perf_counter() - self.t0,
        }

    def _validation_set(self) -> tuple[list, list]:
        from rlrm.engine.data.prompts import encode_prompts

        p = self.profile
        examples = self.parts.test_examples
        if p.data.val_size:
            examples = examples[: p.data.val_size]
        ids, kept, _ = encode_prompts(examples, self.parts.tokenizer, p.data.max_prompt_length, p.data.prompt_too_long)
        return kept, ids

    async def _validate(self, examples: list, ids: list) -> dict:
        from rlrm.engine.validation import validate

        return await validate(self.parts, examples, ids)

    def _save(self, force: bool = False) -> None:
        from rlrm.engine.checkpoint import list_checkpoints, save_checkpoint

        step = self.result.last_step
        if step == 0:
            return
        existing = list_checkpoints(self.run_dir)
        if force and existing and existing[-1].name == f"step_{step}":
            return
        state = {"actor": self.parts.actor.state_dict(), "loader": self.scheduler.loader_state()}
        save_checkpoint(
            self.run_dir, step, self.parts.policy, self.parts.tokenizer, state, self.profile.trainer.keep_checkpoints
        )

    def _write_trace(self) -> None:
        from rlrm.engine.metrics.trace import write_chrome_trace

        write_chrome_trace(self.run_dir / "trace.json", self.spans, origin_s=getattr(self, "t0", 0.0))


def _peak_memory_gb() -> float:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**30
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return rss_kb / 2**20 if sys.platform != "darwin" else rss_kb / 2**30
