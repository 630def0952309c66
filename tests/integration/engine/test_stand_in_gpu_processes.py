"""Every process of a run on the stand-in GPU: `rlrm train` with `trainer.device=cuda`, and the servers it starts.

tests/integration/engine/test_stand_in_gpu.py runs the in-process paths on the stand-in (tests/fixtures/
stand_in_gpu.py). Here the command runs as a user runs it, and each Python process it starts (the trainer, the
judge, DisRM and policy servers, which take `--device auto` as on a GPU machine) goes onto the stand-in through
tests/fixtures/stand_in_site/sitecustomize.py. Each process writes what it ran on the device when it ends; a run
passes when every process that loads a model ran on the device, no reward failed, and its numbers are those of
the same command on the CPU (same seed; the tolerances of test_stand_in_gpu.py, and 1e-5 absolute for the
policy-gradient loss: a mean of advantages that sum to zero, it is rounding near 0; 1e-4 relative for the
gradient's norm: see RELATIVE; the counts exactly).

Not here: the FSDP2 ranks (their collectives run on CPU or CUDA tensors only), vLLM and the router (no model).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from small_run import SMALL_RUN, as_set_args

from rlrm.engine.metrics.metrics_file import read_metrics

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
# the numbers of a step that must not depend on the device, and how far apart (absolute) rounding may take them;
# 1e-5 relative for all but the counts, as in test_stand_in_gpu.py
SAME = {
    "critic/score/mean": 1e-6,
    "critic/advantages/max": 1e-6,
    "actor/pg_loss": 1e-5,
    "actor/entropy": 1e-6,
    "actor/grad_norm": 1e-6,
    "reward/model_calls": 0,
    "reward/judge_completion_tokens": 0,  # the judge wrote the same verdicts
}
# relative, where not 1e-5: a DisRM server batches requests as they arrive, so a sample's padding, and the rounding
# of its score, differ from run to run (by about 1e-6); the gradient's norm sums that over every token (a CI run
# at 2ac710e: 1.0e-5 apart at step 2)
RELATIVE = {"actor/grad_norm": 1e-4}


def _train(
    out: Path, profile: str, settings: list[str], stand_in: bool, graphs: bool = False
) -> tuple[list[dict], list[dict]]:
    """Run `rlrm train` in its own process; its metrics rows, and each stand-in process's record. `graphs`: the
    stand-in CUDA graphs in every process too (tests/fixtures/stand_in_graphs.py)."""
    folder = out.with_name(out.name + "-processes")
    folder.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if stand_in:
        path = [str(FIXTURES / "stand_in_site"), str(FIXTURES), env.get("PYTHONPATH", "")]
        env.update(RLRM_STAND_IN_GPU=str(folder), PYTHONPATH=os.pathsep.join(p for p in path if p))
        if graphs:
            env["RLRM_STAND_IN_GRAPHS"] = "1"
    device = "cuda" if stand_in else "cpu"
    settings = [*SMALL_RUN, "trainer.total_steps=2", *settings, f"trainer.device={device}"]
    argv = [sys.executable, "-m", "rlrm", "train", "--profile", profile, *as_set_args(*settings), "--out", str(out)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    # a server whose port another test's server took while it started was started again on a fresh port (rlrm's
    # `ServerProcess.on_free_port`): the process that lost the port ran nothing, and its record is left out
    lost = re.findall(r"another process took port (\d+)", done.stderr)
    records = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    records = [r for r in records if not ("--port" in r["argv"] and r["argv"][r["argv"].index("--port") + 1] in lost)]
    return read_metrics(out / "metrics.jsonl"), records


def _assert_same_steps(on_cpu: list[dict], on_device: list[dict]) -> None:
    """Steps 1 and 2 of both runs, no reward failed on the device, and the numbers of SAME within their tolerances."""
    on_cpu, on_device = ([r for r in rows if r["step"] > 0] for rows in (on_cpu, on_device))
    assert [r["step"] for r in on_device] == [r["step"] for r in on_cpu] == [1, 2]
    for cpu_row, device_row in zip(on_cpu, on_device):
        assert device_row["reward/failures"] == 0 and device_row["batch/num_samples"] == cpu_row["batch/num_samples"]
        for key, tolerance in SAME.items():
            if key in cpu_row:
                near = pytest.approx(cpu_row[key], rel=RELATIVE.get(key, 1e-5) if tolerance else 0, abs=tolerance)
                assert device_row[key] == near, (key, cpu_row["step"])


CASES = {
    # the judge behind the SGLang router, asleep (weights off the device) except while it scores
    "judge-colocated": ("tiny-genrm", ["reward.placement=colocated", "trainer.mode=sync", "rollout.max_new_tokens=24"]),
    "disrm": ("tiny-disrm", []),
    # two policy replicas generate; the trainer broadcasts its weights to them each step (a process group)
    "policy-servers": ("tiny-rule-served", ["rollout.server.weight_sync=distributed", "trainer.mode=one-step-off"]),
}


@pytest.mark.parametrize("case", CASES)
def test_a_run_and_its_servers_on_the_stand_in_match_the_cpu(tmp_path, case):
    profile, settings = CASES[case]
    on_cpu, _ = _train(tmp_path / "cpu", profile, settings, stand_in=False)
    on_device, processes = _train(tmp_path / "device", profile, settings, stand_in=True)
    servers = [p for p in processes if "rlrm/launch/server" in p["argv"][0]]
    trainers = [p for p in processes if p["argv"][1:2] == ["train"]]
    assert len(trainers) == 1 and len(servers) == (2 if case == "policy-servers" else 1), processes
    assert all(p["ops"] > 500 for p in trainers + servers), processes  # each ran its model on the device
    _assert_same_steps(on_cpu, on_device)


def test_policy_servers_decoding_with_cuda_graphs_on_the_stand_in_match_the_cpu(tmp_path):
    """Two policy servers started with `--compile cudagraphs` (graphs only capture on a GPU: the stand-in's here),
    new weights loaded into them from disk each step, against the dynamic loop on the CPU. The servers' graphs must
    read each update where it was loaded, in place: a graph kept on weights loaded elsewhere fails the run."""
    settings = ["trainer.mode=sync"]  # step 2 generates with the weights step 1 loaded
    graphs = 'rollout.server.extra_args=["--compile","cudagraphs"]'
    on_cpu, _ = _train(tmp_path / "cpu", "tiny-rule-served", settings, stand_in=False)
    on_device, processes = _train(tmp_path / "device", "tiny-rule-served", [*settings, graphs], True, graphs=True)
    servers = [p for p in processes if "rlrm/launch/server" in p["argv"][0]]
    assert len(servers) == 2 and all("cudagraphs" in p["argv"] for p in servers), processes
    assert all(p["ops"] > 500 and p["replays"] > 0 for p in servers), processes  # graphs captured and replayed
    _assert_same_steps(on_cpu, on_device)
