"""The reward-hacking guard: the audit's divergence check run live, after each step, on the last steps' metrics.

    guard = DivergenceGuard(profile.reward.guard)
    finding = guard.observe(row)        # row: the step's metrics; a Finding when the last window diverges
    row["guard/divergence"] = float(finding is not None)

The check is rlrm/engine/metrics/audit.py's (reward rising while rule agreement or held-out accuracy falls) over the
last `window` steps only, so it costs the same at step 10 and step 10,000 and reads nothing but the metrics the run
writes anyway. It judges once the run has a full window, and acts when `confirm_steps` checks in a row find the
divergence: run after every step over overlapping windows, a single finding flagged 28 of 200 simulated healthy
100-step runs (the reward rising, true agreement 0.8 measured on 256 samples a step); three in a row flag 5, and
find an agreement falling 0.006 a step in all 50 runs, 3 steps later.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from rlrm.config.reward_guard import GuardConfig
from rlrm.engine.metrics.audit import AGREEMENT, REWARD, AuditSettings, Finding, check_divergence, row_series

_SERIES = (REWARD, AGREEMENT, "val/accuracy")


class DivergenceGuard:
    """Keeps the last `window` steps' reward and truth series; flags the window where they part ways."""

    def __init__(self, cfg: GuardConfig, history: Iterable[dict] = ()):
        self.cfg = cfg
        self.settings = AuditSettings(window=cfg.window, min_drop=cfg.min_drop)
        self.rows: deque[dict] = deque(maxlen=cfg.window + 1)  # window + 1 steps span `window`
        self.flagged_at: int | None = None  # the first step flagged
        self._streak = 0  # steps in a row whose window shows the divergence
        history = list(history)
        for k, row in enumerate(history):  # a resumed run picks up the window, and the streak, where they were
            self._keep(row)
            if k >= len(history) - (cfg.confirm_steps - 1) and cfg.on_divergence != "off":
                self._check()

    def observe(self, row: dict) -> Finding | None:
        """Add a step's metrics; the divergence finding when the last window shows one, else None."""
        self._keep(row)
        if self.cfg.on_divergence == "off":
            return None
        finding = self._check()
        if finding is None or self._streak < self.cfg.confirm_steps:  # one window's dip is often noise
            return None
        if self.flagged_at is None:
            self.flagged_at = int(row["step"])
        return finding

    def _check(self) -> Finding | None:
        """The last window's finding (None before the run has a full window), counted in the streak."""
        if self.rows[-1]["step"] - self.rows[0]["step"] < self.cfg.window:  # the audit would judge fewer steps
            return None  # (3 steps give each trend one degree of freedom: a run stopped on noise at step 3)
        finding = check_divergence(row_series(list(self.rows), _SERIES), self.settings)
        self._streak = self._streak + 1 if finding.flagged else 0
        return finding

    def _keep(self, row: dict) -> None:
        self.rows.append({k: row[k] for k in ("step", *_SERIES) if k in row})
