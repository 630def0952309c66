"""The samples `rlrm inspect reward` scores: a file, one prompt and response, or the profile's own.

    samples = read_inspect_file("samples.jsonl")          # prompt, response, optional ground_truth
    samples = [one_sample("What is 2 + 3?", "2 + 3 = 5\\n#### 5")]
    samples = policy_samples(profile, k=4, seed=0)         # the policy's responses to the first k prompts

A file row holds `prompt` (a string, one user turn, or a list of {role, content} messages) and
`response` (text, exactly as the reward receives it), and optionally `ground_truth` (the reference
answer: the rule and judges that use {reference} need it), `data_source`, `group_id` and `turns` (an
agent trajectory, as extra_info["turns"] holds it: a list of {"role": "assistant", "text": ...,
"tool_call": {"name", "arguments"}} and {"role": "tool", "name": ..., "text": ...}). A row's turns give the
reward the keys training gives it (num_turns, turns, tool_calls as {name, arguments, result}: a call's result is
the text of the tool turn after it; tool_rewards), made by the agent loop's own function. With
`rollout.agent.enabled`, `policy_samples` runs the agent loop as training does. Every problem is a DataError
that names the file and the row.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

from rlrm.engine.agent.engine import in_process_engine
from rlrm.engine.agent.loop import trajectory_extra_info as _extra_info
from rlrm.engine.data.dataset import load_splits
from rlrm.engine.data.prompts import encode_prompts
from rlrm.engine.models.tiny import resolve_model_path
from rlrm.engine.rewards.base import RewardSample
from rlrm.engine.scheduling.requests import (
    generate_groups,
    reward_samples,
    sampling_params,
)
from rlrm.errors import DataError
from rlrm.inference.loading import (
    load_causal_lm,
    load_tokenizer,
    pick_device,
)
from rlrm.jsonl_lines import jsonl_lines

REQUIRED = ("prompt", "response")


def read_jsonl(path: Path, what: str) -> list[tuple[int, dict]]:
    """(line number, row) of each row of a .jsonl file (a bad line or an empty file is a DataError naming it)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{what} {path} does not exist")
    if path.suffix != ".jsonl":
        raise DataError(f"{what} {path}: expected a .jsonl file (one JSON object per line)")
    rows = []
    for lineno, line in jsonl_lines(path, "row"):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path} row {lineno}: not valid JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise DataError(f"{path} row {lineno}: expected a JSON object, got {type(row).__name__}")
        rows.append((lineno, row))
    if not rows:
        raise DataError(f"{path} holds no rows")
    return rows


def messages_of(prompt, where: str) -> list[dict]:
    """A prompt field as chat messages: a string is one user turn."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if (
        isinstance(prompt, list)
        and prompt
        and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in prompt
        )
    ):
        return [{"role": m["role"], "content": m["content"]} for m in prompt]
    raise DataError(f"{where}: prompt must be a string or a list of {{role, content}} messages")


def read_inspect_file(path: Path) -> list[RewardSample]:
    """Samples from a .jsonl file of prompt, response (and optional ground_truth, data_source, group_id, turns and
    extra_info: an object a custom function reads, as verl's datasets give it)."""
    samples = []
    for i, (lineno, row) in enumerate(read_jsonl(path, "--input")):
        where = f"{path} row {lineno}"
        missing = [f for f in REQUIRED if row.get(f) is None]
        if missing:
            raise DataError(f"{where}: missing field(s) {', '.join(missing)} (each row needs {', '.join(REQUIRED)})")
        if not isinstance(row["response"], str):
            raise DataError(f"{where}: response must be text, got {type(row['response']).__name__}")
        extra = row.get("extra_info")
        if extra is not None and not isinstance(extra, dict):
            raise DataError(f"{where}: extra_info must be an object, got {type(extra).__name__}")
        sample = _sample(
            i,
            messages_of(row["prompt"], where),
            row["response"],
            row.get("ground_truth"),
            row.get("data_source"),
            row.get("group_id"),
            _turns(row.get("turns"), where),
        )
        # the row's own keys as training gives them (a function reading extra_info["index"] is checked as it runs;
        # its "question" is the judge's, as in training), a trajectory's keys as its turns make them
        made = dict(sample.extra_info)
        merged = {"question": made.pop("question"), **(extra or {}), **made}
        samples.append(replace(sample, extra_info=merged))
    return samples


def _turns(turns, where: str) -> list[dict] | None:
    """A row's trajectory turns, checked: dicts with role assistant or tool and a text."""
    if turns is None:
        return None
    if not isinstance(turns, list) or not turns:
        raise DataError(f"{where}: turns must be a non-empty list of {{role, text}} turns")
    for k, turn in enumerate(turns):
        if not isinstance(turn, dict) or turn.get("role") not in ("assistant", "tool"):
            raise DataError(f"{where}: turns[{k}] must be a dict with role 'assistant' or 'tool'")
        if not isinstance(turn.get("text"), str):
            raise DataError(f"{where}: turns[{k}] needs a text string")
        if turn.get("tool_call") is not None and not isinstance(turn["tool_call"], dict):
            raise DataError(f"{where}: turns[{k}].tool_call must be a dict of name and arguments")
    return turns


def trajectory_extra_info(turns: list[dict]) -> dict:
    """The extra_info keys an agent trajectory gives the reward (num_turns, turns, tool_calls, tool_rewards), made by
    the agent loop's own function from a file's turns (rlrm/engine/agent/loop.py `trajectory_extra_info`), so a
    call's `result` (the tool turn that answers it) is there as in training. The turns are copies: the row is not
    changed."""
    copied: list[dict] = []
    tool_rewards: list[float] = []
    for k, turn in enumerate(turns):
        turn = dict(turn)
        if turn["role"] == "assistant" and turn.get("tool_call"):
            turn["tool_call"] = dict(turn["tool_call"])
            answer = turns[k + 1] if k + 1 < len(turns) and turns[k + 1]["role"] == "tool" else None
            if "tool_result" not in turn and answer is not None:  # the loop records it on the calling turn
                turn["tool_result"] = answer["text"]
            if "tool_reward" in turn:
                tool_rewards.append(turn["tool_reward"])
        copied.append(turn)
    return _extra_info(copied, tool_rewards)


def one_sample(prompt: str, response: str, ground_truth: str | None = None) -> RewardSample:
    """The sample of `--prompt TEXT --response TEXT`."""
    return _sample(0, [{"role": "user", "content": prompt}], response, ground_truth)


def _sample(
    index: int, prompt: list[dict], response: str, ground_truth=None, data_source=None, group_id=None, turns=None
) -> RewardSample:
    question = prompt[-1]["content"]
    extra = {"question": question}
    if turns:  # verl's keys, as the agent loop gives them to the reward (rlrm/engine/agent/loop.py)
        extra |= trajectory_extra_info(turns)
    return RewardSample(
        uid=str(group_id) if group_id is not None else f"input/{index}",
        index=index,
        data_source=str(data_source or "input"),
        prompt=prompt,
        solution_str=response,
        ground_truth="" if ground_truth is None else str(ground_truth),
        extra_info=extra,
    )


def policy_samples(profile, k: int, seed: int = 0) -> list[RewardSample]:
    """One response of the profile's policy to each of the first `k` prompts of its test split.

    The trainer's own pieces make them (prompt encoding, the hf rollout engine, seeded requests,
    `reward_samples`), so they are what the reward meets in training; the test split keeps the
    check apart from the prompts a run trains on.
    """
    import torch

    torch.manual_seed(seed)
    _, test, _ = load_splits(profile.data)
    if not test:
        raise DataError("the profile's test split is empty: pass --input FILE or --prompt/--response")
    examples = test[:k]
    path = resolve_model_path(profile.model.path)
    tokenizer = load_tokenizer(path)
    policy = load_causal_lm(path, profile.model.dtype, pick_device(profile.trainer.device))
    prompt_ids, kept, _ = encode_prompts(
        examples, tokenizer, profile.data.max_prompt_length, profile.data.prompt_too_long
    )
    engine = in_process_engine(profile, policy, tokenizer)

    async def run():
        try:
            return await generate_groups(engine, prompt_ids, sampling_params(profile), 1, seed, step=0)
        finally:
            await engine.close()

    return reward_samples(tokenizer, kept, asyncio.run(run()), 1)
