"""The device check reads its figures from what the benchmarks print (scripts/gpu_check.py).

A GPU session is rare and short: a row that misreads its benchmark's output loses the one measurement of the
lease. The outputs here are written by the benchmarks' own report code, so a change of format fails here.
"""

from __future__ import annotations

import argparse
import io
import subprocess
from contextlib import redirect_stdout

from repo_scripts import load_script  # tests/fixtures/repo_scripts.py


def _step_report() -> str:
    """What `benchmarks/step_vs_trl.py` prints for one pair of two timed steps after one warm-up."""
    bench = load_script("benchmarks/step_vs_trl.py")
    rlrm = {
        "step_s": [9.0, 2.0, 2.2],
        "cpu_s": [9.0, 2.0, 2.0],
        "length": [128.0] * 3,
        "memory_gb": 21.5,
        "gen_tok_s": [30000.0, 41000.0, 39000.0],
        "phases": [{"gen": 0.8, "update_actor": 1.1, "step": 2.0}] * 3,
    }
    trl = {"step_s": [9.0, 5.0, 6.0], "cpu_s": [9.0, 5.0, 5.0], "length": [128.0] * 3, "memory_gb": 30.25}
    args = argparse.Namespace(warmup=1, steps=2, shape="qwen2.5-0.5b", threads=4, device="cuda", dtype="float32")
    args.passive, args.overrides = False, ["rollout.compile=cudagraphs"]
    printed = io.StringIO()
    with redirect_stdout(printed):
        bench.report([(rlrm, trl)], args)
    return printed.getvalue()


def test_the_step_row_reads_ratio_times_memory_and_tokens(monkeypatch, tmp_path):
    check = load_script("scripts/gpu_check.py")
    done = subprocess.CompletedProcess([], 0, _step_report(), "")
    monkeypatch.setattr(check, "_run", lambda *a, **k: done)
    name, result, _, figures = check.check_step_vs_trl(tmp_path, "cuda", "float32", "cudagraphs")
    assert result == "ok" and "float32" in name and "cudagraphs" in name
    assert figures.startswith("rlrm/TRL step 0.38;")  # 2.1 s against 5.5 s: the medians after the warm-up
    assert "rlrm 2.10 s/step, peak 21.50 GiB" in figures and "TRL 5.50 s/step, peak 30.25 GiB" in figures
    assert "rlrm generation 40000 tok/s" in figures and "gen 0.800" in figures
    assert "NOT COMPILED" not in figures


def test_the_tf32_step_row_asks_both_sides_for_tf32(monkeypatch, tmp_path):
    check = load_script("scripts/gpu_check.py")
    done = subprocess.CompletedProcess([], 0, _step_report(), "")
    commands = []
    monkeypatch.setattr(check, "_run", lambda cmd, **k: commands.append(cmd) or done)
    name, result, _, figures = check.check_step_vs_trl(tmp_path, "cuda", "float32", "cudagraphs", tf32=True)
    assert result == "ok" and "TF32" in name and figures.startswith("rlrm/TRL step 0.38;")
    assert "--tf32" in commands[0]
    check.check_step_vs_trl(tmp_path, "cuda", "float32", "cudagraphs")
    assert "--tf32" not in commands[1]


def test_a_step_whose_graphs_fell_back_says_so(monkeypatch, tmp_path):
    check = load_script("scripts/gpu_check.py")
    warning = (
        "warning: rollout.compile=cudagraphs: capturing a decode step as a CUDA graph failed (x): decoding uncompiled"
    )
    done = subprocess.CompletedProcess([], 0, _step_report(), f"some log line\n{warning}\n")
    monkeypatch.setattr(check, "_run", lambda *a, **k: done)
    _, result, _, figures = check.check_step_vs_trl(tmp_path, "cuda", "bfloat16", "cudagraphs")
    assert result == "ok" and "NOT COMPILED: warning: rollout.compile=cudagraphs: capturing" in figures


def test_a_failed_step_row_names_the_last_line(monkeypatch, tmp_path):
    check = load_script("scripts/gpu_check.py")
    said = "error: out of GPU memory in the actor update: lower actor.micro_batch_size"
    monkeypatch.setattr(check, "_run", lambda *a, **k: subprocess.CompletedProcess([], 1, "", f"trace\n{said}\n"))
    _, result, _, figures = check.check_step_vs_trl(tmp_path, "cuda", "float32", "cudagraphs")
    assert result == "FAILED" and figures == f"exit 1: {said}"


def test_the_logits_row_reads_the_table_and_an_out_of_memory_whole_head(monkeypatch, tmp_path):
    bench = load_script("benchmarks/logits_memory.py")
    check = load_script("scripts/gpu_check.py")
    chunked = {"peak_gb": 4.4, "seconds": 0.5, "log_probs": [-1.0, -2.0]}
    printed = io.StringIO()
    with redirect_stdout(printed):
        bench.report([0, 1024], {0: [{"peak_gb": float("nan"), "seconds": float("nan"), "oom": True}], 1024: [chunked]})
    monkeypatch.setattr(check, "_run", lambda *a, **k: subprocess.CompletedProcess([], 0, printed.getvalue(), ""))
    _, result, _, figures = check.check_logits(tmp_path, "cuda")
    assert result == "ok"
    assert "whole out of memory" in figures and "1024 4.40 0.50 (whole: OOM)" in figures
