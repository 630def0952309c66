"""The reward contract: everything that decides a score, as named parts, and one stable fingerprint of them.

    contract = reward_contract(profile.reward, model={"path": ..., "weights": "sha256:..."})
    contract.fingerprint          # sha256 hex of the parts: the reward cache's key prefix, in every score record
    contract.short                # its first 12 characters, what users are shown
    changed_parts(old.parts, contract.parts)   # ["template"]: what a resumed run changed

A function of the resolved `reward` section (a chat template file its engine arguments name read by its
digest), the model's identity (read by rlrm/engine/rewards/model_identity.py: a local folder's weights digest,
or what a served model's /v1/models reports) and a custom function's source digest. Two rewards with the same
fingerprint give the same score to the same (prompt, response, reference); anything that may change a score
changes a part. The failure policy
(on_failure, default_score) and injected latency are not part of it: they never change a score that was given.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from rlrm.config.reward import RewardConfig

CONTRACT_VERSION = 1  # bump when a part's meaning changes, so older fingerprints never match by accident
SHORT_CHARS = 12


@dataclass(frozen=True)
class RewardContract:
    parts: dict  # part name -> what decides it (JSON-able; None where the reward has no such part)

    @property
    def fingerprint(self) -> str:
        return _digest({"version": CONTRACT_VERSION, "parts": self.parts})

    @property
    def short(self) -> str:
        return self.fingerprint[:SHORT_CHARS]

    def as_json(self) -> dict:
        """What reward_contract.json and `rlrm inspect reward --json` hold."""
        return {"version": CONTRACT_VERSION, "fingerprint": self.fingerprint, "parts": self.parts}

    def part_digests(self) -> dict[str, str]:
        """Each part's own short digest, so two contracts can be compared part by part."""
        return {name: _digest(value)[:SHORT_CHARS] for name, value in self.parts.items()}


def reward_contract(
    cfg: RewardConfig, model: dict | None = None, source_digest: str | None = None, max_response_len: int | None = None
) -> RewardContract:
    """The contract of a `reward` section.

    Args:
        cfg: the resolved reward section.
        model: the reward model's identity (model_identity.py), None for rewards that call no model.
        source_digest: sha256 of a custom function's file (reward.kind=custom), else None.
        max_response_len: rollout.max_new_tokens, part of the shaping when reward.overlong is on.
    """
    kind = cfg.model_kind if cfg.kind != "custom" else None  # the model rlrm's own clients call
    uses_rule = cfg.kind in ("rule", "composite")
    g, d = cfg.genrm, cfg.disrm
    parts = {
        "kind": {"kind": cfg.kind, "model_kind": cfg.model_kind},
        "model": model if cfg.model_kind else None,
        "dtype": _dtype(cfg) if cfg.model_kind else None,
        "template": _template(cfg, kind),  # a DisRM's chat template is in the model's files
        "parser": {
            "rule": _rule(cfg) if uses_rule else None,
            "genrm": {"verdict": g.verdict, "max_score": g.max_score, "max_tokens": g.max_tokens,
                      "temperature": g.temperature} if kind == "genrm" else None,
            "rubric": [c.model_dump() for c in cfg.rubric.criteria] if cfg.kind == "rubric" else None,
            "disrm": {"max_length": d.max_length, "too_long": d.too_long} if kind == "disrm" else None,
        },
        "reference": _reference(cfg, kind, uses_rule),
        "composite": cfg.composite.model_dump(exclude={"model_kind"}) if cfg.kind == "composite" else None,
        "components": dict(sorted(cfg.weights_of_components.items())),
        "custom": {"name": cfg.custom.name, "source_sha256": source_digest, "model_role": cfg.custom.model_role}
        if cfg.kind == "custom" else None,
        # the penalty starts buffer_len tokens before the longest response: that length shapes the score too
        "shaping": {**cfg.overlong.model_dump(), "max_response_len": max_response_len} if cfg.overlong.active else None,
    }  # fmt: skip
    if cfg.tool_rewards_as_turn_scores:  # a part only when on, so the contracts of runs without it stay as they were
        parts["turn_scores"] = {"tool_rewards": True}  # what the step trains on: tools' rewards in each turn's score
    return RewardContract(parts)


def changed_parts(old: dict, new: dict) -> list[str]:
    """Names of the parts that differ between two contracts' `parts` (a part only one has counts)."""
    return sorted(name for name in set(old) | set(new) if _digest(old.get(name)) != _digest(new.get(name)))


def describe_change(name: str, old, new) -> str:
    """What changed in a part, where it changed: the keys of a mapping that differ, each with its two values
    (`parser.method ('strict' -> 'flexible')`), and of two texts the stretch around their first difference
    (`template ('...Problem: {question}...' -> '...Question: {question}...')`)."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys = sorted(k for k in old.keys() | new.keys() if (k in old, old.get(k)) != (k in new, new.get(k)))
        if keys:
            return "; ".join(describe_change(f"{name}.{k}", old.get(k, _ABSENT), new.get(k, _ABSENT)) for k in keys)
    if isinstance(old, str) and isinstance(new, str):
        return f"{name} ({_around_difference(old, new)})"
    return f"{name} ({_short_value(old)} -> {_short_value(new)})"


_ABSENT = object()  # a key one contract has and the other has not (a part added to the contract since: None)


def _around_difference(old: str, new: str, before: int = 12, chars: int = 40) -> str:
    """`'...at the first difference...' -> '...at the first change...'`: both texts from a little before where they
    first differ, each cut to `chars` characters."""
    at = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
    start = max(0, at - before)

    def stretch(text: str) -> str:
        piece = text[start : start + chars]
        return repr(("..." if start else "") + piece + ("..." if start + chars < len(text) else ""))

    return f"{stretch(old)} -> {stretch(new)}"


def _short_value(value, chars: int = 40) -> str:
    if value is _ABSENT:
        return "absent"
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return repr(text if len(text) <= chars else text[: chars - 3] + "...")


def _template(cfg: RewardConfig, kind: str | None) -> str | None:
    """The judge's prompt template: a rubric's shared prefix (its criteria are in the parser part), or genrm's."""
    if kind != "genrm":
        return None  # a DisRM's chat template is in the model's files
    return cfg.rubric.prefix if cfg.kind == "rubric" else cfg.genrm.template


def _rule(cfg: RewardConfig) -> dict:
    """The rule's part: GSM8K's as it always was (so older fingerprints stay), the MATH rule's named."""
    scores = {"score": cfg.score, "format_score": cfg.format_score}
    return {"method": cfg.method, **scores} if cfg.rule == "gsm8k" else {"rule": cfg.rule, **scores}


def _dtype(cfg: RewardConfig) -> dict:
    if cfg.model_kind == "disrm" and cfg.disrm.scorer == "legacy":
        return {"scorer": "legacy", "dtype": cfg.disrm.legacy_dtype}
    if cfg.server.addresses:  # running servers: theirs (rlrm's own say it in /v1/models; vLLM and SGLang do not)
        return {"scorer": "served", "dtype": None, "backend": None}
    served: dict[str, object] = {"scorer": "served", "dtype": cfg.server.dtype, "backend": cfg.server.backend}
    if cfg.server.extra_args:  # a key only when set, so the contracts of runs without them stay as they were
        served["extra_args"] = _engine_args(cfg.server.extra_args)  # --chat-template, --quantization fp8, ...
    return served


def _engine_args(args: list[str]) -> list[str]:
    """A launched engine's own arguments, a chat template file's path followed by its contents' digest (a file
    edited in place is another judge prompt)."""
    out = []
    for i, arg in enumerate(args):
        out.append(arg)
        name, eq, value = arg.partition("=")
        if not eq and i > 0 and args[i - 1] == "--chat-template":
            name, value = "--chat-template", arg
        if name == "--chat-template" and value and Path(value).is_file():
            out.append("sha256:" + hashlib.sha256(Path(value).read_bytes()).hexdigest())
    return out


def _reference(cfg: RewardConfig, kind: str | None, uses_rule: bool) -> dict:
    """Where the reference answer (ground truth) enters the score."""
    return {
        "rule_compares": uses_rule,
        "judge_sees": "{reference}" in (_template(cfg, kind) or ""),
        "custom_gets": cfg.kind == "custom",
    }


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()
