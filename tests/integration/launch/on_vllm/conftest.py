"""The vLLM replicas shared by this folder's tests, each launched once per session (a 20-130 s start on 2 cores).

- `vllm_rollout`, the policy replica, on vLLM's default (compiled) path: test_vllm_agent.py uses it first, with the
  policy's own weights (its file sorts before test_vllm_rollout.py); test_vllm_rollout.py then reloads weights,
  trains through it and, last, kills it (see that module's docstring).
- `vllm_disrm`, a DisRM replica (eager, `vllm_disrm_path`'s model, served as "rm"): test_vllm_reward_roles.py
  compares its /classify with the embedded server's, test_vllm_runs.py runs `rlrm parity disrm` against it.
"""

from __future__ import annotations

import time

import pytest
from vllm_fleets import EAGER, LoopFleets, disrm_config, policy_sized_disrm  # on_vllm/vllm_fleets.py

from rlrm.config.servers import RolloutServerConfig
from rlrm.inference.weight_files import WeightFiles
from rlrm.launch.client.rollout_engine import ServerRolloutEngine
from rlrm.launch.client.wire import wire_for
from rlrm.launch.fleet.server_fleet import ServerFleet, fleet_key


@pytest.fixture(scope="session")
def vllm_fleets():
    """Fleets launched for the session on a loop of their own, closed at its end."""
    with LoopFleets() as fleets:
        yield fleets


@pytest.fixture(scope="session")
def vllm_rollout(vllm_fleets, tiny_policy_path, tmp_path_factory):
    """(engine, loop): a started ServerRolloutEngine over one launched vLLM policy replica (fp32, client router,
    keyed: `engine.api_key`), on the session fleets' event loop (`loop.run(coro)`, `loop.loop`).

    The replica serves a copy of the tiny policy whose generation_config.json carries sampling defaults as model
    cards ship them (Qwen2.5-Instruct: repetition_penalty, top_p, top_k): vLLM applies those to every field a
    request leaves out unless launched with `--generation-config vllm`, and a penalty rlrm never sent would move
    the log-probs test_vllm_rollout.py compares with the actor's."""
    path = str(_with_model_card_defaults(tiny_policy_path, tmp_path_factory.mktemp("vllm-policy") / "policy"))
    cfg = RolloutServerConfig(backend="vllm", router="client", dtype="float32", start_timeout_s=600)
    key = fleet_key(cfg.fleet_spec(), None)  # a fresh key, as `rlrm train` gives a launched fleet
    fleet = ServerFleet(cfg.fleet_spec(), role="policy", model_path=path, api_key=key)
    files = WeightFiles(str(tmp_path_factory.mktemp("vllm-weights")), config_from=path)
    engine = ServerRolloutEngine(fleet, wire_for("vllm", fleet.served_name), files, api_key=key, sync_timeout_s=120)
    loop = vllm_fleets
    started = time.perf_counter()
    loop.run(engine.start())
    print(f"vLLM policy replica healthy after {time.perf_counter() - started:.1f} s")
    yield engine, loop
    loop.run(engine.close(), 120)


def _with_model_card_defaults(source, folder):
    import json
    import shutil

    shutil.copytree(source, folder)
    path = folder / "generation_config.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps({**config, "repetition_penalty": 1.3, "top_p": 0.8, "top_k": 20}))
    return folder


@pytest.fixture(scope="session")
def vllm_disrm_path(tmp_path_factory, tiny_policy_path):
    return policy_sized_disrm(tmp_path_factory.mktemp("vllm-disrm"), tiny_policy_path)


@pytest.fixture(scope="session")
def vllm_disrm(vllm_fleets, vllm_disrm_path):
    return vllm_fleets.start(disrm_config("vllm", vllm_disrm_path, extra_args=EAGER), "disrm")
