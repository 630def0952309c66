"""The actor on two FSDP2 ranks (real gloo processes) takes the optimizer steps one rank takes."""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path

import pytest
import torch

from rlrm.config.schema import Profile
from rlrm.engine.actor.actor import Actor
from rlrm.engine.actor.batch import collate
from rlrm.engine.actor.logprobs import response_log_probs
from rlrm.engine.actor.shards import split_for_ranks
from rlrm.inference.loading import load_causal_lm
from tests.unit.engine.actor.test_actor_ranks import N, _completions

MODES = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


def _batch(model, temperature=1.0):
    batch = collate(_completions(), pad_token_id=0)
    batch.group_ids = torch.arange(len(batch)) // N
    batch.advantages = torch.linspace(-1.5, 1.5, len(batch))[
        torch.randperm(len(batch), generator=torch.Generator().manual_seed(1))
    ]
    with torch.no_grad():
        lp = response_log_probs(model, batch, temperature, 64)[0]
    batch.old_log_prob = lp + 0.05 * torch.sin(torch.arange(lp.numel()).reshape(lp.shape).float())  # ratios != 1
    return batch


def _profile(path, mode, world_size) -> Profile:
    # mini-batches of 3 prompts (2 optimizer steps), micro-batches of 3 samples
    return Profile.model_validate(
        {
            "model": {"path": str(path)},
            "data": {"train_batch_size": 6},
            "rollout": {"n": N},
            "actor": {
                "lr": 1e-4,
                "mini_batch_size": 3,
                "micro_batch_size": 3,
                "loss_agg_mode": mode,
                "world_size": world_size,
                "entropy_coeff": 0.01,
                "clip_ratio_low": 0.02,
                "clip_ratio_high": 0.02,
            },
        }
    )


@pytest.fixture(scope="module")
def two_ranks(tiny_policy_path):
    from rlrm.engine.actor.group import RankGroupActor
    from rlrm.engine.actor.rank import RankSpec
    from rlrm.engine.executor.rank_procs import RankProcesses

    p = _profile(tiny_policy_path, MODES[0], 2)
    ranks = RankProcesses(RankSpec(p, str(tiny_policy_path), None, world_size=2, device="cpu", threads=1))
    ranks.start()
    actor = RankGroupActor(ranks, load_causal_lm(str(tiny_policy_path), "float32", "cpu"), p)
    try:
        yield actor
    finally:
        actor.close()


def test_two_ranks_update_the_weights_one_rank_does_for_every_agg_mode(two_ranks, tiny_policy_path):
    model = load_causal_lm(str(tiny_policy_path), "float32", "cpu")
    batch = _batch(model)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    shards = split_for_ranks(batch.select(range(3 * N)), 2)
    assert shards[0].batch.response_mask.sum() != shards[1].batch.response_mask.sum()  # unequal tokens per rank
    assert sorted(len(s.rows) for s in shards) == [N, 2 * N]  # and unequal sequences
    assert torch.allclose(
        two_ranks.compute_old_log_prob(batch), response_log_probs(model, batch, 1.0, 64)[0], atol=1e-5
    )
    profile = _profile(tiny_policy_path, MODES[0], 1)
    budget = profile.rollout.max_new_tokens  # seq-mean-token-sum-norm's divisor on both sides, as a run builds them
    one = Actor(model, None, profile.actor, temperature=1.0, total_steps=1, n=N, response_budget=budget)
    # the modes one after the other on both sides (two optimizer steps each), compared after each
    for mode in MODES:
        two_ranks.ranks.call_all("configure", {"loss_agg_mode": mode})
        one.cfg = one.cfg.model_copy(update={"loss_agg_mode": mode})
        before = one.policy_state_dict()
        before = {k: v.clone() for k, v in before.items()}
        metrics = two_ranks.update(copy.deepcopy(batch))
        want_metrics = one.update(copy.deepcopy(batch))
        got, want = two_ranks.policy_state_dict(), one.policy_state_dict()
        moved = max((want[k] - before[k]).abs().max().item() for k in want)
        assert moved > 1e-4, mode  # the steps moved the weights by far more than the tolerance
        worst = max((got[k] - want[k]).abs().max().item() for k in want)
        assert worst < 1e-5, f"{mode}: weights differ by {worst:.2e} (moved {moved:.2e})"
        for key in ("actor/pg_loss", "actor/entropy", "actor/grad_norm", "actor/pg_clipfrac", "actor/ppo_kl"):
            assert metrics[key] == pytest.approx(want_metrics[key], rel=1e-4, abs=1e-6), (mode, key)
    assert max((want[k] - start[k]).abs().max().item() for k in want) > 5e-4


LONG_TMPDIR_RUN = """
import sys
from multiprocessing import util

from rlrm.engine.actor.group import RankGroupActor
from rlrm.engine.actor.logprobs import response_log_probs
from rlrm.engine.actor.rank import RankSpec
from rlrm.engine.executor.rank_procs import RankProcesses
from rlrm.inference.loading import load_causal_lm
from tests.integration.engine.test_actor_ranks_runs import MODES, _batch, _profile

path = sys.argv[1]
profile = _profile(path, MODES[0], 2)
ranks = RankProcesses(RankSpec(profile, path, None, world_size=2, device="cpu", threads=1))
ranks.start()
model = load_causal_lm(path, "float32", "cpu")
actor = RankGroupActor(ranks, model, profile)
try:
    batch = _batch(model)  # tensors to the ranks, log-prob tensors back: a shared-memory fd each way
    worst = (actor.compute_old_log_prob(batch) - response_log_probs(model, batch, 1.0, 64)[0]).abs().max().item()
    print(util.get_temp_dir())
    print(worst)
finally:
    actor.close()
"""


def test_two_ranks_work_under_a_tmpdir_too_long_for_a_unix_socket(tmp_path, tiny_policy_path):
    """Tensors pass between the trainer and its ranks as file descriptors over a Unix socket in multiprocessing's
    temp folder; under a TMPDIR of 80+ characters (a cluster job's scratch folder) its path is over the 107-byte
    limit. Before, the message was dropped by the queue's feeder thread and the trainer waited for ever."""
    import os
    import subprocess

    repo = Path(__file__).resolve().parents[3]
    long_tmp = tmp_path / ("scratch-" + "x" * 80)
    long_tmp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1", "TMPDIR": str(long_tmp)}
    done = subprocess.run(
        [sys.executable, "-c", LONG_TMPDIR_RUN, str(tiny_policy_path)],
        env=env,
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    folder, worst = done.stdout.split()
    assert len(folder) + len("/listener-xxxxxxxx") <= 107 and not folder.startswith(str(long_tmp)), folder
    assert not Path(folder).exists()  # removed at exit, as multiprocessing's own folder is
    assert float(worst) < 1e-5


def test_ranks_that_fail_their_setup_are_named_with_their_own_error(tmp_path):
    """A rank whose setup raises reports the error and stays up until closed: before, it exited (code 0) and the
    trainer, finding it gone, said "died (exit code 0)" and dropped the error it had just received."""
    from rlrm.engine.actor.rank import RankSpec
    from rlrm.engine.executor.rank_procs import RankError, RankProcesses

    missing = tmp_path / "no-such-model"
    profile = _profile(missing, MODES[0], 2)
    ranks = RankProcesses(RankSpec(profile, str(missing), None, world_size=2, device="cpu", threads=1))
    with pytest.raises(RankError) as caught:
        ranks.start()
    line = str(caught.value)
    assert re.match(r"actor rank [01] on node \S+ failed in setup: \w+: ", line), line
    assert "died" not in line and str(missing) in line, line
    assert ranks.pids() == []  # closed: no rank left behind


def test_ranks_whose_rendezvous_port_was_taken_start_again_on_a_fresh_one(tiny_policy_path, monkeypatch, capfd):
    """The port the ranks' rendezvous was given is taken by another process before rank 0 binds it (as a server's
    can be: rlrm/launch/fleet/process.py): rank 0 fails with EADDRINUSE, and the ranks start again on a fresh port."""
    import socket

    from rlrm.engine.actor.rank import RankSpec
    from rlrm.engine.executor import rank_procs
    from rlrm.launch.common import ports

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        lost = taken.getsockname()[1]
        picks = iter([lost])
        fresh = ports.free_port
        monkeypatch.setattr(ports, "free_port", lambda: next(picks, None) or fresh())
        profile = _profile(tiny_policy_path, MODES[0], 2)
        ranks = rank_procs.RankProcesses(
            RankSpec(profile, str(tiny_policy_path), None, world_size=2, device="cpu", threads=1)
        )
        try:
            ranks.start()
            assert len(ranks.pids()) == 2 and ranks.broken is None
            assert len(ranks.call_all("peak_memory_gb")) == 2  # they serve calls
        finally:
            ranks.close()
    line = f"rlrm: another process took port {lost} before the actor ranks' rendezvous bound it; starting them again"
    assert line in capfd.readouterr().err


def test_a_ray_rank_0_holds_the_rendezvous_store_it_names(tiny_policy_path):
    """On Ray, rank 0's `address` names the port of a store it already listens on (the OS picked it), and its setup
    joins through that store: no other process can take the port in between (the ranks' run on a Ray cluster:
    tests/integration/engine/test_actor_ranks_ray.py, slow)."""
    from rlrm.engine.actor.rank import RankSpec, RankWorker
    from rlrm.launch.common.ports import port_taken

    profile = _profile(tiny_policy_path, MODES[0], 2)
    worker = RankWorker(RankSpec(profile, str(tiny_policy_path), None, world_size=2, device="cpu", threads=1))
    host, port = worker.address()
    assert port_taken(host, port)


@pytest.mark.parametrize("tf32", [True, False])
def test_an_actor_rank_takes_model_tf32_for_its_process(tiny_policy_path, tf32):
    """A rank sets CUDA's float32 matrix products to TF32 from model.tf32 when it starts (its process is the run's;
    the trainer's own: tests/integration/engine/test_trainer.py); false touches nothing. One rank, set up in this
    process."""
    from rlrm.engine.actor.rank import RankSpec, RankWorker

    profile = _profile(tiny_policy_path, MODES[0], 1)
    profile.model.tf32 = tf32
    worker = RankWorker(RankSpec(profile, str(tiny_policy_path), None, world_size=1, device="cpu", threads=1))
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    matmul.fp32_precision = "ieee"
    try:
        worker.setup(0, 0, *worker.address())  # a store already listening: no port picked free and bound later
        assert matmul.fp32_precision == ("tf32" if tf32 else "ieee")
    finally:
        worker.close()
        matmul.fp32_precision = before


def test_shards_saved_before_the_first_optimizer_step_leave_adam_as_it_was(tiny_policy_path, tmp_path):
    # get_state_dict makes a fresh optimizer's state by stepping it at lr 0: Adam's step count became 1, and every
    # later update differed from the one-process actor's (by 1.9e-4 after one step that moved the weights 2.0e-4)
    from rlrm.engine.actor.group import RankGroupActor
    from rlrm.engine.actor.rank import RankSpec
    from rlrm.engine.executor.rank_procs import RankProcesses

    p = _profile(tiny_policy_path, MODES[0], 2)
    model = load_causal_lm(str(tiny_policy_path), "float32", "cpu")
    batch = _batch(model)
    skipped = copy.deepcopy(batch)
    skipped.advantages = torch.full_like(skipped.advantages, float("nan"))  # every mini-batch skipped: no step
    profile = _profile(tiny_policy_path, MODES[0], 1)
    one = Actor(model, None, profile.actor, temperature=1.0, total_steps=1, n=N, response_budget=64)
    ranks = RankProcesses(RankSpec(p, str(tiny_policy_path), None, world_size=2, device="cpu", threads=1))
    ranks.start()
    group = RankGroupActor(ranks, load_causal_lm(str(tiny_policy_path), "float32", "cpu"), p)
    try:
        assert one.update(copy.deepcopy(skipped))["actor/nonfinite_skipped"] == 2
        assert group.update(copy.deepcopy(skipped))["actor/nonfinite_skipped"] == 2
        group.write_shards(tmp_path)  # the checkpoint of that step
        one.update(copy.deepcopy(batch))
        group.update(copy.deepcopy(batch))
        got, want = group.policy_state_dict(), one.policy_state_dict()
    finally:
        group.close()
    assert (tmp_path / "shards" / "optimizer_empty").is_file()
    start = load_causal_lm(str(tiny_policy_path), "float32", "cpu").state_dict()
    assert max((want[k] - start[k]).abs().max().item() for k in want) > 1e-4
    assert max((got[k] - want[k]).abs().max().item() for k in want) < 1e-5
