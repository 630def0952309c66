"""One parity run: the same samples through the legacy FSDP2 scorer and the reward loop, compared.

    cells = run_parity(cfg, samples)          # one Cell per (legacy dtype, loop dtype) pair
    cells[0].passed, cells[0].summary

Each legacy dtype and each loop dtype is scored once; `--matrix` then compares every pair. The
legacy worker group is closed before the loop's servers start, so on a GPU the two never hold the
reward model at the same time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rlrm.engine.rewards.fsdp_disrm.config import LegacyConfig
from rlrm.engine.rewards.fsdp_disrm.workers import LegacyWorkerGroup
from rlrm.errors import ModelError
from rlrm.parity.compare import compare, verdict, worst_samples
from rlrm.parity.config import ParityConfig
from rlrm.parity.inputs import Encoded, ParitySample, encode_samples
from rlrm.parity.loop import loop_reward_config, score_with_loop


@dataclass
class PathScores:
    scores: np.ndarray  # [B] float64 copies of the path's scores (exact: every dtype here fits)
    seconds: float
    truncated: list[bool]
    errors: dict[int, str]
    invariance: dict | None = None  # the loop side's score-invariance check (rlrm.engine.rewards.invariance)


@dataclass
class Cell:
    legacy_dtype: str
    loop_dtype: str
    legacy: PathScores
    loop: PathScores
    comparison: object  # rlrm.parity.compare.Comparison
    passed: bool
    reasons: list[str]
    summary: dict


def load_rm_tokenizer(path: str, template: str | None = None):
    """The reward model's tokenizer, with `template` as its chat template when given."""
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise ModelError(
            f"cannot load the tokenizer of the reward model {path!r}: {str(exc).strip().splitlines()[0]}"
        ) from None
    if template is not None:
        tok.chat_template = template
    if not tok.chat_template:
        raise ModelError(
            f"the reward model's tokenizer ({path}) has no chat template, so conversations cannot be rendered "
            "the way the reward loop renders them; pass --template FILE (a Jinja chat template)"
        )
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def run_parity(
    cfg: ParityConfig, samples: list[ParitySample], log: Callable[[str], None] = lambda _: None
) -> list[Cell]:
    """Score `samples` both ways in every requested dtype and compare every (legacy, loop) pair."""
    tokenizer = load_rm_tokenizer(cfg.model, cfg.template)
    encoded = encode_samples(tokenizer, samples, cfg.max_length, cfg.truncation)
    legacy = {}
    for dtype in cfg.legacy_dtypes:
        log(f"legacy: FSDP2 {dtype}, world size {cfg.world_size}")
        legacy[dtype] = _score_legacy(cfg, dtype, encoded, tokenizer.pad_token_id)
    loop = {}
    for dtype in cfg.loop_dtypes:
        log(f"reward loop: served DisRM {dtype}")
        loop[dtype] = _score_loop(cfg, dtype, samples, tokenizer)
    return [_cell(cfg, samples, encoded, a, legacy[a], b, loop[b]) for a in cfg.legacy_dtypes for b in cfg.loop_dtypes]


def _score_legacy(cfg: ParityConfig, dtype: str, encoded: Encoded, pad_token_id: int) -> PathScores:
    legacy_cfg = LegacyConfig(
        model_path=cfg.model,
        dtype=dtype,
        world_size=cfg.world_size,
        micro_batch_size=cfg.micro_batch_size,
        max_tokens_per_batch=cfg.max_tokens_per_batch,
        rmpad=cfg.rmpad,
        device=cfg.device,
        pad_token_id=pad_token_id,
        threads=cfg.threads,
        score_offset=cfg.score_offset,
    )
    with LegacyWorkerGroup(legacy_cfg) as group:
        warm = min(len(encoded.ids), cfg.world_size * cfg.micro_batch_size)
        group.score(encoded.ids[:warm], encoded.response_tokens[:warm])  # untimed: first-call setup is not throughput
        out = group.score(encoded.ids, encoded.response_tokens)
    scores = out.scores.double().numpy()  # bf16/fp16/fp32 -> float64 is exact
    return PathScores(scores, out.seconds, list(encoded.truncated), {})


def _score_loop(cfg: ParityConfig, dtype: str, samples: list[ParitySample], tokenizer) -> PathScores:
    reward_cfg = loop_reward_config(cfg.reward, cfg.model, dtype, cfg.max_length, cfg.addresses)
    out = score_with_loop(
        samples, reward_cfg, tokenizer if cfg.template is not None else None, invariance=cfg.invariance
    )
    return PathScores(out.scores.astype(np.float64), out.seconds, out.truncated, out.errors, out.invariance)


def _cell(
    cfg: ParityConfig,
    samples,
    encoded: Encoded,
    legacy_dtype: str,
    legacy: PathScores,
    loop_dtype: str,
    loop: PathScores,
) -> Cell:
    tol = cfg.tolerances()
    cmp = compare(legacy.scores, loop.scores, [s.group_id for s in samples], tol, cfg.adv_eps, cfg.norm_adv_by_std)
    passed, reasons = verdict(cmp.summary, tol)
    if loop.invariance is not None and not loop.invariance["passed"]:
        inv = loop.invariance
        passed = False
        reasons.append(
            f"served scores depend on the batch: {inv['worst_setting']} differs from one at a time by up to "
            f"{inv['max_abs_diff']:.3g} (tolerance {inv['tolerance']:.3g} for {inv['dtype']}), {inv['rank_flips']} rank flips"
        )
    n = len(samples)
    summary = {
        "verdict": "pass" if passed else "fail",
        "reasons": reasons,
        "legacy_dtype": legacy_dtype,
        "loop_dtype": loop_dtype,
        "world_size": cfg.world_size,
        "model": cfg.model,
        "samples": n,
        "groups": cmp.summary["groups"],
        "max_length": cfg.max_length,
        "truncation": cfg.truncation,
        "truncated": int(sum(encoded.truncated)),
        # keep-start cuts differently from the loop's keep-end: every truncated sample then differs
        "truncation_differs": int(sum(encoded.truncated)) if cfg.truncation != "keep-end" else 0,
        "longest_conversation": max(encoded.full_lengths),
        "legacy": {
            "dtype": legacy_dtype,
            "world_size": cfg.world_size,
            "micro_batch_size": cfg.micro_batch_size,
            "max_tokens_per_batch": cfg.max_tokens_per_batch,
            "rmpad": cfg.rmpad,
            "device": cfg.device,
            "seconds": legacy.seconds,
            "samples_per_s": n / legacy.seconds if legacy.seconds > 0 else math.inf,
        },
        "loop": {
            "dtype": loop_dtype,
            "replicas": cfg.reward.server.replicas,
            "addresses": cfg.addresses,
            "seconds": loop.seconds,
            "samples_per_s": n / loop.seconds if loop.seconds > 0 else math.inf,
            "failures": len(loop.errors),
        },
        "tolerances": tol.as_dict(),
        "stats": {k: v for k, v in cmp.summary.items() if k not in ("samples", "groups")},
        "nonfinite": {
            "legacy": [samples[i].sample_id for i in np.flatnonzero(~np.isfinite(legacy.scores))],
            "loop": [
                {"sample_id": samples[i].sample_id, "error": loop.errors.get(int(i))}
                for i in np.flatnonzero(~np.isfinite(loop.scores))
            ],
        },
        "worst": worst_samples(samples, {"legacy": legacy.scores, "loop": loop.scores}, cmp.abs_diff),
        "invariance": loop.invariance,
        "config": cfg.model_dump(mode="json"),
    }
    argmax = summary["stats"].get("abs_diff_argmax")
    summary["stats"]["abs_diff_argmax"] = samples[argmax].sample_id if argmax is not None else None
    return Cell(legacy_dtype, loop_dtype, legacy, loop, cmp, passed, reasons, summary)
