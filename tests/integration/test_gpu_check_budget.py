"""The device check keeps to its lease (scripts/gpu_check.py --budget-s, GPU_CHECK_BUDGET_S): a row that runs
out of time is stopped with every process it started, so nothing it left holds the GPU through the rows after
it, and the rows the budget does not reach are named in the table, not lost."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from repo_scripts import load_script  # tests/fixtures/repo_scripts.py

REPO = Path(__file__).resolve().parents[2]


def _check():
    return load_script("scripts/gpu_check.py")


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in state  # killed, not yet reaped by whoever adopted it


def test_a_row_out_of_time_is_stopped_with_the_processes_it_started(tmp_path):
    check = _check()
    # a benchmark that starts a worker (as step_vs_trl.py starts TRL's) and both outlive the row's time
    parent = (
        "import subprocess, sys, time\n"
        "worker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "print(worker.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    log = tmp_path / "row.log"
    start = time.monotonic()
    done = check._run([sys.executable, "-c", parent], timeout=3, log=log)
    took = time.monotonic() - start
    assert done.returncode == 124 and "timed out after 3 s" in done.stderr
    assert took < 60, took  # not the worker's 120 s: its pipes closed with it
    worker = int(done.stdout.split()[0])
    deadline = time.monotonic() + 10
    while not _gone(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(worker), f"the row's worker {worker} outlived the row"
    assert "timed out" in log.read_text()


def test_rows_past_the_budget_are_named_not_reached_and_fail_the_check(tmp_path):
    out = tmp_path / "out"
    argv = [sys.executable, "scripts/gpu_check.py", "--device", "cpu", "--out", str(out)]
    argv += ["--only", "tiny-rule,bench", "--budget-s", "5"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    table = (out / "gpu_check.md").read_text()
    for row in ("tiny-rule", "bench"):
        assert f"| {row} | NOT REACHED |" in table, table
    assert "ran out first" in table and "0 of 2 checks ok" in done.stdout


def test_a_tier_stopped_by_the_budget_keeps_what_passed(tmp_path):
    # gpu_check.sh stops the tier as `timeout -s INT -k 30 N pytest ...`: pytest stopped by SIGINT still writes its
    # JUnit XML (by SIGTERM, the default signal, it wrote none, and the row said FAILED with no counts)
    (tmp_path / "test_slow.py").write_text(
        "import time\n\ndef test_a():\n    pass\n\ndef test_b():\n    pass\n\ndef test_c():\n    time.sleep(60)\n"
    )
    xml = tmp_path / "tier.xml"
    cmd = ["timeout", "-s", "INT", "-k", "30", "6", sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    done = subprocess.run([*cmd, str(tmp_path / "test_slow.py"), f"--junitxml={xml}"], capture_output=True, timeout=90)
    assert done.returncode == 124
    assert "timeout -s INT -k 30" in (REPO / "scripts" / "gpu_check.sh").read_text()
    check, result, _, detail = _check().tier_row(xml, 6.0, rc=124)
    assert result == "STOPPED" and detail.startswith("stopped by the budget after 2 passed"), detail


def test_a_check_stopped_by_sigterm_names_the_row_it_stopped_and_the_rest(tmp_path):
    import signal

    out = tmp_path / "out"
    argv = [sys.executable, "scripts/gpu_check.py", "--device", "cpu", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([*argv, "--only", "tiny-rule,bench"], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    proc.stdout.readline()  # the environment line, printed before the first row
    time.sleep(2)  # inside the tiny-rule row (a training run of minutes on CPU)
    proc.send_signal(signal.SIGTERM)  # as an outer `timeout 570 bash scripts/gpu_check.sh` ends it
    stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1, stdout
    table = (out / "gpu_check.md").read_text()
    assert "| tiny-rule | STOPPED |" in table and "| bench | NOT REACHED |" in table, table
