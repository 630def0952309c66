"""A reward cache file this user can read but not write (a team's shared judge verdicts), read by a real other
user: the cache code runs as `nobody` (setpriv) on files root made, so the tests need root, and run in CI as root
(rlrm/engine/rewards/cache_store.py). As another user than root, tests/unit/engine/rewards/test_reward_cache.py
covers what chmod can show."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from rlrm.config.reward_cache import RewardCacheConfig
from rlrm.engine.rewards.base import RewardResult, RewardSample
from rlrm.engine.rewards.cache import RewardCache

REPO = Path(__file__).resolve().parents[3]
AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]

# Scores the given responses through the cache at argv[1] as a genrm run would; "WAIT" lets the test write the
# file meanwhile. Prints one JSON line: the scores, the responses judged, the cache's metrics (or what it raised).
READER = textwrap.dedent(
    """
    import asyncio, json, sys
    from rlrm.config.reward_cache import RewardCacheConfig
    from rlrm.engine.rewards.base import RewardResult, RewardSample
    from rlrm.engine.rewards.cache import RewardCache

    judged = []
    async def judge(s):
        judged.append(s.solution_str)
        return RewardResult(0.0, {"model_calls": 1})
    try:
        cache = RewardCache.open(RewardCacheConfig(enabled=True, path=sys.argv[1]), "genrm", "fp")
    except Exception as exc:
        print(json.dumps({"raised": type(exc).__name__, "message": str(exc)}))
        raise SystemExit(0)
    scores = []
    for response in sys.argv[2:]:
        if response == "WAIT":
            print("waiting", flush=True)
            sys.stdin.readline()
            continue
        s = RewardSample("p0", 0, "t", [{"role": "user", "content": "1+2?"}], response, "3", {})
        scores.append(asyncio.run(cache.through(s, judge)).score)
    cache.close()
    print(json.dumps({"scores": scores, "judged": judged, "metrics": cache.take_metrics()}))
    """
)


@pytest.fixture(scope="module")
def nobody_env():
    if os.geteuid() != 0:
        pytest.skip("needs root to run the cache as another user (setpriv); as a user, the unit tier's chmod tests")
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv (util-linux) to run the cache as the user nobody")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    probe = subprocess.run([*AS_NOBODY, sys.executable, "-c", "import rlrm"], env=env, cwd="/", capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"the user nobody cannot run {sys.executable} with rlrm here: {probe.stderr.decode()[-200:]}")
    return env


@pytest.fixture
def shared():
    """A folder of root's that nobody can enter (pytest's tmp_path is root's own, 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="rlrm-shared-cache-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    folder.chmod(0o755)
    shutil.rmtree(folder, ignore_errors=True)


def owner_cache(path: Path) -> RewardCache:
    """The file's owner (root), writing it as its own run does."""
    return RewardCache.open(RewardCacheConfig(enabled=True, path=str(path)), "genrm", "fp")


def judged(cache: RewardCache, response: str, score: float) -> None:
    async def judge(s):
        return RewardResult(score, {"model_calls": 1})

    s = RewardSample("p0", 0, "t", [{"role": "user", "content": "1+2?"}], response, "3", {})
    asyncio.run(cache.through(s, judge))


def shared_file(folder: Path, folder_mode: int) -> Path:
    """A cache file of root's (0644) holding "#### 3" judged 0.75, closed, in `folder` made `folder_mode`."""
    path = folder / "judge-cache.sqlite"
    cache = owner_cache(path)
    judged(cache, "#### 3", 0.75)
    cache.close()
    assert sorted(folder.iterdir()) == [path]  # the last connection took its -wal and -shm away
    path.chmod(0o644)
    folder.chmod(folder_mode)
    return path


def read_as_nobody(env: dict, path: Path, *responses: str) -> tuple[dict, str]:
    done = subprocess.run(
        [*AS_NOBODY, sys.executable, "-c", READER, str(path), *responses],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


@pytest.mark.parametrize("folder_mode", [0o755, 0o1777], ids=["read-only-folder", "writable-folder"])
def test_a_shared_cache_this_user_cannot_write_serves_its_entries_and_is_left_as_it_was(
    nobody_env, shared, folder_mode
):
    """Before: in a folder nobody cannot write, SQLite cannot make the WAL's -wal and -shm, the first read failed
    "attempt to write a readonly database" and the run stopped with "is not an rlrm reward cache ... move this one
    away"; in a folder nobody can write, the hit's LRU stamp failed, the hit became a judge call and the file was
    dropped for the run, and nobody's -wal and -shm stayed beside it (SQLite would then refuse its owner's writes,
    as the owner is not root)."""
    path = shared_file(shared, folder_mode)
    before = path.read_bytes()
    out, err = read_as_nobody(nobody_env, path, "#### 3", "#### 4", "#### 4")
    assert "raised" not in out, out
    assert out["scores"] == [0.75, 0.0, 0.0] and out["judged"] == ["#### 4"]  # new ones kept in memory
    assert out["metrics"]["reward/cache_hits"] == 2 and out["metrics"]["reward/cache_errors"] == 1
    assert err.count(f"warning: reward cache {path} is read-only") == 1 and "not used" not in err, err
    assert path.read_bytes() == before and sorted(shared.iterdir()) == [path]


@pytest.mark.parametrize("owner_open", ["before", "after"])
def test_entries_its_owner_writes_while_the_run_reads_are_served(nobody_env, shared, owner_open):
    """The owner's run writes the shared file while nobody's run reads it from a folder nobody cannot write.
    Open before nobody's run: SQLite reads through the owner's -wal and -shm. Opened after: nobody's run read the
    file as unchanging, sees it change, and opens it again. Before: the run stopped ("not an rlrm reward cache")."""
    path = shared_file(shared, 0o755)
    owner = owner_cache(path) if owner_open == "before" else None
    reader = subprocess.Popen(
        [*AS_NOBODY, sys.executable, "-c", READER, str(path), "#### 3", "WAIT", "#### 5", "WAIT", "#### 6"],
        env=nobody_env,
        cwd="/",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout.readline() == "waiting\n", reader.communicate(timeout=60)
        owner = owner or owner_cache(path)
        judged(owner, "#### 5", 0.5)
        reader.stdin.write("\n")
        reader.stdin.flush()
        assert reader.stdout.readline() == "waiting\n", reader.communicate(timeout=60)
        judged(owner, "#### 6", 0.25)
        owner.close()  # its last write, and its -wal and -shm gone when nothing else holds them
        stdout, err = reader.communicate("\n", timeout=60)
    finally:
        if reader.poll() is None:
            reader.kill()
    out = json.loads(stdout.splitlines()[-1])
    assert out.get("scores") == [0.75, 0.5, 0.25] and out["judged"] == [], (out, err)
    assert err.count("is read-only") == 1, err


def test_another_programs_database_this_user_cannot_write_is_still_refused_for_what_it_is(nobody_env, shared):
    """A WAL-mode SQLite database of another program in a folder nobody cannot write: refused, and for the right
    reason. Before: "SQLite cannot read it (attempt to write a readonly database)", as a valid cache was."""
    path = shared / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.commit()
    conn.close()
    path.chmod(0o644)
    out, _ = read_as_nobody(nobody_env, path, "#### 3")
    assert out.get("raised") == "CacheFileError", out
    assert "it is a SQLite database of something else (tables ['users'])" in out["message"], out


def test_a_cache_file_this_user_cannot_read_leaves_the_run_cached_in_memory(nobody_env, shared):
    """Someone else's cache file, 0600. Before: PermissionError out of the header check, a traceback."""
    path = shared_file(shared, 0o755)
    path.chmod(0o600)
    out, err = read_as_nobody(nobody_env, path, "#### 3", "#### 3")
    assert out.get("scores") == [0.0, 0.0] and out["judged"] == ["#### 3"], out
    assert out["metrics"]["reward/cache_errors"] == 1 and out["metrics"]["reward/cache_hits"] == 1
    assert err.count(f"warning: reward cache file not used: cannot open {path}") == 1, err


def test_a_read_only_folder_without_the_file_leaves_the_run_cached_in_memory(nobody_env, shared):
    """tests/unit's test of the same name, which root skips (root writes into any folder), as nobody."""
    shared.chmod(0o755)
    out, err = read_as_nobody(nobody_env, shared / "cache.sqlite", "#### 3", "#### 3")
    assert out["scores"] == [0.0, 0.0] and out["judged"] == ["#### 3"], out
    assert out["metrics"]["reward/cache_errors"] == 1 and out["metrics"]["reward/cache_hits"] == 1
    assert err.count("warning: reward cache file not used") == 1, err
    assert list(shared.iterdir()) == []
