"""The tiny GenRM judge recipe: a causal LM that reads a judge prompt and answers with a verdict.

    metrics = build_judge(dest, seed, log, policy_dir)              # minutes, one thread (docs/benchmarks.md)
    build_judge(dest, seed, log, policy_dir, JudgeRecipe.smoke())   # seconds: for tests

The judge is a copy of the warm-started tiny policy fine-tuned (loss on the answer only) to read
`JUDGE_TEMPLATE` (in the chat format, as the GenRM client sends it) and answer in two lines: first
its working, then the verdict: the digits of the response's final answer paired with the
reference's, each pair checked, e.g. "2-1 wrong 0-9 wrong\\nScore: 0" (20 against 19) or
"1-1 correct 9-9 correct\\nScore: 10". The tiny-genrm profile uses this template,
`verdict: score` and `max_score: 10`.

Why this shape (measured on 2 cores; the DisRM's measurements are in tiny_disrm.py):
- A judge that must give the verdict at once stays at AUC ~0.5: the comparison has to happen in
  the verdict token's single forward pass, which is too deep for 2 layers. Writing the working
  out first turns it into copying (easy) plus a comparison of two adjacent numbers.
- Without the reference, the working would be the arithmetic itself, which the tiny models do
  badly (the policy's own likelihood separates right from consistently-wrong sums at AUC ~0.66).
  With the reference (as verifier-style judges get it) the judge only copies the response's
  final answer and the reference, and catches consistent arithmetic errors as well.
- Each digit pair checked in its own token ("2-1 wrong"), so the verdict only looks for a
  " wrong": at 800 steps, seed 1, held-out AUC 0.965 -> 0.998 and verdict accuracy 0.927 -> 0.992
  against pairs alone ("2-1 0-9"). 400 steps were too few for either (verdict accuracy
  0.87 / 0.76 and 0.78 / 0.82, seeds 0 / 1); 600 gave 0.97 / 0.955; 800 gave AUC 0.994 / 0.998
  and verdict accuracy 0.988 / 0.992 (recipe 2: two build threads).
- Recipe 3 builds on one thread (sft.BUILD_THREADS) and the tokenizer holds the judge's
  instructions as whole words (prompts ~100 tokens instead of ~165). Seed 0 at 800 steps:
  AUC 0.990, verdict accuracy 0.976; at 1000 (the recipe): AUC 0.997, verdict accuracy 0.993.
- Recipe 5 adds answers whose width differs from the reference's, which the working pads with zeros
  ("#### 1" against 11: "0-1 wrong 1-1 correct"): with 4000 adversarial answers and 1200 steps, seed 0,
  AUC 0.9995, verdict accuracy 0.998, held-out adversarial accuracy 0.984 (recipe 4: 0.999, 0.997, and
  on one shared set of adversarial answers 0.963 against recipe 5's 0.990; docs/benchmarks.md).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from rlrm.engine.models.judge_negatives import adversarial_response
from rlrm.engine.models.sft import BUILD_THREADS, chat_prompt, fine_tune, fixed_threads, generate, save_build
from rlrm.engine.models.tiny_pairs import (
    Labelled,
    auc_report,
    heldout_pairs,
    reward_problems,
    right_response,
    sample_policy,
    wrong_response,
)
from rlrm.engine.rewards import genrm
from rlrm.engine.rewards.base import RewardSample
from rlrm.engine.rewards.gsm8k import extract_solution

JUDGE_TEMPLATE = (
    "Is the answer to this problem correct?\n"
    "Problem: {question}\n"
    "Answer: {response}\n"
    "Reference answer: {reference}\n"
    "Compare the final answer with the reference, then end with 'Score: 10' if it is correct or 'Score: 0' if it is not."
)
# 3: adversarial answers in the training data (judge_negatives.py): master keys 3-17% -> 0% in `rlrm audit reward`
# 5: answers of another width than the reference's ("#### 1" against 11) and `#### N` on several lines, which
#    the recipe-4 judge misread (`rlrm train --profile tiny-genrm --seed 4` found them; judge_negatives.py)
JUDGE_RECIPE_VERSION = 5  # (3 is the shared recipe 3's judge, without adversarial answers)
VERDICT = "score"  # the GenRM client's verdict style for this judge
MAX_SCORE = 10.0  # "Score: 10" means correct; verdicts are divided by it
MAX_NEW_TOKENS = 24  # the answer is ~16 tokens for two-digit numbers (tiny-genrm allows 32)
EVAL_BATCH = 64


@dataclass(frozen=True)
class JudgeRecipe:
    """The knobs of the build; the defaults are the recipe `rlrm models prepare` uses."""

    num_train: int = 6000
    num_test: int = 256  # held-out problems of each size (up to 20 and up to 10)
    policy_problems: int = 300  # training problems the policy answers: its odd formats get judged too
    samples_per_problem: int = 4
    adversarial: int = 4000  # master keys, injections, other widths... (judge_negatives.py)
    steps: int = 1200  # recipe 4: 1000 (verdict accuracy 0.976 after 800, 0.993 after 1000; module docstring)
    batch: int = 32
    lr: float = 1e-3
    warmup_steps: int = 20

    @classmethod
    def smoke(cls) -> "JudgeRecipe":
        """A few steps on a few problems: the same code path in seconds (determinism tests)."""
        return replace(cls(), num_train=64, num_test=8, policy_problems=4, adversarial=16, steps=3, batch=4)


def parse_verdict(text: str) -> float | None:
    """The judge's verdict as the GenRM client reads it: the last 'Score: N' / MAX_SCORE, or None."""
    return genrm.parse_verdict(text, VERDICT, MAX_SCORE)


def judge_answer(response: str, reference: str) -> str:
    """What the judge is taught to answer: its working (final answer vs reference), then the verdict."""
    final = extract_solution(response, "strict")
    if final is None:
        return "none\nScore: 0"
    # Digit pairs, zero-padded to a common width ("20" vs "19" -> "2-1 ... 0-9 ..."), each followed
    # by its own check: the check compares two tokens a fixed distance back, and the verdict then
    # only has to look for a " wrong" (numbers in the module docstring).
    width = max(len(final), len(reference))
    pairs = " ".join(
        f"{x}-{y} {'correct' if x == y else 'wrong'}" for x, y in zip(final.zfill(width), reference.zfill(width))
    )
    return f"{pairs}\nScore: {10 if final == reference else 0}"


def judge_messages(ex, response: str) -> list[dict]:
    """The judge's conversation for one (problem, response), exactly as the GenRM client sends it."""
    sample = RewardSample(ex.uid, 0, ex.data_source, ex.prompt, response, ex.ground_truth, ex.extra_info)
    return genrm.judge_messages(JUDGE_TEMPLATE, sample)


def build_judge(
    dest: Path, seed: int, log: Callable[[str], None], policy_dir: Path, recipe: JudgeRecipe = JudgeRecipe()
) -> dict:
    """Build the tiny judge into `dest` (created; must not exist) and return its held-out metrics.

    Returns `auc_report`'s keys (AUC from P("Score: 1…") vs P("Score: 0") at the verdict token of
    the greedy answer), `verdict_accuracy` (parsed greedy verdict; none counts as wrong),
    `parsed` (share with a verdict), `build_s` and `parameters`.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    start = time.perf_counter()
    with fixed_threads(BUILD_THREADS):
        torch.manual_seed(seed)
        rng = random.Random(seed)
        tokenizer = AutoTokenizer.from_pretrained(policy_dir)
        model = AutoModelForCausalLM.from_pretrained(policy_dir).eval()  # the judge starts as the policy
        train_problems, heldout = reward_problems(seed, recipe.num_train, recipe.num_test)
        own = sample_policy(model, tokenizer, train_problems[: recipe.policy_problems], recipe.samples_per_problem)
        test = heldout_pairs(model, tokenizer, heldout, rng)
        written = [
            right_response(ex, rng) if i % 2 == 0 else wrong_response(ex, rng) for i, ex in enumerate(train_problems)
        ]
        adversarial = [adversarial_response(ex, rng) for ex in rng.sample(train_problems, recipe.adversarial)]
        _fine_tune(model, tokenizer, written + own + adversarial, recipe, rng, log)
        scores, verdicts = judge_all(model, tokenizer, test)
        metrics = auc_report(scores, test)
        metrics["verdict_accuracy"] = _agreement(verdicts, test)
        metrics["parsed"] = sum(v is not None for v in verdicts) / len(test)
        # held-out adversarial responses (other problems than training's): the judge must follow the rule there too
        attacks = [adversarial_response(ex, rng) for ex in heldout]
        metrics["adversarial_accuracy"] = _agreement(judge_all(model, tokenizer, attacks)[1], attacks)
    out = save_build(dest, model, tokenizer, metrics, start)
    log(
        f"tiny judge: held-out AUC {out['auc']:.3f}, verdict accuracy {out['verdict_accuracy']:.3f}, on adversarial "
        f"answers {out['adversarial_accuracy']:.3f}, {out['build_s']} s"
    )
    return out


def _agreement(verdicts: list[float | None], pairs: list[Labelled]) -> float:
    """Share of verdicts equal to the rule's label (no verdict counts as wrong)."""
    return sum(v is not None and round(v) == p.label for v, p in zip(verdicts, pairs)) / max(1, len(pairs))


def _fine_tune(model, tokenizer, train: list[Labelled], recipe: JudgeRecipe, rng: random.Random, log) -> None:
    """Supervised steps on (judge prompt, working + verdict), loss on the answer only."""
    eos = tokenizer.eos_token_id
    pairs = []
    for ex, response, _, _ in train:
        answer = tokenizer(judge_answer(response, ex.ground_truth), add_special_tokens=False)["input_ids"] + [eos]
        pairs.append((chat_prompt(tokenizer, judge_messages(ex, response)), answer))
    fine_tune(
        model,
        pairs,
        steps=recipe.steps,
        batch=recipe.batch,
        lr=recipe.lr,
        pad_id=tokenizer.pad_token_id,
        rng=rng,
        log=log,
        label="judge",
        warmup=recipe.warmup_steps,
    )


def judge_all(model, tokenizer, pairs: list[Labelled]) -> tuple[list[float], list[float | None]]:
    """Greedy judgements of every pair: P(verdict 10) / (P(10) + P(0)) at the verdict token, and the parsed verdict."""
    scores: list[float] = []
    verdicts: list[float | None] = []
    for i in range(0, len(pairs), EVAL_BATCH):
        s, v = _judge(model, tokenizer, [judge_messages(p.example, p.response) for p in pairs[i : i + EVAL_BATCH]])
        scores += s
        verdicts += v
    return scores, verdicts


def _judge(model, tokenizer, conversations: list[list[dict]]) -> tuple[list[float], list[float | None]]:
    import torch

    out, width = generate(
        model,
        tokenizer,
        conversations,
        max_new_tokens=MAX_NEW_TOKENS,
        do_sample=False,
        output_scores=True,
        return_dict_in_generate=True,
    )
    new = out.sequences[:, width:]
    # The verdict digit follows the tokens of "Score: "; "10" starts with "1", "0" is "0".
    marker = tokenizer("Score: ", add_special_tokens=False)["input_ids"]
    one, zero = tokenizer.convert_tokens_to_ids("1"), tokenizer.convert_tokens_to_ids("0")
    scores, verdicts = [], []
    for row in range(new.shape[0]):
        tokens = new[row].tolist()
        score = 0.5  # no verdict: no opinion
        for pos in range(len(tokens) - len(marker)):
            if tokens[pos : pos + len(marker)] == marker:
                logits = out.scores[pos + len(marker)][row]
                score = torch.softmax(logits[[one, zero]], dim=0)[0].item()
                break
        scores.append(score)
        verdicts.append(parse_verdict(tokenizer.decode(tokens, skip_special_tokens=True)))
    return scores, verdicts
