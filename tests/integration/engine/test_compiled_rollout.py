"""rollout.compile=inductor in a training run on the CPU: the first rollout, from the same weights and seeds, is
the uncompiled run's (the compiled step's kernels round differently, so later steps may drift apart).

Slow: inductor compiles each decode-step shape with the C++ compiler (20-40 s on 2 cores). The step's tracing
and the static cache are in the default tier (tests/unit/inference/test_static_decode.py); CUDA graphs in the gpu
tier.
"""

from __future__ import annotations

import pytest

from rlrm.config.loader import load_profile
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.trainer import start_run, train

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


def _first_step(tmp_path, name: str, *extra: str) -> dict:
    run_dir = start_run(load_profile("tiny-rule", [*SMALL, *extra]), tmp_path / name)
    assert train(run_dir).last_step == 2
    return next(row for row in read_metrics(run_dir / "metrics.jsonl") if row["step"] == 1)


def test_a_run_with_inductor_decoding_rolls_out_what_the_eager_run_does(tmp_path, tiny_policy_path):
    import torch._dynamo

    torch._dynamo.reset()
    compiled = _first_step(tmp_path, "inductor", "rollout.compile=inductor")
    eager = _first_step(tmp_path, "eager")
    for key in ("response_length/mean", "critic/score/mean"):
        assert compiled[key] == eager[key], key
    torch._dynamo.reset()
