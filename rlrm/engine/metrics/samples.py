"""`<run>/samples.jsonl` (logging.save_samples): every trained sample, one JSON object per line.

    log = SampleLog(run_dir / "samples.jsonl", keep_through_step=0)
    log.write(step, [(reward_sample, reward_result_or_None, completion), ...])

Each line holds the step, the prompt messages, the decoded response, the ground truth, the score
(null for a failed sample whose group was dropped), the reward's extra info and the policy version
that generated it, and the short fingerprint of the reward contract that scored it
(`reward_contract.json`); `reward_extra_info.reward_cached` says whether the score came from the reward cache. Rows of steps after a resumed checkpoint are cut first, as in metrics.jsonl.
"""

from __future__ import annotations

import json
from pathlib import Path

from rlrm.engine.metrics.metrics_file import MetricsWriter, _jsonable


class SampleLog:
    def __init__(self, path: Path, keep_through_step: int | None = None, reward_contract: str | None = None):
        self._writer = MetricsWriter(path, keep_through_step)
        self.reward_contract = reward_contract  # the short fingerprint of what scored them (reward_contract.json)

    def write(self, step: int, items: list) -> None:
        for sample, result, completion in items:
            self._writer.log(
                {
                    "step": step,
                    "uid": sample.uid,
                    "index": sample.index,
                    "prompt": sample.prompt,
                    "response": sample.solution_str,
                    "ground_truth": sample.ground_truth,
                    "score": None if result is None else result.score,
                    "reward_contract": self.reward_contract,
                    "reward_extra_info": {} if result is None else {k: _plain(v) for k, v in result.extra.items()},
                    "policy_version": completion.policy_version,
                    "finish_reason": completion.finish_reason,
                }
            )

    def close(self) -> None:
        self._writer.close()


def _plain(value):
    value = _jsonable(value)
    try:
        json.dumps(value)
        return value
    except TypeError:
        return str(value)
