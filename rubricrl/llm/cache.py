"""A persistent, content-addressed cache of model responses, so that re-running any stage never pays twice.

The key hashes model, messages, sampling parameters and sample index (each of n samples is its own entry), not the
URL or API key: the same model elsewhere answers the same. Storage is log-structured, each answer written once:
- `segment-N.log`: answers appended in one `write`, so once `put` returns one survives a SIGKILL (page cache). They
  are deflated against a preset dictionary (RECORD_DICTIONARY: 251 -> 196 bytes a record on a RuFT build's 16,800
  answers), a few hundred bytes being too short for plain zlib; older plain-zlib records still read;
- `index.sqlite` (WAL, never synced): key -> (segment, offset, length), written every FLUSH_SECONDS or FLUSH_ENTRIES
  and on close (a page write per answer made SQLite write 7-16x the bytes held). Derived data: rebuilt from the
  segments after a corrupting power loss (answers deleted as invalid come back, to be rejected again). Opened under
  `index.lock`: processes creating it at once got SQLITE_BUSY, which, taken for corruption, deleted it under them;
- each process appends under an exclusive `flock` on its own segment, so any number write at once; the next opener
  re-indexes a dead writer's tail, checking CRCs and truncating a cut-off record.
Unflushed answers are seen by their process at once, by others at its next flush (<= FLUSH_SECONDS). The first
writer of a key wins: within a process at `put`, across processes at flush.
"""

import fcntl
import hashlib
import json
import os
import sqlite3
import struct
import threading
import time
import zlib
from pathlib import Path
from typing import Any

from rubricrl.home import rubricrl_home

FLUSH_SECONDS = 1.0
FLUSH_ENTRIES = 1000
INDEX_PAGE_SIZE = 512
HEADER = struct.Struct("<16sII")  # key (first 128 bits of the sha256), payload length, CRC32 of the payload

# A payload is either a zlib stream (records written before RECORD_DICTIONARY: its first byte is 0x78, a zlib
# header) or DICTIONARY_V1 followed by raw deflate against RECORD_DICTIONARY. Never edit this dictionary: records
# on disk need it byte for byte; a better one gets a new marker byte, and the reader keeps the old.
DICTIONARY_V1 = b"\x01"
RECORD_DICTIONARY = "".join(
    [  # the most frequent strings last: zlib reaches the end of a dictionary cheapest
        # synthesis rubrics (synthesis/criteria.py) and ratings (grading/judge.py)
        '{\\"criteria\\": [{\\"title\\": \\"',
        '\\", \\"description\\": \\"',
        '\\", \\"weight\\": ',
        ', \\"category\\": \\"',
        '{\\"explanation\\": \\"',
        '\\", \\"rating\\": ',
        # verdicts as models without structured outputs write them: pretty-printed, or without spaces
        '{\\n  \\"explanation\\": \\"',
        '\\",\\n  \\"criteria_met\\": true\\n}',
        '\\",\\n  \\"criteria_met\\": false\\n}',
        '{\\"explanation\\":\\"',
        '\\",\\"criteria_met\\":true}',
        '\\",\\"criteria_met\\":false}',
        # what judges write
        "The response does not mention ",
        "The response does not meet the criterion",
        "The response meets the criteria of ",
        "The response mentions ",
        "The response provides ",
        "The response correctly ",
        "the criterion ",
        " because ",
        " the response ",
        " does not ",
        " which is ",
        " and the ",
        # batched verdicts (grading/judge.py: batched_schema)
        '{\\"verdicts\\": [{\\"id\\": \\"c1\\", \\"explanation\\": \\"',
        '}, {\\"id\\": \\"c',
        '\\", \\"explanation\\": \\"',
        '\\", \\"criteria_met\\": false}]}',
        '\\", \\"criteria_met\\": true}]}',
        # the stored value (client.py: text and finish reason) around a verdict (grading/judge.py: VERDICT_SCHEMA)
        '", "finish_reason": "length"}',
        '", "finish_reason": null}',
        '{"text": "{\\"explanation\\": \\"',
        '\\", \\"criteria_met\\": false}", "finish_reason": "stop"}',
        '\\", \\"criteria_met\\": true}", "finish_reason": "stop"}',
    ]
).encode()


def _compress(value: dict[str, Any]) -> bytes:
    deflate = zlib.compressobj(6, zlib.DEFLATED, -15, 8, zlib.Z_DEFAULT_STRATEGY, RECORD_DICTIONARY)
    return DICTIONARY_V1 + deflate.compress(json.dumps(value, ensure_ascii=False).encode()) + deflate.flush()


def _decompress(payload: bytes) -> dict[str, Any]:
    if payload[:1] != DICTIONARY_V1:
        return json.loads(zlib.decompress(payload))  # written before RECORD_DICTIONARY
    inflate = zlib.decompressobj(-15, RECORD_DICTIONARY)
    data = inflate.decompress(payload[1:]) + inflate.flush()
    if not inflate.eof:
        raise zlib.error("record cut off")
    return json.loads(data)


def default_cache_path() -> Path:
    return rubricrl_home() / "cache" / "responses"


def _stored(key: str) -> bytes:
    """The first 128 bits of the key's sha256: collisions are out of reach, and the index stays small."""
    return bytes.fromhex(key[:32])


def cache_key(model: str, messages: list[dict[str, Any]], params: dict[str, Any], sample_index: int) -> str:
    request = {"model": model, "messages": messages, "params": params, "sample": sample_index}
    canonical = json.dumps(request, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


class ResponseCache:
    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path else default_cache_path()
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()  # the TRL reward runs the client on its own thread
        self._db = self._open_index()
        self._readers: dict[int, int] = {}  # segment id -> read-only fd
        self._segment: int | None = None  # the segment this process appends to (locked), once it has written
        self._fd: int | None = None
        self._end = 0  # bytes in our segment
        self._pending: dict[bytes, tuple[int, int, dict[str, Any]]] = {}  # appended, not yet in the index
        self._flushed_at = time.monotonic()
        for segment in self._segment_ids():
            fd = self._try_lock(segment)
            if fd is not None:  # its writer is gone: index what it appended after its last flush
                self._recover(segment, fd)
                os.close(fd)

    # --- reading and writing -------------------------------------------------------------------------------------

    def get(self, key: str) -> dict[str, Any] | None:
        stored = _stored(key)
        with self._lock:
            if stored in self._pending:
                return self._pending[stored][2]
            row = self._db.execute("SELECT segment, offset, length FROM entries WHERE key = ?", (stored,)).fetchone()
            if row is None:
                return None
            try:
                payload = os.pread(self._reader(row[0]), row[2], row[1] + HEADER.size)
                return _decompress(payload)
            except (OSError, zlib.error, ValueError):  # the segment was removed by a `cache clear` elsewhere
                return None

    def put(self, key: str, value: dict[str, Any]) -> dict[str, Any]:
        """Store `value` unless the key is already there, and return what is stored: the first writer wins, so
        every rerun sees the same answer for a key."""
        with self._lock:
            existing = self.get(key)
            if existing is not None:
                return existing
            if self._fd is None:
                self._open_segment()
            stored = _stored(key)
            payload = _compress(value)
            record = HEADER.pack(stored, len(payload), zlib.crc32(payload)) + payload
            os.write(self._fd, record)  # O_APPEND, one write: a record is whole or cut off at the end
            self._pending[stored] = (self._end, len(payload), value)
            self._end += len(record)
            if len(self._pending) >= FLUSH_ENTRIES or time.monotonic() - self._flushed_at >= FLUSH_SECONDS:
                self.flush()
            return value

    def flush(self) -> None:
        """Write the index entries of the answers appended since the last flush (one transaction)."""
        with self._lock:
            self._flushed_at = time.monotonic()
            if not self._pending:
                return
            with self._db:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.executemany(
                    "INSERT OR IGNORE INTO entries VALUES (?, ?, ?, ?)",
                    [(k, self._segment, offset, length) for k, (offset, length, _) in self._pending.items()],
                )
                self._db.execute("UPDATE segments SET indexed = ? WHERE id = ?", (self._end, self._segment))
            self._pending.clear()

    def delete(self, keys: list[str]) -> None:
        with self._lock:
            self.flush()  # then the log behind these entries is indexed, and a recovery cannot bring them back
            self._db.executemany("DELETE FROM entries WHERE key = ?", [(_stored(key),) for key in keys])

    def __len__(self) -> int:
        with self._lock:
            self.flush()
            return self._db.execute("SELECT COUNT(*) FROM entries").fetchone()[0]

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.path.iterdir() if p.is_file())

    def clear(self) -> int:
        """Delete every entry whose segment no other running process is writing; returns how many were deleted."""
        with self._lock:
            self._let_go()
            removed = 0
            for segment in self._segment_ids():
                fd = self._try_lock(segment)
                if fd is None:
                    continue
                with self._db:
                    self._db.execute("BEGIN IMMEDIATE")
                    removed += self._db.execute("DELETE FROM entries WHERE segment = ?", (segment,)).rowcount
                    self._db.execute("DELETE FROM segments WHERE id = ?", (segment,))
                self._segment_path(segment).unlink(missing_ok=True)
                os.close(fd)
            self._db.execute("VACUUM")
            return removed

    def close(self) -> None:
        with self._lock:
            self._let_go()
            self._db.close()

    # --- segments --------------------------------------------------------------------------------------------------

    def _open_index(self) -> sqlite3.Connection:
        """Open the index, creating it, or rebuilding it from the segments if a power loss corrupted it (it is
        never synced). One opener at a time: processes creating it at once got SQLITE_BUSY from the set-up pragmas,
        and a rebuild deletes the files (a process that opened them before the corruption fails on them anyway)."""
        with open(self.path / "index.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            try:
                return self._connect_index()
            except sqlite3.DatabaseError as error:
                if error.sqlite_errorcode & 0xFF not in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
                    raise  # busy, read-only, disk full: not for a rebuild to hide
            for leftover in self.path.glob("index.sqlite*"):
                leftover.unlink(missing_ok=True)  # the -wal may go with the connection that found the fault
            db = self._connect_index()
            segments = sorted(int(p.stem.removeprefix("segment-")) for p in self.path.glob("segment-*.log"))
            db.executemany("INSERT INTO segments (id, indexed) VALUES (?, 0)", [(s,) for s in segments])
            return db

    def _connect_index(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path / "index.sqlite", timeout=60, isolation_level=None, check_same_thread=False)
        try:
            return self._set_up_index(db)
        except sqlite3.DatabaseError:
            db.close()  # now, not when the traceback goes: the caller may delete the files next
            raise

    @staticmethod
    def _set_up_index(db: sqlite3.Connection) -> sqlite3.Connection:
        # Small pages: a flush touches one leaf per entry (keys are random), and the WAL holds whole pages.
        db.execute(f"PRAGMA page_size={INDEX_PAGE_SIZE}")
        db.execute("PRAGMA journal_mode=WAL")
        # No fsync: the index is derived data, and without a sync per checkpoint the kernel writes each index
        # page once instead of once per flush (measured: 70 MB -> 6 MB written for 8,000 answers into a
        # 500,000-entry index).
        db.execute("PRAGMA synchronous=OFF")
        # AUTOINCREMENT: a cleared segment's id is never reused, so no process reads a stale file under that id.
        db.execute(
            "CREATE TABLE IF NOT EXISTS segments (id INTEGER PRIMARY KEY AUTOINCREMENT, indexed INTEGER NOT NULL)"
        )
        db.execute(
            "CREATE TABLE IF NOT EXISTS entries (key BLOB PRIMARY KEY, segment INTEGER NOT NULL, "
            "offset INTEGER NOT NULL, length INTEGER NOT NULL) WITHOUT ROWID"
        )
        db.execute("SELECT COUNT(*) FROM segments").fetchone()  # a corrupted file fails here
        return db

    def _segment_path(self, segment: int) -> Path:
        return self.path / f"segment-{segment}.log"

    def _segment_ids(self) -> list[int]:
        return [row[0] for row in self._db.execute("SELECT id FROM segments ORDER BY id")]

    def _try_lock(self, segment: int) -> int | None:
        """An appending fd on the segment with its exclusive lock, or None while another process holds it."""
        fd = os.open(self._segment_path(segment), os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    def _open_segment(self) -> None:
        """Take over a segment no process is writing (indexing its tail first), or start a new one."""
        fd = None
        while fd is None:
            for segment in self._segment_ids():
                fd = self._try_lock(segment)
                if fd is not None:
                    break
            else:  # all taken: a new one (which another process's recovery pass may hold for a moment)
                segment = self._db.execute("INSERT INTO segments (indexed) VALUES (0)").lastrowid
                fd = self._try_lock(segment)
        self._end = self._recover(segment, fd)
        self._segment, self._fd = segment, fd

    def _let_go(self) -> None:
        """Flush, give up our segment (closing the fd releases its lock) and close every file we read."""
        self.flush()
        if self._fd is not None:
            os.close(self._fd)
        self._segment = self._fd = None
        for fd in self._readers.values():
            os.close(fd)
        self._readers.clear()

    def _recover(self, segment: int, fd: int) -> int:
        """Index the records appended to a segment after its last flush (its writer was killed, or did not close)
        and cut off a record the kill left incomplete. Returns the segment's length. Caller holds the lock."""
        row = self._db.execute("SELECT indexed FROM segments WHERE id = ?", (segment,)).fetchone()
        if row is None:  # removed by a `cache clear` while we waited
            self._db.execute("INSERT INTO segments (id, indexed) VALUES (?, 0)", (segment,))
        offset = row[0] if row else 0
        size = os.fstat(fd).st_size
        if offset == size:
            return size
        entries = []
        with open(os.dup(fd), "rb") as f:
            f.seek(offset)
            while offset + HEADER.size <= size:
                key, length, crc = HEADER.unpack(f.read(HEADER.size))
                payload = f.read(length)
                if length == 0 or len(payload) != length or zlib.crc32(payload) != crc:
                    break
                entries.append((key, segment, offset, length))
                offset += HEADER.size + length
        if offset != size:
            os.ftruncate(fd, offset)
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany("INSERT OR IGNORE INTO entries VALUES (?, ?, ?, ?)", entries)
            self._db.execute("UPDATE segments SET indexed = ? WHERE id = ?", (offset, segment))
        return offset

    def _reader(self, segment: int) -> int:
        if segment not in self._readers:
            self._readers[segment] = os.open(self._segment_path(segment), os.O_RDONLY)
        return self._readers[segment]
