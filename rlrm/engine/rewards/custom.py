"""Custom rewards: a function of your own, named by file and name in `reward.custom`, with verl's contract.

    reward:
      kind: custom
      custom: {path: my_reward.py, name: compute_score}

    # my_reward.py
    def compute_score(data_source, solution_str, ground_truth, extra_info):
        return {"score": float(solution_str.strip().endswith(ground_truth)), "ends_right": True}

The function may be sync (run in a thread, so it never blocks the event loop) or async. It returns a
float or a dict with `score`; the reward loop checks it (a non-numeric or non-finite score is a
counted failure, never a silent 0). verl's newer keyword arguments `reward_router_address` and
`reward_model_tokenizer` are passed (as None) only to a function that names them.
"""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

from rlrm.config.reward import RewardConfig
from rlrm.engine.rewards.base import RewardFn, RewardSample
from rlrm.engine.rewards.threads import run_abandonable
from rlrm.errors import ConfigError

_OPTIONAL_KWARGS = ("reward_router_address", "reward_model_tokenizer")


def load_function(path: str, name: str):
    """The function `name` defined in the Python file `path` (ConfigError when it is not there)."""
    file = Path(path)
    spec = importlib.util.spec_from_file_location(f"rlrm_custom_reward_{abs(hash(str(file)))}", file)
    if spec is None or spec.loader is None:
        raise ConfigError(f"reward.custom.path {path} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise ConfigError(f"reward.custom.path {path} failed to import: {type(exc).__name__}: {exc}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        found = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_"))
        raise ConfigError(
            f"reward.custom.name {name!r} is not a function in {path}; functions there: {', '.join(found) or 'none'}"
        )
    return fn


def make_custom_reward(cfg: RewardConfig) -> RewardFn:
    """A reward function calling the user's function with verl's arguments."""
    fn = load_function(cfg.custom.path, cfg.custom.name)
    params = inspect.signature(fn).parameters
    extra_kwargs = {k: None for k in _OPTIONAL_KWARGS if k in params}
    check_signature(fn, cfg, extra_kwargs)
    is_async = inspect.iscoroutinefunction(fn)

    async def custom_reward(sample: RewardSample):
        args = (sample.data_source, sample.solution_str, sample.ground_truth, dict(sample.extra_info))
        if is_async:
            return await fn(*args, **extra_kwargs)
        return await run_abandonable(fn, *args, **extra_kwargs)  # a call that never returns is left behind

    custom_reward.__name__ = cfg.custom.name  # named in the reward loop's error messages
    return custom_reward


def check_signature(fn, cfg: RewardConfig, extra_kwargs: dict) -> None:
    """At start, not at step 1: the function must take verl's four arguments (and the keywords it names)."""
    try:
        inspect.signature(fn).bind("data_source", "solution_str", "ground_truth", {}, **extra_kwargs)
    except TypeError as exc:
        raise ConfigError(
            f"reward function {cfg.custom.name} in {cfg.custom.path} cannot be called as "
            f"{cfg.custom.name}(data_source, solution_str, ground_truth, extra_info) ({exc}); give it that signature"
        ) from None
