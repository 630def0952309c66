"""What a run needs, checked before its run folder exists: each bad input is one line, and nothing is written.

check_inputs(profile)        # rlrm train and rlrm bench call it before start_run
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from rlrm.config.ray_address import check_ray_address
from rlrm.config.schema import Profile, unread_instruction
from rlrm.engine.agent.tools import build_tools
from rlrm.engine.canaries import check_canary_data
from rlrm.engine.data.dataset import load_splits
from rlrm.engine.executor.world_size import check_world_size
from rlrm.engine.metrics.trackers import check_trackers
from rlrm.engine.models.tiny import resolve_model_path
from rlrm.engine.rewards.cache_store import check_cache_file
from rlrm.engine.rewards.custom import check_custom_reward
from rlrm.errors import ConfigError, clipped
from rlrm.inference.loading import check_chat_template, check_model_folder, pick_device
from rlrm.inference.weight_files import check_weights_dir
from rlrm.launch.common.ray_head import check_ray_head
from rlrm.open_files import open_files_limit, open_files_needed


def check_inputs(profile: Profile) -> None:
    """Fail before a run folder exists: a tracker extra not installed, a user tool that does not import, a weights
    folder that is a file, a missing local model (policy, reference, reward), an unreadable local dataset, more local
    actor ranks than devices, a Ray address where no head answers, a reward.cache.path that is not a reward cache, a
    custom reward function that does not import or cannot take verl's arguments, or a judge temperature the SGLang
    router in front of the judge refuses."""
    check_trackers(profile.logging)
    check_open_files(profile)
    note_unread_answers(profile)
    if profile.rollout.agent.enabled:  # a user tool that fails at import: in a second, not after the model loads
        build_tools(profile.rollout.agent.tools, profile.rollout.agent.user_tools)
    check_weights_dir(profile.rollout.server.weights_dir)
    reward = profile.reward
    if reward.kind == "custom":  # a typo in the user's reward: in a second, not after the model and servers start
        check_custom_reward(reward)
    if reward.cache.path and reward.cache.active(reward.kind, reward.samples_verdicts):
        check_cache_file(reward.cache.path)
    check_actor_ranks(profile)
    check_ray_heads(profile)
    check_judge_router(profile)
    reward_model = (
        profile.reward.server.model if profile.reward.model_kind and not profile.reward.server.addresses else None
    )
    for setting, path in (
        ("model.path", profile.model.path),
        ("model.ref_path", profile.model.ref_path),
        ("reward.server.model", reward_model),
    ):
        if path and not path.startswith("tiny:"):
            check_model_folder(resolve_model_path(path), setting)
    if reward_model and not reward_model.startswith("tiny:") and profile.reward.model_kind == "disrm":
        check_chat_template(resolve_model_path(reward_model), "reward.server.model (the DisRM)")
    data = profile.data
    local = data.source == "synthetic" or Path(data.path).expanduser().exists() or data.path.startswith((".", "/", "~"))
    if local:  # synthetic settings that cannot make the splits, a bad row (hub data: checked when the run starts)
        check_canary_data(profile, load_splits(data)[1])


def note_unread_answers(profile: Profile) -> None:
    """A line when the prompts ask for answers in a format reward.rule cannot read, and the reward is a model or a
    function of the user's (with the rule as the reward, the profile is refused): held-out accuracy, the reward's
    rule agreement and the guard, which read answers by the rule, would read none."""
    asks = unread_instruction(profile)
    if asks is not None and profile.reward.kind not in ("rule", "composite"):
        print(
            f"note: data.prompt_suffix asks for the answer as reward.rule={asks} reads it, but reward.rule="
            f"{profile.reward.rule}: val/accuracy and reward/rule_agreement will read no answers; set reward.rule={asks}",
            file=sys.stderr,
            flush=True,
        )


def check_open_files(profile: Profile) -> None:
    """ConfigError when the open-files limit (after `raise_open_files_limit`) is below what the reward requests in
    flight may hold (rlrm/open_files.py): they failed as connection errors and were defaulted, the limit unnamed."""
    reward = profile.reward
    limit = open_files_limit()
    if not reward.model_kind or limit is None:  # a rule or a function calling no model: no reward sockets
        return
    in_flight = min(reward.num_workers * reward.max_concurrency, profile.data.train_batch_size * profile.rollout.n)
    if reward.limits.max_concurrent is not None:
        in_flight = min(in_flight, reward.limits.max_concurrent)
    # the SGLang router in front of launched judges holds two sockets a request (reward.server.router auto or sglang)
    routed = reward.server.router != "client" and reward.model_kind == "genrm" and not reward.server.addresses
    need = open_files_needed(in_flight, routed)
    if limit < need:
        raise ConfigError(
            f"the open-files limit (ulimit -n) is {limit}, and up to {in_flight} reward requests in flight "
            f"(reward.num_workers x reward.max_concurrency, at most a step's samples) may hold about {need} files: "
            f"raise it (ulimit -n {need}, or the container's or job's nofile limit), or lower reward.max_concurrency"
        )


SGLANG_ROUTER_MAX_TEMPERATURE = 2.0  # sglang-router validates chat requests: temperature in [0, 2]


def check_judge_router(profile: Profile) -> None:
    """A judge temperature the SGLang router in front of the judge refuses (it answers every request 400): one line
    now, not a step whose every sample failed. rlrm's own servers take any temperature; the client router is kept."""
    reward = profile.reward
    if reward.model_kind != "genrm" or reward.kind == "custom":
        return
    temperature = reward.genrm.temperature
    if temperature <= SGLANG_ROUTER_MAX_TEMPERATURE:
        return
    from rlrm.launch.fleet.server_fleet import ServerFleet

    fleet = ServerFleet(reward.server.fleet_spec(), role="genrm", model_path=reward.server.model or "")
    if fleet.uses_router():
        raise ConfigError(
            f"reward.genrm.temperature {temperature:g} is above {SGLANG_ROUTER_MAX_TEMPERATURE:g}, the most the SGLang "
            f"router in front of the judge takes (reward.server.router={reward.server.router}); lower it, or set "
            "reward.server.router=client"
        )


def check_actor_ranks(profile: Profile) -> None:
    """Refuse, before anything starts, more local actor ranks than this machine has GPUs (cuda) or cores (cpu)."""
    if profile.actor.on_ranks and profile.actor.ranks_on == "ray" and importlib.util.find_spec("ray") is None:
        raise ConfigError(
            "actor.ranks_on=ray needs the ray package: pip install 'rlrm[ray]', or set actor.ranks_on=local"
        )
    if not profile.actor.on_ranks or profile.actor.ranks_on == "ray":
        return  # Ray's placement group says whether the cluster can hold them
    try:
        check_world_size(profile.actor.world_size, pick_device(profile.trainer.device), key="actor.world_size")
    except ConfigError as exc:
        raise ConfigError(f"{exc}; or place ranks on a Ray cluster with actor.ranks_on=ray") from None


def check_ray_heads(profile: Profile) -> None:
    """Refuse, before a run folder exists, a Ray address (a setting's, or RAY_ADDRESS) where no Ray head answers
    (ray.init waits minutes there)."""
    uses_ray = "ray" in (
        profile.actor.ranks_on,
        profile.reward.executor,
        profile.rollout.server.launch_on,
        profile.reward.server.launch_on,
    )
    if uses_ray:
        _check_ray_imports()
        check_ray_head(profile.actor.ray_address, "actor.ray_address")
        check_ray_head(profile.reward.ray_address, "reward.ray_address")
        if None in (profile.actor.ray_address, profile.reward.ray_address):
            _check_ray_address_env()


def _check_ray_address_env() -> None:
    """RAY_ADDRESS, which a part without a ray_address of its own joins (rlrm/launch/common/ray_init.py), checked alike."""
    address = os.environ.get("RAY_ADDRESS")
    if not address:
        return
    try:
        check_ray_address(address)
    except ValueError as exc:  # e.g. the dashboard's http:// address, which `ray job submit` takes, not ray.init
        raise ConfigError(f"RAY_ADDRESS: {exc}; or unset RAY_ADDRESS for a local Ray") from None
    check_ray_head(address.strip(), "RAY_ADDRESS")


def _check_ray_imports() -> None:
    """A Ray that is installed but fails to import (a broken wheel, a missing shared library): one line, now."""
    if importlib.util.find_spec("ray") is None:
        return  # not installed: each Ray setting's own check names the extra to install
    try:
        import ray  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - whatever a broken install raises
        reason = (str(exc).strip().splitlines() or [""])[0]
        raise ConfigError(
            f"ray is installed but fails to import ({type(exc).__name__}: {clipped(reason)}); repair it "
            "(pip install --force-reinstall 'rlrm[ray]') or drop the Ray settings"
        ) from None
