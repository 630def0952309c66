"""Per-turn rewards of a trajectory: what a reward returns besides its outcome score, checked per sample.

    scores = read_turn_scores(raw_extra, sample, "compute_score", tool_rewards=False)   # [0.1, 0.0, 0.5] | None

A reward function returns them under verl's agent-loop name for per-turn rewards (`turn_scores`, the list
verl's ToolAgentLoop puts in its output's `extra_fields`):

    {"score": 1.0, "turn_scores": [0.1, 0.0, 0.5]}      # one number per assistant turn, in order

The list has one number per assistant turn of the sample (`extra_info["turns"]`, role "assistant"); a
single-turn sample has one turn. With `reward.tool_rewards_as_turn_scores`, the reward a tool returned for
the call that ended turn k is added to turn k's number (a reward function that returns no `turn_scores`
then gets zeros plus the tool rewards). Each turn's number lands on that turn's last generated token, the
outcome score on the response's last generated token (rlrm/engine/turn_rewards.py). A list of the wrong
length or with a non-number is a counted failure (`reward/turn_score_errors`); a NaN or inf counts as
`reward/nonfinite`: never a silent 0.
"""

from __future__ import annotations

from rlrm.engine.rewards.base import RewardSample
from rlrm.engine.rewards.errors import BadTurnScores, NonFiniteScore
from rlrm.float32 import fits_float32

TURN_SCORES_KEY = "turn_scores"  # verl's ToolAgentLoop extra_fields name; a result's checked list is kept here


def assistant_turns(sample: RewardSample) -> list[dict]:
    """The sample's assistant turns from `extra_info["turns"]` (an agent trajectory); [] for a single-turn sample."""
    turns = sample.extra_info.get("turns")
    if not isinstance(turns, list):
        return []
    return [t for t in turns if isinstance(t, dict) and t.get("role") == "assistant"]


def read_turn_scores(raw: dict, sample: RewardSample, fn_name: str, tool_rewards: bool) -> list[float] | None:
    """The checked per-turn rewards of one result dict (plus the tools' rewards when `tool_rewards`), or None.

    Raises:
        BadTurnScores: not a list, the wrong length, or an entry that is not a number.
        NonFiniteScore: a NaN or inf entry.
    """
    given = raw.get(TURN_SCORES_KEY)
    turns = assistant_turns(sample)
    count = max(len(turns), 1)
    tool = [float(t.get("tool_reward", 0.0)) for t in turns] if tool_rewards and turns else []
    for k, reward in enumerate(tool):  # a tool's reward is checked as a turn score is: inf in training beyond float32
        if not fits_float32(reward):
            raise NonFiniteScore(f"a tool's reward {reward} on turn {k} of sample {sample.uid} is beyond float32")
    if given is None and not any(tool):
        return None
    if given is None:
        return tool
    if isinstance(given, (str, bytes, dict)) or not hasattr(given, "__len__"):
        raise BadTurnScores(
            f"reward function {fn_name} gave {TURN_SCORES_KEY} as {type(given).__name__} for sample {sample.uid}; "
            "give a list with one number per assistant turn"
        )
    if len(given) != count:
        raise BadTurnScores(
            f"reward function {fn_name} gave {len(given)} {TURN_SCORES_KEY} for sample {sample.uid}, which has "
            f"{count} assistant turn(s); give one number per turn (extra_info['turns'], role 'assistant')"
        )
    scores = [_number(value, k, fn_name, sample.uid) for k, value in enumerate(given)]
    return [s + t for s, t in zip(scores, tool)] if tool else scores


def _number(value, k: int, fn_name: str, uid: str) -> float:
    bad = BadTurnScores(
        f"reward function {fn_name} gave {TURN_SCORES_KEY}[{k}]={value!r} for sample {uid}; give a number"
    )
    if isinstance(value, (str, bytes, bool)) or value is None:
        raise bad
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise bad from None
    if not fits_float32(number):  # beyond float32's range: inf in training
        raise NonFiniteScore(f"reward function {fn_name} gave {TURN_SCORES_KEY}[{k}]={number} for sample {uid}")
    return number
