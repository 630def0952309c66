"""GenRM client: a judge model asked through `/v1/chat/completions`, its verdict parsed and normalised."""

from __future__ import annotations

import re

from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.base import RewardFn, RewardResult, RewardSample
from rlrm.engine.rewards.errors import UnparsedVerdict

_PATTERNS = {
    "score": re.compile(r"Score:\s*(-?\d+(?:\.\d+)?)"),
    "boxed": re.compile(r"\\boxed\{\s*(-?\d+(?:\.\d+)?)\s*\}"),
}


def parse_verdict(text: str, style: str = "score", max_score: float = 10.0) -> float | None:
    """The last verdict in `text` divided by `max_score` and clipped to [0, 1]; None when there is none."""
    matches = _PATTERNS[style].findall(text)
    if not matches:
        return None
    return min(1.0, max(0.0, float(matches[-1]) / max_score))


def judge_prompt(template: str, sample: RewardSample) -> str:
    """The judge's question for one sample: {question}, {response}, {reference} and {turns} filled in."""
    question = sample.extra_info.get("question") or sample.prompt[-1]["content"]
    return template.format(
        question=question, response=sample.solution_str, reference=sample.ground_truth, turns=render_turns(sample)
    )


def render_turns(sample: RewardSample) -> str:
    """The trajectory as the judge reads it in {turns}: one line per assistant turn and per tool reply.

        assistant (turn 1): Sum: <call>calculator 12+34</call>
        tool calculator (12+34): 46
        assistant (turn 2): #### 46

    A single-turn sample is one assistant turn holding the whole response. In a trajectory each turn's line breaks
    are written `\\n`, so no text of a turn (the policy's or a tool's) can forge the line of another turn.
    """
    turns = sample.extra_info.get("turns")
    if not isinstance(turns, list) or not turns:
        return f"assistant (turn 1): {sample.solution_str}"
    lines, number = [], 0
    call: dict = {}
    for turn in turns:
        if turn.get("role") == "assistant":
            number += 1
            lines.append(f"assistant (turn {number}): {_one_line(turn.get('text', ''))}")
            call = turn.get("tool_call") or {}
        else:
            arguments = f" ({_one_line(call['arguments'])})" if call.get("arguments") else ""
            name = _one_line(turn.get("name") or "(malformed call)")
            lines.append(f"tool {name}{arguments}: {_one_line(turn.get('text', ''))}")
    return "\n".join(lines)


def _one_line(text) -> str:
    """`text` on one line: its line breaks as the two characters `\\n` (backslashes as they are: LaTeX reads on)."""
    return str(text).replace("\r\n", "\\n").replace("\r", "\\n").replace("\n", "\\n")


def judge_messages(template: str, sample: RewardSample) -> list[dict]:
    """The conversation sent to the judge: one user turn holding `judge_prompt`."""
    return [{"role": "user", "content": judge_prompt(template, sample)}]


def cut_off(answer: dict) -> bool:
    """The judge stopped at max_tokens (finish_reason "length"): the last verdict in its text may be one it was
    quoting from the response it judges (an answer that ends in "Score: 10"), so none of it is taken."""
    return answer["choices"][0].get("finish_reason") == "length"


def cut_off_line(max_tokens: int) -> str:
    return f"judge stopped at reward.genrm.max_tokens={max_tokens} before it finished; raise max_tokens"


def make_genrm_reward(cfg: RewardConfig, balancer) -> RewardFn:
    """A reward function that asks a served judge."""
    g = cfg.genrm

    async def genrm_reward(sample: RewardSample) -> RewardResult:
        body = {
            "model": cfg.server.request_model,
            "messages": judge_messages(g.template, sample),
            "max_tokens": g.max_tokens,
            "temperature": g.temperature,
        }
        out = await balancer.post("/v1/chat/completions", body, cfg.server.request_timeout_s)
        text = out["choices"][0]["message"]["content"] or ""
        usage = out.get("usage") or {}
        score = None if cut_off(out) else parse_verdict(text, g.verdict, g.max_score)
        tokens = {
            "judge_prompt_tokens": usage.get("prompt_tokens", 0),
            "judge_completion_tokens": usage.get("completion_tokens", 0),
        }
        if score is None:
            why = f" ({cut_off_line(g.max_tokens)})" if cut_off(out) else ""
            error = UnparsedVerdict(f"judge gave no verdict for sample {sample.uid}{why}: {text[-80:]!r}")
            error.extra = tokens  # the judge's tokens were spent all the same
            raise error
        return RewardResult(score, {"judge_verdict": text[-200:], **tokens})

    return genrm_reward
