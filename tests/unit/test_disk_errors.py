"""A write the disk cuts (full, over quota, failing): one line naming the path and what to do, nothing half-written.

`f.write` and `flush` raise their OSError without a file name, torch.save a RuntimeError naming nothing
("unexpected pos 1188928 vs 1188880"): each reached the user as a 45-80 line traceback (found by filling real
tmpfs disks of 12 KB to 40 MB). The disks here are stand-ins: the failing calls are patched.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
import typer

from rlrm.cli.common import friendly_errors, path_error
from rlrm.errors import TrainingError, writing_to

FULL = OSError(errno.ENOSPC, "No space left on device")  # as a write or flush raises it: no file name


def test_a_write_cut_without_a_file_name_is_named_and_printed_as_one_line(tmp_path, capsys):
    target = tmp_path / "metrics.jsonl"

    @friendly_errors
    def command():
        with writing_to(target):
            raise FULL

    with pytest.raises(typer.Exit):
        command()
    assert capsys.readouterr().err.splitlines() == [
        f"error: {target}: No space left on device; the disk is full: free some space, or choose a folder on "
        "another disk"
    ]
    # one no rlrm writer named: still one line, not a traceback; a socket's or a process's OSError stays a bug
    assert path_error(OSError(errno.EIO, "Input/output error")).startswith("a write: Input/output error; the disk")
    assert path_error(OSError(errno.ECONNRESET, "Connection reset by peer")) is None


def test_torch_saves_nameless_runtime_error_becomes_the_disks_error(tmp_path):
    with pytest.raises(OSError) as cut, writing_to(tmp_path / "state.pt"):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1188928 vs 1188880")
    # this disk has room: an I/O error, saying what torch said; a bug's RuntimeError passes as it is
    assert cut.value.errno == errno.EIO and cut.value.filename == str(tmp_path / "state.pt")
    assert "unexpected pos" in cut.value.strerror
    with pytest.raises(RuntimeError, match="shape mismatch"), writing_to(tmp_path / "state.pt"):
        raise RuntimeError("shape mismatch")


def test_a_checkpoint_the_disk_refuses_is_one_line_and_leaves_nothing_behind(tmp_path, tiny_policy_path, monkeypatch):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlrm.engine import checkpoint

    model = AutoModelForCausalLM.from_pretrained(tiny_policy_path)
    tok = AutoTokenizer.from_pretrained(tiny_policy_path)
    checkpoint.save_checkpoint(tmp_path, 1, model, tok, {"actor": {}, "loader": {}}, keep=3)

    def full(*args, **kwargs):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 12")

    monkeypatch.setattr(torch, "save", full)
    monkeypatch.setattr("rlrm.errors._free_bytes", lambda path: 0)  # the disk is full
    with pytest.raises(TrainingError) as refused:
        checkpoint.save_checkpoint(tmp_path, 2, model, tok, {"actor": {}, "loader": {}}, keep=3)
    line = str(refused.value)
    assert line.startswith(f"checkpoint step_2 could not be written in {tmp_path / 'checkpoints'}: No space left")
    assert f"continue with rlrm train --resume {tmp_path} (newest complete checkpoint: step_1)" in line
    assert "step 1's takes" in line and "MB" in line
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_1"]  # no step_2.tmp holding space


def test_a_hung_reward_record_after_a_cut_line_starts_a_line_of_its_own(tmp_path):
    from rlrm.engine.metrics.hung_rewards import HungRewardLog

    path = tmp_path / "hung_rewards.jsonl"
    log = HungRewardLog(path)
    log.write(1, [{"uid": "u1"}])
    with path.open("ab") as f:
        f.write(b'{"step": 2, "uid": "u3", "promp')  # a full disk (or a kill) cut it; the resumed run goes on
    log.write(3, [{"uid": "u4"}, {"uid": "u5"}])
    lines = path.read_text().splitlines()
    readable = []
    for line in lines:
        try:
            readable.append(json.loads(line)["uid"])
        except ValueError:
            pass
    assert readable == ["u1", "u4", "u5"] and len(lines) == 4  # u4 was glued onto the cut line and lost


def test_a_prepared_model_copied_onto_a_full_disk_names_the_destination(tmp_path, monkeypatch):
    import shutil

    from rlrm.engine.models import tiny

    src, dest = tmp_path / "shipped", tmp_path / "cache" / "judge"
    src.mkdir()
    (src / "model.safetensors").write_bytes(b"x")

    def full(a, b):
        raise OSError(errno.ENOSPC, "No space left on device", str(a))  # shutil names the source

    monkeypatch.setattr(shutil, "copyfile", full)
    with pytest.raises(OSError) as cut:
        tiny._copy_files(src, dest)
    assert cut.value.filename == str(dest / "model.safetensors")


def test_the_pairs_file_on_a_full_disk_leaves_no_temporary_file(tmp_path, monkeypatch):
    from pathlib import Path

    from rlrm.engine.models import pairs_file

    real = Path.write_text

    def full(self, *args, **kwargs):
        real(self, "half", encoding="utf-8")
        raise FULL

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError) as cut:
        pairs_file.write_pairs_file(tmp_path)
    assert cut.value.filename == str(pairs_file.pairs_path(tmp_path, 0))
    assert list(tmp_path.iterdir()) == []


def test_an_actor_ranks_full_disk_and_a_run_with_no_checkpoint_yet_say_what_to_do(tmp_path, tiny_policy_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlrm.engine import checkpoint
    from rlrm.engine.executor.rank_procs import RankError

    model = AutoModelForCausalLM.from_pretrained(tiny_policy_path)
    tok = AutoTokenizer.from_pretrained(tiny_policy_path)

    def shards(folder):  # a rank's OSError reaches the trainer as its text
        (folder / "shards").mkdir()
        raise RankError("actor rank 1 failed: OSError: [Errno 28] No space left on device: '.../shards/__1_0.distcp'")

    with pytest.raises(TrainingError) as refused:
        checkpoint.save_checkpoint(tmp_path, 1, model, tok, {"actor": {}, "loader": {}}, keep=3, write_extra=shards)
    assert str(refused.value) == (
        f"checkpoint step_1 could not be written in {tmp_path / 'checkpoints'}: No space left on device; free some "
        "space and start the run again (no complete checkpoint to resume from)"
    )
    assert list((tmp_path / "checkpoints").iterdir()) == []  # the shards written before it went with it


class SafetensorError(Exception):
    """As safetensors names its error (its Rust side says only the OS error's text)."""


def test_a_file_size_limit_is_named_as_one(tmp_path, monkeypatch):
    # safetensors' "File too large (os error 27)" was not read as a failed write (a 40-line traceback), and
    # torch.save's "unexpected pos" under `ulimit -f` was called an I/O error of the disk ("check the disk")
    import rlrm.errors

    with pytest.raises(OSError) as cut:
        with writing_to(tmp_path / "model.safetensors"):
            raise SafetensorError("Error while serializing: I/O error: File too large (os error 27)")
    assert cut.value.errno == errno.EFBIG and cut.value.filename == str(tmp_path / "model.safetensors")
    monkeypatch.setattr(rlrm.errors, "_file_size_limited", lambda: True)
    with pytest.raises(OSError) as cut:
        with writing_to(tmp_path / "state.pt"):
            raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 4096 vs 3990")
    assert cut.value.errno == errno.EFBIG
    assert path_error(cut.value).endswith("a file-size limit refused it (ulimit -f): raise the limit")
    assert path_error(OSError(errno.EFBIG, "File too large")) is not None  # a write that names no file


def test_files_written_beside_and_renamed_leave_no_half_copy_on_a_full_disk(tmp_path, monkeypatch):
    # trace.json (every run's end), metrics.jsonl cut back (every resume) and reward_contract.json (every start) left
    # their half-written `.tmp` in the run folder, holding the space the user was freeing
    from rlrm.engine.metrics.metrics_file import MetricsWriter
    from rlrm.engine.metrics.timing import Span
    from rlrm.engine.metrics.trace import write_chrome_trace
    from rlrm.engine.run_contract import check_run_contract

    metrics = tmp_path / "metrics.jsonl"
    rows = "".join(json.dumps({"step": s, "x": "y" * 100}) + "\n" for s in range(1, 6))
    metrics.write_text(rows)

    class Contract:
        fingerprint, parts = "f" * 64, {"kind": "rule"}

        def as_json(self):
            return {"fingerprint": self.fingerprint, "parts": self.parts}

    real = Path.write_text

    def half(self, data, *args, **kwargs):
        real(self, data[: len(data) // 2], *args, **kwargs)
        raise FULL

    monkeypatch.setattr(Path, "write_text", half)
    with pytest.raises(OSError, match="trace.json.tmp"):
        write_chrome_trace(tmp_path / "trace.json", [Span("trainer", "step", 0.0, 1.0)])
    with pytest.raises(OSError, match="metrics.jsonl.tmp"):
        MetricsWriter(metrics, keep_through_step=3)
    with pytest.raises(OSError, match="reward_contract.json.tmp"):
        check_run_contract(tmp_path, Contract(), False, 0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]
    assert metrics.read_text() == rows  # as it was


def test_a_pairs_file_already_there_is_not_written_again(tmp_path, monkeypatch):
    # `rlrm models prepare` on a read-only (or another user's) cache that holds everything failed on its temporary
    # pairs file: "Permission denied; choose a folder you can write to"
    from rlrm.engine.models import pairs_file

    path = pairs_file.write_pairs_file(tmp_path)
    written = path.read_bytes()

    def refused(self, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(Path, "write_text", refused)
    assert pairs_file.write_pairs_file(tmp_path) == path and path.read_bytes() == written
    monkeypatch.undo()  # a file of another recipe's pairs is written again
    path.write_text("an older recipe's pairs\n")
    assert pairs_file.write_pairs_file(tmp_path).read_bytes() == written


def test_a_file_this_user_cannot_read_is_not_blamed_on_writing(tmp_path, monkeypatch):
    # another user's 0600 profile or 0700 model folder read "choose a folder you can write to": rlrm writes nothing
    # there. Root reads anything, so the permission bits are stood in for.
    import rlrm.cli.common as common

    theirs = tmp_path / "theirs.yaml"
    theirs.write_text("a: 1")
    monkeypatch.setattr(common.os, "access", lambda p, mode: Path(p) != theirs)
    refused = PermissionError(errno.EACCES, "Permission denied", str(theirs))
    assert path_error(refused).endswith("this user cannot read it: check its permissions, or give a path you can read")
    new = PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "new" / "metrics.jsonl"))
    assert path_error(new).endswith("choose a folder you can write to")  # a file to be made: a write it was


def test_the_cpu_out_of_memory_is_one_line_as_the_gpus_is():
    # under `ulimit -v` (a job's memory limit) the update died in a 160-line traceback from inside transformers,
    # where the same on a GPU names the setting to lower
    from rlrm.errors import OutOfDeviceMemory, out_of_memory_named

    cpu = RuntimeError(
        "[enforce fail at alloc_cpu.cpp:127] data. DefaultCPUAllocator: can't allocate memory: you tried"
    )
    for failure in (cpu, MemoryError()):
        with pytest.raises(
            OutOfDeviceMemory, match=r"^out of memory \(CPU\) in the update: lower actor.micro_batch_size"
        ):
            with out_of_memory_named("in the update", "actor.micro_batch_size"):
                raise failure
    with pytest.raises(RuntimeError, match="shape mismatch"), out_of_memory_named("in the update", "x"):
        raise RuntimeError("shape mismatch")  # a bug stays a bug
