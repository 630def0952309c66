"""Rubric rewards (rlrm/engine/rewards/rubric.py, reward.kind=rubric): the config checks, the weighted sum of the
criteria's verdicts with hand values, the shared prefix of a sample's K requests, and a criterion without a
verdict counted as a failure under reward.on_failure. The judge here answers from a script (no server: the real
tiny judge is in tests/engine/test_rubric_runs.py)."""

from __future__ import annotations

import asyncio

import pytest

from rlrm.config.loader import load_profile
from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.base import RewardSample
from rlrm.engine.rewards.contract import changed_parts, reward_contract
from rlrm.engine.rewards.factory import build_reward_fn
from rlrm.engine.rewards.loop import RewardError, RewardLoop
from rlrm.engine.rewards.rubric import criterion_messages, weighted_sum
from rlrm.errors import ConfigError

PREFIX = "Problem: {question}\nAnswer: {response}\nReference: {reference}\n"
CRITERIA = [
    {"name": "correct", "question": "Is it correct?", "weight": 1.0},
    {"name": "working", "question": "Is the working shown?", "weight": 0.2},
    {"name": "terse", "question": "Is it short? Give \\boxed{N} of 4.", "weight": -0.5, "verdict": "boxed",
     "max_score": 4},
]  # fmt: skip


def rubric(criteria=CRITERIA, **settings) -> RewardConfig:
    return RewardConfig.model_validate(
        {
            "kind": "rubric",
            "server": {"model": "judge", "addresses": ["http://127.0.0.1:1"]},
            "rubric": {"prefix": PREFIX, "criteria": criteria},
            "max_retries": 0,
            **settings,
        }
    )


def sample(i: int, response: str = "2 + 2 = 4\n#### 4") -> RewardSample:
    return RewardSample(f"p{i}", i, "synthetic", [{"role": "user", "content": "2 + 2?"}], response, "4")


class ScriptedJudge:
    """A balancer whose judge answers each criterion with a set text; it keeps every request it got."""

    urls = ["scripted"]

    def __init__(self, answers: dict[str, str]):
        self.answers, self.requests = answers, []

    async def post(self, path: str, body: dict, timeout_s: float, url: str | None = None) -> dict:
        self.requests.append(body)
        text = next(a for q, a in self.answers.items() if body["messages"][0]["content"].endswith(q))
        return {"choices": [{"message": {"content": text}}], "usage": {"prompt_tokens": 10, "completion_tokens": 3}}


ANSWERS = {"Is it correct?": "Score: 10", "Is the working shown?": "Score: 5", "Give \\boxed{N} of 4.": "\\boxed{1}"}


def score(cfg: RewardConfig, judge: ScriptedJudge, samples: list[RewardSample]):
    loop = RewardLoop(build_reward_fn(cfg, judge), cfg)

    async def all_samples():
        return await loop.score_all(samples)

    return asyncio.run(all_samples()), loop.take_metrics()


def test_the_reward_is_the_weighted_sum_of_the_criteria_verdicts():
    # correct: 10/10 = 1.0; working: 5/10 = 0.5; terse: boxed 1 of 4 = 0.25
    # reward = 1.0 * 1.0 + 0.2 * 0.5 + (-0.5) * 0.25 = 1.0 + 0.1 - 0.125 = 0.975
    judge = ScriptedJudge(ANSWERS)
    (result,), metrics = score(rubric(), judge, [sample(0)])
    assert result.extra["reward_components"] == {"correct": 1.0, "working": 0.5, "terse": 0.25}
    assert result.score == pytest.approx(0.975)
    assert metrics["reward/judge_prompt_tokens"] == 30 and metrics["reward/model_calls"] == 3  # one call per criterion
    assert weighted_sum({"a": 0.5, "b": 1.0}, {"a": 2.0, "b": -1.0}) == pytest.approx(0.0)  # 2*0.5 - 1*1


def test_a_samples_criteria_share_its_prefix_and_differ_only_in_the_question_last():
    judge = ScriptedJudge(ANSWERS)
    score(rubric(), judge, [sample(0)])
    prompts = [r["messages"][0]["content"] for r in judge.requests]
    shared = "Problem: 2 + 2?\nAnswer: 2 + 2 = 4\n#### 4\nReference: 4\n"
    assert sorted(prompts) == sorted(shared + c["question"] for c in CRITERIA)
    # the question is appended as written: braces in it are not template fields
    assert criterion_messages(PREFIX, rubric().rubric.criteria[2], sample(0))[0]["content"].endswith("\\boxed{N} of 4.")


def test_a_criterion_whose_parser_never_matches_is_a_counted_failure_never_a_zero():
    judge = ScriptedJudge({**ANSWERS, "Is the working shown?": "the working is fine"})
    (result,), metrics = score(rubric(default_score=-1.0), judge, [sample(0)])
    assert result.score == -1.0 and result.extra["reward_failed"]  # reward.on_failure=default, as set
    assert "rubric criterion working of sample p0" in result.extra["reward_error"]
    assert metrics["reward/unparsed"] == 1 and metrics["reward/defaulted"] == 1
    assert metrics["reward/judge_prompt_tokens"] == 30  # the three calls were paid for all the same
    (dropped,), metrics = score(rubric(on_failure="drop-group"), judge, [sample(1)])
    assert dropped is None and metrics["reward/failures"] == 1
    with pytest.raises(RewardError, match="rubric criterion working of sample p2"):
        score(rubric(on_failure="fail"), judge, [sample(2)])


def test_the_criteria_are_the_runs_components_with_their_weights():
    cfg = rubric()
    assert cfg.model_kind == "genrm"  # the judge is served as for genrm
    assert cfg.weights_of_components == {"correct": 1.0, "working": 0.2, "terse": -0.5}
    profile = load_profile("tiny-rubric", ["algorithm.component_norm=gdpo"])  # GDPO trains on the criteria
    assert profile.reward.weights_of_components == {"correct": 1.0, "correct_half": 0.2}


@pytest.mark.parametrize(
    "override, needle",
    [
        ("reward.rubric.criteria=[]", "reward.kind=rubric needs reward.rubric.criteria"),
        ("reward.rubric.criteria=[{name: a, question: q, weight: .inf}]", "criteria.0.weight: Input should be a finite"),
        ("reward.rubric.criteria=[{name: a, question: q, weight: .nan}]", "criteria.0.weight: Input should be a finite"),
        ("reward.rubric.criteria=[{name: a, question: q}]", "criteria.0.weight: Field required"),
        ("reward.rubric.criteria=[{name: a, question: q, weight: 1}, {name: a, question: r, weight: 1}]",
         "the criterion name(s) a appear more than once"),
        ("reward.rubric.criteria=[{name: a/b, question: q, weight: 1}]", "criteria.0.name"),
        ("reward.rubric.prefix='Problem: {question}'", "reward.rubric.prefix must contain {response}"),
        ("reward.rubric.prefix='{response} {answer}'", "reward.rubric.prefix has the unknown field(s) {answer}"),
        ("reward.component_weights={correct: 1}", "a rubric's component weights are its criteria's"),
    ],
)  # fmt: skip
def test_a_bad_rubric_is_refused_in_one_line(override, needle):
    with pytest.raises(ConfigError) as refused:
        load_profile("tiny-rubric", [override])
    assert needle in str(refused.value) and "\n" not in str(refused.value)


def test_the_contract_changes_with_a_criterions_question_weight_or_parser():
    base = reward_contract(rubric())
    for change in ({"question": "Is it right?"}, {"weight": 2.0}, {"max_score": 5}, {"verdict": "boxed"}):
        changed = reward_contract(rubric([{**CRITERIA[0], **change}, *CRITERIA[1:]]))
        assert changed.fingerprint != base.fingerprint, change
        assert "parser" in changed_parts(base.parts, changed.parts)
    other_prefix = rubric(rubric={"prefix": "Q: {question}\nA: {response}\n", "criteria": CRITERIA})
    assert changed_parts(base.parts, reward_contract(other_prefix).parts) == ["reference", "template"]


def test_a_criterion_whose_judge_was_cut_off_at_max_tokens_has_no_verdict():
    # its last "Score: N" may be quoted from the response it judges; before, it was taken as the judge's own
    from rlrm.engine.rewards.errors import UnparsedVerdict

    class CutOnWorking(ScriptedJudge):
        async def post(self, path, body, timeout_s, url=None):
            answer = await super().post(path, body, timeout_s, url)
            if body["messages"][0]["content"].endswith("Is the working shown?"):
                answer["choices"][0]["finish_reason"] = "length"
            return answer

    fn = build_reward_fn(rubric(), balancer=CutOnWorking(ANSWERS))
    with pytest.raises(UnparsedVerdict, match="working of sample p0.*max_tokens=48 before it finished"):
        asyncio.run(fn(sample(0)))
