"""The SQLite reward cache shared by two processes writing at once (rlrm/engine/rewards/cache_store.py)."""

from __future__ import annotations

import multiprocessing

from rlrm.engine.rewards.cache_store import SqliteStore
from tests.unit.engine.rewards.test_reward_cache import _writer


def test_processes_share_one_file(tmp_path):
    path = str(tmp_path / "shared.sqlite")
    SqliteStore.open(path, 10).close()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, who, 150)) for who in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    store = SqliteStore.open(path, 10_000)
    assert len(store) == 300 and store.get("1-149") == {"score": 149.0, "extra": {"who": 1}}
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.close()


def _open_at(path: str, start: float, answers) -> None:
    import time

    from rlrm.engine.rewards.cache_store import CacheUnavailable

    while time.time() < start:
        pass
    try:
        SqliteStore.open(path, 100).close()
        answers.put("ok")
    except CacheUnavailable as exc:
        answers.put(str(exc))


def test_runs_creating_one_new_cache_file_at_once_both_get_it(tmp_path):
    """Two runs sharing a new reward.cache.path, started together: SQLite turns one away at once (SQLITE_BUSY while
    both switch the file to WAL, a deadlock it will not wait in), and that run went without the file for its whole
    run (1 to 22 of 40 opens, measured). Opening waits out the other's creation now."""
    import time

    ctx = multiprocessing.get_context("fork")  # fast to start: the race needs the opens within a millisecond
    failed = []
    for trial in range(12):
        path, answers = str(tmp_path / f"judge-{trial}.sqlite"), ctx.Queue()
        start = time.time() + 0.3
        procs = [ctx.Process(target=_open_at, args=(path, start, answers)) for _ in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(30)
        failed += [a for a in (answers.get(timeout=5) for _ in procs) if a != "ok"]
    assert failed == []
