"""The reward cache on disk: one SQLite file that several runs and processes share (`reward.cache.path`).

    store = SqliteStore.open(Path("judge.sqlite"), max_entries=100_000)
    store.put(key, contract_fingerprint, {"score": 1.0, "extra": {...}})
    store.get(key)                     # that dict, or None

WAL journal, one short transaction per statement, a 5 s busy timeout: readers never wait for the writer, and
writers of other processes take turns. Values are JSON text (never pickled, never code). A file that is not
SQLite, or a SQLite database that is not an rlrm reward cache, is refused (CacheFileError, one line); a path
that cannot be written (a read-only folder, a full disk) raises CacheUnavailable, which the cache turns into a
warning and a counter while the run goes on without the file (rlrm/engine/rewards/cache.py).
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from rlrm.errors import RlrmError

FORMAT = "rlrm-reward-cache"
VERSION = "1"
_SQLITE_HEADER = b"SQLite format 3\x00"
_EVICT_EVERY = 64  # puts between two size checks


class CacheFileError(RlrmError):
    """reward.cache.path names a file that is not an rlrm reward cache."""


class CacheUnavailable(Exception):
    """The cache file cannot be opened or written (read-only folder, full disk): the run goes on without it."""


class SqliteStore:
    def __init__(self, conn: sqlite3.Connection, path: Path, max_entries: int):
        self.conn, self.path, self.max_entries = conn, path, max_entries
        self._puts = 0

    @classmethod
    def open(cls, path: Path, max_entries: int) -> "SqliteStore":
        path = Path(path)
        _check_foreign(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)  # a cache file in a folder of its own, made as any output's
            conn = sqlite3.connect(path, timeout=5.0, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:  # a folder that cannot be made or written
            raise CacheUnavailable(f"cannot open {path}: {exc}") from None
        try:
            _check_or_create(conn, path)
        except BaseException:
            conn.close()
            raise
        return cls(conn, path, max_entries)

    def get(self, key: str) -> dict | None:
        """The value kept under `key`, or None (also for a row that does not hold a JSON object)."""
        try:
            row = self.conn.execute("SELECT value FROM rlrm_reward_cache WHERE key = ?", (key,)).fetchone()
            if row is None:
                return None
            self.conn.execute("UPDATE rlrm_reward_cache SET used = ? WHERE key = ?", (time.time_ns(), key))
        except sqlite3.Error as exc:
            raise CacheUnavailable(f"cannot read {self.path}: {exc}") from None
        try:
            value = json.loads(row[0])
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    def put(self, key: str, contract: str, value: dict) -> None:
        try:
            self.conn.execute(
                "INSERT OR REPLACE INTO rlrm_reward_cache (key, contract, value, used) VALUES (?, ?, ?, ?)",
                (key, contract, json.dumps(value), time.time_ns()),
            )
            self._puts += 1
            if self._puts % _EVICT_EVERY == 0:
                self.evict()
        except sqlite3.Error as exc:  # SQLITE_FULL, SQLITE_READONLY, SQLITE_IOERR ...
            raise CacheUnavailable(f"cannot write {self.path}: {exc}") from None

    def evict(self) -> int:
        """Drop the least recently used rows past max_entries; returns how many went."""
        (count,) = self.conn.execute("SELECT COUNT(*) FROM rlrm_reward_cache").fetchone()
        extra = count - self.max_entries
        if extra <= 0:
            return 0
        self.conn.execute(
            "DELETE FROM rlrm_reward_cache WHERE key IN (SELECT key FROM rlrm_reward_cache ORDER BY used ASC LIMIT ?)",
            (extra,),
        )
        return extra

    def __len__(self) -> int:
        return self.conn.execute("SELECT COUNT(*) FROM rlrm_reward_cache").fetchone()[0]

    def close(self) -> None:
        try:
            self.evict()
        except sqlite3.Error:
            pass  # the bound is checked again by the next run that writes
        self.conn.close()


def check_cache_file(path: Path | str) -> None:
    """CacheFileError for a folder or a file that is not SQLite at `path` (read: 16 bytes; nothing written)."""
    _check_foreign(Path(path))


def _check_foreign(path: Path) -> None:
    if path.is_dir():
        raise CacheFileError(f"reward.cache.path {path} is a folder; name a file, e.g. {path / 'reward-cache.sqlite'}")
    if not path.is_file() or path.stat().st_size == 0:
        return
    with path.open("rb") as f:
        header = f.read(len(_SQLITE_HEADER))
    if header != _SQLITE_HEADER:
        raise CacheFileError(_refusal(path, "it is not a SQLite file"))


def _check_or_create(conn: sqlite3.Connection, path: Path) -> None:
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as exc:  # "file is not a database", "database disk image is malformed"
        raise CacheFileError(_refusal(path, f"SQLite cannot read it ({exc})")) from None
    if tables and "rlrm_meta" not in tables:
        raise CacheFileError(_refusal(path, f"it is a SQLite database of something else (tables {sorted(tables)})"))
    try:
        if tables:
            meta = dict(conn.execute("SELECT name, value FROM rlrm_meta").fetchall())
            if meta.get("format") != FORMAT or meta.get("version") != VERSION:
                raise CacheFileError(_refusal(path, f"its format is {meta.get('format')} v{meta.get('version')}"))
        conn.execute("PRAGMA journal_mode=WAL")
        if not tables:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("CREATE TABLE IF NOT EXISTS rlrm_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS rlrm_reward_cache "
                "(key TEXT PRIMARY KEY, contract TEXT NOT NULL, value TEXT NOT NULL, used INTEGER NOT NULL)"
            )
            conn.execute("CREATE INDEX IF NOT EXISTS rlrm_reward_cache_used ON rlrm_reward_cache (used)")
            conn.execute("INSERT OR IGNORE INTO rlrm_meta VALUES ('format', ?), ('version', ?)", (FORMAT, VERSION))
            conn.execute("COMMIT")
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError) or "readonly" in str(exc):
            raise CacheUnavailable(f"cannot write {path}: {exc}") from None
        raise CacheFileError(_refusal(path, f"SQLite cannot read it ({exc})")) from None


def _refusal(path: Path, why: str) -> str:
    return (
        f"reward.cache.path {path} is not an rlrm reward cache: {why}; it is never loaded. Point reward.cache.path at "
        "a new file, or move this one away"
    )
