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
