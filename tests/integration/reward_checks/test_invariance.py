"""Score invariance: the statistics by hand, a healthy served DisRM passing, and a DisRM made
batch-dependent on purpose (a stand-in server: rlrm's embedded server with a batch statistic leaking
into every score, as a BatchNorm left in training mode would) failing, in batches and padding both."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import numpy as np
import pytest

from rlrm.engine.rewards.invariance import (
    InvarianceSettings,
    check_invariance,
    compare_scores,
    settings_to_run,
)

LEAKY_SERVER = Path(__file__).with_name("leaky_server.py")  # the stand-in batch-dependent DisRM server


def test_compare_scores_by_hand():
    ref = np.array([1.0, 2.0, 3.0, 10.0], dtype=np.float32)
    # group a = samples 0, 1; group b = 2, 3. Sample 1 moves by 1.5: pair (0, 1) flips (2 - 1 = 1 vs 0.5 - 1 = -0.5)
    other = np.array([1.0, 0.5, 3.0, 10.0], dtype=np.float32)
    out = compare_scores(ref, other, ["a", "a", "b", "b"], tolerance=0.1)
    assert out["max_abs_diff"] == pytest.approx(1.5) and out["rank_flips"] == 1 and not out["passed"]
    # a flip where one side separates the pair by less than the tolerance is noise, not a flip
    assert compare_scores(ref, other, ["a", "a", "b", "b"], tolerance=0.6)["rank_flips"] == 0
    same = compare_scores(ref, ref + np.float32(1e-6), ["a", "a", "b", "b"], tolerance=1e-4)
    assert same["passed"] and same["rank_flips"] == 0 and same["max_abs_diff"] < 1e-5
    # no group has two samples: pairs are taken over all samples
    assert compare_scores(ref, other, ["a", "b", "c", "d"], tolerance=0.1)["rank_flips"] == 1
    assert not compare_scores(ref, np.array([1, 2, np.nan, 10], dtype=np.float32), list("abcd"), 1.0)["passed"]


def test_settings_are_8_and_the_max_batch_each_side():
    assert settings_to_run(24, 16) == [
        ("batch 8, right-padded", 8, "right"),
        ("batch 16, right-padded", 16, "right"),
        ("batch 8, left-padded", 8, "left"),
        ("batch 16, left-padded", 16, "left"),
    ]
    assert [b for _, b, _ in settings_to_run(5, 64)] == [5, 5]  # capped at the sample count


def _leaky_server(path):
    from rlrm.launch.common.ports import free_port
    from rlrm.launch.fleet.process import ServerProcess

    port = free_port()
    argv = [sys.executable, str(LEAKY_SERVER), "--model", str(path), "--role", "disrm", "--port", str(port)]
    return ServerProcess.movable([*argv, "--threads", "1"])  # started again on a fresh port if another took it


def _check(url, path, conversations):
    from transformers import AutoTokenizer

    from rlrm.engine.rewards.disrm import render_conversation
    from rlrm.launch.client.balancer import ReplicaBalancer

    tok = AutoTokenizer.from_pretrained(path)
    ids = [render_conversation(tok, prompt, response)[-64:] for _, _, prompt, response in conversations]
    groups = [group for _, group, _, _ in conversations]

    async def run():
        balancer = ReplicaBalancer([url])
        try:
            return await check_invariance(balancer, None, ids, groups, InvarianceSettings(max_batch=16), timeout_s=30)
        finally:
            await balancer.close()

    return asyncio.run(run())


def test_a_healthy_served_disrm_passes_and_a_batch_dependent_one_fails(
    spread_disrm_path, spread_disrm_server, arithmetic_conversations
):
    good = _check(spread_disrm_server.url, spread_disrm_path, arithmetic_conversations)  # the session's server
    assert good["passed"], good["comparisons"]
    assert [c["name"] for c in good["comparisons"]] == [name for name, _, _ in settings_to_run(24, 16)]
    assert all(c["max_abs_diff"] <= good["tolerance"] and c["rank_flips"] == 0 for c in good["comparisons"])
    assert good["tolerance"] == pytest.approx(
        1e-4 * max(1.0, float(np.sqrt(np.mean(np.square(good["reference_scores"])))))
    )
    with _leaky_server(spread_disrm_path) as leaky:
        bad = _check(leaky.url, spread_disrm_path, arithmetic_conversations)
    assert not bad["passed"]
    assert all(not c["passed"] and c["max_abs_diff"] > 10 * bad["tolerance"] for c in bad["comparisons"])
