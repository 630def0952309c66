"""Both DisRM paths on the same samples: the legacy FSDP2 scorer against the reward loop over HTTP."""

from __future__ import annotations

from rlrm.parity.compare import (
    DEFAULT_ATOL,
    DEFAULT_MAX_OUTSIDE_FRAC,
    DEFAULT_MAX_RANK_FLIPS,
    DEFAULT_MIN_SPEARMAN,
    DEFAULT_RTOL,
)
from rlrm.parity.config import ParityConfig
from rlrm.parity.run import run_parity

DEFAULTS = dict(
    atol=DEFAULT_ATOL,
    rtol=DEFAULT_RTOL,
    max_outside_frac=DEFAULT_MAX_OUTSIDE_FRAC,
    min_spearman=DEFAULT_MIN_SPEARMAN,
    max_rank_flips=DEFAULT_MAX_RANK_FLIPS,
)


def parity(path, server, samples, **kw):
    cfg = ParityConfig(model=str(path), max_length=64, threads=1, addresses=[server.url], **{**DEFAULTS, **kw})
    cells = run_parity(cfg, samples)
    assert len(cells) == 1
    return cells[0]


def test_both_paths_in_fp32_agree(random_disrm_path, random_disrm_server, arithmetic_samples):
    cell = parity(
        random_disrm_path, random_disrm_server, arithmetic_samples, legacy_dtypes=["fp32"], loop_dtypes=["fp32"]
    )
    stats = cell.summary["stats"]
    assert stats["abs_diff_max"] <= 1e-5
    assert cell.summary["truncated"] == 6  # the long answer of each group, cut the same way in both paths
    assert cell.passed and stats["rank_flip_groups"] == 0 and stats["nonfinite_samples"] == 0
    assert cell.summary["legacy"]["samples_per_s"] > 0 and cell.summary["loop"]["samples_per_s"] > 0


def test_bf16_legacy_passes_the_default_verdict_and_an_off_by_one_token_fails(
    spread_disrm_path, spread_disrm_server, arithmetic_samples
):
    healthy = parity(spread_disrm_path, spread_disrm_server, arithmetic_samples, legacy_dtypes=["bf16"])
    stats = healthy.summary["stats"]
    assert healthy.passed, healthy.reasons
    assert 0 < stats["abs_diff_max"] < 0.1 * stats["score_scale"]  # bf16 does move scores, by a few % of the scale
    assert stats["spearman"] > DEFAULT_MIN_SPEARMAN and stats["rank_flip_groups"] == 0

    broken = parity(spread_disrm_path, spread_disrm_server, arithmetic_samples, legacy_dtypes=["fp32"], score_offset=1)
    assert not broken.passed
    assert broken.summary["stats"]["outside_tolerance"] > len(arithmetic_samples) // 2
    assert any("differ by more than" in r for r in broken.reasons)


def test_verl_truncation_is_reported_and_differs_on_truncated_samples(
    spread_disrm_path, spread_disrm_server, arithmetic_samples
):
    cell = parity(
        spread_disrm_path, spread_disrm_server, arithmetic_samples, legacy_dtypes=["fp32"], truncation="keep-start"
    )
    assert cell.summary["truncated"] == cell.summary["truncation_differs"] == 6
    truncated = [i for i, t in enumerate(cell.legacy.truncated) if t]
    assert all(cell.comparison.abs_diff[i] > 1e-3 for i in truncated)  # another 64 tokens, another score
    untouched = [i for i, t in enumerate(cell.legacy.truncated) if not t]
    assert max(cell.comparison.abs_diff[i] for i in untouched) <= 1e-5


def test_a_nan_from_the_server_is_reported_per_sample_never_zeroed(tmp_path, random_disrm_path, arithmetic_samples):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(random_disrm_path)
    with torch.no_grad():
        model.score.weight[0, 0] = float("nan")  # every score NaN, in both paths
    model.save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(random_disrm_path).save_pretrained(tmp_path)
    samples = arithmetic_samples[:4]
    # no address: rlrm starts (and stops) the reward server itself
    cfg = ParityConfig(model=str(tmp_path), max_length=64, threads=1, legacy_dtypes=["fp32"], **DEFAULTS)
    cell = run_parity(cfg, samples)[0]
    assert not cell.passed and "4 samples with a non-finite score (legacy 4, loop 4)" in cell.reasons[0]
    nonfinite = cell.summary["nonfinite"]
    assert nonfinite["legacy"] == [s.sample_id for s in samples]
    assert [e["sample_id"] for e in nonfinite["loop"]] == [s.sample_id for s in samples]
    assert all("DisRM returned" in e["error"] for e in nonfinite["loop"])


def test_served_scores_that_depend_on_the_batch_fail_the_verdict(
    spread_disrm_path, spread_disrm_server, arithmetic_samples
):
    """Score invariance rides along: it passes on a healthy server, and a stand-in server whose model leaks the
    batch mean into each score (tests/integration/reward_checks/test_invariance.py) fails the verdict, legacy and loop agreeing or not."""
    import sys

    from rlrm.launch.common.ports import free_port
    from rlrm.launch.fleet.process import ServerProcess

    healthy = parity(spread_disrm_path, spread_disrm_server, arithmetic_samples, legacy_dtypes=["fp32"])
    inv = healthy.summary["invariance"]
    assert healthy.passed and inv["passed"] and inv["samples"] == 24 and inv["max_abs_diff"] <= inv["tolerance"]
    assert {c["name"] for c in inv["comparisons"]} == {
        "batch 8, right-padded",
        "batch 24, right-padded",
        "batch 8, left-padded",
        "batch 24, left-padded",
    }
    from pathlib import Path

    script = (
        Path(__file__).parents[1] / "reward_checks" / "leaky_server.py"
    )  # the stand-in batch-dependent DisRM server
    argv = [
        sys.executable,
        str(script),
        "--model",
        str(spread_disrm_path),
        "--role",
        "disrm",
        "--port",
        str(free_port()),
        "--threads",
        "1",
    ]
    with ServerProcess.movable(argv) as leaky:  # started again on a fresh port if another process took this one
        cell = parity(
            spread_disrm_path,
            leaky,
            arithmetic_samples,
            legacy_dtypes=["fp32"],
            max_outside_frac=1.0,
            min_spearman=-1.0,
            max_rank_flips=1000,
            atol=100.0,
        )
    assert not cell.passed and not cell.summary["invariance"]["passed"]
    assert [r for r in cell.reasons if r.startswith("served scores depend on the batch")], cell.reasons
