"""The GRPO training loop: steps, validation, metrics, checkpoints, resume and Ctrl-C.

    from rlrm.engine.trainer import start_run, train
    run_dir = start_run(profile, Path("runs/demo"), overwrite=False)
    result = train(run_dir)                   # a new run, or the continuation of a stopped one

A run folder holds `config.yaml` (the resolved profile), `metrics.jsonl` (one row per step),
`trace.json` (timeline spans), `checkpoints/step_<k>/` and, when a reward attempt timed out, `hung_rewards.jsonl`. `train` resumes from the newest
checkpoint when there is one, so `rlrm train --resume DIR` and a fresh start share one path.
"""

from __future__ import annotations

import asyncio
import gc
import os
import resource
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlrm.config.schema import Profile
from rlrm.engine.canaries import Canaries
from rlrm.engine.checkpoint import (
    added_settings,
    changed_settings,
    check_checkpoint,
    checkpoint_step,
    commit_checkpoint,
    list_checkpoints,
    load_state,
    write_checkpoint,
)
from rlrm.engine.components import build_components
from rlrm.engine.data.loader import PromptLoader
from rlrm.engine.data.prompts import encode_prompts
from rlrm.engine.held_out import evaluate_held_out
from rlrm.engine.metrics.display import StepDisplay
from rlrm.engine.metrics.guard import DivergenceGuard
from rlrm.engine.metrics.hung_rewards import HungRewardLog
from rlrm.engine.metrics.idle import IdleMeter
from rlrm.engine.metrics.intervals import merged
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.metrics.samples import SampleLog
from rlrm.engine.metrics.spans import SpanLog
from rlrm.engine.metrics.timing import Span, StepTimer
from rlrm.engine.metrics.trace import TraceStream, write_chrome_trace
from rlrm.engine.metrics.trackers import RunLog
from rlrm.engine.rewards.budget import RewardBudgetExceeded, check_failure_budget
from rlrm.engine.run_contract import check_run_contract
from rlrm.engine.run_folder import last_logged_step, load_run_profile, start_run
from rlrm.engine.run_lock import release_run
from rlrm.engine.scheduling.base import PromptSource, RunParts, Scheduler
from rlrm.engine.scheduling.registry import make_scheduler
from rlrm.engine.step import GRPOStep, StepSettings
from rlrm.engine.weights import PolicyWeights
from rlrm.inference.tf32 import cuda_tf32_on
from rlrm.launch.common import progress

__all__ = ["RunResult", "load_run_profile", "start_run", "train"]  # start_run and load_run_profile: run_folder.py


@dataclass
class RunResult:
    run_dir: Path
    last_step: int
    metrics: dict = field(default_factory=dict)
    interrupted: bool = False
    signal: str = "SIGINT"  # what interrupted it: Ctrl-C, or SIGTERM (a scheduler, `docker stop`, `kill`)
    stopped: str | None = None  # why the reward guard ended the run early (on_divergence or on_canary=stop)


def train(run_dir: Path, console: str | None = None, allow_contract_change: bool = False) -> RunResult:
    """Run (or continue) the training of a run folder until `trainer.total_steps`.

    Ctrl-C, or SIGTERM in the main thread (what schedulers, `docker stop` and `kill` send), saves a checkpoint of
    the last completed step and returns with `interrupted=True`.
    `allow_contract_change` (or reward.allow_contract_change in config.yaml): resume with a reward contract that
    differs from the run's (rlrm/engine/run_contract.py), recording the change.
    """
    profile = load_run_profile(run_dir)  # locks the folder for this process (run_lock.py) until the run ends
    try:
        if allow_contract_change:  # this resume only: config.yaml keeps the run's own setting
            profile.reward.allow_contract_change = True
        loop = _TrainLoop(profile, Path(run_dir), console or profile.logging.console)
        put_back = cuda_tf32_on() if profile.model.tf32 else None  # for the run; the caller's own setting after it
        try:
            asyncio.run(loop.run())
        except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C; SIGTERM while the parts started
            loop.result.interrupted = True
        finally:
            if put_back is not None:
                put_back()
        return loop.result
    finally:
        release_run(Path(run_dir))


class _SigtermStops:
    """SIGTERM (a scheduler, `docker stop`, `kill`) stops the run as Ctrl-C does: the run's task is cancelled,
    which saves its last completed step and writes trace.json whole, where the default would end the process with
    neither. Taken on the run's loop (main thread only, where Python takes signals) and taken again once the run's
    parts have started (Ray sets a SIGTERM handler of its own when it joins); a second SIGTERM does not cut the
    save short. The handler found first (or the one a part set since) is put back after the run."""

    def __init__(self, result: RunResult):
        self.result = result
        self.loop: asyncio.AbstractEventLoop | None = None
        self.before: Any = None  # the SIGTERM handler to put back
        self.ours: Any = None  # what signal.getsignal reports while the loop's handler is in place
        self.fired = False

    def take(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        current = signal.getsignal(signal.SIGTERM)
        if self.loop is None or current is not self.ours:
            self.before = current
        self.loop = asyncio.get_running_loop()
        self.loop.add_signal_handler(signal.SIGTERM, self._stop, asyncio.current_task())
        self.ours = signal.getsignal(signal.SIGTERM)

    def _stop(self, task) -> None:
        if not self.fired and task is not None:
            self.fired = True
            self.result.signal = "SIGTERM"
            task.cancel()

    def give_back(self) -> None:
        if self.loop is None:
            return
        self.loop.remove_signal_handler(signal.SIGTERM)
        if self.before is not None:
            signal.signal(signal.SIGTERM, self.before)
        self.loop = None


class _TrainLoop:
    """One run: builds the parts, then asks the mode's scheduler for step after step."""

    def __init__(self, profile: Profile, run_dir: Path, console: str):
        self.profile = profile
        self.run_dir = run_dir
        self.console = console
        self.result = RunResult(run_dir, last_step=0)
        self.spans = SpanLog()  # every span of the run (trace.json, idle ratios)
        self.idle = IdleMeter(self.spans)
        self._detail_from = 0  # where the spans of the current step start (see _step)
        self.sample_log: SampleLog | None = None
        self.pending_row: dict | None = None
        self._logged_step = 0  # the last step whose row metrics.jsonl holds (a resumed run: its checkpoint's)
        self.t0 = time.perf_counter()
        self._trace: TraceStream | None = None  # trace.json as the run goes, so a killed run keeps its finished steps
        self._trace_sent = 0  # spans of self.spans already appended to it
        self._unsaved = False  # the actor's state is not to be checkpointed (an over-budget step trained)
        # a periodic checkpoint written in its step, named complete once the step's row is in metrics.jsonl: a
        # crash in between (its held-out evaluation, its canaries) must not leave a checkpoint past the rows
        self._written: tuple[int, Path] | None = None

    async def run(self) -> None:
        self.sigterm = _SigtermStops(self.result)
        self.sigterm.take()
        try:
            await self._run()
        finally:
            self.sigterm.give_back()

    async def _run(self) -> None:
        ckpts = list_checkpoints(self.run_dir)
        if ckpts:
            check_checkpoint(ckpts[-1])  # before the policy is loaded from it
        elif last_logged_step(self.run_dir):  # stopped before its first checkpoint
            progress.say(f"no checkpoint in {self.run_dir} yet: training from step 0 (its metrics rows are replaced)")
        progress.say(f"loading {self.profile.model.path} ({self.profile.model.dtype}) ...")
        with progress.waiting(f"loading {self.profile.model.path}"):
            parts = build_components(
                self.profile,
                policy_path=str(ckpts[-1] / "model") if ckpts else None,
                checkpoint=ckpts[-1] if ckpts else None,
            )
        progress.say(f"policy on {parts.device}; starting the reward and rollout ({self.profile.reward.kind} reward)")
        # torch, transformers and the models leave ~350k objects that live as long as the run; a full
        # collection walked them all (0.2 s of CPU, every ~18 tiny-rule steps). Frozen, it walks new ones only.
        gc.collect()
        gc.freeze()
        self.parts = parts
        self.scheduler: Scheduler | None = None
        try:
            await parts.reward.start()
            step = checkpoint_step(ckpts[-1]) if ckpts else 0
            contract = parts.reward.contract
            if contract is None:  # start() made it
                raise RuntimeError("the reward service started without its reward contract")
            check_run_contract(self.run_dir, contract, self.profile.reward.allow_contract_change, step)
            edited = changed_settings(ckpts[-1], self.profile.model_dump(mode="json")) if ckpts else []
            if edited:  # config.yaml edited by hand since the checkpoint: taken, and said once
                progress.say(
                    f"note: resuming {ckpts[-1].name} with settings edited since it was saved: {', '.join(edited)}"
                )
            added = added_settings(ckpts[-1], self.profile.model_dump(mode="json")) if ckpts else []
            if added:  # an upgrade since: new settings at their defaults may train differently, said once
                shown = ", ".join(added[:8]) + (f", and {len(added) - 8} more" if len(added) > 8 else "")
                progress.say(f"note: {ckpts[-1].name} was saved by an earlier rlrm; settings added since: {shown}")
            await parts.engine.start()
            self.sigterm.take()  # again: a part may have set its own handler while it started (Ray does)
            await self._loop(ckpts)
        finally:
            gc.unfreeze()  # what the run leaves behind is collected as usual again
            if self.scheduler is not None:
                await self.scheduler.close()
            await parts.reward.close()
            await parts.engine.close()
            parts.actor.close()

    async def _loop(self, ckpts: list) -> None:
        p = self.profile
        step = self._start(ckpts)
        self._logged_step = step  # metrics.jsonl keeps the rows through the checkpoint's step
        # rows through the checkpoint's step stay; without one the run starts over (its step 0 is written again)
        keep = step if step > 0 else -1
        writer = RunLog(self.run_dir, p, keep_through_step=keep)  # metrics.jsonl and logging.trackers
        if p.logging.save_samples:
            contract = self.parts.reward.contract.short if self.parts.reward.contract is not None else None
            self.sample_log = SampleLog(
                self.run_dir / "samples.jsonl", keep_through_step=keep, reward_contract=contract
            )
        hung = HungRewardLog(self.run_dir / "hung_rewards.jsonl")  # created at the first reward that hangs
        self.val_examples, self.val_ids = self._held_out_set()
        history = read_metrics(self.run_dir / "metrics.jsonl") if (self.run_dir / "metrics.jsonl").exists() else []
        self.guard = DivergenceGuard(p.reward.guard, [r for r in history if r.get("step", 0) <= keep])
        self.canaries = Canaries.build(p, self.parts.test_examples, self.parts.tokenizer)
        self.wall_offset_s = _wall_so_far(history, step)  # a resumed run's perf/wall_s goes on from its last row
        self.t0 = time.perf_counter()
        try:
            with StepDisplay(p.trainer.total_steps, step, self.console) as display:
                first = {"step": step}  # the first check of the canaries (their baseline) and step 0's held-out set
                if step == 0 and p.trainer.val_before_train and p.trainer.val_every:
                    display.message(f"step 0: held-out accuracy on {len(self.val_examples)} problems ...")
                    started = time.perf_counter()
                    with progress.waiting("step 0: held-out accuracy"):
                        first.update(await self._held_out())
                    self.guard.observe(first)
                    display.message(
                        f"step 0: held-out accuracy {first.get('val/accuracy', float('nan')):.3f} "
                        f"({time.perf_counter() - started:.1f} s)"
                    )
                carried = await self._check_canaries(step, first, display)  # a resumed run: into its next row
                if step == 0 and len(first) > 1:
                    writer.log(first)
                    carried = {}
                while step < p.trainer.total_steps and self.result.stopped is None:
                    step += 1
                    row = {**await self._step(step), **carried}
                    carried = {}
                    hung.write(step, self.parts.reward.loop.take_hung())
                    finding = self.guard.observe(row)
                    row["guard/divergence"] = float(finding is not None)
                    diverged = finding is not None and p.reward.guard.on_divergence == "stop"
                    if not diverged and step % p.reward.guard.canary_every == 0 and step < p.trainer.total_steps:
                        self.pending_row = row  # the step is complete: an interrupt in the check keeps its row
                        await self._check_canaries(step, row, display)  # after this step, before the next update
                    writer.log(row)
                    self.pending_row, self._logged_step = None, step
                    self._commit_written()
                    display.update(step, row)
                    if finding is not None and self.guard.flagged_at == step:
                        display.message(f"warning: step {step}: reward-hacking guard: {finding.detail}")
                    if diverged and finding is not None:  # diverged holds a finding
                        self.result.stopped = (
                            f"stopped at step {step} by the reward-hacking guard (reward.guard.on_divergence=stop): "
                            f"{finding.detail}"
                        )
        except RewardBudgetExceeded as exc:
            self._unsaved = exc.trained  # the actor holds an over-budget update: keep the last good checkpoint
            self._log_pending(writer)
            raise
        except asyncio.CancelledError:
            self.result.interrupted = True
            self._log_pending(writer)
        finally:
            # a step whose row never reached metrics.jsonl (a second Ctrl-C's KeyboardInterrupt between the two) is
            # not checkpointed either: a resume from it would leave its row missing for good
            unlogged = self.result.last_step > self._logged_step
            self._wind_up(
                lambda: hung.write(step, self.parts.reward.loop.take_hung(every=True)),  # a stopped run's: all
                self._commit_written,  # its row logged (a stop between the two), else dropped
                None if self._unsaved or unlogged else lambda: self._save(force=True),
                writer.close,
                self.sample_log.close if self.sample_log is not None else None,
                self._write_trace,
            )

    def _commit_written(self) -> None:
        """The checkpoint written in a step, named complete if that step's row is logged, else deleted."""
        if self._written is None:
            return
        (step, folder), self._written = self._written, None
        if step <= self._logged_step:
            commit_checkpoint(folder, self.profile.trainer.keep_checkpoints)
        else:
            shutil.rmtree(folder, ignore_errors=True)

    def _log_pending(self, writer) -> None:
        """The row of a step that completed but was not logged yet, logged (a stop between the two)."""
        if self.pending_row is not None:
            writer.log(self.pending_row)
            self._logged_step = max(self._logged_step, int(self.pending_row["step"]))
            self.pending_row = None

    @staticmethod
    def _wind_up(*actions) -> None:
        """Each of a run's last actions, whatever the others did: a tracker that fails to close (a full disk under
        MLflow's store) must not cost the final checkpoint. The first failure is raised after all of them, unless
        the run is already stopping on an error of its own (that one is the one to see; these are printed)."""
        failures = []
        for action in actions:
            if action is None:
                continue
            try:
                action()
            except Exception as exc:
                failures.append(exc)
        if not failures:
            return
        if sys.exc_info()[1] is None:
            raise failures[0]
        for failure in failures:
            print(f"rlrm: while stopping: {type(failure).__name__}: {failure}", file=sys.stderr, flush=True)

    async def _check_canaries(self, step: int, row: dict, display: StepDisplay) -> dict:
        """Score the canaries (reward.guard.on_canary) after `step`, into `row`; a flag warns, or stops the run."""
        if self.canaries is None:
            return {}
        finding, metrics = await self.canaries.check(self.parts.reward)
        row.update(metrics)
        if finding.flagged:
            display.message(f"warning: step {step}: reward canaries: {finding.detail}")
        if finding.flagged and self.profile.reward.guard.on_canary == "stop":
            self.result.stopped = (
                f"stopped at step {step}, before the next update, by the reward canaries "
                f"(reward.guard.on_canary=stop): {finding.detail}"
            )
        return metrics

    def _start(self, ckpts: list) -> int:
        """Restore the newest checkpoint (if any), build the mode's scheduler; returns the last step done."""
        p, parts = self.profile, self.parts
        loader = PromptLoader(parts.train_examples, p.data.train_batch_size, p.data.shuffle, p.trainer.seed)
        if len(parts.train_examples) < p.data.train_batch_size:
            progress.say(
                f"note: the train split has {len(parts.train_examples)} prompts, fewer than data.train_batch_size="
                f"{p.data.train_batch_size}: every step trains some prompt as more than one group"
            )
        step, resume = 0, None
        weights = PolicyWeights(parts.actor, parts.engine)
        if ckpts:
            state = load_state(ckpts[-1])
            resume = state["loader"]
            parts.actor.load_state_dict(state["actor"], ckpt_dir=ckpts[-1])
            loader.load_state_dict(state["loader"])
            step = state["step"]
            weights.publish(step)  # the engine loaded the checkpoint's weights already: this gives them their version
        self.result.last_step = step
        prompts = PromptSource(loader, parts.tokenizer, p.data.max_prompt_length, p.data.prompt_too_long)
        grpo = GRPOStep(
            parts.actor, parts.engine, StepSettings.from_profile(p, parts.tokenizer.pad_token_id, parts.device)
        )
        run = RunParts(p, prompts, parts.engine, parts.reward, parts.tokenizer, grpo, weights, self.spans)
        self.grpo = grpo
        self.scheduler = make_scheduler(p.trainer.mode, run, step, resume)
        return step

    async def _step(self, step: int) -> dict:
        p = self.profile
        timer = StepTimer()
        start = time.perf_counter()
        _reset_peak_memory(self.parts.device)  # perf/max_memory_gb: this step's, its checkpoint and validation too
        if self.scheduler is None:  # made by the run before its first step
            raise RuntimeError("a training step is run before the run made its scheduler")
        outcome = self.grpo.finish(await self.scheduler.step(step, timer))  # the row's part the step's maths gives
        # From here the step is done: an interrupt below still checkpoints this step.
        self.result.last_step = step
        end = time.perf_counter()
        self.spans.extend(timer.spans)
        timed = len(timer.spans)
        # merged: a rollout server's client gives one interval a request, which would stay in the trace (and in
        # memory) for the whole run, past trace_detail_steps; the idle meter reads their union all the same
        busy = merged(self.parts.engine.take_busy_intervals())
        self.spans.extend(Span("rollout", "decode", s, e) for s, e in busy)
        row = {"step": step, **outcome.metrics, **timer.metrics()}
        row.update(self.parts.engine.take_metrics())  # rollout/retries, ... of rollout servers
        row["data/skipped_rows"] = self.parts.data_info["skipped_train"] + self.parts.data_info["skipped_test"]
        row.update(self._perf(row, end - start))
        row.update(self.idle.measure((start, end)))
        if step > p.logging.trace_detail_steps:  # keep the trace (and memory) bounded on long runs
            self.spans.compact(self._detail_from, drop_lanes={"generate", "reward", "minibatch"})
            self.idle.rewind()
        self._detail_from = self.spans.cursor()  # spans of later steps (some recorded during validation) from here
        self._stream_trace()
        if self.sample_log is not None:
            self.sample_log.write(step, outcome.samples)
        try:  # modes check before their update; this catches what they could not (pipeline's last groups)
            check_failure_budget(step, row, p.reward, self.parts.reward.loop.last_error, trained=True)
        except RewardBudgetExceeded:
            self.pending_row = row  # logged, never checkpointed
            raise
        if p.trainer.save_every and step % p.trainer.save_every == 0 and step < p.trainer.total_steps:
            with timer("save_checkpoint"):
                self._save(commit=False)  # named complete once this row is logged
        if p.trainer.val_every and (step % p.trainer.val_every == 0 or step == p.trainer.total_steps):
            try:
                with timer("testing"):
                    row.update(await self._held_out())
            except asyncio.CancelledError:
                self.pending_row = row  # the step itself is complete: keep its row
                raise
        self.spans.extend(timer.spans[timed:])  # checkpoint and validation
        row.update(self._peak_memory())
        row.update(timer.metrics())
        row["timing_s/step"] = time.perf_counter() - start
        self.result.metrics = row
        return row

    def _perf(self, row: dict, step_s: float) -> dict:
        tokens = row.get("perf/total_num_tokens", 0)
        n_samples = row.get("batch/num_samples", 0)
        perf = {
            "perf/throughput": tokens / step_s,
            "perf/samples_per_s": n_samples / step_s,
            "perf/time_per_step": step_s,
            "perf/wall_s": time.perf_counter() - self.t0 + self.wall_offset_s,
            "perf/cpu_cores": _cpu_cores(),
        }
        return perf

    def _peak_memory(self) -> dict:
        memory = {"perf/max_memory_gb": _peak_memory_gb(self.parts.device)}
        rank_memory = self.parts.actor.peak_memory_gb()  # actor.world_size > 1: the ranks' own
        if rank_memory is not None:
            memory["perf/actor_max_memory_gb"] = rank_memory
        return memory

    def _held_out_set(self) -> tuple[list, list]:
        p = self.profile
        examples = self.parts.test_examples
        if p.data.val_size:
            examples = examples[: p.data.val_size]
        ids, kept, dropped = encode_prompts(
            examples, self.parts.tokenizer, p.data.max_prompt_length, p.data.prompt_too_long
        )
        if dropped:  # val/accuracy is over the rest: say so, or two runs' accuracies read as on one set
            print(
                f"rlrm: {dropped} of {len(examples)} held-out prompts are longer than data.max_prompt_length="
                f"{p.data.max_prompt_length} and left out of val/accuracy (data.prompt_too_long=drop)",
                file=sys.stderr,
                flush=True,
            )
        return kept, ids

    async def _held_out(self) -> dict:
        parts = self.parts
        return await evaluate_held_out(parts.engine, parts.tokenizer, self.profile, self.val_examples, self.val_ids)

    def _save(self, force: bool = False, commit: bool = True) -> None:
        step = self.result.last_step
        if step == 0 or self.scheduler is None:
            return
        if self.parts.actor.broken:  # a rank died: its shards are gone, keep the last checkpoint
            return
        existing = list_checkpoints(self.run_dir)
        if force and existing and existing[-1].name == f"step_{step}":
            return
        if self.grpo.update_stopped:  # part of the next step's update is in the actor
            kept = existing[-1].name if existing else "none: a resume starts the run again"
            print(
                f"rlrm: step {step + 1}'s update stopped partway, so the actor is no longer step {step}'s: it is "
                f"not checkpointed (newest checkpoint kept: {kept})",
                file=sys.stderr,
                flush=True,
            )
            return
        state = {"actor": self.parts.actor.state_dict(), "loader": self.scheduler.loader_state()}
        written = write_checkpoint(
            self.run_dir,
            step,
            self.parts.policy,
            self.parts.tokenizer,
            state,
            write_extra=self.parts.actor.write_shards,
            profile_data=self.profile.model_dump(mode="json"),
            reference=self.parts.reference,
        )
        if written is None:
            return
        if commit:
            commit_checkpoint(written, self.profile.trainer.keep_checkpoints)
        else:
            self._written = (step, written)

    def _stream_trace(self) -> None:
        """Append the spans that no later pruning changes (those before this step's window) to trace.json."""
        if self._trace is None:
            # Made after this session's first step: a run resumed after step k keeps its earlier sessions' trace.
            first_step = self.result.last_step
            self._trace = TraceStream(
                self.run_dir / "trace.json",
                origin_s=self.t0,
                resumed_after_step=first_step - 1,
                wall_offset_s=self.wall_offset_s,
            )
        self._trace.append(self.spans.since(self._trace_sent)[: self._detail_from - self._trace_sent])
        self._trace_sent = self._detail_from

    def _write_trace(self) -> None:
        """Rewrite trace.json whole: earlier sessions' events (a resumed run), then every span of this one."""
        if self._trace is not None:
            self._trace.write_whole(list(self.spans))
        elif self.result.last_step == 0:  # a run from step 0 that finished no step: its spans (held-out set) only
            write_chrome_trace(self.run_dir / "trace.json", list(self.spans), origin_s=self.t0)
        # else a resumed run that trained nothing: trace.json stays as its earlier sessions left it


def _wall_so_far(history: list[dict], step: int) -> float:
    """`perf/wall_s` of the last row through `step` (0.0 for a new run): the sessions of a resumed run are counted end
    to end, the time between them left out, so `rlrm report --x time` goes forward."""
    walls = [r["perf/wall_s"] for r in history if r.get("step", 0) <= step and isinstance(r.get("perf/wall_s"), float)]
    return walls[-1] if walls else 0.0


def _reset_peak_memory(device: str) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _peak_memory_gb(device: str) -> float:
    """The trainer's peak memory: the step's peak CUDA allocations on the policy's GPU since `_reset_peak_memory`
    (not device 0's, not a GPU it leaves alone when it trains on the CPU), the process's peak resident set so far
    otherwise (a process's RSS peak cannot be reset)."""
    import torch

    if torch.device(device).type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return rss_kb / 2**20 if sys.platform != "darwin" else rss_kb / 2**30


def _cpu_cores() -> int:
    """The cores this process may run on (its affinity, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1
