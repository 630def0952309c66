"""Parity fixtures: hand-made GRPO groups, a DisRM whose scores spread like a trained one's, and
reward servers started once per module on free ports."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlrm.parity.inputs import ParitySample


@pytest.fixture(scope="session")
def arithmetic_samples() -> list[ParitySample]:
    """6 GRPO groups of 4 (see `arithmetic_groups`)."""
    return arithmetic_groups()


def arithmetic_groups(num_groups: int = 6, n: int = 4) -> list[ParitySample]:
    """`num_groups` synthetic problems x `n` responses in the policy's format: the right answer and
    near misses (a wrong final answer, a wrong sum) and a long answer that a 64-position model
    truncates, so every group has something to rank."""
    from rlrm.config.schema import PROMPT_SUFFIX, SyntheticConfig
    from rlrm.engine.data.synthetic import synthetic_splits

    train, _ = synthetic_splits(SyntheticConfig(num_train=num_groups, num_test=1, max_value=10), PROMPT_SUFFIX)
    samples = []
    for ex in train:
        equation = ex.extra_info["solution"].split(" = ")[0]
        answer = int(ex.ground_truth)
        responses = [
            f"{equation} = {answer}\n#### {answer}",
            f"{equation} = {answer}\n#### {answer + 2}",
            f"{equation} = {answer + 1}\n#### {answer + 1}",
            f"{equation} = {answer}. Check it again: {equation} = {answer}.\n#### {answer}",  # long: over 64 tokens
        ]
        for j in range(n):
            samples.append(ParitySample(f"{ex.uid}#{j}", ex.uid, ex.prompt, responses[j % len(responses)]))
    return samples


@pytest.fixture(scope="session")
def spread_disrm_path(tmp_path_factory, tiny_policy_path) -> Path:
    """A random Qwen2 DisRM initialised with std 0.2 (instead of 0.02), so that, like a trained reward
    model and unlike `random_disrm_path` (whose scores are nearly constant), its scores separate the
    samples by far more than bf16 rounding moves them. 64 positions: long conversations get truncated."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForSequenceClassification

    tok = AutoTokenizer.from_pretrained(tiny_policy_path)
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, num_labels=1, pad_token_id=tok.pad_token_id,
        initializer_range=0.2,
    )
    path = tmp_path_factory.mktemp("spread-disrm")
    Qwen2ForSequenceClassification(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _server(path: Path):
    from rlrm.launch.ports import free_port
    from rlrm.launch.process import ServerProcess, embedded_server_argv

    return ServerProcess(embedded_server_argv(str(path), "disrm", free_port(), extra=["--threads", "1"]))


@pytest.fixture(scope="session")
def spread_disrm_server(spread_disrm_path):
    """A served fp32 copy of the spread DisRM (tests pass its URL as a running reward server)."""
    with _server(spread_disrm_path) as server:
        yield server


@pytest.fixture(scope="session")
def random_disrm_server(random_disrm_path):
    with _server(random_disrm_path) as server:
        yield server
