"""perf/max_memory_gb: the peak memory of the device the policy trains on, whatever else the machine has."""

from __future__ import annotations

import torch

from rlrm.engine import trainer


def test_a_policy_on_the_cpu_reports_the_resident_set_on_a_machine_with_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 0)  # a GPU the run leaves alone
    assert trainer._peak_memory_gb("cpu") > 0.01  # this process's peak RSS, not the idle GPU's 0


def test_a_policy_on_a_second_gpu_reports_that_gpu_each_steps_peak(monkeypatch):
    asked, reset = [], []
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: asked.append(device) or 3 * 2**30)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: reset.append(device))
    trainer._reset_peak_memory("cuda:1")  # a step starts: its peak is its own (issue 32: peak memory per step)
    assert trainer._peak_memory_gb("cuda:1") == 3.0
    assert asked == ["cuda:1"] and reset == ["cuda:1"]  # not the current device (0 unless the process set another)
    trainer._reset_peak_memory("cpu")  # the CPU's RSS peak has nothing to reset
    assert reset == ["cuda:1"]
