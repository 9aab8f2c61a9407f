"""A request cache keyed by content fingerprint, so a resumed run does not pay twice.

A chunk is the unit of resume: a run killed halfway through a chunk regenerates the whole
chunk. Paid API calls of that chunk are answered from here instead. The key is a hash of the
full request body (model, messages, sampling parameters) plus the episode's turn key (trajectory
id + turn), so the same prompt in another round or sample is still a new request. Only
successful responses are stored, as the raw body, and are parsed by the same code as a live one.

SQLite in WAL mode: several worker processes on one host can share the file. On a multi-node
cluster give each node its own directory (or accept per-node misses): SQLite locking is not
reliable on network filesystems.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from pathlib import Path
from typing import Any

import orjson


def fingerprint(body: dict[str, Any], key: str) -> str:
    """Stable hash of a request body and its episode turn key."""
    payload = orjson.dumps(body, option=orjson.OPT_SORT_KEYS) + b"\x00" + key.encode()
    return hashlib.blake2b(payload, digest_size=20).hexdigest()


class RequestCache:
    """Response bodies by fingerprint (SQLite file at `path`)."""

    def __init__(self, path: str | Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.path = str(path)
        self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None,
                                   check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable on app crash
        self._db.execute("CREATE TABLE IF NOT EXISTS responses "
                         "(key TEXT PRIMARY KEY, body BLOB NOT NULL, created REAL NOT NULL)")
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> bytes | None:
        row = self._db.execute("SELECT body FROM responses WHERE key = ?", (key,)).fetchone()
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        return bytes(row[0])

    def put(self, key: str, body: bytes) -> None:
        self._db.execute("INSERT OR REPLACE INTO responses (key, body, created) VALUES (?, ?, ?)",
                         (key, body, time.time()))

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def close(self) -> None:
        self._db.close()
