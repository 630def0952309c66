"""The rollouter: generates batches of prompts ahead of the trainer and scores every sample the
moment it is generated.

    rollouter = Rollouter(parts, loader, first_batch=1, max_ahead=1, spans=spans)
    rollouter.start()
    groups = await rollouter.batch(k)          # the groups of batch k, every sample scored
    rollouter.set_version(k)                   # the trainer finished update k: batch k+1+max_ahead may start

Batch k (the prompts of step k, sampled with the same per-request seeds as sync mode) is only
launched once the trainer holds policy version >= k - 1 - max_ahead, so a sample is never more
than `max_ahead` versions older than the policy it trains (0: on-policy, as stream and pipeline
need; 1: one-step-off; max_staleness: fully-async). Each request and each reward call becomes a
trace span.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace

from rlrm.engine.metrics.timing import Span
from rlrm.engine.scheduling.common import request_seed, reward_sample


@dataclass
class Group:
    """The n samples of one prompt, filled in as they are generated and scored."""

    order: int  # launch order over the run: 0, 1, 2, ...
    batch: int  # the step whose prompts it belongs to
    position: int  # the prompt's position in its batch
    example: object
    prompt_ids: list[int]
    n: int
    completions: list = field(default_factory=list)
    results: list = field(default_factory=list)
    generated_at: float | None = None  # perf_counter when its last sample was generated
    scored_at: float | None = None  # perf_counter when its last sample was scored

    def triples(self) -> list:
        """(reward sample, result, completion) of each sample, for samples.jsonl."""
        return list(zip(self.samples, self.results, self.completions))

    def __post_init__(self):
        self.completions = [None] * self.n
        self.results = [None] * self.n
        self.samples = [None] * self.n  # what the reward function saw
        self._left_gen = self._left_score = self.n

    @property
    def generated(self) -> bool:
        return self.generated_at is not None

    @property
    def scored(self) -> bool:
        return self.scored_at is not None


@dataclass
class LaunchedBatch:
    groups: list[Group]
    dropped_prompts: int
    loader_state: dict  # the loader's state once this batch was taken (resume point after it)


class Rollouter:
    """Launches batch after batch while the trainer trains; see the module docstring.

    Args:
        parts: the run's Components (engine, reward loop, tokenizer, profile).
        loader: the PromptLoader, positioned at `first_batch`.
        first_batch: the step number of the first batch to launch.
        max_ahead: how many policy versions a launched batch may run ahead of the trainer.
        spans: list that receives `generate` and `reward` spans (trace lanes of their own).
    """

    def __init__(self, parts, loader, first_batch: int, max_ahead: int, spans: list):
        self.parts, self.loader, self.spans = parts, loader, spans
        self.next_batch, self.max_ahead = first_batch, max_ahead
        self.version = first_batch - 1  # the trainer's policy version
        self.last_batch = parts.profile.trainer.total_steps
        self.batches: dict[int, LaunchedBatch] = {}
        self.loader_states: dict[int, dict] = {}  # the loader's state after taking batch k
        self.groups_launched = 0
        self._changed = asyncio.Event()  # a batch was launched or a group finished
        self._version_changed = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self._main: asyncio.Task | None = None
        self.error: BaseException | None = None

    def start(self) -> None:
        self._main = asyncio.get_running_loop().create_task(self._run())

    def set_version(self, version: int) -> None:
        """The trainer holds policy version `version` (after update `version`)."""
        self.version = version
        self._version_changed.set()

    async def batch(self, k: int) -> LaunchedBatch:
        """Batch k once it is launched (its samples may still be running)."""
        while k not in self.batches:
            self._raise_if_failed()
            self._changed.clear()
            await self._changed.wait()
        return self.batches[k]

    async def wait_changed(self) -> None:
        """Until a batch is launched or a group is generated or scored."""
        self._raise_if_failed()
        self._changed.clear()
        await self._changed.wait()
        self._raise_if_failed()

    def forget(self, k: int) -> None:
        """Drop the bookkeeping of batch k (trained)."""
        self.batches.pop(k, None)

    async def close(self) -> None:
        """Cancel everything still generating or scoring."""
        tasks = [t for t in (self._main, *self._tasks) if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    def _raise_if_failed(self) -> None:
        if self.error is not None:
            raise self.error

    async def _run(self) -> None:
        from rlrm.engine.data.prompts import encode_prompts
        from rlrm.engine.scheduling.sync import sampling_params

        p = self.parts.profile
        sampling = sampling_params(p)
        try:
            while self.next_batch <= self.last_batch:
                k = self.next_batch
                while self.version < k - 1 - self.max_ahead:
                    self._version_changed.clear()
                    await self._version_changed.wait()
                examples = self.loader.next_batch()
                ids, kept, dropped = encode_prompts(
                    examples, self.parts.tokenizer, p.data.max_prompt_length, p.data.prompt_too_long
                )
                groups = []
                for i, (example, prompt_ids) in enumerate(zip(kept, ids)):
                    group = Group(self.groups_launched, k, i, example, prompt_ids, p.rollout.n)
                    self.groups_launched += 1
                    groups.append(group)
                    for j in range(group.n):
                        seeded = replace(sampling, seed=request_seed(p.trainer.seed, k, i, j))
                        self._spawn(self._sample(group, j, seeded))
                self.batches[k] = LaunchedBatch(groups, dropped, self.loader.state_dict())
                self.loader_states[k] = self.loader.state_dict()
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
        parts = self.parts
        try:
            start = time.perf_counter()
            completion = await parts.engine.generate(group.prompt_ids, sampling)
            end = time.perf_counter()
            self.spans.append(Span("generate", "generate", start, end, {"batch": group.batch, "group": group.position}))
            group.completions[j] = completion
            group._left_gen -= 1
            if group._left_gen == 0:
                group.generated_at = end
                self._changed.set()
            sample = reward_sample(parts.tokenizer, group.example, completion, group.position * group.n + j)
            group.samples[j] = sample
            result = await parts.reward.loop.score(sample)
            done = time.perf_counter()
            args = {"batch": group.batch, "group": group.position}
            if result is not None and "injected_latency_s" in result.extra:
                args["injected_latency_s"] = result.extra["injected_latency_s"]
            self.spans.append(Span("reward", "reward", end, done, args))
            group.results[j] = result
            group._left_score -= 1
            if group._left_score == 0:
                group.scored_at = done
                self._changed.set()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # RewardError (on_failure: fail), a dead engine: stop the run
            self.error = self.error or exc
            self._changed.set()
