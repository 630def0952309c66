"""What every scheduling mode sends out: seeded generation requests and the samples rewards see.

    sampling = sampling_params(profile)
    completions = await generate_groups(engine, prompt_ids, sampling, n, seed, step)
    results = await reward_loop.score_all(reward_samples(tokenizer, examples, completions, n))

The same request (step, prompt, sample) draws the same tokens in every mode, which is what makes
the modes comparable sample for sample.
"""

from __future__ import annotations

import asyncio
import time

from rlrm.engine.rewards.base import RewardSample
from rlrm.inference.base import SamplingParams

_SEED_MOD = 2**63 - 1


def sampling_params(profile, validation: bool = False) -> SamplingParams:
    """The profile's sampling settings (greedy-by-default ones at validation)."""
    r = profile.rollout
    if validation:
        return SamplingParams(temperature=r.val_temperature, top_p=1.0, top_k=-1, max_new_tokens=r.max_new_tokens)
    return SamplingParams(temperature=r.temperature, top_p=r.top_p, top_k=r.top_k, max_new_tokens=r.max_new_tokens)


def request_seed(seed: int, step: int, prompt_index: int, sample_index: int) -> int:
    """A per-request sampling seed: the same request draws the same tokens in every mode."""
    value = seed
    for part in (step, prompt_index, sample_index):
        value = (value * 1_000_003 + part + 1) % _SEED_MOD
    return value


async def generate_groups(
    engine, prompt_ids: list[list[int]], sampling, n: int, seed: int, step: int, timer=None
) -> list:
    """Send n seeded requests per prompt and wait for all of them (prompt-major order).

    With a `timer`, each request becomes a `generate` trace span.
    """
    from dataclasses import replace

    async def one(i: int, j: int, ids: list[int]):
        start = time.perf_counter()
        completion = await engine.generate(ids, replace(sampling, seed=request_seed(seed, step, i, j)))
        if timer is not None:
            timer.span("generate", "generate", start, time.perf_counter(), {"batch": step, "group": i})
        return completion

    return list(await asyncio.gather(*(one(i, j, ids) for i, ids in enumerate(prompt_ids) for j in range(n))))


def reward_span_args(result, **args) -> dict:
    """The args of a `reward` trace span: `args`, the latency `reward.inject` added to this result, the time it
    waited for `reward.limits` or a Retry-After, and whether the reward cache answered it, if any."""
    if result is not None and "injected_latency_s" in result.extra:
        args["injected_latency_s"] = result.extra["injected_latency_s"]
    if result is not None and result.extra.get("throttle_wait_s"):
        args["throttle_wait_s"] = result.extra["throttle_wait_s"]
    if result is not None and result.extra.get("reward_cached"):
        args["cached"] = True  # answered by reward.cache: no call was made
    return args


def model_call_spans(result, start: float, args: dict) -> list[tuple[str, float, float, dict]]:
    """The reward-model calls a sample's reward made (a custom function's, a judge's) as (name, begin, end, args),
    placed inside the sample's reward span that began at `start`."""
    calls = result.extra.get("model_requests", []) if result is not None else []
    spans = []
    for call in calls:
        begin = start + call["offset_s"]
        spans.append((call["call"], begin, begin + call["duration_s"], {**args, "status": call["status"]}))
    return spans


def reward_samples(tokenizer, examples: list, completions: list, n: int) -> list[RewardSample]:
    """What the reward functions see: decoded responses with their prompt's metadata."""
    texts = tokenizer.batch_decode([c.token_ids for c in completions], skip_special_tokens=True)
    return [_sample(examples[index // n], text, index, c) for index, (text, c) in enumerate(zip(texts, completions))]


def reward_sample(tokenizer, example, completion, index: int) -> RewardSample:
    """One sample as `reward_samples` makes it (index: its position in the step's batch)."""
    return _sample(example, tokenizer.decode(completion.token_ids, skip_special_tokens=True), index, completion)


def _sample(example, text: str, index: int, completion) -> RewardSample:
    # an agent trajectory adds verl's extra_info keys (num_turns, turns, tool_calls) to the example's
    agent = completion.meta.get("agent", {}).get("extra_info", {}) if completion.meta else {}
    return RewardSample(
        uid=example.uid,
        index=index,
        data_source=example.data_source,
        prompt=example.prompt,
        solution_str=text,
        ground_truth=example.ground_truth,
        extra_info={**example.extra_info, **agent} if agent else example.extra_info,
        response_length=len(completion.token_ids),
    )
