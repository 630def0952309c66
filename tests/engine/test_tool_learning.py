"""The tiny policy that learns to use the calculator: the `tiny:tools` variant and the `tiny-tools` profile.

    PYTHONPATH=$PWD python -m pytest -q tests/engine/test_tool_learning.py            # the variant (fast)
    PYTHONPATH=$PWD python -m pytest -q -m slow tests/engine/test_tool_learning.py    # GRPO learns with the tool

The learning test fails when the observation mask is broken (observation tokens trained on): checked
by hand once with `collate` patched to set `response_mask` to 1 on every response token (docs/agentic.md
gives the figures).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlrm.config.loader import load_profile
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.trainer import start_run, train

PROMPTS = 32
LEARNING_STEPS = 20


@pytest.fixture(scope="module")
def tiny_tools_path(tiny_policy_path) -> Path:
    from rlrm.engine.models.tiny import resolve_model_path

    return Path(resolve_model_path("tiny:tools"))


def test_the_variant_calls_the_tool_and_cannot_answer_without_it(tiny_tools_path):
    # held-out problems of the tiny-tools profile itself (its test split, unseen by the build)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlrm.engine.data.synthetic import synthetic_splits
    from rlrm.engine.models.sft import generate
    from rlrm.engine.models.tiny_tools import MAX_NEW_TOKENS, well_formed_call
    from rlrm.engine.rewards.gsm8k import compute_score

    profile = load_profile("tiny-tools", [])
    assert profile.model.path == "tiny:tools" and profile.rollout.agent.enabled
    tokenizer = AutoTokenizer.from_pretrained(tiny_tools_path)
    model = AutoModelForCausalLM.from_pretrained(tiny_tools_path).eval()
    _, test = synthetic_splits(profile.data.synthetic, profile.data.prompt_suffix)
    test = test[:PROMPTS]
    out, width = generate(model, tokenizer, [ex.prompt for ex in test], max_new_tokens=MAX_NEW_TOKENS, do_sample=False)
    texts = tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
    calls = sum(well_formed_call(t) for t in texts) / PROMPTS
    correct = sum(compute_score(t, ex.ground_truth) for t, ex in zip(texts, test)) / PROMPTS
    assert calls >= 0.5, f"well-formed calculator calls on {calls:.2f} of greedy answers: {texts[:3]}"
    # without the tool its observations are its own guesses at three-digit sums and products
    assert correct <= 0.1, f"accuracy without the tool {correct:.2f}"


def tiny_tools_run(tmp_path: Path, steps: int, extra: list[str] = ()) -> list[dict]:
    """`tiny-tools` for `steps` GRPO steps, validated before and after; the metrics rows."""
    profile = load_profile(
        "tiny-tools",
        [
            f"trainer.total_steps={steps}",
            f"trainer.val_every={steps}",
            "trainer.save_every=0",
            "trainer.num_threads=2",
            "logging.console=none",
            *extra,
        ],
    )
    run_dir = start_run(profile, tmp_path / "tools")
    assert train(run_dir).last_step == steps
    return read_metrics(run_dir / "metrics.jsonl")


@pytest.mark.slow
def test_grpo_with_the_calculator_raises_held_out_accuracy(tmp_path, tiny_tools_path):
    rows = tiny_tools_run(tmp_path, LEARNING_STEPS)
    before, after = rows[0]["val/accuracy"], rows[-1]["val/accuracy"]
    # 128 held-out problems, greedy: +0.10 is 13 problems
    assert after >= before + 0.10, f"held-out accuracy with the tool {before:.3f} -> {after:.3f}"
    rewards = [r["critic/score/mean"] for r in rows if "critic/score/mean" in r]
    third = len(rewards) // 3
    assert sum(rewards[-third:]) / third > sum(rewards[:third]) / third
    assert sum(r["agent/tool_calls"] for r in rows if "agent/tool_calls" in r) > 0
