"""rollout.compile=inductor on the CPU: a training run rolls out as the eager run does, and torch's recompile limit
ends no batch.

Slow: inductor compiles each decode-step shape with the C++ compiler (10-40 s on 2 cores). The buckets and the
loop are in the default tier (tests/unit/inference/test_static_decode.py); CUDA graphs in the gpu tier.
"""

from __future__ import annotations

import threading

import pytest
import torch

from rlrm.config.loader import load_profile
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.trainer import start_run, train
from rlrm.inference.base import SamplingParams
from rlrm.inference.decode import decode
from rlrm.inference.static_decode import StaticDecoder

pytestmark = pytest.mark.slow

SMALL = [
    "data.train_batch_size=4",
    "actor.mini_batch_size=4",
    "rollout.n=4",
    "rollout.max_new_tokens=16",
    "trainer.total_steps=2",
    "trainer.val_every=0",
    "trainer.val_before_train=false",
    "trainer.save_every=0",
    "trainer.device=cpu",
    "logging.console=none",
]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _first_step(tmp_path, name: str, *extra: str) -> dict:
    run_dir = start_run(load_profile("tiny-rule", [*SMALL, *extra]), tmp_path / name)
    assert train(run_dir).last_step == 2
    return next(row for row in read_metrics(run_dir / "metrics.jsonl") if row["step"] == 1)


def test_a_run_with_inductor_decoding_rolls_out_what_the_eager_run_does(tmp_path, tiny_policy_path, capfd):
    """The first rollout comes from the same weights and seeds; the compiled kernels round differently, so a draw
    at a token boundary may move: 16 samples agree within a token of mean length and one sample's score."""
    compiled = _first_step(tmp_path, "inductor", "rollout.compile=inductor")
    eager = _first_step(tmp_path, "eager")
    assert abs(compiled["response_length/mean"] - eager["response_length/mean"]) <= 1.0
    assert abs(compiled["critic/score/mean"] - eager["critic/score/mean"]) <= 1 / 16 + 1e-9
    assert "warning: rollout.compile" not in capfd.readouterr().err  # it compiled: no fallback


def test_the_recompile_limit_decodes_uncompiled_saying_so_once(tiny_policy_path, monkeypatch, capsys):
    """With fullgraph, torch raises at its recompile limit (8 shapes per function by default; 1 here)."""
    from transformers import AutoModelForCausalLM

    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 1)
    model = AutoModelForCausalLM.from_pretrained(tiny_policy_path).eval()
    decoder = StaticDecoder(model, "inductor", max_batch_size=64)
    prompts = [[5, 9, 12], [7, 3, 3, 3, 8, 1]] * 6
    for rows in (2, 12):  # 8 rows, then 16: a second shape, past the limit
        params = [SamplingParams(temperature=1.0, max_new_tokens=6, seed=i) for i in range(rows)]
        stops = [[]] * rows
        with torch.inference_mode():
            expected = decode(model, prompts[:rows], params, list(range(rows)), stops, 0, threading.Event(), True)
            got = decoder.decode(prompts[:rows], params, list(range(rows)), stops, 0, threading.Event(), True)
        differing = sum(a[0] != b[0] for a, b in zip(got, expected))
        assert differing <= (1 if rows == 2 else 0)  # compiled kernels may move a draw; the uncompiled step does not
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert err == [
        "warning: rollout.compile=inductor: compiling a decode step failed (FailOnRecompileLimitHit): decoding "
        "uncompiled"
    ]
