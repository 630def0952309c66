"""Named checks of what a reward received: the mistakes that quietly change scores.

    findings = run_lints(records, LintContext(kind="disrm", policy_tokenizer=..., rm_tokenizer=...))

Each lint is a function of the inspected records (see `details.py`) and returns findings
`{"lint", "severity", "samples", "message"}`. `warning`s fail `rlrm inspect reward --strict`;
`info` only says something worth knowing.

| lint | what it catches |
|---|---|
| eos-in-response | the response still holds the EOS text: the reward scores a turn end the policy never wrote as text |
| special-tokens-in-response | the response holds other special tokens (a turn header, a pad token) |
| template-think-prefill | the reward model's rendering adds a `<think>` the conversation does not hold |
| template-system-prompt | the reward model's template adds a system prompt that the policy's prompt did not have |
| truncated | a DisRM conversation cut to reward.disrm.max_length, or a verdict cut at reward.genrm.max_tokens |
| tokenizer-differs (info) | the reward model's tokenizer or chat template is not the policy's (fine, but token counts differ) |
| judge-template-missing-response | the judge prompt as sent does not hold the whole response (e.g. `{response:.2000}`) |
| judge-request-failed | judge requests that got no verdict at all (e.g. a prompt over the judge's context), with the first error |
| verdict-unparsed | judge verdicts that the parser cannot read, among the inspected samples |
| reward-failed | samples the reward failed to score that no judge lint names (a custom function that raised, exited or gave a non-numeric or non-finite score; a DisRM request that failed), with the first error |
| score-beyond-float32 | a score, reward component or turn score that is NaN, inf or beyond float32's range (1e39: finite in Python, inf in the float32 tensors training computes with) |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlrm.engine.rewards.components import COMPONENTS_KEY
from rlrm.engine.rewards.genrm import BREAK
from rlrm.engine.rewards.turn_scores import TURN_SCORES_KEY
from rlrm.float32 import FLOAT32_MAX, fits_float32

THINK = "<think>"
_PROBE = "rlrm-probe-7f3a"


@dataclass
class LintContext:
    kind: str  # rule | disrm | genrm (composite: its model kind)
    policy_tokenizer: Any = None  # a transformers tokenizer, or None
    rm_tokenizer: Any = None  # the DisRM's, or the judge's


def special_strings(tokenizer) -> set[str]:
    """The text of every special token a tokenizer knows (EOS, pad, turn markers, ...)."""
    if tokenizer is None:
        return set()
    found = set(tokenizer.all_special_tokens)
    found.update(t.content for t in tokenizer.added_tokens_decoder.values() if t.special)
    return {s for s in found if s}


def _finding(lint: str, severity: str, samples: list[int], message: str) -> list[dict]:
    return (
        [{"lint": lint, "severity": severity, "samples": samples, "message": message}]
        if samples or severity == "info"
        else []
    )


def eos_in_response(records: list[dict], ctx: LintContext) -> list[dict]:
    eos = {t.eos_token for t in (ctx.policy_tokenizer, ctx.rm_tokenizer) if t is not None and t.eos_token}
    hits = [r["index"] for r in records if any(e in r["response"] for e in eos)]
    return _finding(
        "eos-in-response",
        "warning",
        hits,
        f"the response holds the EOS text ({', '.join(sorted(eos))}); "
        "decode responses with skip_special_tokens=True, as the trainer does",
    )


def special_tokens_in_response(records: list[dict], ctx: LintContext) -> list[dict]:
    eos = {t.eos_token for t in (ctx.policy_tokenizer, ctx.rm_tokenizer) if t is not None}
    specials = (special_strings(ctx.policy_tokenizer) | special_strings(ctx.rm_tokenizer)) - eos
    found: dict[int, set[str]] = {}
    for r in records:
        seen = {s for s in specials if s in r["response"]}
        if seen:
            found[r["index"]] = seen
    tokens = sorted(set().union(*found.values())) if found else []
    return _finding(
        "special-tokens-in-response",
        "warning",
        sorted(found),
        f"the response holds special tokens {', '.join(tokens)}: a DisRM or a custom reward reads them as structure, "
        "not text (a GenRM judge gets them broken by a zero-width space)",
    )


def template_think_prefill(records: list[dict], ctx: LintContext) -> list[dict]:
    hits = []
    for r in records:
        rendered = r.get("rendered_text") or r.get("judge_prompt_text")
        if rendered is None:
            continue
        if r.get("judge_messages") is not None:  # the judge's messages hold the response already
            given = sum(m["content"].count(THINK) for m in r["judge_messages"])
        else:  # a DisRM renders the prompt and the response
            given = r["response"].count(THINK) + sum(m["content"].count(THINK) for m in r["prompt"])
        if rendered.count(THINK) > given:
            hits.append(r["index"])
    where = "the judge prompt" if ctx.kind == "genrm" else "the DisRM's rendering of the conversation"
    return _finding(
        "template-think-prefill",
        "warning",
        hits,
        f"the reward model's chat template adds {THINK} to {where}: scores depend on a prefill the policy never wrote",
    )


def injected_system_prompt(tokenizer, messages: list[dict]) -> str | None:
    """The system prompt `tokenizer`'s template adds to `messages` (which hold none), or None."""
    if any(m["role"] == "system" for m in messages):
        return None
    plain = tokenizer.apply_chat_template(messages, tokenize=False)
    with_system = tokenizer.apply_chat_template([{"role": "system", "content": _PROBE}, *messages], tokenize=False)
    at = with_system.find(_PROBE)
    if at <= 0:
        return None
    header, after = with_system[:at], with_system[at + len(_PROBE) :]
    start = plain.find(header)
    if start < 0:
        return None
    rest = plain[start + len(header) :]
    end = rest.find(after[:8]) if after[:8] else -1
    text = rest[:end] if end > 0 else ""
    return text.strip() or None


def template_system_prompt(records: list[dict], ctx: LintContext) -> list[dict]:
    if ctx.kind != "disrm" or ctx.rm_tokenizer is None:
        return []  # a judge's conversation is its own: only a re-rendered policy conversation matters here
    hits, texts = [], set()
    for r in records:
        injected = injected_system_prompt(ctx.rm_tokenizer, r["prompt"])
        if injected is None:
            continue
        seen = ""
        if ctx.policy_tokenizer is not None:
            seen = ctx.policy_tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False)
        if injected not in seen:
            hits.append(r["index"])
            texts.add(injected)
    shown = "; ".join(repr(t[:60]) for t in sorted(texts))
    return _finding(
        "template-system-prompt",
        "warning",
        hits,
        f"the reward model's chat template adds a system prompt the policy never saw ({shown})",
    )


def truncated(records: list[dict], ctx: LintContext) -> list[dict]:
    cut = [r["index"] for r in records if r.get("truncation")]
    stopped = [r["index"] for r in records if r.get("finish_reason") == "length"]
    out = []
    if cut:
        removed = max(r["truncation"]["tokens_removed"] for r in records if r.get("truncation"))
        out += _finding(
            "truncated",
            "warning",
            cut,
            f"conversations longer than reward.disrm.max_length lost their start "
            f"(up to {removed} tokens); raise reward.disrm.max_length",
        )
    if stopped:
        out += _finding(
            "truncated", "warning", stopped, "the judge's verdict was cut at reward.genrm.max_tokens; raise it"
        )
    return out


def tokenizer_differs(records: list[dict], ctx: LintContext) -> list[dict]:
    a, b = ctx.policy_tokenizer, ctx.rm_tokenizer
    if a is None or b is None:
        return []
    parts = []
    if a.get_vocab() != b.get_vocab():
        parts.append(f"vocabularies differ ({len(a)} vs {len(b)} tokens)")
    if (a.chat_template or "") != (b.chat_template or ""):
        parts.append("chat templates differ")
    if not parts:
        return []
    return _finding(
        "tokenizer-differs",
        "info",
        [],
        f"the reward model's tokenizer is not the policy's: {', '.join(parts)}; "
        "the reward sees the response re-tokenized (lengths and truncation are in its tokens)",
    )


def judge_template_missing_response(records: list[dict], ctx: LintContext) -> list[dict]:
    hits = [
        r["index"]
        for r in records
        if r.get("judge_messages") is not None
        and r["response"].strip()
        # the judge's fields have special-token strings broken by a zero-width space (genrm.py `neutralise`); one
        # the response holds itself (web text) is taken out of both sides
        and not any(r["response"].replace(BREAK, "") in m["content"].replace(BREAK, "") for m in r["judge_messages"])
    ]
    return _finding(
        "judge-template-missing-response",
        "warning",
        hits,
        "the judge prompt as sent does not hold the whole response: the template cuts or converts it "
        "({response:.N}, {response!r}) or escapes it ({{response}}); the judge may not see the final answer",
    )


def judge_request_failed(records: list[dict], ctx: LintContext) -> list[dict]:
    failed = [
        r
        for r in records
        if "parse_error" in r and r.get("verdict") is None and r["parse_error"] and not r.get("gated")  # not asked
    ]
    first = failed[0]["parse_error"] if failed else ""
    return _finding(
        "judge-request-failed",
        "warning",
        [r["index"] for r in failed],
        f"{len(failed)} judge request(s) got no verdict at all (not a parsing problem); the first: {first}"[:600],
    )


def verdict_unparsed(records: list[dict], ctx: LintContext) -> list[dict]:
    # a request the judge refused (a prompt over its context) has no verdict to parse: judge-request-failed says it
    judged = [r for r in records if "parse_error" in r and r.get("verdict") is not None]
    hits = [r["index"] for r in judged if r["parse_error"]]
    return _finding(
        "verdict-unparsed",
        "warning",
        hits,
        f"{len(hits)} of the first {len(judged)} verdicts did not parse "
        "(each would be a failed reward in training); check reward.genrm.verdict and max_tokens",
    )


def _judge_failure(record: dict) -> bool:
    """A failed sample whose judge exchange judge-request-failed or verdict-unparsed already names."""
    return "parse_error" in record and bool(record["parse_error"])


def reward_failed(records: list[dict], ctx: LintContext) -> list[dict]:
    failed = [r for r in records if r.get("error") is not None and not _judge_failure(r)]
    first = failed[0]["error"] if failed else ""
    return _finding(
        "reward-failed",
        "warning",
        [r["index"] for r in failed],
        f"{len(failed)} of {len(records)} samples failed to score (in training each is a failed reward, handled as "
        f"reward.on_failure says); the first: {first}"[:600],
    )


def _beyond_float32(value) -> bool:
    return isinstance(value, (int, float)) and not fits_float32(value)


def score_beyond_float32(records: list[dict], ctx: LintContext) -> list[dict]:
    hits, seen = [], []
    for r in records:
        extra = r.get("extra") or {}
        values = [("score", r.get("score"))]
        values += [(f"component {k}", v) for k, v in (extra.get(COMPONENTS_KEY) or {}).items()]
        values += [(f"turn score {i}", v) for i, v in enumerate(extra.get(TURN_SCORES_KEY) or [])]
        bad = [f"{name} {value:g}" for name, value in values if _beyond_float32(value)]
        if bad:
            hits.append(r["index"])
            seen += bad
    return _finding(
        "score-beyond-float32",
        "warning",
        hits,
        f"{', '.join(seen[:3])}: not finite in the float32 tensors training computes with (+-{FLOAT32_MAX:.3g})",
    )


LINTS = (
    eos_in_response,
    special_tokens_in_response,
    template_think_prefill,
    template_system_prompt,
    truncated,
    tokenizer_differs,
    judge_template_missing_response,
    judge_request_failed,
    verdict_unparsed,
    reward_failed,
    score_beyond_float32,
)
LINT_NAMES = (
    "eos-in-response",
    "special-tokens-in-response",
    "template-think-prefill",
    "template-system-prompt",
    "truncated",
    "tokenizer-differs",
    "judge-template-missing-response",
    "judge-request-failed",
    "verdict-unparsed",
    "reward-failed",
    "score-beyond-float32",
)


def run_lints(records: list[dict], ctx: LintContext) -> list[dict]:
    """Every finding of every lint, in the order of LINTS."""
    return [f for lint in LINTS for f in lint(records, ctx)]
