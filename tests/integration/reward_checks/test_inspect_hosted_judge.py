"""`rlrm inspect reward` with a judge behind a hosted API (a stand-in of the test's own on loopback, its model a
name no hub holds): scored as `rlrm train` scores it, with no tokenizer asked of the hub (none can be reached),
and each judge prompt shown as the messages sent."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))
from odd_judge_api import OddJudgeAPI  # noqa: E402
from small_run import as_set_args  # noqa: E402

from tests.unit.reward_checks.test_inspect_cli import QUESTION, invoke  # noqa: E402


def test_a_hosted_judge_is_inspected_without_a_hub_tokenizer(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("ODD_KEY", "sk-odd-0123")
    with OddJudgeAPI(model="gpt-4o-mini") as api:
        sets = [
            "reward.kind=genrm",
            "reward.server.model=gpt-4o-mini",
            f"reward.server.addresses={api.base_url}",
            "reward.server.api_key_env=ODD_KEY",
        ]
        args = ["--profile", "tiny-rule", "--prompt", QUESTION, "--response", "#### 8", "--ground-truth", "8"]
        result = invoke(*args, *as_set_args(*sets), "--json")
        judged = api.requests["/v1/chat/completions"]
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    [record] = report["samples"]
    assert record["verdict"] == "Score: 10" and record["parsed_score"] == 1.0 and record["score"] == 1.0
    assert record["judge_prompt_text"].startswith("user: Is the answer to this problem correct?")
    assert QUESTION in record["judge_prompt_text"]
    assert any("its tokenizer is not on this machine" in note for note in report["notes"]), report["notes"]
    assert judged == 2  # the readiness probe and the one judgement
