"""The reward loop: per-sample scoring by `num_workers` async workers, with timeouts, retries and a
failure policy, and counters for everything that went wrong.

    loop = RewardLoop(reward_fn, profile.reward)
    result = await loop.score(sample)      # RewardResult, or None when the sample's group must be dropped
    loop.take_metrics()                    # reward/latency_p50, reward/failures, ... since the last call
    loop.take_metrics(tags=[3, 4])         # only the samples scored under SCORED_FOR 3 or 4 (rlrm/engine/rewards/tags.py)
    loop.take_hung()                       # the attempts past reward.attempt_timeout_s: sample, function, how long

Nothing is ever silently zeroed: a sample that still fails after its retries is given
`reward.default_score` (counted in `reward/defaulted`), dropped with its whole group (counted in
`reward/dropped_groups`), or stops the run with a RewardError, as `reward.on_failure` says.
"""

from __future__ import annotations

import asyncio
import collections
import math
import random
import time
from dataclasses import dataclass, field, fields
from typing import Callable, Hashable, Iterable

from rlrm.call_errors import CallError, RequestTimeout
from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.base import RewardFn, RewardResult, RewardSample, is_score
from rlrm.engine.rewards.budget import check_failure_budget
from rlrm.engine.rewards.cache import RewardCache
from rlrm.engine.rewards.components import COMPONENTS_KEY, ComponentSpec
from rlrm.engine.rewards.deadline import AttemptTimedOut, within
from rlrm.engine.rewards.errors import BadComponents, NonFiniteScore
from rlrm.engine.rewards.ledger import LEDGER_KEYS, ledger_scope
from rlrm.engine.rewards.overlong import shape
from rlrm.engine.rewards.reported import REPORTED_KEY, reported_names
from rlrm.engine.rewards.tags import PerTag
from rlrm.engine.rewards.threads import FunctionCancelled, FunctionExited, being_cancelled
from rlrm.engine.rewards.turn_scores import TURN_SCORES_KEY, read_turn_scores
from rlrm.errors import RlrmError
from rlrm.float32 import FLOAT32_MAX, fits_float32
from rlrm.stats import quantile

HUNG_KEPT = 1000  # hung-attempt records held between two take_hung() calls (the oldest go first)


class RewardError(RlrmError):
    """A reward failed and `reward.on_failure` is `fail`."""


@dataclass
class RewardStats:
    latencies_s: list[float] = field(default_factory=list)
    samples: int = 0  # samples whose scoring ended (scored or failed): the failure budget's denominator
    failures: int = 0  # samples that failed after every retry
    retries: int = 0
    timeouts: int = 0
    unparsed: int = 0
    nonfinite: int = 0
    component_errors: int = 0  # components missing, extra or not numbers (rlrm/engine/rewards/components.py)
    turn_score_errors: int = 0  # turn_scores of the wrong length or not numbers (rlrm/engine/rewards/turn_scores.py)
    injected_failures: int = 0  # attempts failed on purpose by reward.inject.fail_rate
    injected_latency_sum_s: float = 0.0  # reward.inject latency of the results scored
    injected_latency_count: int = 0
    defaulted: int = 0
    dropped_samples: int = 0
    judge_prompt_tokens: int = 0
    judge_completion_tokens: int = 0
    model_calls: int = 0  # reward-model requests answered or failed (rlrm/engine/rewards/ledger.py)
    rate_limited: int = 0  # 429s (503s with Retry-After) waited out and sent again: not failures
    throttle_wait_s: float = 0.0  # time spent waiting for reward.limits or a Retry-After
    model_not_found: int = 0  # 404 answers to reward-model calls
    overlong_shaped: int = 0  # scored samples reward.overlong looked at (failed ones never are)
    overlong_penalised: int = 0  # of those, the ones whose penalty was below 0
    overlong_penalty_sum: float = 0.0

    @classmethod
    def total(cls, parts: list["RewardStats"]) -> "RewardStats":
        """The counters of `parts` added up (their latencies joined)."""
        total = cls()
        for part in parts:
            for f in fields(cls):
                setattr(total, f.name, getattr(total, f.name) + getattr(part, f.name))
        return total

    def metrics(self) -> dict[str, float]:
        """reward/* counters (the groups dropped for failed samples are counted by the step: rlrm/engine/step.py)."""
        lat = self.latencies_s
        return {
            "reward/latency_p50": quantile(lat, 0.5) if lat else 0.0,
            "reward/latency_p99": quantile(lat, 0.99) if lat else 0.0,
            "reward/samples": self.samples,
            "reward/failures": self.failures,
            "reward/retries": self.retries,
            "reward/timeouts": self.timeouts,
            "reward/unparsed": self.unparsed,
            "reward/nonfinite": self.nonfinite,
            "reward/component_errors": self.component_errors,
            "reward/turn_score_errors": self.turn_score_errors,
            "reward/injected_failures": self.injected_failures,
            "reward/injected_latency_mean": self.injected_latency_sum_s / max(1, self.injected_latency_count),
            "reward/defaulted": self.defaulted,
            "reward/judge_prompt_tokens": self.judge_prompt_tokens,
            "reward/judge_completion_tokens": self.judge_completion_tokens,
            "reward/model_calls": self.model_calls,
            "reward/rate_limited": self.rate_limited,
            "reward/throttle_wait_s": self.throttle_wait_s,
            "reward/model_not_found": self.model_not_found,
        }


class RewardLoop:
    """Scores samples through `fn` under the profile's timeout, retry and failure policy.

    Args:
        max_response_len: the rollout's max_new_tokens; with reward.overlong set, each scored sample of known
            length gets the soft overlong penalty once (rlrm/engine/rewards/overlong.py). None: never shaped.
        cache: a RewardCache in front of the attempts (rlrm/engine/rewards/cache.py); None: every sample is scored.
    """

    def __init__(
        self,
        fn: RewardFn,
        cfg: RewardConfig,
        seed: int = 0,
        counters: Callable[[], dict] | None = None,
        max_response_len: int | None = None,
        cache: RewardCache | None = None,
    ):
        self.fn, self.cfg = fn, cfg
        self.cache = cache  # judgements kept by content (reward.cache): a hit skips the attempts
        self.counters = counters  # more per-step counters, e.g. the router's retries this loop never sees
        self.max_response_len = max_response_len if cfg.overlong.active else None
        self.name = getattr(fn, "__name__", type(fn).__name__)
        # One concurrency budget per worker; samples are spread over workers by index.
        self._workers = [asyncio.Semaphore(cfg.max_concurrency) for _ in range(cfg.num_workers)]
        self._jitter = random.Random(seed)
        # per SCORED_FOR tag: a mode that scores ahead of the trainer takes each step's own (rlrm/engine/rewards/tags.py)
        self._stats = PerTag(RewardStats)
        self.components = ComponentSpec(cfg.weights_of_components)  # names pinned by the profile or the first sample
        self.last_error: str | None = None  # of the last sample that failed after its retries (kept across steps)
        # hung attempts per tag too, handed out (take_hung) with the counters that count them (take_metrics)
        self._hung: PerTag[collections.deque[dict]] = PerTag(lambda: collections.deque(maxlen=HUNG_KEPT))
        self._hung_taken: collections.deque[dict] = collections.deque(maxlen=HUNG_KEPT)

    @property
    def stats(self) -> RewardStats:
        """The counters of the samples scored under the current task's SCORED_FOR tag, since they were taken."""
        return self._stats.now

    def stats_of(self, tags: Iterable[Hashable] | None = None) -> RewardStats:
        """The counters so far (not reset) of the samples scored under `tags` and untagged (None: every sample)."""
        return RewardStats.total(self._stats.peek(tags))

    async def score(self, sample: RewardSample) -> RewardResult | None:
        """The sample's reward, or None when it failed and its group is to be dropped."""
        start = time.perf_counter()  # from the request: a wait for one of the worker's reward.max_concurrency slots too
        async with self._workers[sample.index % len(self._workers)]:
            if self.cache is not None:
                outcome = await self.cache.through(sample, self._attempts)  # the score kept before shaping
            else:
                outcome = await self._attempts(sample)
            self.stats.samples += 1
            if isinstance(outcome, RewardResult):
                self.stats.latencies_s.append(time.perf_counter() - start)
                return self._shape(sample, outcome)
            return self._on_failure(sample, outcome)  # never shaped: a failure is not a score

    def _shape(self, sample: RewardSample, result: RewardResult) -> RewardResult:
        if self.max_response_len is None or sample.response_length is None:
            return result
        shape(result, sample.response_length, self.max_response_len, self.cfg.overlong)
        penalty = result.extra["overlong_penalty"]
        self.stats.overlong_shaped += 1
        self.stats.overlong_penalised += penalty < 0
        self.stats.overlong_penalty_sum += penalty
        return result

    async def score_all(
        self,
        samples: list[RewardSample],
        on_scored: Callable[[RewardSample, RewardResult | None, float, float], None] | None = None,
    ) -> list[RewardResult | None]:
        """Score samples concurrently; results keep their order.

        Args:
            on_scored: called as (sample, result, start_s, end_s) as each sample's scoring ends (sync mode
                records its `reward` trace spans with it).
        """

        async def one(sample: RewardSample) -> RewardResult | None:
            start = time.perf_counter()
            result = await self.score(sample)
            if on_scored is not None:
                on_scored(sample, result, start, time.perf_counter())
            return result

        return list(await asyncio.gather(*(one(s) for s in samples)))

    def take_metrics(self, tags: Iterable[Hashable] | None = None) -> dict[str, float]:
        """Counters since the last call (then reset).

        Args:
            tags: only the samples scored under these SCORED_FOR tags (and any untagged), e.g. the groups a step
                trains; None: every sample. `counters` (the router's) are not per sample: they come whole.
        """
        stats = RewardStats.total(self._stats.take(tags))
        for hung in self._hung.take(tags):  # the step's timeouts: take_hung() gives their records
            self._hung_taken.extend(hung)
        metrics = stats.metrics()
        g = self.cfg.genrm
        metrics["reward/cost"] = (
            stats.judge_prompt_tokens * g.price_per_mtok_input + stats.judge_completion_tokens * g.price_per_mtok_output
        ) / 1e6
        if self.max_response_len is not None:  # mean over the samples shaped; failed ones are not
            shaped = max(1, stats.overlong_shaped)
            metrics["reward/overlong_penalty"] = stats.overlong_penalty_sum / shaped
            metrics["reward/overlong_frac"] = stats.overlong_penalised / shaped
        if self.cache is not None:
            metrics.update(self.cache.take_metrics(tags))
            metrics["reward/cache_saved_cost"] = (
                metrics["reward/cache_saved_prompt_tokens"] * g.price_per_mtok_input
                + metrics["reward/cache_saved_completion_tokens"] * g.price_per_mtok_output
            ) / 1e6
        if self.counters is not None:
            metrics.update(self.counters())
        return metrics

    def take_hung(self, every: bool = False) -> list[dict]:
        """The attempts given up at reward.attempt_timeout_s (then cleared) of the samples whose counters the last
        `take_metrics` calls took, and of untagged samples, so a step writes the hangs its reward/timeouts count (one-step-off and fully-async
        score the next batch meanwhile: its hangs are the next step's); `every`: all of them (a run that stops).
        One dict each, with the sample (uid, index, prompt, response, data source, ground truth), the function, the
        attempt, how long it ran before it was given up (a custom function's worker is killed by then:
        rlrm/engine/rewards/worker_pool.py) and how long it waited for a worker before that.
        The trainer appends them to `<run>/hung_rewards.jsonl`."""
        for hung in self._hung.take(None if every else []):  # and those of untagged samples (sync mode's)
            self._hung_taken.extend(hung)
        taken = list(self._hung_taken)
        self._hung_taken.clear()
        return taken

    def check_budget(
        self, step: int, metrics: dict, dropped_groups: int = 0, of_samples: int | None = None, trained: bool = False
    ) -> None:
        """Stop step `step` before it trains when its failed share is over reward.max_failure_rate.

        Args:
            metrics: the step's reward/* counters (`take_metrics`, or `stats_of(...).metrics()` so far).
            dropped_groups: groups the step leaves out for a failed sample.
            of_samples: the step's whole sample count when `metrics` covers only the samples scored so far
                (pipeline): the failures so far over it never exceed the step's final share.
            trained: part of the step's update already ran (pipeline's later mini-batches).
        """
        row = {**metrics, "reward/dropped_groups": dropped_groups}
        if of_samples is not None:
            row["reward/samples"] = of_samples
        check_failure_budget(step, row, self.cfg, self.last_error, trained)

    async def _attempts(self, sample: RewardSample) -> RewardResult | CallError:
        cfg = self.cfg
        for attempt in range(cfg.max_retries + 1):
            counted = False  # the attempt's model calls: from its result or error, else from its ledger
            started = time.perf_counter()
            try:
                with ledger_scope() as ledger:  # outlives an attempt its timeout cuts off
                    raw = await within(self.fn(sample), cfg.attempt_timeout_s)
                counted = True
                result = self._check(raw, sample)
                self._count_tokens(result.extra)
                if "injected_latency_s" in result.extra:
                    self.stats.injected_latency_sum_s += float(result.extra["injected_latency_s"])
                    self.stats.injected_latency_count += 1
                return result
            except AttemptTimedOut as exc:
                error: CallError = RequestTimeout(
                    f"reward function {self.name}: no reward within reward.attempt_timeout_s={cfg.attempt_timeout_s:g} s"
                )
                self._hung.now.append(self._hung_record(sample, attempt, time.perf_counter() - started, exc.queued_s))
            except (asyncio.CancelledError, FunctionCancelled) as exc:  # FunctionCancelled: 3.10's (deadline.py)
                if isinstance(exc, asyncio.CancelledError) and being_cancelled():
                    raise  # this sample's own task: the run stops (Ctrl-C, a closing mode)
                # raised by something the function awaited (a task of its own, cancelled): a failure of this sample,
                # where it used to escape the loop (the overlapping modes waited forever; sync read it as Ctrl-C)
                error = CallError(f"reward function {self.name} raised CancelledError: {exc}".rstrip(": "))
            except (FunctionExited, SystemExit) as exc:  # sys.exit() in a user's function: a failed sample, named
                code = exc.code
                error = CallError(f"reward function {self.name} called sys.exit({code!r}); return a score instead")
            except CallError as exc:
                error = exc
                counted = "model_calls" in exc.extra or not ledger.as_extra()
                if counted:
                    self._count_tokens(exc.extra)
            except Exception as exc:  # a user's function that raised: not retried, named in the message
                error = CallError(
                    f"reward function {self.name} raised {type(exc).__name__}: {exc} (sample {sample.uid})"
                )
            if not counted:
                self._count_tokens(ledger.as_extra())
            self._count(error)
            if not error.retryable or attempt == cfg.max_retries:
                return error
            self.stats.retries += 1
            delay = min(cfg.backoff_max_s, cfg.backoff_s * 2**attempt)
            await asyncio.sleep(delay * (0.5 + 0.5 * self._jitter.random()))  # half to all of it: spread, never longer
        raise AssertionError("unreachable")

    def _hung_record(self, sample: RewardSample, attempt: int, elapsed_s: float, queued_s: float) -> dict:
        return {
            "uid": sample.uid,
            "index": sample.index,
            "function": self.name,
            "attempt": attempt + 1,
            "attempt_timeout_s": self.cfg.attempt_timeout_s,
            "elapsed_s": round(elapsed_s - queued_s, 3),  # on its deadline's clock, until it was given up
            "queued_s": round(queued_s, 3),  # waiting for a worker process before that (not on the clock)
            "prompt": sample.prompt,
            "response": sample.solution_str,
            "data_source": sample.data_source,
            "ground_truth": sample.ground_truth,
        }

    def _check(self, raw, sample: RewardSample) -> RewardResult:
        if isinstance(raw, RewardResult):
            result = raw
            components = self.components.read(result.extra, self.name, sample.uid)
        elif isinstance(raw, dict) and ("score" in raw or COMPONENTS_KEY in raw):
            components = self.components.read(raw, self.name, sample.uid)
            if "score" in raw:
                score = raw["score"]
            elif components is not None:  # components without a score: their weighted sum
                score = self.components.weighted_sum(components)
            else:
                raise BadComponents(
                    f"reward function {self.name} gave an empty {COMPONENTS_KEY} and no 'score' for sample "
                    f"{sample.uid}; return a score or the components"
                )
            result = RewardResult(score=score, extra={k: v for k, v in raw.items() if k != "score"})
            # the function's own numbers: not what rlrm added to its dict (call counts, the injected latency)
            added = (*LEDGER_KEYS, "injected_latency_s")
            reported = reported_names(raw, ("score", COMPONENTS_KEY, TURN_SCORES_KEY, REPORTED_KEY, *added))
            if reported:
                result.extra[REPORTED_KEY] = reported
        elif is_score(raw):  # int, float, a numpy scalar, a 0-d tensor: float() reads it below, as verl's tensor would
            result, components = RewardResult(score=raw), self.components.read({}, self.name, sample.uid)
        else:
            raise CallError(
                f"reward function {self.name} returned {type(raw).__name__} for sample {sample.uid}; "
                "return a float or a dict with 'score'"
            )
        if components is not None:
            result.extra[COMPONENTS_KEY] = components  # checked floats, what the step and samples.jsonl read
        turn_scores = read_turn_scores(result.extra, sample, self.name, self.cfg.tool_rewards_as_turn_scores)
        if turn_scores is not None:
            result.extra[TURN_SCORES_KEY] = turn_scores  # checked floats: the step puts them on the turns' last tokens
        try:
            if not is_score(result.score):  # refused in a dict as when returned bare
                raise TypeError
            result.score = float(result.score)
        except (TypeError, ValueError):
            raise CallError(
                f"reward function {self.name} gave a non-numeric score {result.score!r} for sample {sample.uid}"
            ) from None
        if not math.isfinite(result.score):
            raise NonFiniteScore(f"reward function {self.name} gave {result.score} for sample {sample.uid}")
        total = result.score + sum(turn_scores or ())  # the return the step puts on the response's tokens
        if abs(result.score) > FLOAT32_MAX or not fits_float32(total):  # inf in training's float32 tensors
            raise NonFiniteScore(
                f"reward function {self.name} gave {result.score:g} (with its turn scores, {total:g}) for sample "
                f"{sample.uid}, beyond float32's range (+-{FLOAT32_MAX:.3g}) that training computes in"
            )
        return result

    def _count_tokens(self, extra: dict) -> None:
        self.stats.judge_prompt_tokens += int(extra.get("judge_prompt_tokens", 0))
        self.stats.judge_completion_tokens += int(extra.get("judge_completion_tokens", 0))
        self.stats.model_calls += int(extra.get("model_calls", 0))
        self.stats.rate_limited += int(extra.get("rate_limited", 0))
        self.stats.throttle_wait_s += float(extra.get("throttle_wait_s", 0.0))
        self.stats.model_not_found += int(extra.get("model_not_found", 0))

    def _count(self, error: CallError) -> None:
        if error.kind == "timeout":
            self.stats.timeouts += 1
        elif error.kind == "unparsed":
            self.stats.unparsed += 1
        elif error.kind == "nonfinite":
            self.stats.nonfinite += 1
        elif error.kind == "components":
            self.stats.component_errors += 1
        elif error.kind == "turn_scores":
            self.stats.turn_score_errors += 1
        elif error.kind == "injected":
            self.stats.injected_failures += 1

    def _on_failure(self, sample: RewardSample, error: CallError) -> RewardResult | None:
        self.stats.failures += 1
        self.last_error = str(error)
        policy = self.cfg.on_failure
        if policy == "fail":
            tried = f"after {self.cfg.max_retries} retries" if error.retryable else "(not retried: a retry cannot help)"
            named = f"sample {sample.uid}" in str(error)  # the function's own error names its sample already
            raise RewardError(
                f"reward{'' if named else f' for sample {sample.uid}'} failed {tried}: {error}; "
                "set reward.on_failure=default or drop-group to go on"
            )
        if policy == "default":
            self.stats.defaulted += 1
            return RewardResult(self.cfg.default_score, {"reward_failed": True, "reward_error": str(error)})
        self.stats.dropped_samples += 1
        return None
