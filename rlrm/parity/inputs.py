"""What both DisRM paths score: (prompt messages, response, group) samples, and their token ids.

    samples = read_samples("pairs.jsonl")                      # or:
    samples = generate_samples(profile, num_prompts=16, n=8)   # the profile's policy on its dataset
    encoded = encode_samples(rm_tokenizer, samples, max_length=512, truncation="keep-end")

A file holds one row per sample with `prompt` (chat messages, or a string for one user turn),
`response` (text), `group_id` (the GRPO group: the prompt it answers) and optionally `sample_id`,
`reference` (the reference answer a rule or a GenRM judge compares with), `question` (what a judge
template's {question} shows; default: the last prompt message) and `data_source`.

Both paths see the same tokens: the conversation is rendered with the reward model's chat template
by the reward loop's own function (`rlrm.engine.rewards.disrm.render_conversation`), and a
conversation longer than `max_length` is cut the same way in both (see `encode_samples`).
"""

from __future__ import annotations

import json
import math
import numbers
from dataclasses import dataclass
from pathlib import Path

from rlrm.engine.agent.engine import in_process_engine
from rlrm.engine.data.dataset import load_splits
from rlrm.engine.data.prompts import encode_prompts
from rlrm.engine.models.tiny import resolve_model_path
from rlrm.engine.rewards.disrm import render_conversation
from rlrm.engine.scheduling.requests import generate_groups, reward_samples, sampling_params
from rlrm.errors import DataError
from rlrm.inference.loading import load_causal_lm, load_tokenizer, pick_device
from rlrm.jsonl_lines import jsonl_lines
from rlrm.parity.config import TRUNCATIONS

REQUIRED_FIELDS = ("prompt", "response", "group_id")


@dataclass(frozen=True)
class ParitySample:
    sample_id: str
    group_id: str
    prompt: list[dict]  # chat messages
    response: str  # decoded without special tokens, as the reward loop sees it
    response_tokens: int | None = None  # policy tokens of the response (EOS included), when generated here
    reference: str | None = None  # the reference answer (ground truth) a rule or a GenRM judge compares with
    extra_info: dict | None = None  # the dataset row's extra_info (the judge's {question}), when known
    data_source: str = "parity"


@dataclass
class Encoded:
    """Reward-model token ids of every sample, after truncation."""

    ids: list[list[int]]
    truncated: list[bool]
    full_lengths: list[int]  # before truncation
    response_tokens: list[int]  # where the score lands in the token-level tensor (>= 1)


def read_samples(path: str | Path) -> list[ParitySample]:
    """Samples from a `.jsonl` or `.parquet` file; every problem is a DataError naming the row."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"input file {path} does not exist")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            rows = pq.read_table(path).to_pylist()  # plain Python values (pandas: numpy arrays in list columns)
        except Exception as exc:
            raise DataError(f"cannot read {path}: {str(exc).splitlines()[0]}") from None
        places = [f"row {i + 1}" for i in range(len(rows))]
    elif path.suffix == ".jsonl":
        rows, places = [], []
        for lineno, line in jsonl_lines(path):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DataError(f"{path} line {lineno}: not valid JSON ({exc.msg})") from None
            places.append(f"line {lineno}")
    else:
        raise DataError(f"{path}: unsupported input type {path.suffix!r}; use .jsonl or .parquet")
    if not rows:
        raise DataError(f"{path} holds no samples")
    samples = [_to_sample(row, i, f"{path} {place}") for i, (row, place) in enumerate(zip(rows, places))]
    seen: set[str] = set()
    for s in samples:
        if s.sample_id in seen:
            raise DataError(f"{path}: sample_id {s.sample_id!r} appears more than once")
        seen.add(s.sample_id)
    return samples


def _to_sample(row, index: int, where: str) -> ParitySample:
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected an object with {', '.join(REQUIRED_FIELDS)}, got {type(row).__name__}")
    missing = [f for f in REQUIRED_FIELDS if row.get(f) is None]
    if missing:
        raise DataError(f"{where}: missing field(s) {', '.join(missing)} (need {', '.join(REQUIRED_FIELDS)})")
    prompt = row["prompt"]
    if isinstance(prompt, str):
        prompt = [{"role": "user", "content": prompt}]
    else:
        # parquet gives arrays of dicts; anything else (a number, a list of strings) is named, not a traceback
        messages = list(prompt) if hasattr(prompt, "__iter__") and not isinstance(prompt, dict) else None
        if not messages or not all(
            hasattr(m, "keys") and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages
        ):
            raise DataError(
                f"{where}: prompt must be a string or a list of {{role, content}} messages, got {_shown(prompt)}"
            )
        prompt = [dict(m) for m in messages]
    if not isinstance(row["response"], str):
        raise DataError(f"{where}: response must be text, got {type(row['response']).__name__}")
    for key in ("group_id", "sample_id"):
        value = row.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (str, numbers.Integral))):
            raise DataError(f"{where}: {key} must be a string or an integer, got {_shown(value)}")
    sample_id = row.get("sample_id")
    reference, question, source = (
        _optional_text(row.get(k), k, where) for k in ("reference", "question", "data_source")
    )
    return ParitySample(
        sample_id=str(sample_id) if sample_id is not None else str(index),
        group_id=str(row["group_id"]),
        prompt=prompt,
        response=row["response"],
        reference=reference,
        extra_info={"question": question} if question is not None else None,
        data_source=source or "parity",
    )


def _optional_text(value, key: str, where: str) -> str | None:
    """An optional text field (a number is taken as its text); a parquet column's missing value (NaN) is None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, bool) or not isinstance(value, (str, numbers.Number)):
        raise DataError(f"{where}: {key} must be text or a number, got {_shown(value)}")
    return str(value)


def _shown(value) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def generate_samples(profile, num_prompts: int, n: int, seed: int = 0) -> list[ParitySample]:
    """`num_prompts` x `n` responses of the profile's policy to the first prompts of its train split.

    The rollout engine (in the agent loop with `rollout.agent.enabled`: trajectories with their tool calls run and
    their turns in extra_info), the prompt encoding and the seeded requests are the trainer's own (step 0), so the
    samples are what the first GRPO step of that profile would score.
    """
    import asyncio

    import torch

    torch.manual_seed(seed)
    train, _, _ = load_splits(profile.data)
    if len(train) < num_prompts:
        raise DataError(f"--samples {num_prompts} is more than the {len(train)} prompts of the profile's train split")
    path = resolve_model_path(profile.model.path)
    tokenizer = load_tokenizer(path)
    policy = load_causal_lm(path, profile.model.dtype, pick_device(profile.trainer.device))
    prompt_ids, examples, _ = encode_prompts(
        train[:num_prompts], tokenizer, profile.data.max_prompt_length, profile.data.prompt_too_long
    )
    engine = in_process_engine(profile, policy, tokenizer)  # the agent loop around it with rollout.agent.enabled

    async def run():
        try:
            return await generate_groups(engine, prompt_ids, sampling_params(profile), n, seed, step=0)
        finally:
            await engine.close()

    completions = asyncio.run(run())
    samples = reward_samples(tokenizer, examples, completions, n)
    return [
        ParitySample(
            f"{s.uid}#{s.index % n}",
            s.uid,
            s.prompt,
            s.solution_str,
            len(c.token_ids),
            reference=s.ground_truth,
            extra_info=dict(s.extra_info),
            data_source=s.data_source,
        )
        for s, c in zip(samples, completions)
    ]


def encode_samples(tokenizer, samples: list[ParitySample], max_length: int, truncation: str = "keep-end") -> Encoded:
    """Reward-model token ids, rendered as the reward loop renders them and cut to `max_length`.

    Args:
        truncation: `keep-end` keeps the last `max_length` tokens, as the reward loop's DisRM client
            does (`reward.disrm.too_long=truncate`): the end of the response is what is judged, and
            the position scored is the last token. `keep-start` keeps the first `max_length` tokens,
            as verl's legacy reward-model worker did (`truncation: right` in its
            `tokenize_and_postprocess_data`): the end of a long response, and the template's closing
            tokens, are cut off and the score is read mid-response. Use it to reproduce what the
            legacy path really scored; it differs from the reward loop on every truncated sample.
    """
    if truncation not in TRUNCATIONS:
        raise ValueError(f"unknown truncation {truncation!r}; use one of {', '.join(TRUNCATIONS)}")
    ids, truncated, full, response_tokens = [], [], [], []
    for s in samples:
        seq = render_conversation(tokenizer, s.prompt, s.response)
        full.append(len(seq))
        truncated.append(len(seq) > max_length)
        ids.append(seq[-max_length:] if truncation == "keep-end" else seq[:max_length])
        count = s.response_tokens
        if count is None:  # a file gives text only: count the reward model's tokens of the response
            count = len(tokenizer(s.response, add_special_tokens=False)["input_ids"])
        response_tokens.append(max(1, count))
    return Encoded(ids, truncated, full, response_tokens)
