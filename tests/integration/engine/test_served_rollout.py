"""rollout.backend: server end to end: policy replicas as real subprocesses, weights synced every step."""

from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file
from small_run import SMALL_RUN

from rlrm.config.loader import load_profile
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.trainer import start_run, train

SMALL = [*SMALL_RUN, "actor.mini_batch_size=2", "logging.save_samples=true"]  # two optimizer steps a step
SERVED = ["rollout.backend=server", "rollout.server.router=client", "rollout.server.threads=1"]


def _run(tmp_path, name, steps, extra=()):
    profile = load_profile("tiny-rule", SMALL + [f"trainer.total_steps={steps}", *extra])
    run_dir = start_run(profile, tmp_path / name)
    return run_dir, train(run_dir)


def _samples(run_dir):
    return [(r["step"], r["response"]) for r in map(json.loads, (run_dir / "samples.jsonl").read_text().splitlines())]


def _weights(run_dir, step=3):
    return load_file(str(run_dir / "checkpoints" / f"step_{step}" / "model" / "model.safetensors"))


@pytest.fixture(scope="module")
def served_run(tmp_path_factory, tiny_policy_path):
    """One 3-step run on one embedded replica with the default disk sync, read by both tests below."""
    return _run(tmp_path_factory.mktemp("served"), "served", 3, SERVED)


def test_one_embedded_replica_reproduces_the_hf_backend(tmp_path, tiny_policy_path, served_run):
    # `auto` on both sides: neither recomputes old log-probs (an embedded replica runs the in-process engine's
    # code in its dtype, rlrm/engine/behaviour.py), so the PPO ratio is built on each engine's own log-probs
    hf_dir, _ = _run(tmp_path, "hf", 3)
    sv_dir, result = served_run
    assert result.last_step == 3 and not result.interrupted
    assert _samples(sv_dir) == _samples(hf_dir)  # token for token, every step: the weights were synced each time
    a, b = _weights(hf_dir), _weights(sv_dir)
    assert a.keys() == b.keys()
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-6
    rows = read_metrics(sv_dir / "metrics.jsonl")
    assert all(r["rollout/retries"] == 0 and r["rollout/stale_refused"] == 0 for r in rows)
    assert all(r["async/staleness_max"] == 0 for r in rows)  # every sample from the version in place
    assert all(r["timing_s/weight_load"] > 0 for r in rows)
    assert not any("rollout/log_prob_diff_max" in r for r in rows)  # no recompute: the served log-probs were used


def test_the_servers_requests_are_kept_as_their_busy_time_not_one_span_each(served_run):
    """The client times every request (8 a step here, 256 in tiny-rule-served): kept one span each, they stayed in
    trace.json and in the trainer's memory for the whole run, past logging.trace_detail_steps. The rollout lane
    holds their union: disjoint spans, fewer than the requests, idle/rollout read from them as before."""
    run_dir, _ = served_run
    events = json.loads((run_dir / "trace.json").read_text())["traceEvents"]
    decode = sorted(
        (e["ts"], e["ts"] + e["dur"]) for e in events if (e.get("cat"), e.get("name")) == ("rollout", "decode")
    )
    requests = [e for e in events if (e.get("cat"), e.get("name")) == ("generate", "generate")]
    assert decode and len(requests) == 3 * 8  # 4 prompts x 2 samples a step, each its own request
    assert len(decode) < len(requests)
    assert all(end <= start for (_, end), (start, _) in zip(decode, decode[1:]))  # disjoint: nothing twice
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert all(0.0 <= r["idle/rollout"] < 1.0 for r in rows)


def test_distributed_weight_sync_trains_exactly_as_disk_sync(tmp_path, tiny_policy_path, served_run):
    """rollout.server.weight_sync=distributed (gloo broadcast, no files) against the default disk sync."""
    disk_dir, _ = served_run
    dist_dir, result = _run(tmp_path, "distributed", 3, SERVED + ["rollout.server.weight_sync=distributed"])
    assert result.last_step == 3 and _samples(dist_dir) == _samples(
        disk_dir
    )  # every step sampled from the synced weights
    a, b = _weights(disk_dir, 3), _weights(dist_dir, 3)
    assert a.keys() == b.keys() and max((a[k] - b[k]).abs().max().item() for k in a) < 1e-6
    rows = read_metrics(dist_dir / "metrics.jsonl")
    assert all(r["timing_s/weight_broadcast"] > 0 and r["timing_s/weight_write"] == 0 for r in rows)
    assert all(r["rollout/stale_refused"] == 0 and r["rollout/sync_skipped"] == 0 for r in rows)
    assert all(r["timing_s/weight_broadcast"] == 0 for r in read_metrics(disk_dir / "metrics.jsonl"))


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


@pytest.mark.slow
def test_two_replicas_behind_the_sglang_router_learn_and_survive_a_kill(tmp_path, tiny_policy_path, monkeypatch):
    """`rlrm train --profile tiny-rule --set rollout.backend=server --set rollout.server.replicas=2`, with one
    replica killed (-9) after a few steps: every step keeps all its samples and the run still learns."""
    import threading

    import rlrm.engine.components as components

    pytest.importorskip("sglang_router")
    steps, engines = 20, []
    build = components.served_engine
    monkeypatch.setattr(components, "served_engine", lambda *a, **k: engines.append(build(*a, **k)) or engines[-1])
    profile = load_profile(
        "tiny-rule",
        [
            f"trainer.total_steps={steps}",
            f"trainer.val_every={steps}",
            "trainer.save_every=0",
            "trainer.num_threads=1",
            "logging.console=none",
            "rollout.backend=server",
            "rollout.server.replicas=2",
            "rollout.server.router=sglang",
        ],
    )
    run_dir = start_run(profile, tmp_path / "learn")
    stop = threading.Event()

    def kill_after_step_4():
        metrics = run_dir / "metrics.jsonl"
        while not stop.wait(0.2):
            if metrics.exists() and len(metrics.read_text().splitlines()) >= 5:  # validation row + 4 steps
                engines[0].fleet.pool.servers[0].kill()
                return

    killer = threading.Thread(target=kill_after_step_4)
    killer.start()
    try:
        result = train(run_dir)
    finally:
        stop.set()
        killer.join()
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert result.last_step == steps
    trained = [r for r in rows if r["step"] > 0]
    assert all(
        r["batch/num_samples"] == 256 and r["async/staleness_max"] == 0 for r in trained
    )  # nothing lost, never stale
    assert sum(r["rollout/replica_restarts"] for r in trained) == 1
    assert sum(r["rollout/retries"] for r in trained) >= 1  # the dead replica's requests went to the other one
    before, after = rows[0]["val/accuracy"], rows[-1]["val/accuracy"]
    assert after >= before + 0.08, f"held-out accuracy {before:.3f} -> {after:.3f}"


@pytest.mark.slow
def test_two_actor_ranks_hand_their_gathered_weights_to_the_rollout_servers(tmp_path, tiny_policy_path):
    """actor.world_size=2 (FSDP2 ranks, gloo) with rollout.backend=server samples what it samples in process."""
    ranks = ["actor.world_size=2", "actor.recompute_old_log_prob=always"]
    hf_dir, _ = _run(tmp_path, "hf", 3, ranks)
    sv_dir, result = _run(tmp_path, "served", 3, SERVED + ranks)
    assert result.last_step == 3 and _samples(sv_dir) == _samples(hf_dir)
