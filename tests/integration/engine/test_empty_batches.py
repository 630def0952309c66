"""A batch whose every prompt is dropped for length (data.prompt_too_long=drop: at a batch of a few prompts, one long
prompt is enough) is an empty step in every mode, and the run goes on. one-step-off launched it a step ahead and then
forgot it with the step before, and waited for it for ever (rlrm/engine/scheduling/rollouter.py `take`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from small_run import SMALL_RUN, as_set_args

# about 60% of the synthetic prompts are over 41 tokens: step 2's 4 prompts are all dropped (seed 0)
DROPPING = (
    "trainer.total_steps=3",
    "data.max_prompt_length=41",
    "data.prompt_too_long=drop",
    "actor.mini_batch_size=2",
)


@pytest.mark.parametrize("mode", ["one-step-off", "fully-async"])
def test_a_step_whose_prompts_were_all_dropped_trains_nothing_and_the_run_goes_on(tmp_path, tiny_policy_path, mode):
    out = tmp_path / "run"
    args = ["train", "--profile", "tiny-rule", "--out", str(out)]
    args += as_set_args(*SMALL_RUN, *DROPPING, f"trainer.mode={mode}")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "rlrm", *args], capture_output=True, text=True, timeout=150, env=env
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{mode}: hung; rows written: {(out / 'metrics.jsonl').read_text()[:400]}")
    assert done.returncode == 0, done.stderr[-1500:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["step"] > 0]
    assert [r["step"] for r in steps] == [1, 2, 3]
    # step 2 trains nothing (fully-async may also have trained step 3's one kept prompt early, in step 1)
    assert (steps[1]["batch/num_samples"], steps[1]["data/dropped_prompts"]) == (0, 4)
