"""The tiny policy that learns to use the calculator: the `tiny:tools` variant and the `tiny-tools` profile.

    PYTHONPATH=$PWD python -m pytest -q tests/engine/test_tool_learning.py            # the variant (fast)
    PYTHONPATH=$PWD python -m pytest -q -m slow tests/engine/test_tool_learning.py    # GRPO learns with the tool

The learning test fails when the observation mask is broken (observation tokens trained on): checked
by hand once with `collate` patched to set `response_mask` to 1 on every response token. Observations
carry log-prob 0 from the rollout (the engine never sampled them), so in sync mode, where the old
log-probs are the rollout's, a loss that reads them sees a PPO ratio far from 1 (`actor/ppo_kl` ~1
instead of ~0); docs/agentic.md gives the figures.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlrm.config.loader import load_profile
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.trainer import start_run, train

PROMPTS = 32
LEARNING_STEPS = 30


@pytest.fixture(scope="module")
def tiny_tools_path(tiny_policy_path) -> Path:
    from rlrm.engine.models.tiny import resolve_model_path

    return Path(resolve_model_path("tiny:tools"))


@pytest.mark.slow  # builds tiny:tools on first use: 6-12 minutes on 2 cores, too long for the default tier
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


def test_the_tool_trace_leaves_exactly_the_observation_out_of_the_loss(tiny_policy_path):
    from transformers import AutoTokenizer

    from rlrm.config.schema import PROMPT_SUFFIX
    from rlrm.engine.data.synthetic import synthetic_splits
    from rlrm.engine.models.sft import pad_answers
    from rlrm.engine.models.tiny_tools import TOOL_DATA, tool_trace

    tokenizer = AutoTokenizer.from_pretrained(tiny_policy_path)
    _, (ex, *_) = synthetic_splits(TOOL_DATA.model_copy(update={"num_test": 1, "num_train": 1}), PROMPT_SUFFIX)
    answer, mask = tool_trace(tokenizer, ex)
    unscored = [t for t, m in zip(answer, mask) if m == 0]
    # the observation's ids are the loop's own (tokenised alone, as rlrm/engine/agent/loop.py splices them)
    assert unscored == tokenizer.encode(f"<obs>{ex.ground_truth}</obs>", add_special_tokens=False)
    expression = ex.extra_info["solution"].split(" = ")[0].replace(" ", "")  # "123 + 456 = 579" -> "123+456"
    scored = tokenizer.decode([t for t, m in zip(answer, mask) if m == 1])
    assert scored == f"<call>calculator {expression}</call>\n#### {ex.ground_truth}<|im_end|>"
    _, labels, _ = pad_answers([([7, 8], answer)], pad_id=0, answer_masks=[mask])
    assert labels[0, 2:].tolist() == [t if m else -100 for t, m in zip(answer, mask)]


def test_the_build_is_deterministic_for_a_seed(tmp_path, tiny_policy_path):
    """The full build code path on a few steps: the same seed gives the same weights and figures."""
    from transformers import AutoModelForCausalLM

    from rlrm.engine.models.tiny_tools import ToolsRecipe, build_tools_policy

    builds = [
        build_tools_policy(tmp_path / str(i), 0, lambda _: None, tiny_policy_path, ToolsRecipe.smoke()) for i in (0, 1)
    ]
    weights = [AutoModelForCausalLM.from_pretrained(tmp_path / str(i)).state_dict() for i in (0, 1)]
    assert all(v.equal(weights[1][k]) for k, v in weights[0].items())
    assert {k: v for k, v in builds[0].items() if k != "build_s"} == {
        k: v for k, v in builds[1].items() if k != "build_s"
    }
    assert {"call_rate", "accuracy_without_tool"} <= builds[0].keys()


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
def test_grpo_teaches_the_policy_to_call_the_calculator(tmp_path, tiny_tools_path):
    # the first row's tool calls hold the validation before training too: left out
    rows = [r for r in tiny_tools_run(tmp_path, LEARNING_STEPS) if "agent/tool_calls" in r][1:]
    samples = 16 * 8  # the profile's train_batch_size x rollout.n: one trajectory each
    third = len(rows) // 3

    def mean(key: str, part: list[dict]) -> float:
        return sum(r[key] for r in part) / len(part)

    # without a call the answer is a guess at a three-digit sum or product (reward ~0), with one it is right
    # when the operands were copied right: GRPO raises the share of trajectories that call the tool
    calls_before, calls_after = (
        mean("agent/tool_calls", rows[:third]) / samples,
        mean("agent/tool_calls", rows[-third:]) / samples,
    )
    assert calls_after >= calls_before + 0.15, f"tool-call share {calls_before:.2f} -> {calls_after:.2f}"
    assert mean("critic/score/mean", rows[-third:]) > mean("critic/score/mean", rows[:third])
    # on-policy, one update per step: the loss's tokens were sampled by these very weights, so the PPO ratio
    # is 1 on every one of them; an observation token in the loss (rollout log-prob 0) breaks that at once
    kls = [abs(r["actor/ppo_kl"]) for r in rows]
    assert max(kls) < 0.01, f"actor/ppo_kl up to {max(kls):.3f}: tokens in the loss that were not sampled"
