"""`rlrm train` and `rlrm bench` cap glibc's malloc arenas at one (see rlrm/allocator.py), unless the user set MALLOC_ARENA_MAX."""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc arenas are a Linux matter")

# Threads allocate (1 MiB bytearrays go to malloc), then glibc's malloc_stats() lists every arena on stderr.
PROGRAM = """
import ctypes, sys, threading
from rlrm.allocator import use_one_malloc_arena
applied = use_one_malloc_arena() if sys.argv[1] == "cap" else None
def work():
    keep = [bytearray(1 << 20) for _ in range(8)]
threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print(applied, flush=True)
ctypes.CDLL("libc.so.6").malloc_stats()
"""


def _arenas(mode: str, env: dict | None = None) -> tuple[str, int]:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | (env or {})
    done = subprocess.run([sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, env=env, check=True)
    return done.stdout.strip(), done.stderr.count("Arena ")


def test_threads_share_the_main_arena_once_capped():
    _, uncapped = _arenas("none")
    assert uncapped > 1  # the control: without the cap, threads get arenas of their own
    applied, capped = _arenas("cap")
    assert (applied, capped) == ("True", 1)


def test_a_user_set_malloc_arena_max_wins():
    applied, arenas = _arenas("cap", {"MALLOC_ARENA_MAX": "4"})
    assert applied == "False" and arenas > 1


@pytest.mark.parametrize(
    "argv", [["train", "--profile", "tiny-rule", "--dry-run"], ["bench", "reward-latency", "--modes", "nope"]]
)
def test_training_commands_apply_the_cap_first(monkeypatch, argv):
    from typer.testing import CliRunner

    from rlrm.cli.main import app

    calls = []
    monkeypatch.setattr("rlrm.allocator.use_one_malloc_arena", lambda: calls.append("cap") or True)
    CliRunner().invoke(app, argv)
    assert calls == ["cap"]


# Each round allocates 40 blocks of 8 MiB (bytearray zero-fills them: each page is touched), then frees them all,
# as a training step does with its activations; the third round's page faults show whether the memory was kept.
REUSE = """
import resource, sys
from rlrm.allocator import use_one_malloc_arena
if sys.argv[1] == "cap":
    use_one_malloc_arena()
for _ in range(3):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    blocks = [bytearray(8 << 20) for _ in range(40)]
    del blocks
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str, env: dict | None = None) -> int:
    keys = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")
    env = {k: v for k, v in os.environ.items() if k not in keys} | (env or {})
    done = subprocess.run([sys.executable, "-c", REUSE, mode], capture_output=True, text=True, env=env, check=True)
    return int(done.stdout)


def test_freed_blocks_are_reused_without_page_faults():
    pages = 40 * (8 << 20) // 4096
    assert _faults("none") > pages // 2  # the control: glibc gave the memory back and faults it in again
    assert _faults("cap") < pages // 20
    assert _faults("cap", {"MALLOC_TRIM_THRESHOLD_": str(1 << 20)}) > pages // 2  # the user's setting wins
