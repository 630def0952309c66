"""sync mode: generate every sample, then score every sample, then train. Nothing overlaps.

The trainer waits through generation (`timing_s/gen`, lane gen_wait) and scoring (`timing_s/reward`,
lane reward_wait), as it does in every mode.
"""

from __future__ import annotations

from rlrm.engine.metrics.timing import StepTimer
from rlrm.engine.scheduling.base import RunParts
from rlrm.engine.scheduling.requests import (
    generate_groups,
    model_call_spans,
    reward_samples,
    reward_span_args,
    sampling_params,
)
from rlrm.engine.step import StepRecord


class SyncScheduler:
    def __init__(self, run: RunParts, start_step: int, resume: dict | None = None):
        self.run = run

    async def step(self, step: int, timer: StepTimer) -> StepRecord:
        run = self.run
        state = run.prompts.state_dict()
        try:
            return await self._step(step, timer)
        except BaseException:
            run.prompts.load_state_dict(state)  # the step never happened: replay its prompts on resume
            raise

    async def _step(self, step: int, timer: StepTimer) -> StepRecord:
        run, p = self.run, self.run.profile
        n = p.rollout.n
        prompts = run.prompts.take()
        # nothing overlaps in sync: the process's CPU time is the phase's own (on a GPU it says nothing of the work)
        timer.measure_cpu = run.grpo.settings.device == "cpu"
        with timer("gen", lane="gen_wait", cpu=True):
            completions = await generate_groups(
                run.engine, prompts.prompt_ids, sampling_params(p), n, p.trainer.seed, step, timer
            )
        samples = reward_samples(run.tokenizer, prompts.examples, completions, n)
        with timer("reward", lane="reward_wait"):
            results = await self._score(samples, step, timer)
        metrics = run.reward.loop.take_metrics()  # every reward of the step is in
        batch, rollout_metrics = run.grpo.prepare(completions, off_policy=False, timer=timer)
        scored = run.grpo.score(batch, results, timer)
        run.reward.loop.check_budget(step, metrics, scored.dropped_groups)  # before the update, not after
        metrics.update(rollout_metrics)
        metrics.update(run.grpo.train(scored.batch, timer))
        run.weights.publish(step, timer)
        scored_samples = list(zip(samples, results, completions))
        return StepRecord(step, [scored], completions, scored_samples, metrics, prompts.dropped)

    async def _score(self, samples: list, step: int, timer: StepTimer) -> list:
        reward = self.run.reward
        colocated = self.run.profile.reward.placement == "colocated"  # the reward model takes its turn on the device
        if colocated:
            with timer("reward_wake", lane="reward_wait"):
                await reward.wake()

        def traced(sample, result, start: float, end: float) -> None:
            args = reward_span_args(result, batch=step, sample=sample.index)
            timer.span("reward", "reward", start, end, args)
            for name, begin, finish, call_args in model_call_spans(result, start, args):
                timer.span("reward", name, begin, finish, call_args)

        results = await reward.loop.score_all(samples, on_scored=traced)
        if colocated:
            with timer("reward_sleep", lane="reward_wait"):
                await reward.sleep()
        return results

    def loader_state(self) -> dict:
        return self.run.prompts.state_dict()

    async def close(self) -> None:
        return None
