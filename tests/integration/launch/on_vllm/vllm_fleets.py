"""Fleets of real servers for module-scoped fixtures: started once (a vLLM takes 35-80 s), supervised on an
event loop of their own, closed at the end of the module.

    with LoopFleets() as fleets:
        judge = fleets.start(RewardServerConfig(backend="vllm", model="tiny:judge", router="client"), "genrm")
        judge.urls[0]
"""

from __future__ import annotations

import asyncio
import threading

# vLLM on the CPU compiles the model with torch.compile/inductor at start (17 of a 35-s start on a quiet 2-core
# machine, 2026-11-27); --enforce-eager skips it. The session's policy replica (conftest.py) keeps vLLM's default,
# compiled path, which rlrm launches for users; every other test replica here starts eager.
EAGER = ["--enforce-eager"]
EAGER_REWARD_SERVER = "reward.server.extra_args=--enforce-eager"  # as `--set` takes it
EAGER_ROLLOUT_SERVER = "rollout.server.extra_args=--enforce-eager"


class LoopFleets:
    """Runs ServerFleets, and the session's rollout engine, on a background event loop (their supervisors need one
    that keeps running)."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.fleets = []

    def run(self, coro, timeout_s: float = 900):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def start(self, cfg, role: str, **kwargs):
        from rlrm.engine.models.tiny import resolve_model_path
        from rlrm.launch.fleet.server_fleet import ServerFleet

        fleet = ServerFleet(cfg.fleet_spec(), role=role, model_path=resolve_model_path(cfg.model), **kwargs)
        self.run(fleet.start())
        self.fleets.append(fleet)
        return fleet

    def __enter__(self) -> "LoopFleets":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        for fleet in self.fleets:
            self.run(fleet.close(), 120)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def policy_sized_disrm(folder, policy_path):
    """A DisRM with the tiny policy's body and a random score head (seed 0), saved into `folder`: the shape of
    the tiny DisRM, without its minutes of training. (vLLM's CPU attention refuses the 8-wide heads of the
    smaller random DisRM in tests/conftest.py: "Unsupported CPU attention configuration: head_dim=8".)"""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(policy_path)
    model = AutoModelForSequenceClassification.from_pretrained(policy_path, num_labels=1, dtype=torch.float32)
    model.config.pad_token_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    with torch.no_grad():
        model.score.weight.normal_(0.0, 0.5)  # scores that spread well beyond float noise
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def disrm_config(backend: str, path, **keys):
    """A DisRM's reward.server section: served under a name of its own ("rm"), which the requests carry."""
    from rlrm.config.reward import RewardServerConfig

    return RewardServerConfig(
        backend=backend, model=str(path), served_model_name="rm", router="client", start_timeout_s=600, **keys
    )
