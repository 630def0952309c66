"""The tiny tool-use recipe: the tiny policy fine-tuned to call the calculator on large operands.

    metrics = build_tools_policy(dest, seed, log, policy_dir)               # minutes, one thread (docs/benchmarks.md)
    build_tools_policy(dest, seed, log, policy_dir, ToolsRecipe.smoke())    # seconds: for tests

The problems are the synthetic word problems with three-digit operands (`TOOL_DATA`, as the
tiny-tools profile's data): far past what the tiny policy adds in its head (it was warm-started on
operands up to 20). A share `tool_share` of the traces call the tool, the rest answer in the head:

    <call>calculator 123+456</call><obs>579</obs>
    #### 579<|im_end|>                                         (the tool trace; <obs>...</obs> unscored)
    123 + 456 = 579
    #### 579<|im_end|>                                         (the head trace)

The observation is tokenised on its own, exactly as the agent loop splices it in
(rlrm/engine/agent/loop.py), and left out of the loss: the model reads it and is never taught to
write it. So the variant calls the tool on part of the prompts only, and a run with the tool has
room to learn to call it more (the GRPO run of the tiny-tools profile); without the tool (agent
off) it answers almost nothing right, as its observations are its own guesses.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from rlrm.config.schema import PROMPT_SUFFIX, SyntheticConfig
from rlrm.engine.data.synthetic import synthetic_splits
from rlrm.engine.models.sft import BUILD_THREADS, chat_prompt, fine_tune, fixed_threads, generate, save_build
from rlrm.engine.rewards.gsm8k import compute_score

# The tools build's own recipe version (tiny.RECIPE_VERSION versions the policy, judge and DisRM): bump it when
# this recipe changes, so only tiny:tools rebuilds. 5: 2400 supervised steps (4's 800 on recipe 3's policy copied
# the operands too rarely for GRPO to gain, docs/agentic.md); 4: one build thread, the LM head on the answers only
# (3: 800 supervised steps; 2: 400).
TOOLS_RECIPE_VERSION = 5
MAX_NEW_TOKENS = 64  # a tool trace is ~50 tokens: call 28, observation 14-16, answer 7-9
# The tiny-tools profile's problems; the recipe draws its own with another seed, so the profile's
# splits are unseen.
TOOL_DATA = SyntheticConfig(min_value=100, max_value=999, ops=["+", "*"], num_operands=2)


@dataclass(frozen=True)
class ToolsRecipe:
    """The knobs of the build; the defaults are the recipe `rlrm models prepare --name tools` uses."""

    num_train: int = 4000
    num_test: int = 128
    tool_share: float = 0.5  # traces that call the tool; the rest answer in the head
    steps: int = 2400
    batch: int = 32
    lr: float = 2e-3
    warmup_steps: int = 10
    seed_offset: int = 71  # the recipe's problems: not the profile's (TOOL_DATA.seed)

    @classmethod
    def smoke(cls) -> "ToolsRecipe":
        """A few steps on a few problems: the same code path in seconds (determinism tests)."""
        return replace(cls(), num_train=64, num_test=8, steps=3, batch=4)


def tool_trace(tokenizer, ex) -> tuple[list[int], list[int]]:
    """(answer ids, loss mask) of the trace that calls the calculator: 0 on the observation's tokens."""
    expression = ex.extra_info["solution"].split(" = ", 1)[0].replace(" ", "")
    call = tokenizer.encode(f"<call>calculator {expression}</call>", add_special_tokens=False)
    obs = tokenizer.encode(f"<obs>{ex.ground_truth}</obs>", add_special_tokens=False)
    tail = tokenizer.encode(f"\n#### {ex.ground_truth}", add_special_tokens=False) + [tokenizer.eos_token_id]
    return call + obs + tail, [1] * len(call) + [0] * len(obs) + [1] * len(tail)


def head_trace(tokenizer, ex) -> tuple[list[int], list[int]]:
    """(answer ids, loss mask) of the worked solution without the tool (every token scored)."""
    ids = tokenizer.encode(ex.extra_info["solution"], add_special_tokens=False) + [tokenizer.eos_token_id]
    return ids, [1] * len(ids)


def build_tools_policy(
    dest: Path, seed: int, log: Callable[[str], None], policy_dir: Path, recipe: ToolsRecipe = ToolsRecipe()
) -> dict:
    """Build the tool-use variant into `dest` (created; must not exist) and return its held-out metrics:
    `call_rate` (greedy answers that hold a well-formed calculator call), `accuracy_without_tool`
    (greedy, no tool), `build_s`, `parameters`. Accuracy with the tool needs the agent loop, a layer
    above this one: the tiny-tools profile's validation measures it (docs/agentic.md)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    start = time.perf_counter()
    with fixed_threads(BUILD_THREADS):
        torch.manual_seed(seed)
        rng = random.Random(seed)
        tokenizer = AutoTokenizer.from_pretrained(policy_dir)
        model = AutoModelForCausalLM.from_pretrained(policy_dir)  # the variant starts as the policy
        data = TOOL_DATA.model_copy(
            update={"num_train": recipe.num_train, "num_test": recipe.num_test, "seed": seed + recipe.seed_offset}
        )
        train, test = synthetic_splits(data, PROMPT_SUFFIX)
        pairs, masks = [], []
        for ex in train:
            answer, mask = (tool_trace if rng.random() < recipe.tool_share else head_trace)(tokenizer, ex)
            pairs.append((chat_prompt(tokenizer, ex.prompt), answer))
            masks.append(mask)
        fine_tune(
            model,
            pairs,
            steps=recipe.steps,
            batch=recipe.batch,
            lr=recipe.lr,
            pad_id=tokenizer.pad_token_id,
            rng=rng,
            log=log,
            label="tools",
            warmup=recipe.warmup_steps,
            log_every=50,
            answer_masks=masks,
        )
        metrics = evaluate(model, tokenizer, test)
    out = save_build(dest, model, tokenizer, metrics, start)
    log(
        f"tiny tools: calls the tool on {out['call_rate']:.3f} of held-out prompts; accuracy without the tool "
        f"{out['accuracy_without_tool']:.3f}; {out['build_s']} s"
    )
    return out


def evaluate(model, tokenizer, examples: list) -> dict[str, float]:
    """Greedy held-out figures without the tool: the share of well-formed calls, and accuracy."""
    out, width = generate(
        model, tokenizer, [ex.prompt for ex in examples], max_new_tokens=MAX_NEW_TOKENS, do_sample=False
    )
    texts = tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
    n = len(examples)
    return {
        "call_rate": sum(well_formed_call(t) for t in texts) / n,
        "accuracy_without_tool": sum(compute_score(t, ex.ground_truth) for t, ex in zip(texts, examples)) / n,
    }


def well_formed_call(text: str) -> bool:
    """The text holds `<call>calculator A+B</call>` (or `*`) with whole numbers A and B."""
    body = text.split("</call>", 1)[0] if "</call>" in text else ""
    if "<call>calculator " not in body:
        return False
    expression = body.rsplit("<call>calculator ", 1)[1].strip()
    for op in "+*":
        left, sep, right = expression.partition(op)
        if sep and left.isdigit() and right.isdigit():
            return True
    return False
