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
    assert in_flight == 256 and open_files_needed(in_flight) == 576
    monkeypatch.setattr(run_checks, "open_files_limit", lambda: 256)
    with pytest.raises(ConfigError, match=r"^the open-files limit \(ulimit -n\) is 256, .* 256 reward requests .*"
                       r"about 576 files: raise it \(ulimit -n 576"):  # fmt: skip
        run_checks.check_open_files(genrm)
    run_checks.check_open_files(load_profile("tiny-genrm", ["reward.max_concurrency=1"]))  # 4 in flight: 72
    run_checks.check_open_files(load_profile("tiny-rule"))  # a rule opens no reward sockets
    monkeypatch.setattr(run_checks, "open_files_limit", lambda: 576)
    run_checks.check_open_files(genrm)
