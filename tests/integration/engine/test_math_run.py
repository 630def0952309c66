"""A run on MATH-style data (data.source=math, reward.rule=math): text ground truths load, prompts ask for a box,
samples are scored by the MATH rule, and validation reads boxes."""

from __future__ import annotations

import json

import yaml
from small_run import SMALL_RUN

from rlrm.config.loader import load_profile
from rlrm.config.schema import MATH_PROMPT_SUFFIX
from rlrm.engine.metrics.metrics_file import read_metrics
from rlrm.engine.trainer import start_run, train


def test_a_run_on_math_data(tmp_path):
    data = tmp_path / "math"
    data.mkdir()
    rows = [  # the ground truth is the worked solution's last box, as MATH-lighteval's rows hold it
        {
            "problem": f"What is $\\frac{{1}}{{{k}}}$ doubled?",
            "solution": f"$2 \\cdot \\frac{{1}}{{{k}}} = \\boxed{{\\frac{{2}}{{{k}}}}}$.",
        }
        for k in range(3, 11)
    ]
    for split in ("train", "test"):
        (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    settings = [*SMALL_RUN, "data.source=math", f"data.path={data}", "reward.rule=math", "reward.format_score=0.5"]
    settings += ["trainer.total_steps=2", "trainer.val_every=2", "data.val_size=4", "logging.save_samples=true"]
    # the canaries answer in boxes: the MATH rule rewards their references and none of their attacks, or the run stops
    settings += ["reward.guard.on_canary=stop", "reward.guard.canary_every=1"]
    run_dir = start_run(load_profile("tiny-rule", settings), tmp_path / "run")
    assert train(run_dir).last_step == 2
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["data"]["prompt_suffix"] == MATH_PROMPT_SUFFIX and saved["reward"]["rule"] == "math"
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert {s["ground_truth"] for s in samples} <= {f"\\frac{{2}}{{{k}}}" for k in range(3, 11)}
    for s in samples:  # the tiny policy writes `#### N`, never a box: no answer, score 0 (not the format score)
        assert "\\boxed" not in s["response"] and s["score"] == 0.0
    metrics = read_metrics(run_dir / "metrics.jsonl")
    assert metrics[-1]["val/accuracy"] == 0.0 and metrics[-1]["val/format_rate"] == 0.0
    assert [row["guard/canary_flips"] for row in metrics if "guard/canary_flips" in row] == [0.0, 0.0]
