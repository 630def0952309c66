"""The lines rlrm/engine/executor/rank_procs.py says when a rank dies: before the first step there is no
checkpoint of this start to resume from, so the line does not point to one."""

from __future__ import annotations

from rlrm.engine.executor.rank_procs import dead_rank_line, exit_text


def test_a_rank_dead_while_starting_does_not_point_to_a_checkpoint():
    line = dead_rank_line("rank 0 on node vm died (exit code 1)", "setup")
    assert line.startswith("actor rank 0 on node vm died (exit code 1) while the ranks were starting (setup)")
    assert "before its first step" in line and "--resume" not in line and "\n" not in line


def test_a_rank_dead_during_training_points_to_the_resume():
    line = dead_rank_line(f"rank 1 on node vm died ({exit_text(-9)})", "train")
    assert line == (
        "actor rank 1 on node vm died (killed by SIGKILL) during train; the run stops here. "
        "Its checkpoints are intact: continue from the last with `rlrm train --resume RUN_DIR` (a run that wrote none "
        "starts again)"
    )
