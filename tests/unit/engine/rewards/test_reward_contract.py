"""The reward contract fingerprint and the run folder's reward_contract.json (rlrm/engine/rewards/contract.py,
model_identity.py, rlrm/engine/run_contract.py)."""

from __future__ import annotations

import json

import pytest

from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards import model_identity
from rlrm.engine.rewards.contract import changed_parts, reward_contract
from rlrm.engine.run_contract import CONTRACT_FILE, check_run_contract
from rlrm.errors import ConfigError

MODEL = {"name": "judge", "path": "/m", "weights": "sha256:0"}
GENRM = {"kind": "genrm", "server": {"model": "judge"}}


def contract(model=MODEL, source=None, **kw):
    return reward_contract(RewardConfig(**{**GENRM, **kw}), model, source)


@pytest.mark.parametrize(
    "change, part",
    [
        ({"genrm": {"template": "Judge: {question} {response}"}}, "template"),
        ({"genrm": {"verdict": "boxed"}}, "parser"),
        ({"genrm": {"max_score": 5}}, "parser"),
        ({"server": {"model": "judge", "dtype": "bfloat16"}}, "dtype"),
        ({"overlong": {"buffer_len": 4}}, "shaping"),
        ({"genrm": {"template": "{question} {response} {reference}"}}, "template"),
        # a launched judge's own arguments: its chat template, quantization, KV-cache dtype
        ({"server": {"model": "judge", "backend": "vllm", "extra_args": ["--quantization", "fp8"]}}, "dtype"),
        ({"server": {"model": "judge", "backend": "vllm", "extra_args": ["--chat-template=j.jinja"]}}, "dtype"),
    ],
)
def test_each_change_that_decides_a_score_names_its_part(change, part):
    changed = changed_parts(contract().parts, contract(**change).parts)
    assert part in changed
    assert contract(**change).fingerprint != contract().fingerprint


def test_a_chat_template_file_edited_in_place_is_another_contract(tmp_path):
    template = tmp_path / "judge.jinja"
    server = {"model": "judge", "backend": "vllm", "extra_args": ["--chat-template", str(template)]}
    template.write_text("{{ messages }}")
    before = contract(server=server).fingerprint
    template.write_text("{{ messages }} Answer with Score: N.")
    assert contract(server=server).fingerprint != before
    unset = contract(server={**server, "extra_args": []})
    assert "extra_args" not in unset.parts["dtype"]  # no key when unset: older runs' contracts stay as they were


def test_the_reference_part_says_whether_the_judge_sees_it():
    seen = contract(genrm={"template": "{question} {response} {reference}"})
    assert seen.parts["reference"]["judge_sees"] and not contract().parts["reference"]["judge_sees"]


def test_model_identity_composite_weights_and_custom_source_are_parts(tmp_path):
    assert changed_parts(contract().parts, contract(model={**MODEL, "weights": "sha256:1"}).parts) == ["model"]
    composite = {"kind": "composite", "server": {"model": "judge"}}
    a = reward_contract(RewardConfig(**composite), MODEL)
    b = reward_contract(RewardConfig(**composite, composite={"rule_weight": 0.7}), MODEL)
    assert changed_parts(a.parts, b.parts) == ["composite"]
    fn = tmp_path / "r.py"
    fn.write_text("def compute_score(*a, **k):\n    return 1.0\n")
    custom = RewardConfig(kind="custom", custom={"path": str(fn)})
    before = reward_contract(custom, None, model_identity.source_digest(str(fn)))
    fn.write_text("def compute_score(*a, **k):\n    return 0.0\n")
    after = reward_contract(custom, None, model_identity.source_digest(str(fn)))
    assert changed_parts(before.parts, after.parts) == ["custom"]


def test_the_failure_policy_and_worker_settings_are_not_part_of_it():
    same = contract(on_failure="drop-group", default_score=-1.0, num_workers=9, attempt_timeout_s=3, max_retries=0)
    assert same.fingerprint == contract().fingerprint


def test_a_rule_contract_has_no_model_and_names_its_parser():
    rule = reward_contract(RewardConfig())
    assert rule.parts["model"] is None and rule.parts["template"] is None
    flexible = reward_contract(RewardConfig(method="flexible"))
    assert changed_parts(rule.parts, flexible.parts) == ["parser"]


def test_a_folder_digest_changes_with_one_byte_of_the_weights(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text("{}")
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(bytes(range(256)) * 64)
    (tmp_path / ".lock").write_text("pid")  # beside the weights, not part of them
    first = model_identity.folder_digest(tmp_path)
    (tmp_path / ".lock").write_text("another pid")
    assert model_identity.folder_digest(tmp_path) == first
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    assert model_identity.folder_digest(tmp_path) != first
    # a file past SAMPLED_FROM is read at both ends: its last byte still counts
    monkeypatch.setattr(model_identity, "SAMPLED_FROM", 1024)
    monkeypatch.setattr(model_identity, "SAMPLE_BYTES", 256)
    sampled = model_identity.folder_digest(tmp_path)
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    assert model_identity.folder_digest(tmp_path) != sampled


def test_a_resume_with_a_changed_template_stops_naming_it(tmp_path):
    old = contract()
    assert check_run_contract(tmp_path, old, allow_change=False, step=0) == []
    saved = json.loads((tmp_path / CONTRACT_FILE).read_text())
    assert saved["fingerprint"] == old.fingerprint and saved["changes"] == []
    assert check_run_contract(tmp_path, old, allow_change=False, step=3) == []  # the same reward: nothing to say

    new = contract(genrm={"template": "Judge: {question} {response}"})
    with pytest.raises(ConfigError, match=r"the reward changed since this run was started: template \(") as info:
        check_run_contract(tmp_path, new, allow_change=False, step=3)
    assert "reward.allow_contract_change=true" in str(info.value) and "\n" not in str(info.value)
    assert str(info.value).split(": ", 1)[1].startswith("template ('")  # where the two texts part, both sides
    assert json.loads((tmp_path / CONTRACT_FILE).read_text()) == saved  # nothing written

    assert check_run_contract(tmp_path, new, allow_change=True, step=3) == ["template"]
    record = json.loads((tmp_path / CONTRACT_FILE).read_text())
    assert record["fingerprint"] == new.fingerprint
    assert record["changes"] == [
        {"at_step": 3, "changed": ["template"], "from": old.fingerprint, "to": new.fingerprint}
    ]


def test_a_change_is_shown_where_it_is():
    """The part's keys that changed, each with its two values, and of two long texts where they first differ:
    both cut at the same place before, so the difference never showed."""
    from rlrm.engine.rewards.contract import describe_change

    old = {"disrm": None, "genrm": None, "rubric": None, "rule": {"method": "strict", "format_score": 0.0}}
    new = {"disrm": None, "genrm": None, "rubric": None, "rule": {"method": "flexible", "format_score": 0.0}}
    assert describe_change("parser", old, new) == "parser.rule.method ('strict' -> 'flexible')"
    text = "You are a strict grader. Is the answer to this problem correct? Problem: {question} Answer: {response}"
    assert describe_change("template", text, text.replace("Problem:", "Question:")) == (
        "template ('...em correct? Problem: {question} Answer: ...' -> '...em correct? Question: {question} "
        "Answer:...')"
    )
    assert describe_change("model", None, "judge-v2") == "model ('null' -> 'judge-v2')"
    # a key one side lacks and the other holds as null (a contract written before the part was added): it showed
    # the two same cut texts, "parser ('{"disrm": null, "genrm": ...' -> '{"disrm": null, "genrm": ...')"
    earlier = {k: v for k, v in old.items() if k != "rubric"}
    assert describe_change("parser", earlier, old) == "parser.rubric (absent -> 'null')"


def test_the_overlong_penalty_length_is_part_of_the_contract():
    # 90 tokens, buffer 20: at max_new_tokens 100 the penalty is 0.5, at 200 none; both had one fingerprint,
    # against the contract's "same fingerprint, same score"
    import asyncio

    from rlrm.engine.reward_service import RewardService
    from rlrm.engine.rewards.base import RewardSample

    def score_and_fingerprint(max_len: int):
        async def go():
            service = RewardService(RewardConfig(overlong={"buffer_len": 20}), max_response_len=max_len)
            await service.start()
            try:
                prompt = [{"role": "user", "content": "1+2?"}]
                sample = RewardSample("u", 0, "openai/gsm8k", prompt, "1 + 2 = 3\n#### 3", "3", response_length=90)
                (result,) = await service.loop.score_all([sample])
                return result.score, service.contract.fingerprint
            finally:
                await service.close()

        return asyncio.run(go())

    (short, short_print), (long, long_print) = score_and_fingerprint(100), score_and_fingerprint(200)
    assert (short, long) == (0.5, 1.0) and short_print != long_print


def test_the_math_rule_is_part_of_the_contract_and_gsm8k_contracts_are_as_before():
    gsm8k = reward_contract(RewardConfig())
    assert gsm8k.parts["parser"]["rule"] == {"method": "strict", "score": 1.0, "format_score": 0.0}  # as every run's
    math = reward_contract(RewardConfig(rule="math"))
    assert math.parts["parser"]["rule"] == {"rule": "math", "score": 1.0, "format_score": 0.0}
    assert changed_parts(gsm8k.parts, math.parts) == ["parser"]
