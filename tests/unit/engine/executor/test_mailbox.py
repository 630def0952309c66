"""rlrm/engine/executor/mailbox.py: messages pickled where they are sent, and a socket folder on a short path.
The two-rank run under a long TMPDIR is tests/integration/engine/test_actor_ranks_runs.py."""

from __future__ import annotations

import os
import queue
import shutil
import tempfile
from multiprocessing import process

import pytest

from rlrm.engine.executor import mailbox
from rlrm.errors import ConfigError


def test_a_message_that_cannot_be_pickled_raises_where_it_is_sent_and_nothing_is_put():
    box: queue.Queue = queue.Queue()
    with pytest.raises(Exception, match="pickle|local object"):
        mailbox.send(box, ("train", lambda: 0))
    assert box.empty()  # a multiprocessing.Queue's feeder thread would have printed a traceback and dropped it


def test_what_is_sent_is_what_is_received_and_nothing_there_is_empty_after_the_timeout():
    box: queue.Queue = queue.Queue()
    mailbox.send(box, ("score", [[1, 2, 3]], [2], 4))
    mailbox.send(box, None)  # the stop message
    assert mailbox.receive(box, timeout_s=1.0) == ("score", [[1, 2, 3]], [2], 4)
    assert mailbox.receive(box, timeout_s=1.0) is None
    with pytest.raises(queue.Empty):
        mailbox.receive(box, timeout_s=0.01)


@pytest.fixture
def fresh_config(monkeypatch):
    """This process as if multiprocessing had made no temp folder yet; put back afterwards."""
    config = process.current_process()._config
    had, old = "tempdir" in config, config.get("tempdir")
    config.pop("tempdir", None)
    made = []
    try:
        yield config, made
    finally:
        if config.get("tempdir") not in (None, old):
            made.append(config["tempdir"])
        config.pop("tempdir", None)
        if had:
            config["tempdir"] = old
        for folder in made:
            shutil.rmtree(folder, ignore_errors=True)


def test_a_tmpdir_with_room_for_the_socket_is_left_alone(fresh_config, monkeypatch):
    config, _ = fresh_config
    monkeypatch.setattr(tempfile, "tempdir", "/tmp/run")
    assert mailbox.short_socket_folder() is None
    assert "tempdir" not in config  # multiprocessing makes its own folder under TMPDIR, as always


def test_a_tmpdir_too_long_for_the_socket_gets_a_private_folder_on_a_short_path(fresh_config, monkeypatch):
    config, _ = fresh_config
    long = "/scratch/" + "job-1234567/" * 8
    assert not mailbox.socket_room(long)
    monkeypatch.setattr(tempfile, "tempdir", long)
    folder = mailbox.short_socket_folder()
    assert folder is not None and config["tempdir"] == folder and mailbox.socket_room(folder)
    assert folder.rsplit("/", 1)[1].startswith("pymp-") and oct(os.stat(folder).st_mode)[-3:] == "700"
    assert mailbox.short_socket_folder() is None  # once per process: the folder multiprocessing has is kept


def test_no_short_writable_folder_is_one_line_naming_tmpdir(fresh_config, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", "/scratch/" + "x" * 100)
    monkeypatch.setattr(mailbox, "_SHORT_BASES", ("/no/such/folder",))
    with pytest.raises(ConfigError, match=r"TMPDIR /scratch/x+ is too long .* set TMPDIR to a shorter folder"):
        mailbox.short_socket_folder()


def test_a_folder_multiprocessing_made_earlier_under_a_long_tmpdir_is_replaced(fresh_config):
    config, made = fresh_config
    config["tempdir"] = "/scratch/" + "job-1234567/" * 8 + "pymp-abcdefgh"  # made before: too long for a socket
    folder = mailbox.short_socket_folder()
    assert folder is not None and config["tempdir"] == folder and mailbox.socket_room(folder)


def test_a_folder_multiprocessing_made_earlier_where_a_socket_fits_is_kept(fresh_config):
    config, _ = fresh_config
    config["tempdir"] = "/tmp/pymp-abcdefgh"
    assert mailbox.short_socket_folder() is None and config["tempdir"] == "/tmp/pymp-abcdefgh"
