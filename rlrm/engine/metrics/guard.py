"""The reward-hacking guard: the audit's divergence check run live, after each step, on the last steps' metrics.

    guard = DivergenceGuard(profile.reward.guard)
    finding = guard.observe(row)        # row: the step's metrics; a Finding when the last window diverges
    row["guard/divergence"] = float(finding is not None)

The check is rlrm/engine/metrics/audit.py's (reward rising while rule agreement or held-out accuracy falls) over the
last `window` steps only, so it costs the same at step 10 and step 10,000 and reads nothing but the metrics the run
writes anyway.
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
        for row in history:  # a resumed run picks up the window where it was
            self._keep(row)

    def observe(self, row: dict) -> Finding | None:
        """Add a step's metrics; the divergence finding when the last window shows one, else None."""
        self._keep(row)
        if self.cfg.on_divergence == "off":
            return None
        finding = check_divergence(row_series(list(self.rows), _SERIES), self.settings)
        if not finding.flagged:
            return None
        if self.flagged_at is None:
            self.flagged_at = int(row["step"])
        return finding

    def _keep(self, row: dict) -> None:
        self.rows.append({k: row[k] for k in ("step", *_SERIES) if k in row})
