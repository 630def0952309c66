"""GenRM client: a judge model asked through `/v1/chat/completions`, its verdict parsed and normalised.

The judge's prompt is `reward.genrm.template` with {question}, {response}, {reference} and {turns} filled in. The
judge's server (the embedded one, vLLM, SGLang) renders those messages with the judge's chat template and tokenizes
the result, so a special token's *text* in a field (`<|im_end|>`, `</s>`, `[INST]`, a policy's answer or a tool's
reply that writes one) would become the control token and could close the judge's user turn and forge an
assistant turn that gives the verdict. Every filled-in field is therefore neutralised (`neutralise`): a zero-width
space (U+200B) is put after the first character of each special-token string, which no tokenizer then matches as
the token, while the judge still reads the same characters. The template's own text is left as written.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.base import RewardFn, RewardResult, RewardSample
from rlrm.engine.rewards.errors import UnparsedVerdict

_PATTERNS = {
    # `Score: 8`, and as chat models write it: `**Score:** 8`, `Score: **8**`, `Score：8` (a full-width colon)
    # on the same line, or the next: a bold `**Score:**` heading over a blank line and a list is no verdict
    "score": re.compile(r"Score[*_]*[ \t]*[:\uff1a][ \t]*[*_]*[ \t]*\n?[ \t]*[*_]*[ \t]*(-?\d+(?:\.\d+)?)"),
    "boxed": re.compile(r"\\boxed\{\s*(-?\d+(?:\.\d+)?)\s*\}"),
}
THINK_END = "</think>"


def final_answer(text: str) -> str | None:
    """The judge's answer after its reasoning: the text after the last `</think>` (Qwen3, QwQ and DeepSeek-R1 served
    without a reasoning parser put their reasoning in the answer, scores they weighed and dropped included); None
    while the `<think>` it opened with is still open (no answer of its own). A judge that only mentions `<think>`
    (in a reasoning policy's response it judges) is read whole."""
    if THINK_END in text:
        return text.rsplit(THINK_END, 1)[1]
    return None if text.lstrip().startswith("<think>") else text


def parse_verdict(text: str, style: str = "score", max_score: float = 10.0) -> float | None:
    """The last verdict in the judge's final answer (`final_answer`) divided by `max_score` and clipped to [0, 1];
    None when there is none."""
    answer = final_answer(text)
    matches = _PATTERNS[style].findall(answer) if answer is not None else []
    if not matches:
        return None
    return min(1.0, max(0.0, float(matches[-1]) / max_score))


# What breaks a special-token string: invisible, so the judge (and a reader) sees the same characters
BREAK = "\u200b"
# Special tokens of the common chat templates, for judges whose tokenizer rlrm does not read (a hub id, a hosted
# API): `<|...|>` (ChatML, Llama 3, Phi, GPT, Command R, Granite...) and DeepSeek's fullwidth ones by their shape,
# and the turn and sequence markers of Llama 2, Mistral and Gemma by name.
GENERIC_SPECIALS = (
    "<s>",
    "</s>",
    "<bos>",
    "<eos>",
    "<start_of_turn>",
    "<end_of_turn>",
    "[INST]",
    "[/INST]",
    "[SYSTEM_PROMPT]",
    "[/SYSTEM_PROMPT]",
    "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]",
    "[TOOL_CALLS]",
    "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]",
)
# <|im_end|>, and DeepSeek's with fullwidth bars (U+FF5C): <\uff5cend\u2581of\u2581sentence\uff5c>
_BAR_SHAPED = r"<[|\uff5c][^<>|\uff5c\s]{1,64}[|\uff5c]>"


@functools.lru_cache(maxsize=16)
def _specials_pattern(specials: tuple[str, ...]) -> re.Pattern:
    names = sorted({*GENERIC_SPECIALS, *specials}, key=len, reverse=True)  # the longest first
    return re.compile("|".join([_BAR_SHAPED, *(re.escape(n) for n in names)]))


def neutralise(text: str, specials: tuple[str, ...] = ()) -> str:
    """`text` with every special-token string broken by a zero-width space after its first character
    (`<|im_end|>` -> `<\\u200b|im_end|>`): the generic ones (`<|...|>`-shaped, `<s>`, `</s>`, `[INST]`...) and
    `specials` (the judge tokenizer's, `judge_special_tokens`). Text without them is returned as it is."""
    pattern = _specials_pattern(tuple(specials))
    while pattern.search(text):  # again: a string that overlapped a broken one may be whole
        text = pattern.sub(lambda m: m.group(0)[0] + BREAK + m.group(0)[1:], text)
    return text


@functools.lru_cache(maxsize=8)
def judge_special_tokens(model: str | None) -> tuple[str, ...]:
    """The special-token strings of the judge's tokenizer when `model` (reward.server.model) is a local folder that
    holds one, else () (a hub id, a hosted model, a `tiny:` name: `neutralise`'s generic set covers the tiny
    judge's `<|...|>` tokens). Never asks the hub. A tokenizer that does not load (a broken file, a package it
    needs missing) gives () too: the generic set still applies, and the judge itself says what is wrong with it."""
    if not model or not Path(model).is_dir():
        return ()
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model, local_files_only=True)
    except Exception:  # noqa: BLE001 - the tokenizers library raises plain Exception for a broken tokenizer.json
        return ()
    found = set(getattr(tokenizer, "all_special_tokens", ()) or ())
    found |= {t.content for t in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values() if t.special}
    return tuple(sorted(s for s in found if len(s) > 1 and s.strip() == s and BREAK not in s))


def judge_prompt(template: str, sample: RewardSample, specials: tuple[str, ...] = ()) -> str:
    """The judge's question for one sample: {question}, {response}, {reference} and {turns} filled in, each
    `neutralise`d (`specials`: the judge tokenizer's special tokens, beside the generic ones)."""
    question = sample.extra_info.get("question") or sample.prompt[-1]["content"]
    fields = {
        "question": question,
        "response": sample.solution_str,
        "reference": sample.ground_truth,
        "turns": render_turns(sample),
    }
    return template.format(**{k: neutralise(v, specials) if isinstance(v, str) else v for k, v in fields.items()})


def render_turns(sample: RewardSample) -> str:
    """The trajectory as the judge reads it in {turns}: one line per assistant turn and per tool reply.

        assistant (turn 1): Sum: <call>calculator 12+34</call>
        tool calculator (12+34): 46
        assistant (turn 2): #### 46

    A single-turn sample is one assistant turn holding the whole response. In a trajectory each turn's line breaks
    are written `\\n`, and the other characters `str.splitlines` breaks at (U+2028, U+2029, \\x0b, \\x0c,
    \\x1c-\\x1e, \\x85) as their escapes (`\\u2028`), so no text of a turn (the policy's or a tool's) can forge
    the line of another turn.
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


# every line break str.splitlines() honours: \r\n, \r and \n as `\n`, the others as their escapes
_LINE_BREAKS = re.compile("\r\n|[\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def _escaped_break(match: re.Match) -> str:
    c = match.group(0)
    return "\\n" if c in ("\r\n", "\r", "\n") else c.encode("unicode_escape").decode("ascii")


def _one_line(text) -> str:
    """`text` on one line: its line breaks as the two characters `\\n`, the rarer ones as their escapes
    (`\\u2028`, `\\x0b`); backslashes as they are (LaTeX reads on)."""
    return _LINE_BREAKS.sub(_escaped_break, str(text))


def judge_messages(template: str, sample: RewardSample, specials: tuple[str, ...] = ()) -> list[dict]:
    """The conversation sent to the judge: one user turn holding `judge_prompt`."""
    return [{"role": "user", "content": judge_prompt(template, sample, specials)}]


def cut_off(answer: dict) -> bool:
    """The judge stopped at max_tokens (finish_reason "length"): the last verdict in its text may be one it was
    quoting from the response it judges (an answer that ends in "Score: 10"), so none of it is taken."""
    return answer["choices"][0].get("finish_reason") == "length"


def cut_off_line(max_tokens: int) -> str:
    return f"judge stopped at reward.genrm.max_tokens={max_tokens} before it finished; raise max_tokens"


def make_genrm_reward(cfg: RewardConfig, balancer) -> RewardFn:
    """A reward function that asks a served judge."""
    g = cfg.genrm
    specials = judge_special_tokens(cfg.server.model)  # a local judge's own; generic ones for the others

    async def genrm_reward(sample: RewardSample) -> RewardResult:
        body = {
            "model": cfg.server.request_model,
            "messages": judge_messages(g.template, sample, specials),
            "max_tokens": g.max_tokens,
            "temperature": g.temperature,
        }
        out = await balancer.post("/v1/chat/completions", body, cfg.server.request_timeout_s)
        text = (out["choices"][0].get("message") or {}).get("content") or ""  # an answer without content: no verdict
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
