"""Rubric rewards (reward.kind=rubric): a judge asked K questions about one sample, one score per criterion.

    fn = make_rubric_reward(profile.reward, balancer)
    result = await fn(sample)
    result.extra["reward_components"]   # {"correct": 1.0, "shows_working": 0.0}: GDPO's components
    result.score                        # their weighted sum with the criteria's weights

Each criterion's prompt is the rubric's prefix (question, response, reference) filled in for the sample, then
the criterion's question: the K prompts of one sample differ only in their last part, so an engine with a
prefix cache (vLLM, SGLang) reads the sample once. The K requests go out together. A criterion whose verdict
the parser cannot read fails the whole sample (UnparsedVerdict, naming the criterion; not retryable, as for any
judge: its K calls are counted) and the loop applies reward.on_failure; a sample is never scored with a
criterion missing.
"""

from __future__ import annotations

import asyncio

from rlrm.config.reward import RewardConfig
from rlrm.config.rubric import RubricCriterion
from rlrm.engine.rewards.base import RewardFn, RewardResult, RewardSample
from rlrm.engine.rewards.components import COMPONENTS_KEY
from rlrm.engine.rewards.errors import UnparsedVerdict
from rlrm.engine.rewards.genrm import cut_off, cut_off_line, judge_prompt, judge_special_tokens, parse_verdict


def criterion_messages(
    prefix: str, criterion: RubricCriterion, sample: RewardSample, specials: tuple[str, ...] = ()
) -> list[dict]:
    """One criterion's conversation: the sample's filled-in prefix, then the criterion's question (not formatted);
    `specials`: the judge tokenizer's special tokens, broken in the sample's text as in a GenRM's prompt."""
    return [{"role": "user", "content": judge_prompt(prefix, sample, specials) + criterion.question}]


def weighted_sum(components: dict[str, float], weights: dict[str, float]) -> float:
    """sum_k weight_k * score_k over the rubric's criteria (every criterion must have its score)."""
    return sum(weights[name] * components[name] for name in weights)


def make_rubric_reward(cfg: RewardConfig, balancer) -> RewardFn:
    """A reward function that asks a served judge each of the rubric's criteria about every sample."""
    rubric, g = cfg.rubric, cfg.genrm
    specials = judge_special_tokens(cfg.server.model)  # a local judge's own; generic ones for the others

    async def ask(criterion: RubricCriterion, sample: RewardSample) -> tuple[float | None, str, dict]:
        body = {
            "model": cfg.server.request_model,
            "messages": criterion_messages(rubric.prefix, criterion, sample, specials),
            "max_tokens": g.max_tokens,
            "temperature": g.temperature,
        }
        out = await balancer.post("/v1/chat/completions", body, cfg.server.request_timeout_s)
        text = (out["choices"][0].get("message") or {}).get("content") or ""
        usage = out.get("usage") or {}
        tokens = {"prompt": usage.get("prompt_tokens", 0), "completion": usage.get("completion_tokens", 0)}
        if cut_off(out):  # a verdict in cut-off text may be the response's own
            return None, f"{text} [{cut_off_line(g.max_tokens)}]", tokens
        return parse_verdict(text, criterion.verdict, criterion.max_score), text, tokens

    async def rubric_reward(sample: RewardSample) -> RewardResult:
        answers = await asyncio.gather(*(ask(c, sample) for c in rubric.criteria))
        tokens = {
            "judge_prompt_tokens": sum(a[2]["prompt"] for a in answers),
            "judge_completion_tokens": sum(a[2]["completion"] for a in answers),
        }
        unparsed = [(c, text) for c, (score, text, _) in zip(rubric.criteria, answers) if score is None]
        if unparsed:
            criterion, text = unparsed[0]
            names = ", ".join(c.name for c, _ in unparsed)
            error = UnparsedVerdict(
                f"judge gave no {criterion.verdict} verdict for rubric criterion {names} of sample {sample.uid}: "
                f"{text[-80:]!r}"
            )
            error.extra = tokens  # the judge's tokens were spent all the same
            raise error
        # every verdict parsed here (an unparsed one raised above)
        components = {c.name: float(score) for c, (score, _, _) in zip(rubric.criteria, answers) if score is not None}
        verdicts = {c.name: text[-200:] for c, (_, text, _) in zip(rubric.criteria, answers)}
        score = weighted_sum(components, rubric.weights)
        return RewardResult(score, {COMPONENTS_KEY: components, "judge_verdicts": verdicts, **tokens})

    return rubric_reward
