"""`rlrm inspect reward`: score a few samples through the trainer's reward loop and servers, and show
per sample what the reward received and returned, with named lints.

    report = inspect_reward(profile, samples)             # servers started and stopped here
    report.records, report.findings, report.notes

The reward section is the profile's, with three changes that make each sample's outcome visible
rather than change it: latency/failure injection is off, a failed sample keeps its error (instead
of `reward.default_score`), and the reward function runs in-process (`executor: local`, the served
DisRM scorer), so its requests can be recorded. The servers, the balancer or router, the reward
function and the reward loop are the ones `rlrm train` starts (`RewardService`).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from pathlib import Path

from rlrm.config.reward import RewardConfig
from rlrm.engine.models.tiny import resolve_model_path
from rlrm.engine.reward_service import RewardService
from rlrm.engine.rewards.base import RewardSample
from rlrm.engine.rewards.factory import build_reward_fn
from rlrm.engine.rewards.loop import RewardLoop
from rlrm.reward_checks import details
from rlrm.reward_checks.invariance_run import run_invariance
from rlrm.reward_checks.lints import LintContext, run_lints
from rlrm.reward_checks.recorder import Recorder

RULE_NOTE = (
    "reward.kind=rule has no reward model to inspect: shown instead is the answer the {rule} extracts "
    "from each response ({method}) and the score it gives"
)


HOSTED_NOTE = (
    "the judge {model!r} is served at reward.server.addresses and its tokenizer is not on this machine (a hosted "
    "model): each judge prompt is shown as the messages sent, role: content, not as the server renders it"
)


CUSTOM_NOTE = (
    "reward.kind=custom calls your function as training does (a sync one in worker processes, reward.custom.isolation): "
    "shown is what it received and returned (its score and "
    "extra keys; with reward.server.model, model_requests lists each call it made to the model and the start of "
    "each answer)"
)


@dataclass
class InspectReport:
    kind: str  # rule | disrm | genrm | composite
    model: str | None
    records: list[dict]
    findings: list[dict]
    notes: list[str] = field(default_factory=list)
    invariance: dict | None = None
    contract: dict | None = None  # the reward contract (rlrm/engine/rewards/contract.py): fingerprint and parts

    @property
    def warnings(self) -> list[dict]:
        return [f for f in self.findings if f["severity"] == "warning"]

    def as_dict(self) -> dict:
        return {
            "kind": self.kind,
            "model": self.model,
            "notes": self.notes,
            "samples": self.records,
            "lints": self.findings,
            "invariance": self.invariance,
            "reward_contract": self.contract,
        }


def inspect_config(reward: RewardConfig) -> RewardConfig:
    """The profile's reward section, set to show each sample's outcome (see the module docstring)."""
    raw = reward.model_dump()
    raw.update(inject={}, on_failure="default", default_score=math.nan, executor="local", max_failure_rate=1.0)
    raw["disrm"]["scorer"] = "served"
    return RewardConfig.model_validate(raw)


def inspect_reward(profile, samples: list[RewardSample], invariance=None) -> InspectReport:
    """Score `samples` with the profile's reward and return what it received and gave, and the lints.

    Args:
        invariance: an `InvarianceSettings` to also run the score-invariance check on the same
            samples (DisRM only), against the same server.
    """
    cfg = inspect_config(profile.reward)
    kind = cfg.model_kind
    results, recorder, model_path, inv, contract = asyncio.run(_score(cfg, samples, invariance))
    policy_tok = _policy_tokenizer(profile)
    rm_tok = _reward_tokenizer(cfg, model_path)
    records = []
    for sample, result in zip(samples, results):
        record = details.common(sample, result)
        if cfg.kind in ("rule", "composite"):
            record.update(details.rule_detail(sample, cfg))
        if cfg.kind == "custom":
            pass  # its own calls to the model, answers included, are in its extra info (model_requests)
        elif kind == "disrm":
            record.update(details.disrm_detail(sample, recorder.last(sample.index), rm_tok, cfg))
        elif kind == "genrm" and cfg.kind != "rubric":  # a rubric's K verdicts are in its extra info (judge_verdicts)
            gated = bool(result.extra.get("gated"))  # a composite gate's rule-wrong sample: the judge not asked
            record.update(details.genrm_detail(None if gated else recorder.last(sample.index), rm_tok, cfg, gated))
        records.append(record)
    rule = ("MATH rule", "its last \\boxed{}") if cfg.rule == "math" else ("GSM8K rule", f"method {cfg.method}")
    notes = {"rule": [RULE_NOTE.format(rule=rule[0], method=rule[1])], "custom": [CUSTOM_NOTE]}.get(cfg.kind, [])
    if kind == "genrm" and rm_tok is None and cfg.kind != "custom":
        notes = [*notes, HOSTED_NOTE.format(model=cfg.server.model)]
    findings = run_lints(records, LintContext(kind=kind or "rule", policy_tokenizer=policy_tok, rm_tokenizer=rm_tok))
    model = cfg.server.model if kind else None
    return InspectReport(cfg.kind, model, records, findings, notes, inv, contract.as_json())


async def _score(cfg: RewardConfig, samples: list[RewardSample], invariance):
    service = RewardService(cfg)
    try:
        await service.start()
        recorder, model_path = None, service.model_path
        if cfg.model_kind is not None:
            recorder = Recorder(service.balancer)
            service.loop = RewardLoop(recorder.wrap(build_reward_fn(cfg, recorder, model_path)), cfg)
        await service.wake()
        results = await service.loop.score_all(samples)
        inv = None
        if invariance is not None:
            inv = await run_invariance(service, cfg, samples, invariance)
        await service.sleep()
    finally:
        await service.close()
    return results, recorder, model_path, inv, service.contract


def _reward_tokenizer(cfg: RewardConfig, model_path: str | None):
    """The reward model's tokenizer, for showing what it was sent; None where `rlrm train` loads none either: a
    custom function's model, and a judge at running `addresses` whose model is no local folder nor in the hub cache
    (a hosted API's model name: asking the hub for it fails offline, and is not what train does)."""
    if not model_path or cfg.kind == "custom":
        return None
    if cfg.model_kind == "genrm" and cfg.server.addresses and not Path(model_path).is_dir():
        from transformers import AutoTokenizer

        try:
            return AutoTokenizer.from_pretrained(model_path, local_files_only=True)
        except (OSError, ValueError):
            return None
    return _tokenizer(model_path)


def _tokenizer(path: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def _policy_tokenizer(profile):
    return _tokenizer(resolve_model_path(profile.model.path))
