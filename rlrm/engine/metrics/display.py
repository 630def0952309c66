"""The live view of a training run: step, reward, tokens/s, reward failures when there are any, and ETA
(rich), or plain lines."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


class StepDisplay:
    """`with StepDisplay(total, start, style) as d: d.update(step, row)`."""

    def __init__(self, total_steps: int, start_step: int, style: str = "rich"):
        self.total, self.start, self.style = total_steps, start_step, style
        self._progress: Progress | None = None  # set in __enter__ with style rich
        self._task: TaskID | None = None

    def __enter__(self) -> "StepDisplay":
        if self.style == "rich" and not sys.stdout.isatty():
            self.style = "plain"  # a progress bar in a log file is noise
        if self.style == "rich":
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._progress = Progress(
                TextColumn("[bold]step"),
                MofNCompleteColumn(),
                BarColumn(),
                TextColumn("{task.fields[info]}"),
                TextColumn("ETA"),
                TimeRemainingColumn(),
            )
            self._progress.start()
            self._task = self._progress.add_task("train", total=self.total, completed=self.start, info="")
        return self

    def update(self, step: int, row: dict) -> None:
        info = _summary(row)
        if self._progress is not None and self._task is not None:  # style rich
            self._progress.update(self._task, completed=step, info=info)
        elif self.style == "plain":
            print(f"step {step}/{self.total}  {info}", flush=True)

    def message(self, text: str) -> None:
        if self._progress is not None:  # style rich
            self._progress.console.print(text)
        elif self.style == "plain":
            print(text, flush=True)

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()


def _summary(row: dict) -> str:
    parts = [f"reward {row.get('critic/score/mean', float('nan')):.3f}"]
    if "reward/rule_agreement" in row:
        # a model reward's own scale (a DisRM's raw logit may fall while answers improve): agreement with the
        # rule reads the same for every reward
        parts.append(f"rule agree {row['reward/rule_agreement']:.2f}")
    if "val/accuracy" in row:
        parts.append(f"val acc {row['val/accuracy']:.3f}")
    parts.append(f"{row.get('perf/throughput', 0.0):,.0f} tok/s")
    if row.get("reward/cost"):
        parts.append(f"reward cost {row['reward/cost']:.4f}")
    if row.get("reward/rate_limited"):  # waited out, not failed: shown so a throttled judge is no mystery
        parts.append(f"rate-limited {row['reward/rate_limited']} ({row.get('reward/throttle_wait_s', 0.0):.1f} s)")
    if row.get("reward/failures"):  # a substituted or dropped score is never hidden
        outcome = [f"{row.get(key, 0)} {name}" for key, name in _FAILURE_OUTCOMES if row.get(key)]
        parts.append(f"reward failures {row['reward/failures']}" + (f" ({', '.join(outcome)})" if outcome else ""))
    return "  ".join(parts)


_FAILURE_OUTCOMES = (("reward/defaulted", "defaulted"), ("reward/dropped_groups", "groups dropped"))
