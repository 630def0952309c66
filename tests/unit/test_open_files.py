"""The open-files limit (rlrm/open_files.py, rlrm/engine/run_checks.py check_open_files): a limit too low for the
reward requests in flight is one line at start, naming `ulimit -n` and what to raise it to."""

from __future__ import annotations

import pytest

import rlrm.engine.run_checks as run_checks
from rlrm.config.loader import load_profile
from rlrm.errors import ConfigError
from rlrm.open_files import open_files_needed


def test_a_judge_run_needs_files_for_its_requests_in_flight(monkeypatch):
    genrm = load_profile("tiny-genrm")
    in_flight = min(genrm.reward.num_workers * genrm.reward.max_concurrency, 32 * 8)
    assert in_flight == 256 and open_files_needed(in_flight, routed=True) == 576
    monkeypatch.setattr(run_checks, "open_files_limit", lambda: 256)
    with pytest.raises(ConfigError, match=r"^the open-files limit \(ulimit -n\) is 256, .* 256 reward requests .*"
                       r"about 576 files: raise it \(ulimit -n 576"):  # fmt: skip
        run_checks.check_open_files(genrm)
    run_checks.check_open_files(load_profile("tiny-genrm", ["reward.max_concurrency=1"]))  # 4 in flight: 72
    run_checks.check_open_files(load_profile("tiny-rule"))  # a rule opens no reward sockets
    monkeypatch.setattr(run_checks, "open_files_limit", lambda: 576)
    run_checks.check_open_files(genrm)
    # no router (rlrm's own balancer): the trainer, one socket a request, is the busiest: 64 + 256
    monkeypatch.setattr(run_checks, "open_files_limit", lambda: 320)
    run_checks.check_open_files(load_profile("tiny-genrm", ["reward.server.router=client"]))
    with pytest.raises(ConfigError, match="about 576 files"):
        run_checks.check_open_files(genrm)


def test_the_soft_limit_is_raised_to_the_hard_one_but_no_higher_than_ray_raises_it(monkeypatch):
    import resource

    from rlrm.open_files import raise_open_files_limit

    asked = []
    for hard, expected in ((4096, 4096), (2**30, 65536), (resource.RLIM_INFINITY, 65536)):
        monkeypatch.setattr(resource, "getrlimit", lambda which, hard=hard: (256, hard))
        monkeypatch.setattr(resource, "setrlimit", lambda which, limits: asked.append(limits))
        assert raise_open_files_limit() == expected
    assert asked == [(4096, 4096), (65536, 2**30), (65536, resource.RLIM_INFINITY)]
