"""Named reward components: what a reward reports besides its score, checked per sample.

    spec = ComponentSpec(profile.reward.component_weights)
    components = spec.read(raw_result_dict, "compute_score", sample.uid)   # {"correct": 1.0, "format": 1.0} | None

A custom function returns its components in one of two shapes:

    {"score": 1.2, "reward_components": {"correct": 1.0, "format": 1.0}}   # NeMo Gym's reward_components
    {"score": 1.2, "correct": 1.0, "format": 1.0}                          # verl's: keys named by gdpo_reward_keys

The second is read only for the names in `reward.component_weights` (verl's `algorithm.gdpo_reward_keys`
and `gdpo_reward_weights` in one mapping). With `reward_components` the score may be left out: it is then
the weighted sum of the components. The names are pinned by `reward.component_weights`, or, when that is
empty, by the first sample that reports components (each weight 1); every later sample must report the
same names. A sample whose components are missing, extra or not numbers is a counted failure
(`reward/component_errors`), one with a NaN or inf component too (`reward/nonfinite`): never a silent 0.
"""

from __future__ import annotations

from rlrm.engine.rewards.errors import BadComponents, NonFiniteScore
from rlrm.errors import TrainingError
from rlrm.float32 import fits_float32

COMPONENTS_KEY = "reward_components"  # where a result's checked components are kept (samples.jsonl shows them)


class ComponentSpec:
    """The component names and weights of a run, pinned by the profile or by the first sample that has some."""

    def __init__(self, weights: dict[str, float]):
        self.weights = dict(weights)
        self.names: tuple[str, ...] | None = tuple(weights) or None

    def weight(self, name: str) -> float:
        return self.weights.get(name, 1.0)

    def weighted_sum(self, components: dict[str, float]) -> float:
        return sum(self.weight(name) * value for name, value in components.items())

    def read(self, raw: dict, fn_name: str, uid: str) -> dict[str, float] | None:
        """The checked components of one result dict; None when the run has none yet and this one has none.

        Raises:
            BadComponents: a name missing or not pinned, or a value that is not a number.
            NonFiniteScore: a NaN or inf value.
        """
        nested = raw.get(COMPONENTS_KEY)
        if nested is not None and not isinstance(nested, dict):
            raise BadComponents(
                f"reward function {fn_name} gave {COMPONENTS_KEY} as {type(nested).__name__} for sample {uid}; "
                "give a dict {name: number}"
            )
        if self.names is None:
            if not nested:
                return None
            self.names = tuple(nested)  # the first sample with components pins the names
        source = nested if nested is not None else raw
        missing = [name for name in self.names if name not in source]
        extra = sorted(set(nested or ()) - set(self.names))
        if missing or extra:
            raise BadComponents(_mismatch(fn_name, uid, missing, extra, pinned=bool(self.weights)))
        return {name: _number(source[name], name, fn_name, uid) for name in self.names}


def _mismatch(fn_name: str, uid: str, missing: list[str], extra: list[str], pinned: bool) -> str:
    said = []
    if missing:
        said.append(f"no component {', '.join(missing)}")
    if extra:
        said.append(f"component(s) {', '.join(extra)} not in the run's set")
    fix = (
        "return every name of reward.component_weights (weight 0 logs a component without training on it)"
        if pinned
        else "return the same names for every sample, or pin them with reward.component_weights"
    )
    return f"reward function {fn_name} gave {'; '.join(said)} for sample {uid}; {fix}"


def _number(value, name: str, fn_name: str, uid: str) -> float:
    if isinstance(value, (str, bytes)) or value is None:
        raise BadComponents(
            f"reward function {fn_name} gave component {name}={value!r} for sample {uid}; give a number"
        )
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise BadComponents(
            f"reward function {fn_name} gave component {name}={value!r} for sample {uid}; give a number"
        ) from None
    if not fits_float32(number):  # beyond float32's range: inf in training
        raise NonFiniteScore(f"reward function {fn_name} gave component {name}={number} for sample {uid}")
    return number


def component_table(results: list, weights: dict[str, float], default_score: float):
    """(names, rows [B][K], weights [K]) of a batch's results for GDPO.

    A sample whose reward failed (on_failure=default, already counted in reward/defaulted) has no
    components: each takes `reward.default_score`, as its score did. Names: the profile's, else those the
    samples report (the reward loop holds every sample to one set). No names at all: ([], [], []).
    """
    names = tuple(weights)
    if not names:
        reported: dict = next((r.extra[COMPONENTS_KEY] for r in results if COMPONENTS_KEY in r.extra), {})
        names = tuple(reported)
    rows = []
    for result in results:
        components = result.extra.get(COMPONENTS_KEY)
        if components is None and names and not result.extra.get("reward_failed"):
            # scored before the first sample that pinned the names (reward.component_weights pins them up front)
            raise TrainingError(
                f"a sample reported no {COMPONENTS_KEY} while others reported {', '.join(names)}; return them for "
                "every sample, or set reward.component_weights"
            )
        rows.append([default_score] * len(names) if components is None else [components[n] for n in names])
    return list(names), rows, [weights.get(n, 1.0) for n in names]


def component_metrics(results) -> dict[str, float]:
    """reward/component/<name>/{mean,min,max} over the results that report components (failed ones left out)."""
    values: dict[str, list[float]] = {}
    for result in results:
        if result is None or result.extra.get("reward_failed"):
            continue
        for name, value in result.extra.get(COMPONENTS_KEY, {}).items():
            values.setdefault(name, []).append(float(value))
    out = {}
    for name, seen in values.items():
        prefix = f"reward/component/{name}"
        out.update({f"{prefix}/mean": sum(seen) / len(seen), f"{prefix}/min": min(seen), f"{prefix}/max": max(seen)})
    return out
