"""Per-sample detail of what a reward received and returned, one function per reward kind.

Each takes the sample, the reward loop's result and the recorded exchange with the server (see
`recorder.py`) and returns a plain dict (what `--json` prints):

- DisRM: the conversation rendered with the reward model's chat template (special tokens shown as
  text), its token count, what truncation removed (side and tokens), the token whose logit is the
  score, and the raw float32 score the server returned.
- GenRM: the judge conversation as sent and as the judge's template renders it, the raw verdict, the
  parsed score or why it did not parse, the finish reason and token usage.
- Rule: the answer the rule (`reward.rule`) extracts and the score it gives.
"""

from __future__ import annotations

import numpy as np

from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.answers import check_answer, rule_score
from rlrm.engine.rewards.base import RewardResult, RewardSample
from rlrm.engine.rewards.disrm import render_conversation
from rlrm.engine.rewards.genrm import THINK_END, cut_off_line, final_answer, parse_verdict, render_turns
from rlrm.engine.rewards.reported import REPORTED_KEY
from rlrm.launch.fleet.backends import backend_for

VERDICT_FORMS = {"score": "'Score: N'", "boxed": "'\\boxed{N}'"}


def common(sample: RewardSample, result: RewardResult | None) -> dict:
    """What every kind shows: the sample as the reward got it, the loop's score or its error."""
    extra = result.extra if result is not None else {}
    failed = result is None or bool(extra.get("reward_failed"))
    turns = sample.extra_info.get("turns")
    trajectory = {"turns": render_turns(sample), "num_turns": sample.extra_info.get("num_turns")} if turns else {}
    return {
        **trajectory,  # an agent trajectory, as {turns} shows it to a judge
        "index": sample.index,
        "uid": sample.uid,
        "prompt": sample.prompt,
        "response": sample.solution_str,
        "ground_truth": sample.ground_truth,
        "score": None if failed or result is None else float(result.score),
        # what the function returned beside its score (which keys metrics average is training's, not shown here)
        "extra": {k: v for k, v in extra.items() if k not in ("reward_failed", "reward_error", REPORTED_KEY)},
        "error": (extra.get("reward_error") or "dropped by the reward loop") if failed else None,
    }


def rule_detail(sample: RewardSample, cfg: RewardConfig) -> dict:
    answer, correct = check_answer(cfg, sample.solution_str, sample.ground_truth)
    return {
        "rule": cfg.rule,
        **({"method": cfg.method} if cfg.rule == "gsm8k" else {}),
        "extracted_answer": answer,
        "rule_score": rule_score(cfg, answer, correct),
    }


def disrm_detail(sample: RewardSample, exchange: dict | None, tokenizer, cfg: RewardConfig) -> dict:
    full = render_conversation(tokenizer, sample.prompt, sample.solution_str)
    backend = backend_for(cfg.server.backend)  # each backend's /classify shape (vLLM's, SGLang's)
    request = exchange["request"] if exchange else {}
    sent = list(request.get("input", request.get("input_ids", []))) if exchange else full[-cfg.disrm.max_length :]
    removed = len(full) - len(sent)
    raw = None
    if exchange and "response" in exchange:
        raw = backend.classify_scores(exchange["response"])[-1]
    return {
        "rendered_text": tokenizer.decode(sent, skip_special_tokens=False),
        "tokens": len(sent),
        "tokens_before_truncation": len(full),
        "max_length": cfg.disrm.max_length,
        "truncation": {
            "side": "left (the start is cut, the end kept)",
            "tokens_removed": removed,
            "removed_text": tokenizer.decode(full[:removed], skip_special_tokens=False),
        }
        if removed > 0
        else None,
        "score_token": {
            "id": sent[-1],
            "text": tokenizer.decode([sent[-1]], skip_special_tokens=False),
            "token": tokenizer.convert_ids_to_tokens(sent[-1]),
            "position": len(sent) - 1,
        }
        if sent
        else None,
        "raw_score_float32": None if raw is None else repr(float(np.float32(raw))),
        "server_error": exchange.get("error") if exchange else None,
    }


def genrm_detail(exchange: dict | None, tokenizer, cfg: RewardConfig, gated: bool = False) -> dict:
    """What the judge was sent and answered for one sample; `gated`: a composite gate's rule-wrong sample, for
    which the judge is not asked."""
    g = cfg.genrm
    if not exchange:
        return {
            "judge_messages": None,
            "judge_prompt_text": None,
            "verdict": None,
            "parsed_score": None,
            "parse_error": "not asked: gated by the rule" if gated else "no request reached the judge",
            "finish_reason": None,
            "usage": None,
            "max_tokens": g.max_tokens,
            "gated": gated,
        }
    messages = exchange["request"]["messages"]
    if tokenizer is not None:  # as the server renders it
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    else:  # a hosted judge's tokenizer is not on this machine: the messages as sent, one per line
        text = "\n".join(f"{m.get('role')}: {m.get('content')}" for m in messages)
    answer = exchange.get("response")
    if answer is None:
        verdict, finish, usage = None, None, None
        parsed, why = None, f"the judge request failed: {exchange.get('error')}"
    else:
        choice = answer["choices"][0]
        content = (choice.get("message") or {}).get("content")  # an answer without content: no verdict, as in training
        verdict, finish, usage = content or "", choice.get("finish_reason"), answer.get("usage")
        # cut at max_tokens: no verdict, as training scores it (its last one may quote the response)
        parsed = None if finish == "length" else parse_verdict(verdict, g.verdict, g.max_score)
        why = None
        if finish == "length":
            why = cut_off_line(g.max_tokens)
        elif parsed is None and final_answer(verdict) is None:
            why = "the judge's <think> never closed: no answer after its reasoning (raise reward.genrm.max_tokens?)"
        elif parsed is None:
            after = " after its last </think>" if THINK_END in verdict else ""
            why = f"no {VERDICT_FORMS[g.verdict]} in the verdict{after} (reward.genrm.verdict={g.verdict})"
    return {
        "judge_messages": messages,
        "judge_prompt_text": text,
        "verdict": verdict,
        "parsed_score": parsed,
        "parse_error": why,
        "finish_reason": finish,
        "max_tokens": g.max_tokens,
        "usage": usage,
    }
