"""`rlrm inspect reward` through Typer's CliRunner: real reward servers started and stopped by the
command (as in training), JSON read back, lints, --strict, and bad inputs named in one line."""

from __future__ import annotations

import json

import pytest

from tests.unit.reward_checks.test_inspect_cli import QUESTION, invoke, write_rows


def test_the_reward_contract_is_shown_as_a_run_records_it():
    from rlrm.config.loader import load_profile
    from rlrm.engine.rewards.contract import reward_contract

    args = ["--profile", "tiny-rule", "--prompt", QUESTION, "--response", "#### 8", "--ground-truth", "8"]
    report = json.loads(invoke(*args, "--json").stdout)
    expected = reward_contract(load_profile("tiny-rule").reward)
    assert report["reward_contract"]["fingerprint"] == expected.fingerprint
    assert report["reward_contract"]["parts"]["parser"]["rule"]["method"] == "strict"
    flexible = json.loads(invoke(*args, "--json", "--set", "reward.method=flexible").stdout)
    assert flexible["reward_contract"]["fingerprint"] != expected.fingerprint
    shown = invoke(*args)
    assert f"reward contract {expected.short} (of kind, parser, reference" in shown.output


def test_custom_reward_shows_what_the_function_returned(tmp_path):
    fn = tmp_path / "length_reward.py"
    fn.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info):\n"
        "    return {'score': len(solution_str) / 100, 'chars': len(solution_str)}\n"
    )
    result = invoke(
        "--profile",
        "tiny-rule",
        "--set",
        "reward.kind=custom",
        "--set",
        f"reward.custom.path={fn}",
        "--prompt",
        QUESTION,
        "--response",
        "2 + 6 = 8\n#### 8",
        "--json",
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    (record,) = report["samples"]
    assert "reward.kind=custom" in report["notes"][0] and "extracted_answer" not in record
    assert record["score"] == 0.16 and record["extra"] == {"chars": 16}  # "2 + 6 = 8\n#### 8": 16 characters


def test_disrm_samples_show_rendering_truncation_score_token_and_lints(
    tmp_path, random_disrm_path, random_disrm_server
):
    clean = {"prompt": QUESTION, "response": "2 + 6 = 8\n#### 8", "ground_truth": "8"}
    eos = {"prompt": QUESTION, "response": "2 + 6 = 8\n#### 8<|im_end|>", "ground_truth": "8"}
    long = {
        "prompt": QUESTION,
        "response": "2 + 6 = 8. Again: 2 + 6 = 8. Once more: 2 + 6 = 8.\n#### 8",
        "ground_truth": "8",
    }
    path = write_rows(tmp_path / "in.jsonl", [clean, eos, long])
    args = ("--profile", "tiny-disrm", "--input", path, "--set", "reward.disrm.max_length=60", "--json")
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    first, second, third = report["samples"]
    assert first["rendered_text"].startswith("<|im_start|>user\n") and first["rendered_text"].endswith(
        "#### 8<|im_end|>\n"
    )
    assert first["score_token"]["text"] == "\n" and first["score_token"]["position"] == first["tokens"] - 1
    assert (
        first["truncation"] is None and third["truncation"]["tokens_removed"] == third["tokens_before_truncation"] - 60
    )
    for r in report["samples"]:
        assert float(r["raw_score_float32"]) == pytest.approx(
            r["score"], abs=0, rel=0
        )  # the loop's score is the raw logit
    # the EOS text left in a response is rendered as a second turn end, and moves the score: why the lint exists
    assert second["rendered_text"].endswith("#### 8<|im_end|><|im_end|>\n") and second["score"] != first["score"]
    assert {(f["lint"], tuple(f["samples"])) for f in report["lints"]} == {
        ("eos-in-response", (1,)),
        ("truncated", (2,)),
    }
    # --strict fails on the same lints, which come from the rendering, not the scores: asked of the session's random
    # DisRM server (same tokenizer; tests/integration/conftest.py) rather than launching the tiny DisRM again
    served = [
        "--set",
        f"reward.server.model={random_disrm_path}",
        "--set",
        f"reward.server.addresses=[{random_disrm_server.url}]",
    ]
    strict = invoke(*args[:-1], *served, "--strict")
    assert strict.exit_code == 1 and "eos-in-response" in strict.output and "rendered for the DisRM" in strict.output


def test_the_fapo_example_a_custom_reward_taking_the_judge_tokenizer_is_inspected(tmp_path):
    # tiny-fapo's reward is the repository's own example: a custom function given reward_router_address and
    # reward_model_tokenizer; inspect hands it a recording balancer, which must answer what train's does
    path = write_rows(
        tmp_path / "in.jsonl", [{"prompt": QUESTION, "response": "2 + 6 = 8\n#### 8", "ground_truth": "8"}] * 2
    )
    result = invoke("--profile", "tiny-fapo", "--input", path, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert len(report["samples"]) == 2
    assert all(isinstance(r["score"], float) for r in report["samples"]), report["samples"]


@pytest.mark.slow
def test_genrm_judge_prompt_verdict_and_judge_lints(tmp_path):
    path = write_rows(
        tmp_path / "in.jsonl", [{"prompt": QUESTION, "response": "2 + 6 = 8\n#### 8", "ground_truth": "8"}] * 2
    )
    result = invoke("--profile", "tiny-genrm", "--input", path, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["lints"] == []
    for r in report["samples"]:
        assert "Reference answer: 8" in r["judge_prompt_text"] and r["judge_prompt_text"].endswith(
            "<|im_start|>assistant\n"
        )
        assert r["parsed_score"] == 1.0 and r["score"] == 1.0 and r["usage"]["completion_tokens"] > 0
    broken = invoke(
        "--profile",
        "tiny-genrm",
        "--input",
        path,
        "--json",
        "--set",
        "reward.genrm.max_tokens=3",
        "--set",
        "reward.genrm.template=Problem: {question}\nAnswer: {response:.3}\nReference: {reference}",  # cut to 3
    )
    assert broken.exit_code == 0, broken.output
    report = json.loads(broken.stdout)
    assert {f["lint"] for f in report["lints"]} == {"judge-template-missing-response", "verdict-unparsed", "truncated"}
    assert all(r["score"] is None and r["parse_error"] for r in report["samples"])


def test_a_composite_gate_shows_its_rule_wrong_samples_as_not_asked(tmp_path):
    """A gate asks the judge only about rule-right answers: a rule-wrong one has no judge exchange to show (its
    table crashed on it), and says why."""
    rows = [
        {"prompt": QUESTION, "response": "2 + 6 = 8\n#### 8", "ground_truth": "8"},
        {"prompt": QUESTION, "response": "2 + 6 = 9\n#### 9", "ground_truth": "8"},
    ]
    path = write_rows(tmp_path / "in.jsonl", rows)
    gate = ["--profile", "tiny-genrm", "--set", "reward.kind=composite", "--set", "reward.composite.mode=gate"]
    shown = invoke(*gate, "--input", path)
    assert shown.exit_code == 0, shown.output
    report = json.loads(invoke(*gate, "--input", path, "--json").stdout)
    right, wrong = report["samples"]
    assert right["judge_prompt_text"] and right["parsed_score"] == 1.0
    assert wrong["judge_prompt_text"] is None and wrong["parse_error"] == "not asked: gated by the rule"
    assert "not asked: gated by the rule" in shown.output
    assert not any(f["lint"] == "judge-request-failed" for f in report["lints"])  # not asked is no failed request


@pytest.mark.slow
def test_invariance_passes_on_the_tiny_disrm_and_fails_on_a_batch_dependent_server():
    import sys
    from pathlib import Path

    from rlrm.engine.models.tiny import resolve_model_path
    from rlrm.launch.common.ports import free_port
    from rlrm.launch.fleet.process import ServerProcess

    args = ("--profile", "tiny-disrm", "--n", "16", "--invariance", "--json", "--set", "reward.server.max_batch=16")
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    inv = json.loads(result.stdout)["invariance"]
    assert (
        inv["passed"]
        and inv["samples"] == 16
        and len(inv["comparisons"]) == 4
        and inv["max_abs_diff"] <= inv["tolerance"]
    )
    script = Path(__file__).with_name("leaky_server.py")  # the stand-in batch-dependent DisRM server
    argv = [
        sys.executable,
        str(script),
        "--model",
        resolve_model_path("tiny:disrm"),
        "--role",
        "disrm",
        "--port",
        str(free_port()),
        "--threads",
        "1",
    ]
    with ServerProcess.movable(argv) as leaky:  # started again on a fresh port if another process took this one
        result = invoke(*args, "--set", f"reward.server.addresses={leaky.url}")
    assert result.exit_code == 1, result.output
    assert not json.loads(result.stdout)["invariance"]["passed"]
