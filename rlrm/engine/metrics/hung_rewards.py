"""`<run>/hung_rewards.jsonl`: every reward attempt given up at `reward.attempt_timeout_s`, one JSON object per line.

    log = HungRewardLog(run_dir / "hung_rewards.jsonl")
    log.write(step, reward_loop.take_hung())   # nothing is written (or created) when nothing hung

Each line holds the step it was written at, the sample (uid, index, prompt messages, response, data source,
ground truth), the reward function's name, the attempt (1 = first), `attempt_timeout_s` (the run's
reward.attempt_timeout_s), `elapsed_s`, how long the attempt ran before it was given up, and `queued_s`, how long
it waited for a free worker process before that (a wait its deadline does not count). A custom sync function's
worker process is killed at that moment (docs/security.md). The same attempts are counted in the step's `reward/timeouts`; this file says which samples
they were, so the function can be run on them by hand. Lines are appended and never cut on resume: a hang
happened even in a step a resumed run trains again.
"""

from __future__ import annotations

import json
from pathlib import Path

from rlrm.errors import writing_to


class HungRewardLog:
    def __init__(self, path: Path):
        self.path = Path(path)

    def write(self, step: int, records: list[dict]) -> None:
        """Append `records` (RewardLoop.take_hung), each with `step` first; the file is created on the first one."""
        if not records:
            return
        lines = "".join(json.dumps({"step": step, **record}, default=str) + "\n" for record in records)
        with writing_to(self.path), self.path.open("a+b") as f:
            if f.tell() and not _ends_a_line(f):  # a line a full disk or a kill cut: ours start on a line of their own
                lines = "\n" + lines
            f.write(lines.encode("utf-8"))


def _ends_a_line(f) -> bool:
    f.seek(-1, 2)
    return f.read(1) == b"\n"
