"""The rollouter: generates batches of prompts ahead of the trainer and scores every sample the
moment it is generated.

    rollouter = Rollouter(run, first_batch=1, max_ahead=1)
    rollouter.start()
    launched = await rollouter.batch(k)        # batch k's groups, filled in as samples finish
    await rollouter.wait_changed(groups)       # until a batch is launched or a group is generated/scored
    rollouter.take(groups)                     # the trainer trained them (update published): forget them
    rollouter.set_version(k)                   # the trainer finished update k: batch k+1+max_ahead may start

Batch k (the prompts of step k, sampled with the same per-request seeds as sync mode) is only
launched once the trainer holds policy version >= k - 1 - max_ahead, so a sample is never more
than `max_ahead` versions older than the policy it trains (0: on-policy, as stream and pipeline
need; 1: one-step-off; max_staleness: fully-async). Each request and each reward call becomes a
trace span.

What runs ahead stays with its batch: each sample is scored under SCORED_FOR = its group's `order`, so a step
takes the reward counters of the groups it trains (`loop.take_metrics(tags=...)`), and an error of a sample
(a RewardError with reward.on_failure=fail, a dead engine) is kept on its group and raised by `wait_changed`
only to a trainer waiting for that group: the step before it still trains and checkpoints, as in sync. An
error of the rollouter itself (a bad prompt) is raised to any waiter.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace
from typing import Sequence

from rlrm.engine.metrics.timing import Span
from rlrm.engine.rewards.tags import SCORED_FOR
from rlrm.engine.rewards.threads import being_cancelled
from rlrm.engine.scheduling.base import RunParts
from rlrm.engine.scheduling.requests import (
    model_call_spans,
    request_seed,
    reward_sample,
    reward_span_args,
    sampling_params,
)


@dataclass
class Group:
    """The n samples of one prompt, filled in as they are generated and scored."""

    order: int  # launch order over the run: 0, 1, 2, ...
    batch: int  # the step whose prompts it belongs to
    position: int  # the prompt's position in its batch
    example: object
    prompt_ids: list[int]
    n: int
    completions: list = field(init=False)
    results: list = field(init=False)
    samples: list = field(init=False)  # what the reward function saw
    generated_at: float | None = None  # perf_counter when its last sample was generated
    scored_at: float | None = None  # perf_counter when its last sample was scored
    error: BaseException | None = None  # what stopped one of its samples: raised to the step that waits for it

    def __post_init__(self):
        self.completions = [None] * self.n
        self.results = [None] * self.n
        self.samples = [None] * self.n
        self._to_generate = self._to_score = self.n

    @property
    def generated(self) -> bool:
        return self.generated_at is not None

    @property
    def scored(self) -> bool:
        return self.scored_at is not None

    def mark_generated(self, j: int, completion, at: float) -> bool:
        """Sample j is generated; True when it was the group's last."""
        self.completions[j] = completion
        self._to_generate -= 1
        if self._to_generate == 0:
            self.generated_at = at
        return self.generated

    def mark_scored(self, j: int, sample, result, at: float) -> bool:
        """Sample j is scored (result None: failed); True when it was the group's last."""
        self.samples[j], self.results[j] = sample, result
        self._to_score -= 1
        if self._to_score == 0:
            self.scored_at = at
        return self.scored

    def triples(self) -> list:
        """(reward sample, result, completion) of each sample, for samples.jsonl."""
        return list(zip(self.samples, self.results, self.completions))


@dataclass
class LaunchedBatch:
    step: int
    groups: list[Group]
    dropped_prompts: int
    loader_state: dict  # the loader's state once this batch was taken (resume point after it)


class Rollouter:
    """Launches batch after batch while the trainer trains; see the module docstring.

    Args:
        run: the run's parts (engine, reward loop, prompts, spans, profile).
        first_batch: the step number of the first batch to launch.
        max_ahead: how many policy versions a launched batch may run ahead of the trainer.
        skip: batch -> prompt positions already trained before a resume (fully-async takes groups
            of later batches early); their prompts are not generated again.
    """

    def __init__(self, run: RunParts, first_batch: int, max_ahead: int, skip: dict[int, set[int]] | None = None):
        self.run = run
        self._skip = skip or {}  # batch -> positions trained before a resume: not launched again
        self.next_batch, self.max_ahead = first_batch, max_ahead
        self.version = first_batch - 1  # the trainer's policy version
        self.last_batch = run.profile.trainer.total_steps
        self._batches: dict[int, LaunchedBatch] = {}
        self._untaken: dict[int, set[int]] = {}  # batch -> positions of its groups not yet trained
        # batch -> positions trained, kept until the trainer's version passes the batch (a batch taken whole
        # ahead of time is forgotten above, yet a checkpoint must still name its prompts as trained)
        self._taken: dict[int, set[int]] = {k: set(v) for k, v in self._skip.items()}
        self._records: dict[int, LaunchedBatch] = {}  # every batch launched, without its groups (small)
        self._groups_launched = 0
        self._changed = asyncio.Event()  # a batch was launched or a group finished
        self._version_changed = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self._main: asyncio.Task | None = None
        self.error: BaseException | None = None
        self._closing = False  # close() cancels the sample tasks: their CancelledError is theirs, not a failure

    @property
    def started(self) -> bool:
        return self._main is not None

    @property
    def done_launching(self) -> bool:
        """Every batch of the run has been launched."""
        return self.next_batch > self.last_batch

    @property
    def held_back(self) -> bool:
        """No batch will launch before the trainer publishes a newer version: every batch is launched, or the
        next one waits for its version."""
        return self.done_launching or self.version < self.next_batch - 1 - self.max_ahead

    def start(self) -> None:
        self._main = asyncio.get_running_loop().create_task(self._run())

    def set_version(self, version: int) -> None:
        """The trainer holds policy version `version` (after update `version`)."""
        self.version = version
        self._version_changed.set()

    async def batch(self, k: int) -> LaunchedBatch:
        """Batch k once it is launched (its samples may still be running)."""
        while k not in self._batches:
            await self.wait_changed()
        return self._batches[k]

    def record(self, k: int) -> LaunchedBatch:
        """What batch k's launch left behind (dropped prompts, loader state), its groups left out;
        kept for the whole run, unlike the batch itself, which is forgotten once trained."""
        return self._records[k]

    def pending(self) -> list[Group]:
        """The groups launched and not yet taken, in launch order."""
        return [g for k, b in sorted(self._batches.items()) for g in b.groups if g.position in self._untaken[k]]

    def take(self, groups: list[Group]) -> None:
        """The trainer trained `groups` (call it once their update is published, so that a failed step's
        groups are never counted as trained); a batch whose groups are all taken is forgotten. A batch launched
        with no groups (every prompt dropped for length) is kept until the trainer's version reaches it: its step
        still asks for it (one-step-off waited for ever on one forgotten a step early)."""
        for g in groups:
            self._untaken[g.batch].discard(g.position)
            self._taken.setdefault(g.batch, set()).add(g.position)
        for k in [k for k, left in self._untaken.items() if not left and (k <= self.version or k in self._taken)]:
            del self._untaken[k], self._batches[k]
        for k in [k for k in self._taken if k <= self.version]:  # every group of batch <= version is trained
            del self._taken[k]

    def taken_ahead(self, after: int) -> dict[int, list[int]]:
        """Positions of the groups already trained in each batch later than `after`, including the
        positions skipped at a resume and batches taken whole."""
        return {k: sorted(v) for k, v in sorted(self._taken.items()) if k > after and v}

    async def wait_changed(self, groups: Sequence[Group] = ()) -> None:
        """Until a batch is launched or a group is generated or scored; raises what stopped the rollouter or a
        sample of `groups` (the groups the caller waits for; another batch's failure is its own step's to raise)."""
        self._raise_if_failed(groups)
        self._changed.clear()
        await self._changed.wait()
        self._raise_if_failed(groups)

    async def close(self) -> None:
        """Cancel everything still generating or scoring."""
        self._closing = True
        tasks = [t for t in (self._main, *self._tasks) if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    def _raise_if_failed(self, groups: Sequence[Group]) -> None:
        if self.error is not None:
            raise self.error
        for g in groups:
            if g.error is not None:
                raise g.error

    async def _run(self) -> None:
        p = self.run.profile
        sampling = sampling_params(p)
        try:
            while not self.done_launching:
                k = self.next_batch
                while self.version < k - 1 - self.max_ahead:
                    self._version_changed.clear()
                    await self._version_changed.wait()
                prompts = self.run.prompts.take()
                groups = []
                skip = self._skip.pop(k, set())
                for i, (example, prompt_ids) in enumerate(zip(prompts.examples, prompts.prompt_ids)):
                    if i in skip:
                        continue
                    group = Group(self._groups_launched, k, i, example, prompt_ids, p.rollout.n)
                    self._groups_launched += 1
                    groups.append(group)
                    for j in range(group.n):
                        seeded = replace(sampling, seed=request_seed(p.trainer.seed, k, i, j))
                        self._spawn(self._sample(group, j, seeded))
                self._batches[k] = LaunchedBatch(k, groups, prompts.dropped, self.run.prompts.state_dict())
                self._records[k] = replace(self._batches[k], groups=[])
                self._untaken[k] = {g.position for g in groups}
                self.next_batch += 1
                self._changed.set()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a bad prompt, a closed engine: the trainer must hear of it
            self.error = exc
            self._changed.set()

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _sample(self, group: Group, j: int, sampling) -> None:
        run = self.run
        SCORED_FOR.set(group.order)  # this task's own context: its reward counters are its group's
        try:
            start = time.perf_counter()
            completion = await run.engine.generate(group.prompt_ids, sampling)
            end = time.perf_counter()
            run.spans.append(Span("generate", "generate", start, end, {"batch": group.batch, "group": group.position}))
            if group.mark_generated(j, completion, end):
                self._changed.set()
            sample = reward_sample(run.tokenizer, group.example, completion, group.position * group.n + j)
            in_flight = run.spans.open("reward", end)  # busy in a step that ends before it does (idle/reward)
            try:
                result = await run.reward.loop.score(sample)
            finally:
                run.spans.close(in_flight)
            done = time.perf_counter()
            args = reward_span_args(result, batch=group.batch, group=group.position)
            run.spans.append(Span("reward", "reward", end, done, args))
            run.spans.extend(Span("reward", *call) for call in model_call_spans(result, end, args))
            if group.mark_scored(j, sample, result, done):
                self._changed.set()
        except asyncio.CancelledError as exc:
            # close(), or Ctrl-C: this task itself was cancelled (Python 3.10 cannot tell: close() alone decides)
            if self._closing or (hasattr(asyncio.Task, "cancelling") and being_cancelled()):
                raise
            # raised by something it awaited (a client library's own cancel): a failure of this sample, or its step
            # would wait forever; not a CancelledError, which the step would read as its own cancellation
            failure = RuntimeError(f"generating or scoring sample {j} of batch {group.batch} was cancelled: {exc!r}")
            group.error = group.error or failure
            self._changed.set()
        except BaseException as exc:  # RewardError (on_failure: fail), a dead engine: stop the step that needs it
            group.error = group.error or exc
            self._changed.set()
