"""The tiny DisRM recipe: a Qwen2 sequence classifier that scores (problem, response) conversations.

    metrics = build_disrm(dest, seed, log, policy_dir)              # minutes, one thread (docs/benchmarks.md)
    build_disrm(dest, seed, log, policy_dir, DisRMRecipe.smoke())   # seconds: for tests

A `Qwen2ForSequenceClassification` (`num_labels=1`) that reads exactly what the DisRM client sends
(`rlrm.engine.rewards.disrm.render_conversation`: the conversation in the model's chat template)
and gives a higher score to responses the GSM8K rule marks correct. It never sees the reference
answer, so it has to check the arithmetic itself. Two phases, both starting from the prepared
policy (as real reward models start from an SFT model):

1. Arithmetic: the policy keeps training as a language model on worked solutions, 30% of them
   with a wrong equation result but the true final answer (loss on the final line only), so at
   "#### " it predicts the *true* answer instead of copying the equation's result.
2. Classifier: those two layers, a third layer on top (a copy of the first) and a fresh score
   head, trained on pairs of a right and a wrong response to one problem (BCE plus a pairwise
   Bradley-Terry term), with the language-model loss kept on the second layer's output. The wrong
   responses are the policy's own sampled mistakes and written near misses.

What was measured on 2 cores (held-out AUC, seed 0 / seed 1, at 800 classifier steps):
- BCE from the policy's body, 2 layers: ~0.5 after 1000 steps; checking a sum means comparing
  the prediction made at one token with the next token, deeper than 2 layers reach.
- A third or fourth layer plus the language-model loss: learning starts after a plateau of
  300 to more than 800 steps depending on the seed (0.98 / 0.59; pairwise loss 0.99 / 0.92).
- Phase 1 with plain solutions only: at "#### " the model copies the equation's result, so a
  consistently wrong sum is never surprising where the answer is read (the same plateau).
- Phase 1 with 30% wrong-equation items, pairs, 3 layers: learning starts at once;
  0.993 / 0.972 (policy samples 0.985 / 0.973), ~110 s per build (recipe 2: two build threads).
- Recipe 3 (one build thread, the policy of recipe 3), seed 0: the classifier's loss stays at chance
  for ~500 steps, then learns; AUC 0.948 after 800 steps, 0.977 after 1200, 0.986 after 1600 (the
  recipe; policy samples 0.983, near misses 0.990). At 1200 steps a head lr of 3e-2 gave 0.984,
  24 pairs a step 0.984, a body lr of 2e-3 0.815.
"""

from __future__ import annotations

import copy
import random
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from rlrm.engine.models.sft import (
    BUILD_THREADS,
    StepProgress,
    answer_loss,
    chat_prompt,
    fixed_threads,
    optimizer_step,
    pad_answers,
    right_pad,
    save_build,
)
from rlrm.engine.models.tiny_pairs import (
    Labelled,
    auc_report,
    heldout_pairs,
    reward_problems,
    right_response,
    sample_policy,
    wrong_response,
)
from rlrm.engine.rewards.disrm import render_conversation

EVAL_BATCH = 128


@dataclass(frozen=True)
class DisRMRecipe:
    """The knobs of the build; the defaults are the recipe `rlrm models prepare` uses."""

    num_train: int = 6000  # training problems
    num_test: int = 256  # held-out problems of each size (up to 20 and up to 10)
    policy_problems: int = 600  # training problems the policy answers, for its own mistakes
    samples_per_problem: int = 4
    arithmetic_steps: int = 500
    arithmetic_lr: float = 2e-3
    odd_share: float = 0.3  # phase-1 items with a wrong equation result and the true final answer
    steps: int = 1600  # classifier steps; recipe 3, seed 0: AUC 0.948 after 800, 0.977 after 1200, 0.986 after 1600
    pairs_per_step: int = 16
    lr: float = 1e-3
    head_lr: float = 1e-2  # the fresh score head learns faster than the body it reads
    policy_share: float = 0.5  # pairs whose wrong side is one of the policy's own mistakes
    lm_weight: float = 1.0  # language-model loss kept on layer 2 during phase 2
    warmup_steps: int = 20
    layers: int = 3

    @classmethod
    def smoke(cls) -> "DisRMRecipe":
        """A few steps on a few problems: the same code path in seconds (determinism tests)."""
        return replace(
            cls(), num_train=64, num_test=8, policy_problems=8, arithmetic_steps=3, steps=3, pairs_per_step=2
        )


def build_disrm(
    dest: Path, seed: int, log: Callable[[str], None], policy_dir: Path, recipe: DisRMRecipe = DisRMRecipe()
) -> dict:
    """Build the tiny DisRM into `dest` (created; must not exist) and return its held-out metrics.

    Returns `auc_report`'s keys (`auc`, `auc_policy_samples`, `auc_near_misses`, ...) plus
    `build_s` and `parameters`.
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
        policy = AutoModelForCausalLM.from_pretrained(policy_dir).eval()
        train, heldout = reward_problems(seed, recipe.num_train, recipe.num_test)
        answered = sample_policy(policy, tokenizer, train[: recipe.policy_problems], recipe.samples_per_problem)
        mistakes = [p for p in answered if p.label == 0]
        test = heldout_pairs(policy, tokenizer, heldout, rng)
        teach_arithmetic(policy, tokenizer, train, recipe, rng, log)
        model = new_classifier(policy, tokenizer, recipe.layers)
        train_classifier(model, policy.model.norm, tokenizer, train, mistakes, recipe, rng, log)
        metrics = auc_report(score(model, tokenizer, test), test)
    out = save_build(dest, model, tokenizer, metrics, start)
    log(
        f"tiny disrm: held-out AUC {out['auc']:.3f} (policy samples {out['auc_policy_samples']:.3f}, "
        f"near misses {out['auc_near_misses']:.3f}), {out['build_s']} s"
    )
    return out


# --- phase 1: arithmetic ---------------------------------------------------------------------
def teach_arithmetic(lm, tokenizer, train: list, recipe: DisRMRecipe, rng: random.Random, log) -> None:
    """Language-model steps on worked solutions, some with a wrong equation result (loss on the final line)."""
    import torch

    group = {"params": list(lm.parameters()), "base_lr": recipe.arithmetic_lr}
    optimizer = torch.optim.AdamW([group], lr=recipe.arithmetic_lr, weight_decay=0.0)
    lm.train()
    progress = StepProgress("disrm arithmetic", recipe.arithmetic_steps, log)
    for step in range(recipe.arithmetic_steps):
        items = [right_response(ex, rng, recipe.odd_share) for ex in rng.sample(train, 32)]
        ids, mask, labels = _lm_batch(tokenizer, items)
        loss = answer_loss(lm, ids, mask, labels)
        optimizer_step(optimizer, loss, step, recipe.arithmetic_steps, recipe.warmup_steps)
        progress.step(step, loss)
    lm.eval()


def _lm_batch(tokenizer, items: list[Labelled]):
    """Right-padded prompt + response ids, mask, and labels on the response (final line only when the equation is off)."""
    pairs, firsts = [], []
    for ex, response, _, _ in items:
        answer = tokenizer(response, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        pairs.append((chat_prompt(tokenizer, ex.prompt), answer))
        firsts.append(_scored_from(tokenizer, response, ex, answer))
    ids, labels, mask = pad_answers(pairs, tokenizer.pad_token_id, firsts)
    return ids, mask, labels


def _scored_from(tokenizer, response: str, ex, answer_ids: list[int]) -> int:
    """Index of the first response token the language-model loss covers: 0, or "####" when the equation is not the solution."""
    if response == ex.extra_info["solution"]:
        return 0
    marker = tokenizer.convert_tokens_to_ids("####")
    return answer_ids.index(marker) if marker in answer_ids else len(answer_ids)


# --- phase 2: the classifier -----------------------------------------------------------------
def new_classifier(lm, tokenizer, layers: int):
    """A Qwen2 sequence classifier with `lm`'s body, extra layers copied from its first ones, and a fresh head."""
    from transformers import Qwen2ForSequenceClassification

    config = lm.config.__class__.from_dict(lm.config.to_dict())  # a copy, not the policy's object
    config.num_labels = 1
    config.num_hidden_layers = layers
    if getattr(config, "layer_types", None):
        config.layer_types = ["full_attention"] * layers
    config.pad_token_id = tokenizer.pad_token_id  # the classifier scores the last non-pad token
    model = Qwen2ForSequenceClassification(config)
    body = lm.config.num_hidden_layers
    model.model.load_state_dict(lm.model.state_dict(), strict=False)
    for i in range(body, layers):
        model.model.layers[i].load_state_dict(lm.model.layers[i % body].state_dict())
    return model


def train_classifier(
    model, lm_norm, tokenizer, train: list, mistakes: list[Labelled], recipe: DisRMRecipe, rng, log
) -> None:
    """BCE + Bradley-Terry on (right, wrong) pairs, plus the language-model loss on the body's output."""
    import torch
    import torch.nn.functional as F

    body_norm = copy.deepcopy(lm_norm)  # reads the body's output as a language model; not saved
    head = list(model.score.parameters())
    rest = [p for n, p in model.named_parameters() if not n.startswith("score.")] + list(body_norm.parameters())
    optimizer = torch.optim.AdamW(
        [{"params": rest, "base_lr": recipe.lr}, {"params": head, "base_lr": recipe.head_lr}],
        lr=recipe.lr,
        weight_decay=0.0,
    )
    model.train()
    progress = StepProgress("disrm classifier", recipe.steps, log)
    for step in range(recipe.steps):
        items = _pairs(train, mistakes, recipe, rng)
        labels = torch.tensor([float(p.label) for p in items])
        ids = [_render(tokenizer, p) for p in items]
        scores, body_out, padded = _forward(model, ids, tokenizer.pad_token_id, recipe.layers > 2)
        right_minus_wrong = (scores[0::2] - scores[1::2]) * (labels[0::2] - labels[1::2])  # [pairs]; 0 when both agree
        differ = labels[0::2] != labels[1::2]
        pairwise = -F.logsigmoid(right_minus_wrong[differ]).sum() / max(1, int(differ.sum()))
        loss = F.binary_cross_entropy_with_logits(scores, labels) + pairwise
        if recipe.lm_weight and body_out is not None:
            targets = _lm_targets(tokenizer, items, ids, padded)[:, 1:]  # [b, t-1]
            scored = targets != -100  # the head on the scored positions only (as sft.answer_loss)
            logits = body_norm(body_out[:, :-1][scored]) @ model.model.embed_tokens.weight.T  # [n, vocab]
            lm_loss = F.cross_entropy(logits, targets[scored])
            loss = loss + recipe.lm_weight * lm_loss
        optimizer_step(optimizer, loss, step, recipe.steps, recipe.warmup_steps)
        progress.step(step, loss)
    model.eval()


def _pairs(train: list, mistakes: list[Labelled], recipe: DisRMRecipe, rng: random.Random) -> list[Labelled]:
    """[right, wrong, right, wrong, ...] for `pairs_per_step` problems; the wrong side is often the policy's own."""
    items = []
    for _ in range(recipe.pairs_per_step):
        if mistakes and rng.random() < recipe.policy_share:
            wrong = mistakes[rng.randrange(len(mistakes))]
        else:
            wrong = wrong_response(train[rng.randrange(len(train))], rng)
        items += [right_response(wrong.example, rng), wrong]
    return items


def _render(tokenizer, pair: Labelled) -> list[int]:
    return render_conversation(tokenizer, pair.example.prompt, pair.response)


def _lm_targets(tokenizer, items: list[Labelled], ids: list[list[int]], padded):
    """Next-token targets on the responses of correct items (the rendering ends with response, <|im_end|>, newline)."""
    import torch

    targets = torch.full_like(padded, -100)
    for i, pair in enumerate(items):
        if pair.label != 1:
            continue
        answer = tokenizer(pair.response, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        end = len(ids[i]) - 1  # the closing newline is not a target
        first = end - len(answer) + _scored_from(tokenizer, pair.response, pair.example, answer)
        targets[i, first:end] = padded[i, first:end]
    return targets


def _forward(model, sequences: list[list[int]], pad_id: int, with_body: bool = False):
    """Scores pooled at each sequence's last token, right-padded as the server pads; optionally layer 2's output."""
    import torch

    ids, mask = right_pad(sequences, pad_id)
    out = model.model(input_ids=ids, attention_mask=mask, output_hidden_states=with_body)
    last = mask.sum(1) - 1
    scores = model.score(out.last_hidden_state[torch.arange(len(sequences)), last])[:, 0]  # [b]
    return scores, (out.hidden_states[2] if with_body else None), ids


def score(model, tokenizer, pairs: list[Labelled]) -> list[float]:
    """The model's score for each (problem, response), as the DisRM client would get it."""
    import torch

    out: list[float] = []
    with torch.no_grad():
        for start in range(0, len(pairs), EVAL_BATCH):
            chunk = [_render(tokenizer, p) for p in pairs[start : start + EVAL_BATCH]]
            out += _forward(model, chunk, tokenizer.pad_token_id)[0].tolist()
    return out
