"""Custom rewards: a function of your own, named by file and name in `reward.custom`, with verl's contract.

    reward:
      kind: custom
      custom: {path: my_reward.py, name: compute_score}

    # my_reward.py
    def compute_score(data_source, solution_str, ground_truth, extra_info):
        return {"score": float(solution_str.strip().endswith(ground_truth)), "ends_right": True}

A sync function runs in worker processes (`reward.custom.isolation: auto` or `process`,
rlrm/engine/rewards/worker_pool.py): a call past reward.attempt_timeout_s is killed with its worker. An async one runs on an
event loop of its own (rlrm/engine/rewards/side_loop.py; with `isolation: process`, on one per worker process), and
with `isolation: thread` a sync one runs on a thread of its own: a call past the timeout is then abandoned. It returns a
float or a dict with `score`; the reward loop checks it (a non-numeric or non-finite score is a
counted failure, never a silent 0). As in verl, the four arguments are passed by name to a function whose
parameters bear verl's names (in any order), and by position to one that names them otherwise. verl's newer
keyword arguments `reward_router_address` and `reward_model_tokenizer` are passed to a function that names them
(the address also to one that takes `**kwargs`, when a server is up): with `reward.server.model` set, the
address (`host:port`, no scheme) of a forwarder to the reward servers that answers every path they serve, and
the served model's tokenizer; otherwise None. The function's calls through that address are counted per sample
(reward/model_calls, judge tokens), rate limited (reward.limits), and kept in `model_requests` of its extra
info; examples/rewards/fapo_judge.py is one such function.
"""

from __future__ import annotations

import inspect
import os
import sys
import weakref
from pathlib import Path
from typing import cast

from rlrm.call_errors import CallError, TransientError
from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.base import ClosableRewardFn, RewardSample
from rlrm.engine.rewards.deadline import deadline_held
from rlrm.engine.rewards.ledger import current_ledger
from rlrm.engine.rewards.metered import MeteredBalancer
from rlrm.engine.rewards.model_proxy import ModelProxy
from rlrm.engine.rewards.side_loop import SideLoop
from rlrm.engine.rewards.threads import run_abandonable
from rlrm.engine.rewards.worker_pool import FunctionPool
from rlrm.errors import ConfigError
from rlrm.user_code import import_file, is_async

VERL_ARGS = ("data_source", "solution_str", "ground_truth", "extra_info")
_OPTIONAL_KWARGS = ("reward_router_address", "reward_model_tokenizer")


def load_function(path: str, name: str):
    """The function `name` defined in the Python file `path` (ConfigError when it is not there)."""
    module = import_file(path, f"rlrm_custom_reward_{abs(hash(str(Path(path))))}", f"reward.custom.path {path}")
    fn = getattr(module, name, None)
    if not callable(fn):
        found = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_"))
        raise ConfigError(
            f"reward.custom.name {name!r} is not a function in {path}; functions there: {', '.join(found) or 'none'}"
        )
    return fn


def make_custom_reward(cfg: RewardConfig, metered: MeteredBalancer | None = None, model_path: str | None = None):
    """A reward function calling the user's function with verl's arguments.

    With `metered` (reward.server.model set: the reward servers are up), a function that takes
    `reward_router_address` gets a forwarder's `host:port` (rlrm/engine/rewards/model_proxy.py), and one that
    takes `reward_model_tokenizer` the served model's tokenizer from `model_path`, loaded once here.
    """
    fn = load_function(_custom_path(cfg), cfg.custom.name)
    kwargs = dict.fromkeys(optional_kwargs(fn, metered is not None))
    by_name = check_signature(fn, cfg, kwargs)
    if metered is None and "reward_router_address" in inspect.signature(fn).parameters:
        print(
            f"note: reward function {cfg.custom.name} takes reward_router_address, but this profile starts no reward "
            "server (reward.server.model is unset): it gets None",
            file=sys.stderr,
        )
    if "reward_model_tokenizer" in kwargs and metered is not None:
        kwargs["reward_model_tokenizer"] = _tokenizer(model_path, cfg.server.model)
        check_tokenizer(kwargs["reward_model_tokenizer"], metered, cfg.server.model)
    proxy = (
        ModelProxy(metered, cfg.server.request_timeout_s)
        if metered is not None and "reward_router_address" in kwargs
        else None
    )
    name = cfg.custom.name
    pool = _process_pool(cfg, fn, kwargs, model_path)
    side = SideLoop(name, grace_s=cfg.attempt_timeout_s) if pool is None and is_async(fn) else None

    async def call(sample: RewardSample, extra_kwargs: dict):
        values = (sample.data_source, sample.solution_str, sample.ground_truth, dict(sample.extra_info))
        args: tuple = () if by_name else values
        if by_name:
            extra_kwargs = {**dict(zip(VERL_ARGS, values)), **extra_kwargs}
        if pool is not None:  # in a worker process: killed when the reward loop gives up on it
            return await pool.call(args, {k: v for k, v in extra_kwargs.items() if k != "reward_model_tokenizer"})
        if side is not None:  # on a loop of its own: one that blocks its loop cannot hold the run
            return await side.call(fn, *args, **extra_kwargs)
        return await run_abandonable(fn, *args, **extra_kwargs)  # a call that never returns is left behind

    async def custom_reward(sample: RewardSample):
        if proxy is None:
            return await call(sample, kwargs)
        async with proxy.lease() as address:
            try:
                return await call(sample, {**kwargs, "reward_router_address": address})
            except CallError:
                raise
            except Exception as exc:
                ledger = current_ledger()
                if not ledger.transient_errors:
                    raise
                # the function failed because the servers did not answer: a transient failure, retried
                raise TransientError(
                    f"reward function {name} raised {type(exc).__name__}: {exc} after "
                    f"{ledger.transient_errors} reward-model call(s) got no answer"
                ) from None

    custom_reward.__name__ = name  # named in the reward loop's error messages
    if pool is not None:
        setattr(custom_reward, "pool", pool)  # kept for inspection; not part of the reward contract
        cast(ClosableRewardFn, custom_reward).close = pool.close
        weakref.finalize(custom_reward, pool.close)  # the workers go with the function (or at exit)
    return custom_reward


def _process_pool(cfg: RewardConfig, fn, kwargs: dict, model_path: str | None) -> FunctionPool | None:
    """The worker processes the function runs in (reward.custom.isolation), or None for in-process calls."""
    isolation = cfg.custom.isolation
    if isolation == "thread" or (isolation == "auto" and is_async(fn)):
        return None
    processes = cfg.custom.processes or min(8, os.cpu_count() or 1)
    tokenizer_path = None
    if kwargs.get("reward_model_tokenizer") is not None:  # loaded in each worker from the same folder
        tokenizer_path = model_path or cfg.server.model
    # a call's wait for a free worker is kept off its attempt's deadline: the deadline bounds the function's call
    return FunctionPool(_custom_path(cfg), cfg.custom.name, processes, tokenizer_path, while_queued=deadline_held)


def _custom_path(cfg: RewardConfig) -> str:
    if cfg.custom.path is None:  # the profile's validation refuses reward.kind=custom without one
        raise ConfigError("reward.kind=custom needs reward.custom.path (the Python file defining the reward function)")
    return cfg.custom.path


def check_custom_reward(cfg: RewardConfig) -> None:
    """The function imports and takes verl's arguments (ConfigError, one line, otherwise); nothing is called."""
    fn = load_function(_custom_path(cfg), cfg.custom.name)
    check_signature(fn, cfg, dict.fromkeys(optional_kwargs(fn, bool(cfg.server.model))))


def optional_kwargs(fn, has_server: bool) -> list[str]:
    """verl's optional keywords the function takes: those it names; `reward_router_address` too where it takes
    `**kwargs` and a reward server is up (`has_server`), as verl passes it only then: a function forwarding its
    **kwargs to a helper that takes none (verl's gsm8k.compute_score) would fail on None (the tokenizer only when
    named: a hosted judge has none to load, and loading one is not free)."""
    params = inspect.signature(fn).parameters
    named = [k for k in _OPTIONAL_KWARGS if k in params]
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    if takes_any and has_server and "reward_router_address" not in named:
        named.insert(0, "reward_router_address")
    return named


def check_signature(fn, cfg: RewardConfig, extra_kwargs: dict) -> bool:
    """At start, not at step 1: the function must take verl's four arguments (and the keywords it names).

    Returns:
        True where they are passed by name (its parameters bear verl's names, in any order, as verl passes them),
        False where by position (it names them otherwise).
    """
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):  # it yields: no score comes back
        raise ConfigError(
            f"reward function {cfg.custom.name} in {cfg.custom.path} is a generator (it yields): return its score "
            "(a float, or a dict with 'score') instead"
        )
    signature = inspect.signature(fn)
    try:
        signature.bind(**dict.fromkeys(VERL_ARGS, ""), **extra_kwargs)
        return True
    except TypeError:
        pass
    positional = [
        p.name for p in signature.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    for i, name in enumerate(positional[: len(VERL_ARGS)]):
        if name in VERL_ARGS and name != VERL_ARGS[i]:  # by position it would get another argument than it names
            raise ConfigError(
                f"reward function {cfg.custom.name} in {cfg.custom.path} takes {name} as its parameter {i + 1}, where "
                f"verl's arguments put {VERL_ARGS[i]} (a scorer such as verl's gsm8k.compute_score(solution_str, "
                f"ground_truth) is a helper): call it from {cfg.custom.name}(data_source, solution_str, ground_truth, "
                "extra_info=None)"
            )
    try:
        signature.bind("data_source", "solution_str", "ground_truth", {}, **extra_kwargs)
        return False
    except TypeError as exc:
        raise ConfigError(
            f"reward function {cfg.custom.name} in {cfg.custom.path} cannot be called as "
            f"{cfg.custom.name}(data_source, solution_str, ground_truth, extra_info) ({exc}); give it that signature"
        ) from None


def check_tokenizer(tokenizer, metered: MeteredBalancer, model: str | None) -> None:
    """The tokenizer handed to the function must be the one the reward servers tokenize with: each server that
    reports its tokenizer's size (`/get_model_info`: rlrm's embedded server, SGLang) is compared; vLLM and hosted
    APIs report none, and are trusted."""
    from rlrm.launch.client.replica_info import model_info

    for url in metered.urls:
        info = model_info(url, metered.balancer.headers)
        theirs = info.get("tokenizer_size")
        if isinstance(theirs, int) and theirs != len(tokenizer):
            raise ConfigError(
                f"reward.custom: reward_model_tokenizer (from reward.server.model={model!r}) has {len(tokenizer)} "
                f"tokens, but the reward server {url} serves {info.get('model_path', '?')} with a tokenizer of "
                f"{theirs}: name the served model's own folder in reward.server.model"
            )


def _tokenizer(model_path: str | None, model: str | None):
    """The served model's tokenizer (a hosted model with no local folder has none: ConfigError)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model_path or model)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"reward.custom: the function takes reward_model_tokenizer, but no tokenizer loads from "
            f"reward.server.model={model!r} ({type(exc).__name__}); name the model's local folder or hub id"
        ) from None
