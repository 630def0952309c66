"""The legacy FSDP2 DisRM scorer: world size 1 (in this process) against a plain forward, two gloo
ranks (spawned processes, rendezvous on a free port) against one, and models it refuses."""

from __future__ import annotations

import pytest
import torch

from rlrm.engine.rewards.disrm import render_conversation
from rlrm.engine.rewards.fsdp_disrm.config import LegacyConfig
from rlrm.engine.rewards.fsdp_disrm.workers import LegacyWorkerGroup


def encode(path, conversations, max_length=64):
    """Tokenizer, rendered ids, the same cut to their last `max_length` tokens (as the reward loop
    cuts them), and the response lengths."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    full = [render_conversation(tok, prompt, response) for _, _, prompt, response in conversations]
    response_tokens = [len(tok(response, add_special_tokens=False)["input_ids"]) for *_, response in conversations]
    return tok, full, [ids[-max_length:] for ids in full], response_tokens


def plain_scores(path, ids) -> torch.Tensor:
    """One unpadded forward per sample: the score HF's classifier pools at the last token."""
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    with torch.no_grad():
        return torch.tensor([model(input_ids=torch.tensor([s])).logits[0, 0].item() for s in ids])


@pytest.mark.parametrize(
    "batching",
    [{"micro_batch_size": 5}, {"max_tokens_per_batch": 150}, {"rmpad": True, "micro_batch_size": 7}],
    ids=["count", "token-budget", "rmpad"],
)
def test_fp32_legacy_scores_match_a_plain_forward(random_disrm_path, arithmetic_conversations, batching):
    tok, full, ids, response_tokens = encode(random_disrm_path, arithmetic_conversations)
    assert any(len(s) > 64 for s in full) and not all(len(s) > 64 for s in full)  # mixed lengths, some cut to 64
    cfg = LegacyConfig(str(random_disrm_path), dtype="fp32", pad_token_id=tok.pad_token_id, threads=1, **batching)
    with LegacyWorkerGroup(cfg) as group:
        out = group.score(ids, response_tokens)
    assert out.token_level.dtype == torch.float32
    assert out.token_level.shape == (len(ids), max(response_tokens))
    # each score sits on its response's last token, nothing else is set
    assert (out.token_level != 0).sum(-1).tolist() == [1] * len(ids)
    rows = torch.arange(len(ids))
    assert torch.equal(out.token_level[rows, torch.tensor(response_tokens) - 1], out.scores)
    assert out.scores.tolist() == pytest.approx(plain_scores(random_disrm_path, ids).tolist(), abs=1e-5)


def test_world_size_two_gives_the_scores_of_world_size_one(spread_disrm_path, arithmetic_conversations):
    # 23 samples, an odd number: the driver pads the batch to a multiple of the world size
    tok, _, ids, response_tokens = encode(spread_disrm_path, arithmetic_conversations[:23])
    base = dict(
        model_path=str(spread_disrm_path),
        dtype="bf16",
        pad_token_id=tok.pad_token_id,
        threads=1,
        max_tokens_per_batch=150,
    )  # uneven token counts per rank: the ranks agree on the micro-batch count
    with LegacyWorkerGroup(LegacyConfig(**base, world_size=1)) as one:
        single = one.score(ids, response_tokens)
    with LegacyWorkerGroup(LegacyConfig(**base, world_size=2)) as two:
        assert two.spawn and all(p.is_alive() for p in two._procs)
        double = two.score(ids, response_tokens)
        procs = list(two._procs)
    assert not any(p.is_alive() for p in procs)  # stopped by close(), by their own process objects
    assert double.token_level.dtype == torch.bfloat16 and double.token_level.shape == single.token_level.shape
    # sharding splits parameters, never a sample's arithmetic: the same bits
    assert torch.equal(double.token_level, single.token_level)


@pytest.mark.parametrize("world_size", [1, 2], ids=["in-process", "spawned"])
def test_a_rendezvous_port_taken_before_rank_0_binds_it_is_left_for_a_fresh_one(
    random_disrm_path, monkeypatch, capfd, world_size
):
    import socket

    from rlrm.launch.common import ports

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        lost = taken.getsockname()[1]
        picks, fresh = iter([lost]), ports.free_port
        monkeypatch.setattr(ports, "free_port", lambda: next(picks, None) or fresh())
        cfg = LegacyConfig(str(random_disrm_path), dtype="fp32", pad_token_id=0, threads=1, world_size=world_size)
        with LegacyWorkerGroup(cfg) as group:
            out = group.score([[5, 6, 7, 8], [9, 10, 11]], [2, 1])
    assert out.scores.shape == (2,)
    assert f"rlrm: another process took port {lost} before the legacy DisRM ranks' rendezvous" in capfd.readouterr().err


ORPHANED = r"""
import sys, time
from rlrm.engine.rewards.fsdp_disrm.config import LegacyConfig
from rlrm.engine.rewards.fsdp_disrm.workers import LegacyWorkerGroup
group = LegacyWorkerGroup(LegacyConfig(sys.argv[1], dtype="fp32", world_size=2, threads=1))
group.start()
print(" ".join(str(p.pid) for p in group._procs), flush=True)
time.sleep(120)
"""


def test_legacy_ranks_exit_when_their_parent_is_killed(random_disrm_path):
    # they waited on their inbox for good, holding the model, after `rlrm parity disrm` was killed with -9
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    def alive(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False

    repo = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": str(repo), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-c", ORPHANED, str(random_disrm_path)]
    parent = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
    pids: list[int] = []
    try:
        pids = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(pids) == 2
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(alive(pid) for pid in pids):
            time.sleep(0.25)
        assert not [pid for pid in pids if alive(pid)]
    finally:
        for pid in pids:  # only the ranks this test started, by their own pids
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
