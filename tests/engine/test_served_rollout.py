"""rollout.backend: server end to end: policy replicas as real subprocesses, weights synced every step."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from rlrm.config.loader import load_profile
from rlrm.engine.metrics.tracker import read_metrics
from rlrm.engine.trainer import start_run, train

SMALL = [
    "data.train_batch_size=4", "actor.mini_batch_size=2", "actor.micro_batch_size=4", "rollout.n=4",
    "rollout.max_new_tokens=12", "data.val_size=8", "trainer.val_every=0", "trainer.val_before_train=false",
    "trainer.save_every=0", "trainer.num_threads=1", "logging.console=none", "logging.save_samples=true",
]
SERVED = ["rollout.backend=server", "rollout.server.router=client", "rollout.server.threads=1"]


def _run(tmp_path, name, steps, extra=()):
    profile = load_profile("tiny-rule", SMALL + [f"trainer.total_steps={steps}", *extra])
    run_dir = start_run(profile, tmp_path / name)
    return run_dir, train(run_dir)


def _samples(run_dir):
    return [(r["step"], r["response"]) for r in map(json.loads, (run_dir / "samples.jsonl").read_text().splitlines())]


def _weights(run_dir):
    return load_file(str(run_dir / "checkpoints" / "step_5" / "model" / "model.safetensors"))


def test_one_embedded_replica_reproduces_the_hf_backend(tmp_path, tiny_policy_path):
    # `auto` would recompute old log-probs for the served engine only (another process, rlrm/engine/behaviour.py):
    # both runs recompute, so the only thing that may differ is what the engines sampled
    same = ["actor.recompute_old_log_prob=always"]
    hf_dir, _ = _run(tmp_path, "hf", 5, same)
    sv_dir, result = _run(tmp_path, "served", 5, SERVED + same)
    assert result.last_step == 5 and not result.interrupted
    assert _samples(sv_dir) == _samples(hf_dir)  # token for token, every step: the weights were synced each time
    a, b = _weights(hf_dir), _weights(sv_dir)
    assert a.keys() == b.keys()
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-6
    rows = read_metrics(sv_dir / "metrics.jsonl")
    assert all(r["rollout/retries"] == 0 and r["rollout/stale_refused"] == 0 for r in rows)
    assert all(r["async/staleness_max"] == 0 for r in rows)  # every sample from the version in place
    assert all(r["timing_s/weight_load"] > 0 for r in rows)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fully-async"])
def test_fully_async_completions_carry_the_servers_version(tmp_path, tiny_policy_path, mode):
    run_dir, result = _run(tmp_path, mode, 4, SERVED + [f"trainer.mode={mode}", "trainer.max_staleness=1"])
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert result.last_step == 4
    # versions come from the servers' answers: bounded by the staleness limit, and some lag (async really overlapped)
    assert all(0 <= r["async/staleness_max"] <= 1 for r in rows)
    assert any(r["async/staleness_max"] == 1 for r in rows)  # generation ran on while the weights moved
    assert all(r["rollout/stale_refused"] == 0 for r in rows)
