"""The reward cache on disk: one SQLite file that several runs and processes share (`reward.cache.path`).

    store = SqliteStore.open(Path("judge.sqlite"), max_entries=100_000)
    store.put(key, contract_fingerprint, {"score": 1.0, "extra": {...}})
    store.get(key)                     # that dict, or None

WAL journal, one short transaction per statement, a 5 s busy timeout: readers never wait for the writer, and
writers of other processes take turns. Values are JSON text (never pickled, never code). A file that is not
SQLite, or a SQLite database that is not an rlrm reward cache, is refused (CacheFileError, one line); a path
that cannot be written or read (a read-only folder, a full disk) raises CacheUnavailable, which the cache turns into a
warning and a counter while the run goes on without the file (rlrm/engine/rewards/cache.py).

A cache file this process can read but not write (a team's shared judge verdicts: someone else's file, or a
folder it cannot make the WAL's -wal and -shm files in) is opened read-only and serves its entries:
`store.read_only` says why, gets skip the LRU stamp and puts are skipped (the cache keeps them in memory). Such a
connection never writes the file nor makes a file beside it: a -wal or -shm another user made would stop the
owner's own writes. When the file's -wal and -shm are there (its owner has it open), SQLite reads through them
(`mode=ro`) and sees the owner's writes; when they are not, SQLite reads the file as unchanging (`immutable=1`,
no locks), so each read is checked against the file as it was opened (inode, size, modification time, no -wal,
-shm or journal beside it) before and after: a file that changed is opened again, a read that raced a write is
read again, and a file that keeps changing is given up (CacheUnavailable). A store that was writable and whose
write SQLite refuses as read-only (the file made read-only during the run) turns read-only the same way.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

from rlrm.errors import RlrmError

FORMAT = "rlrm-reward-cache"
VERSION = "1"
_SQLITE_HEADER = b"SQLite format 3\x00"
_EVICT_EVERY = 64  # puts between two size checks
_READS = 3  # tries of a read-only reader's read (or open) that a writer of the file got in the way of


class CacheFileError(RlrmError):
    """reward.cache.path names a file that is not an rlrm reward cache."""


class CacheUnavailable(Exception):
    """The cache file cannot be opened or written (read-only folder, full disk): the run goes on without it."""


_State = tuple[int, ...]  # a file and what is beside it (_state): unchanged means nobody wrote it


class SqliteStore:
    def __init__(
        self,
        conn: sqlite3.Connection,
        path: Path,
        max_entries: int,
        read_only: str | None = None,
        unchanged: _State | None = None,
    ):
        self.conn, self.path, self.max_entries = conn, path, max_entries
        self.read_only = read_only  # why this process cannot write the file; None while it can
        self._unchanged = unchanged  # the file as opened immutable (no locks): checked around each read
        self._puts = 0

    @classmethod
    def open(cls, path: Path, max_entries: int) -> "SqliteStore":
        path = Path(path)
        _check_foreign(path)
        why = _cannot_write(path)
        if why is not None:
            conn, unchanged = _open_read_only(path)
            return cls(conn, path, max_entries, read_only=why, unchanged=unchanged)
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
            row = self._read("SELECT value FROM rlrm_reward_cache WHERE key = ?", (key,))
        except (sqlite3.Error, OSError) as exc:
            raise CacheUnavailable(f"cannot read {self.path}: {exc}") from None
        if row is None:
            return None
        if self.read_only is None:
            self._stamp(key)
        try:
            value = json.loads(row[0])
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    def put(self, key: str, contract: str, value: dict) -> None:
        """Keep `value` under `key`; skipped when the file is read-only (`read_only` says why, the cache warns)."""
        if self.read_only is not None:
            return
        try:
            self.conn.execute(
                "INSERT OR REPLACE INTO rlrm_reward_cache (key, contract, value, used) VALUES (?, ?, ?, ?)",
                (key, contract, json.dumps(value), time.time_ns()),
            )
            self._puts += 1
            if self._puts % _EVICT_EVERY == 0:
                self.evict()
        except sqlite3.Error as exc:  # SQLITE_FULL, SQLITE_IOERR ...
            if _refused_as_read_only(exc):  # the file or its -shm made read-only since it was opened
                self.read_only = f"SQLite refused a write: {exc}"
                return
            raise CacheUnavailable(f"cannot write {self.path}: {exc}") from None

    def evict(self) -> int:
        """Drop the least recently used rows past max_entries; returns how many went (none from a read-only file)."""
        if self.read_only is not None:
            return 0
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
        return self._read("SELECT COUNT(*) FROM rlrm_reward_cache")[0]

    def close(self) -> None:
        try:
            self.evict()
        except sqlite3.Error:
            pass  # the bound is checked again by the next run that writes
        self.conn.close()

    def _stamp(self, key: str) -> None:
        """The LRU stamp of a hit, best effort: the hit is served whether or not it can be written."""
        try:
            self.conn.execute("UPDATE rlrm_reward_cache SET used = ? WHERE key = ?", (time.time_ns(), key))
        except sqlite3.Error as exc:  # busy past the timeout, a full disk: the next put says so
            if _refused_as_read_only(exc):
                self.read_only = f"SQLite refused a write: {exc}"

    def _read(self, sql: str, args: tuple = ()):
        """One row of `sql`. A file opened immutable has no locks: the read counts only when the file is as it was
        opened before and after it; a file that changed is opened again (through its -wal and -shm, if they
        are there now) and read again. A read-only reader's read SQLite refuses as a write (the -shm its owner
        is making or taking away: SQLITE_READONLY_CANTINIT) is tried again on a new connection too."""
        for attempt in range(_READS):
            unchanged = self._unchanged
            if unchanged is not None and not _still(self.path, unchanged):
                self._reopen()
                continue
            try:
                row = self.conn.execute(sql, args).fetchone()
            except sqlite3.Error as exc:
                owner_busy = self.read_only is not None and _refused_as_read_only(exc)
                if attempt == _READS - 1 or not owner_busy and (unchanged is None or _still(self.path, unchanged)):
                    raise
                time.sleep(0.01 * (attempt + 1))
                self._reopen()  # a page torn by a writer, a -shm being made: read again
                continue
            if unchanged is None or _still(self.path, unchanged):
                return row
            self._reopen()
        raise sqlite3.OperationalError("another process keeps writing it while it is read")

    def _reopen(self) -> None:
        self.conn.close()
        try:
            self.conn, self._unchanged = _open_read_only(self.path)
        except CacheFileError as exc:  # replaced by something else during the run
            raise CacheUnavailable(str(exc)) from None


def check_cache_file(path: Path | str) -> None:
    """CacheFileError for a folder or a file that is not SQLite at `path` (read: 16 bytes; nothing written)."""
    _check_foreign(Path(path))


def _check_foreign(path: Path) -> None:
    if path.is_dir():
        raise CacheFileError(f"reward.cache.path {path} is a folder; name a file, e.g. {path / 'reward-cache.sqlite'}")
    if not path.is_file() or path.stat().st_size == 0:
        return
    try:
        with path.open("rb") as f:
            header = f.read(len(_SQLITE_HEADER))
    except OSError:  # a file this user may not read: not used (SqliteStore.open raises CacheUnavailable), not refused
        return
    if header != _SQLITE_HEADER:
        raise CacheFileError(_refusal(path, "it is not a SQLite file"))


def _side(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _state(path: Path) -> _State:
    """The file (inode, size, modification time) and the size of its -wal, -shm and -journal (-1: none): as long
    as it stays the same, nobody wrote the file. Raises OSError when the file is gone."""
    st = path.stat()
    beside = []
    for suffix in ("-wal", "-shm", "-journal"):
        try:
            beside.append(_side(path, suffix).stat().st_size)
        except FileNotFoundError:
            beside.append(-1)
    return (st.st_ino, st.st_size, st.st_mtime_ns, *beside)


def _cannot_write(path: Path) -> str | None:
    """Why this process cannot write the cache file at `path` (None: it can, or the file is not there yet). SQLite
    writes a WAL file through its -wal and -shm beside it, made in the folder when they are not there."""
    try:
        if path.stat().st_size == 0:
            return None  # nothing to serve: made (or found unwritable) as a new file is
    except OSError:
        return None
    if not os.access(path, os.W_OK):
        return "the file cannot be written by this user"
    for suffix in ("-wal", "-shm"):
        side = _side(path, suffix)
        if side.exists() and not os.access(side, os.W_OK):
            return f"its {side.name} was made by another user and cannot be written"
        if not side.exists() and not os.access(path.parent, os.W_OK):
            return f"its folder cannot be written, so SQLite cannot make its {suffix} file"
    return None


def _open_read_only(path: Path) -> tuple[sqlite3.Connection, _State | None]:
    """A connection that reads the cache file and never writes it nor makes a file beside it, and the state the
    file must keep for its reads to count (None: SQLite locks it as usual)."""
    for attempt in range(_READS):
        try:
            before = _state(path)
        except OSError as exc:
            raise CacheUnavailable(f"cannot read {path}: {exc}") from None
        wal, shm, journal = before[3:]
        live = wal >= 0 and shm >= 0  # its owner has it open (or left them): SQLite reads through them
        if not live and (wal > 0 or journal > 0):  # the file alone may hold half a transaction
            raise CacheUnavailable(f"cannot read {path} without writing: it has a journal or -wal but no -shm")
        uri = path.absolute().as_uri() + ("?mode=ro" if live else "?mode=ro&immutable=1")
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=5.0, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise CacheUnavailable(f"cannot open {path}: {exc}") from None
        try:
            _check_or_create(conn, path, read_only=True)
        except (CacheFileError, CacheUnavailable) as exc:
            conn.close()
            if attempt == _READS - 1 or isinstance(exc, CacheFileError) and (live or _still(path, before)):
                raise
            time.sleep(0.01 * (attempt + 1))
            continue  # read without locks while a writer changed it, a -shm being made: read again
        except BaseException:
            conn.close()
            raise
        if live or _still(path, before):
            return conn, None if live else before
        conn.close()
    raise CacheUnavailable(f"cannot read {path}: another process keeps writing it while it is read")


def _still(path: Path, state: _State) -> bool:
    try:
        return _state(path) == state
    except OSError:
        return False


def _refused_as_read_only(exc: sqlite3.Error) -> bool:
    """SQLITE_READONLY and its extended codes ("attempt to write a readonly database")."""
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    return (code & 0xFF) == 8 if code is not None else "readonly database" in str(exc)


# How long opening waits out another process creating the file or switching it to WAL: SQLite answers that race
# SQLITE_BUSY at once (a deadlock it will not wait in), so the connection's busy timeout never applies
CREATE_BUSY_S = 5.0


class _Busy(Exception):
    pass


def _is_busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    return (code & 0xFF) in (5, 6) if code is not None else "database is locked" in str(exc)  # BUSY, LOCKED


def _check_or_create(conn: sqlite3.Connection, path: Path, read_only: bool = False) -> None:
    """Check the file is an rlrm reward cache, creating its tables in a new one (two runs doing it at once: the one
    SQLite turns away waits and tries again, where it lost the cache for its whole run)."""
    deadline = time.monotonic() + CREATE_BUSY_S
    while True:
        try:
            _check_or_create_once(conn, path, read_only)
            return
        except _Busy as exc:
            if conn.in_transaction:
                conn.rollback()
            if time.monotonic() > deadline:
                raise CacheUnavailable(f"cannot write {path}: {exc.__cause__}") from None
            time.sleep(0.005 + 0.02 * (os.getpid() % 7) / 7)  # processes started together come apart


def _check_or_create_once(conn: sqlite3.Connection, path: Path, read_only: bool) -> None:
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.OperationalError as exc:  # locked, cannot open, a read-only -shm: the path, not the file
        if _is_busy(exc) and not read_only:
            raise _Busy() from exc
        raise CacheUnavailable(f"cannot read {path}: {exc}") from None
    except sqlite3.DatabaseError as exc:  # "file is not a database", "database disk image is malformed"
        raise CacheFileError(_refusal(path, f"SQLite cannot read it ({exc})")) from None
    if tables and "rlrm_meta" not in tables:
        raise CacheFileError(_refusal(path, f"it is a SQLite database of something else (tables {sorted(tables)})"))
    try:
        if tables:
            meta = dict(conn.execute("SELECT name, value FROM rlrm_meta").fetchall())
            if meta.get("format") != FORMAT or meta.get("version") != VERSION:
                raise CacheFileError(_refusal(path, f"its format is {meta.get('format')} v{meta.get('version')}"))
        if read_only:
            if not tables:
                raise CacheUnavailable(f"cannot write {path}: it is read-only and holds no reward cache yet")
            return
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
        if isinstance(exc, sqlite3.OperationalError) and _is_busy(exc):
            raise _Busy() from exc
        if isinstance(exc, sqlite3.OperationalError) or "readonly" in str(exc):
            raise CacheUnavailable(f"cannot write {path}: {exc}") from None
        raise CacheFileError(_refusal(path, f"SQLite cannot read it ({exc})")) from None


def _refusal(path: Path, why: str) -> str:
    return (
        f"reward.cache.path {path} is not an rlrm reward cache: {why}; it is never loaded. Point reward.cache.path at "
        "a new file, or move this one away"
    )
