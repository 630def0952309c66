"""The tiny policy that learns to use the calculator: the `tiny:tools` variant and the `tiny-tools` profile.

    PYTHONPATH=$PWD python -m pytest -q tests/unit/engine/models/test_tool_learning.py            # the variant (fast)
    PYTHONPATH=$PWD python -m pytest -q -m slow tests/unit/engine/models/test_tool_learning.py    # GRPO learns with the tool

The learning test asserts that 15 sync GRPO steps raise held-out accuracy with the tool by at least 0.2
(0.539 -> 0.914 measured, docs/agentic.md) and that the PPO ratio stays 1 on every token in the loss. The
second check is the one a broken observation mask fails: observations carry log-prob 0 from the rollout
(the engine never sampled them), so in sync mode, where the old log-probs are the rollout's, a loss that
reads them sees a ratio far from 1 (`actor/ppo_kl` ~3.5 instead of ~1e-7). Held-out accuracy alone does
not catch it (0.539 -> 0.938 with observations trained on): the test of the test below breaks the mask
and asserts the learning test fails.
"""

from __future__ import annotations

from rlrm.config.loader import load_profile

PROMPTS = 32
LEARNING_STEPS = 15
ACCURACY_RISE = 0.2  # held-out accuracy with the tool, after LEARNING_STEPS sync steps against before


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
    assert calls >= 0.25, f"well-formed calculator calls on {calls:.2f} of greedy answers: {texts[:3]}"
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


def test_only_the_tools_build_moves_to_its_own_recipe_version(tmp_path):
    from rlrm.engine.models import tiny
    from rlrm.engine.models.tiny_judge import JUDGE_RECIPE_VERSION
    from rlrm.engine.models.tiny_tools import TOOLS_RECIPE_VERSION

    # a change to the tools (or judge) recipe rebuilds that model alone, never the policy and DisRM that CI caches
    assert tiny.model_dir("tools", tmp_path).name == f"tools-v{TOOLS_RECIPE_VERSION}-seed0"
    assert tiny.model_dir("judge", tmp_path).name == f"judge-v{JUDGE_RECIPE_VERSION}-seed0"
    for name in ("policy", "disrm"):
        assert tiny.model_dir(name, tmp_path).name == f"{name}-v{tiny.RECIPE_VERSION}-seed0"


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
