"""`rlrm parity reward` with judges: the tiny GenRM judge (tiny-genrm's reward, served by rlrm) against itself
and against a hosted OpenAI-compatible stand-in (a real HTTP server of the test's own on loopback), and a hosted
judge given a broken template. Each run scores the samples twice, through rlrm's own reward service."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.unit.parity.test_reward_parity_cli import invoke

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))
from standin_openai_api import StandinOpenAIAPI  # noqa: E402

KEY = "sk-standin-parity-0123"
# the stand-in's verdict of each group's four answers: right, wrong final answer, wrong sum, right and long
EXPECTED = [1.0, 0.0, 0.0, 1.0]


@pytest.fixture(scope="module")
def judge_path():
    from rlrm.engine.models.tiny import resolve_model_path

    return resolve_model_path("tiny:judge")  # built once into the test model cache, then reused


@pytest.fixture
def judged_input(tmp_path):
    """3 synthetic problems x 4 answers in the tiny policy's format, with the reference answer and the question."""
    from rlrm.config.schema import PROMPT_SUFFIX, SyntheticConfig
    from rlrm.engine.data.synthetic import synthetic_splits

    train, _ = synthetic_splits(SyntheticConfig(num_train=3, num_test=1, max_value=10), PROMPT_SUFFIX)
    rows = []
    for ex in train:
        equation, answer = ex.extra_info["solution"].split(" = ")[0], int(ex.ground_truth)
        responses = [
            f"{equation} = {answer}\n#### {answer}",
            f"{equation} = {answer}\n#### {answer + 2}",
            f"{equation} = {answer + 1}\n#### {answer + 1}",
            f"{equation} = {answer}. Check it again: {equation} = {answer}.\n#### {answer}",
        ]
        rows += [
            {"sample_id": f"{ex.uid}#{j}", "group_id": ex.uid, "prompt": ex.prompt, "response": response,
             "reference": ex.ground_truth, "question": ex.extra_info["question"]}
            for j, response in enumerate(responses)
        ]  # fmt: skip
    path = tmp_path / "judged.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


@pytest.fixture
def standin(monkeypatch):
    monkeypatch.setenv("STANDIN_KEY", KEY)
    with StandinOpenAIAPI(KEY, rpm=60000) as api:
        yield api


def hosted(api, flag: str = "--b-set") -> list[str]:
    sets = [f"reward.server.addresses={api.base_url}", f"reward.server.model={api.model}",
            "reward.server.api_key_env=STANDIN_KEY"]  # fmt: skip
    return [x for s in sets for x in (flag, s)]


def read(out: Path) -> tuple[dict, pd.DataFrame]:
    return json.loads((out / "summary.json").read_text()), pd.read_parquet(out / "scores.parquet")


def test_the_tiny_judge_against_itself_is_a_noise_baseline_that_passes(judge_path, tmp_path):
    # generated samples: the tiny policy's answers to the first 2 prompts, references from the profile's data
    out = tmp_path / "same"
    result = invoke("--profile", "tiny-genrm", "--samples", 2, "--n", 2, "--out", out)
    assert result.exit_code == 0, result.output
    summary, scores = read(out)
    assert summary["verdict"] == "pass" and summary["reasons"] == []
    assert summary["differs"]["settings"] == [] and summary["differs"]["contract"]["same"]
    assert summary["a"]["contract"]["parts"]["model"]["weights"].startswith("sha256:")
    assert summary["notes"] and "own noise" in summary["notes"][0]
    # a greedy judge asked the same questions twice gives the same verdicts, at the same cost
    assert summary["agreement"]["exact"] == 1.0 and summary["agreement"]["compared"] == 4  # 2 prompts x 2
    assert (scores["a_score"] == scores["b_score"]).all() and set(scores["a_score"]) <= {0.0, 1.0}
    assert summary["stats"]["abs_diff_max"] == 0.0 and summary["stats"]["adv_max_abs_diff"] == 0.0
    for side in ("a", "b"):
        assert summary[side]["failures"] == 0 and summary[side]["judge"]["calls"] == 4
    assert summary["a"]["judge"]["prompt_tokens"] == summary["b"]["judge"]["prompt_tokens"] > 0


def test_the_tiny_judge_against_a_hosted_judge(judge_path, judged_input, standin, tmp_path):
    out = tmp_path / "hosted"
    result = invoke("--profile", "tiny-genrm", "--input", judged_input, *hosted(standin), "--out", out)
    summary, scores = read(out)
    # side B is the hosted judge: every answer judged once, as the stand-in judges it
    assert scores["b_score"].tolist() == EXPECTED * 3
    assert summary["b"]["judge"]["calls"] == 12 and summary["b"]["failures"] == 0
    assert len([p for _, p in standin.accepted if "Reference answer:" in p]) == 12
    assert summary["b"]["judge"]["completion_tokens"] > 0
    diff = summary["differs"]["contract"]
    assert not diff["same"] and diff["parts"] == ["dtype", "model"]
    assert {"reward.server.addresses", "reward.server.model", "reward.server.api_key_env"} <= set(
        summary["differs"]["settings"]
    )
    # the tiny judge (98-99.9% accurate on held-out answers) gets these 12 right: the two judges agree
    binary = summary["agreement"]["binary"]
    assert scores["a_score"].tolist() == EXPECTED * 3, result.output
    assert binary["confusion"] == [[6, 0], [0, 6]] and binary["kappa"] == 1.0
    assert result.exit_code == 0 and summary["verdict"] == "pass", result.output
    assert KEY not in (out / "summary.json").read_text()  # the key's variable is named, its value never written


def test_a_hosted_judge_with_a_broken_template_fails_naming_why(standin, judged_input, tmp_path):
    # both sides the hosted judge; side B's template shows the question where the reference answer belongs
    broken = "Problem: {question}\nAnswer: {response}\nReference answer: {question}\nSay Score: 10 or Score: 0."
    out = tmp_path / "broken"
    args = ["--profile", "tiny-genrm", "--input", judged_input, *hosted(standin, "--set")]
    result = invoke(*args, "--b-set", f"reward.genrm.template={broken}", "--out", out)
    assert result.exit_code == 1, result.output
    summary, scores = read(out)
    assert scores["a_score"].tolist() == EXPECTED * 3 and scores["b_score"].tolist() == [0.0] * 12
    assert summary["differs"]["settings"] == ["reward.genrm.template"]
    assert summary["differs"]["contract"]["parts"] == ["reference", "template"]
    # 6 right answers judged wrong: 6 of 12 outside the band; kappa 0 (B always says no)
    assert summary["reasons"][0].startswith("6 of 12 samples (allowed 0) differ by more than")
    binary = summary["agreement"]["binary"]
    assert binary["confusion"] == [[6, 0], [6, 0]] and binary["rate"] == 0.5 and binary["kappa"] == 0.0
    assert summary["stats"]["adv_sign_agreement"] < 1.0
    assert "FAIL" in result.output and "template" in result.output
