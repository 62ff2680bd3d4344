"""A persistent cache of LLM answers, so that unchanged input never costs a second call.

One SQLite file in the store directory (``llm-cache.sqlite``), in WAL mode, written one answer
at a time as answers arrive: a run killed half-way keeps every answer it paid for, and
``--full`` re-indexing or switching sectioners back and forth replays them for free.

The key is ``sha256(kind, model, prompt version, request)``; only the key, the model name,
the request kind and the answer are stored — never the endpoint's URL or API key.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path

CACHE_FILE = "llm-cache.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS answers (
    key     TEXT PRIMARY KEY,   -- sha256 of kind, model, prompt version and the request
    kind    TEXT NOT NULL,      -- sections, document, section_summary, chunk_context
    model   TEXT NOT NULL,
    answer  TEXT NOT NULL,      -- the model's message content, as returned
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS learned (
    key     TEXT PRIMARY KEY,   -- sha256 of what was learned about which endpoint and model
    value   TEXT NOT NULL       -- e.g. the response_format style the endpoint accepts
)
"""


def cache_key(kind: str, model: str, version: str | int, request: object) -> str:
    """The cache key of one request: a hash of everything that shapes the answer."""
    blob = json.dumps([kind, model, version, request], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _fact_key(what: tuple[str, ...]) -> str:
    return hashlib.sha256(json.dumps(list(what)).encode("utf-8")).hexdigest()


class LLMCache:
    """``get``/``put`` of answers by key; thread-safe; every ``put`` is committed at once."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._con = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30, isolation_level=None)
        self._con.execute("PRAGMA journal_mode=WAL")
        self._con.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: a crash loses nothing committed
        self._con.executescript(_SCHEMA)

    def get(self, key: str) -> str | None:
        with self._lock:
            row = self._con.execute("SELECT answer FROM answers WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def put(self, key: str, kind: str, model: str, answer: str) -> None:
        with self._lock:
            self._con.execute(
                "INSERT OR REPLACE INTO answers (key, kind, model, answer, created) VALUES (?, ?, ?, ?, ?)",
                (key, kind, model, answer, time.time()),
            )

    def learned(self, *what: str) -> str | None:
        """A fact learned about an endpoint in an earlier run (``what`` is hashed, never stored)."""
        with self._lock:
            row = self._con.execute("SELECT value FROM learned WHERE key = ?", (_fact_key(what),)).fetchone()
        return row[0] if row else None

    def learn(self, value: str, *what: str) -> None:
        with self._lock:
            self._con.execute("INSERT OR REPLACE INTO learned (key, value) VALUES (?, ?)", (_fact_key(what), value))

    def __len__(self) -> int:
        with self._lock:
            return self._con.execute("SELECT count(*) FROM answers").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._con.close()
