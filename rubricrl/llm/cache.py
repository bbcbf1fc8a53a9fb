"""A persistent, content-addressed cache of model responses, so that re-running any stage never pays twice.

The key is a hash of what determines an answer: model, messages, sampling parameters and the sample index
(the i-th of n samples is its own entry, so a sampled call is cached per sample instead of collapsing every
sample into one). The endpoint URL and the API key are not part of it: the same model behind another URL
answers the same call.

SQLite in WAL mode with one autocommitted row per answer: any number of processes may read and write at once,
and a process killed with SIGKILL loses at most the calls still in flight; everything it finished is on disk.
"""

import hashlib
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from rubricrl.home import rubricrl_home


def default_cache_path() -> Path:
    return rubricrl_home() / "cache" / "responses.sqlite"


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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: autocommit, each put is durable on its own. timeout: wait for other writers.
        self._db = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # in WAL mode still safe against a killed process
        # Rows are appended in rowid order and found through a compact index of 16-byte keys: random 64-character
        # keys as the primary key scatter every insert over the whole B-tree, which wrote ~4x more pages.
        self._db.execute("CREATE TABLE IF NOT EXISTS samples (id INTEGER PRIMARY KEY, key BLOB NOT NULL UNIQUE, "
                         "value TEXT NOT NULL, created REAL NOT NULL)")  # fmt: skip

    def get(self, key: str) -> dict[str, Any] | None:
        row = self._db.execute("SELECT value FROM samples WHERE key = ?", (_stored(key),)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, key: str, value: dict[str, Any]) -> dict[str, Any]:
        """Store `value` unless the key is already there, and return what is stored: the first writer wins, so
        every process and every rerun sees the same answer for a key."""
        self._db.execute(
            "INSERT OR IGNORE INTO samples (key, value, created) VALUES (?, ?, ?)",
            (_stored(key), json.dumps(value, ensure_ascii=False), time.time()),
        )
        return self.get(key)

    def put_many(self, items: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Store many in one transaction (pages are written once per batch, not once per answer) and return what
        is stored for each key (first writer wins, as with put)."""
        now = time.time()
        with self._db:  # BEGIN ... COMMIT
            self._db.execute("BEGIN IMMEDIATE")
            self._db.executemany("INSERT OR IGNORE INTO samples (key, value, created) VALUES (?, ?, ?)",
                                 [(_stored(k), json.dumps(v, ensure_ascii=False), now) for k, v in items.items()])  # fmt: skip
        return {key: self.get(key) for key in items}

    def delete(self, keys: list[str]) -> None:
        self._db.executemany("DELETE FROM samples WHERE key = ?", [(_stored(key),) for key in keys])

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM samples").fetchone()[0]

    def clear(self) -> int:
        """Delete every entry; returns how many there were."""
        removed = self._db.execute("DELETE FROM samples").rowcount
        self._db.execute("VACUUM")
        return removed

    def close(self) -> None:
        self._db.close()
