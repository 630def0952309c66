"""The legacy DisRM inside training (`reward.disrm.scorer: legacy`, `rlrm parity disrm --train-steps`): where its
ranks run and what it leaves of the trainer's process.

It used to build its worker group with the default device, the CPU, in a CUDA run too (`parity --device cuda
--train-steps` trained against a CPU bf16 scorer), and its one in-process rank set torch's threads to cores / world
size, overriding trainer.num_threads for the actor and rollout of the same process."""

from __future__ import annotations

import asyncio

import pytest
import torch

import rlrm.engine.rewards.fsdp_disrm.disrm as legacy_mod
import rlrm.parity.train_curves as curves_mod
from rlrm.config.loader import load_profile
from rlrm.errors import ConfigError


def _profile(model, *extra):
    return load_profile("tiny-disrm", ["reward.disrm.scorer=legacy", f"reward.server.model={model}", *extra])


class Recorder:
    seen: list = []

    def __init__(self, cfg, spawn=None):
        Recorder.seen.append(cfg)

    def start(self):
        pass


@pytest.mark.parametrize(("setting", "cuda_visible", "device"), [("auto", True, "cuda"), ("auto", False, "cpu")])
def test_the_legacy_scorer_follows_its_device_setting(random_disrm_path, monkeypatch, setting, cuda_visible, device):
    monkeypatch.setattr(legacy_mod, "LegacyWorkerGroup", Recorder)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda_visible)
    Recorder.seen.clear()
    scorer = legacy_mod.LegacyDisRM(
        _profile(random_disrm_path, f"reward.disrm.legacy_device={setting}").reward, str(random_disrm_path)
    )
    asyncio.run(scorer.start())
    asyncio.run(scorer.batcher.close())
    assert [c.device for c in Recorder.seen] == [device]


def test_legacy_device_cuda_without_a_gpu_is_one_line(random_disrm_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    scorer = legacy_mod.LegacyDisRM(
        _profile(random_disrm_path, "reward.disrm.legacy_device=cuda").reward, str(random_disrm_path)
    )
    with pytest.raises(ConfigError, match="legacy_device=cuda but no CUDA device is visible"):
        asyncio.run(scorer.start())


def test_parity_training_puts_the_legacy_side_on_the_parity_device(tmp_path, monkeypatch):
    profiles = []
    monkeypatch.setattr(curves_mod, "start_run", lambda profile, out, overwrite: profiles.append(profile) or out)

    class Stop(Exception):
        pass

    def train(run_dir, console):
        raise Stop

    monkeypatch.setattr(curves_mod, "train", train)
    with pytest.raises(Stop):
        curves_mod.train_parity(load_profile("tiny-disrm"), "m", 1, "bf16", "fp32", 1, 64, tmp_path, device="cuda")
    assert profiles[0].reward.disrm.scorer == "legacy" and profiles[0].reward.disrm.legacy_device == "cuda"


def test_the_in_process_legacy_scorer_keeps_the_trainers_torch_threads(random_disrm_path):
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # as trainer.num_threads=1 sets it; the machine has more cores
    try:
        scorer = legacy_mod.LegacyDisRM(_profile(random_disrm_path).reward, str(random_disrm_path))

        async def go():
            await scorer.start()
            try:
                (score,) = await scorer.batcher.submit([[1, 2, 3]])
                return torch.get_num_threads(), score
            finally:
                await scorer.close()

        during, score = asyncio.run(go())
        assert during == 1 and torch.get_num_threads() == 1 and score == score
    finally:
        torch.set_num_threads(before)
