"""A FAPO-style reward (verl's FAPO recipe, reduced): the rule first, the judge only for rule-correct samples.

    reward:
      kind: custom
      custom: {path: examples/rewards/fapo_judge.py, name: compute_score}
      server: {model: tiny:judge}          # rlrm starts the judge's servers and hands this function their address

A wrong answer scores 0 by rule and costs no judge call. A right answer is shown to the judge through
`reward_router_address` (SGLang's native `/generate`, the prompt rendered with the judge's own chat template by
`reward_model_tokenizer`, as verl's FAPO does); when the judge calls it flawed (no "Score: 10"), the answer is a
flawed positive and loses FLAWED_PENALTY. `rlrm train --profile tiny-fapo` runs it; `reward/model_calls` counts
the judge calls made, and `judged` in each sample's extra info says which samples the rule spared.
"""

from __future__ import annotations

import re

import aiohttp

from rlrm.engine.rewards.gsm8k import compute_score as gsm8k_rule

FLAWED_PENALTY = 0.5  # what a right answer the judge calls flawed loses
MAX_JUDGE_TOKENS = 32
# The template the tiny judge was trained on (rlrm.engine.models.tiny_judge.JUDGE_TEMPLATE).
JUDGE_TEMPLATE = (
    "Is the answer to this problem correct?\nProblem: {question}\nAnswer: {response}\nReference answer: {reference}\n"
    "Compare the final answer with the reference, then end with 'Score: 10' if it is correct or 'Score: 0' if it is not."
)
_VERDICT = re.compile(r"Score:\s*(\d+)")


async def compute_score(
    data_source, solution_str, ground_truth, extra_info, reward_router_address=None, reward_model_tokenizer=None
):
    rule = gsm8k_rule(solution_str, ground_truth)  # strict: the last `#### N` is the reference
    if rule < 1.0 or reward_router_address is None:
        return {"score": rule, "rule": rule, "judged": False}
    prompt = JUDGE_TEMPLATE.format(
        question=extra_info.get("question", ""), response=solution_str, reference=ground_truth
    )
    text = reward_model_tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
    )
    ids = reward_model_tokenizer(text, add_special_tokens=False)["input_ids"]
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": MAX_JUDGE_TOKENS, "temperature": 0}}
    async with aiohttp.ClientSession() as session:
        async with session.post(f"http://{reward_router_address}/generate", json=body) as resp:
            resp.raise_for_status()  # a failed call raises: the reward loop retries it or applies on_failure
            verdict = _VERDICT.findall((await resp.json())["text"])
    flawed = not verdict or int(verdict[-1]) < 10
    return {"score": rule - FLAWED_PENALTY * flawed, "rule": rule, "judged": True, "flawed": flawed}
