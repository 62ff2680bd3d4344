"""Helpers for storage fault tests: what a store holds, and a small filesystem the test controls."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

import quarry


def contents(db) -> tuple:
    """Everything a user can observe of an index, independent of ids, timestamps and the root."""
    with quarry.open(db) as idx:
        con = idx.snapshot.con
        docs = sorted(con.execute("SELECT rel_path, sha256, title, n_chunks FROM documents").fetchall())
        chunks = sorted(
            con.execute(
                "SELECT d.rel_path, c.chunk_index, c.header, c.text, c.text_hash FROM chunks c JOIN documents d "
                "USING (doc_id)"
            ).fetchall()
        )
        table = idx.snapshot.table
        lance = table.to_arrow() if table is not None else None
        vectors = (
            sorted(zip(lance.column("chunk_id").to_pylist(), lance.column("text_hash").to_pylist()))
            if lance is not None
            else []
        )
        by_id = dict(
            con.execute(
                "SELECT chunk_id, d.rel_path || ':' || c.chunk_index FROM chunks c JOIN documents d USING (doc_id)"
            ).fetchall()
        )
        vectors = sorted((by_id.get(cid, "?"), h) for cid, h in vectors)
        # Every chunk with its rounded score: the order of tied scores depends on document ids,
        # which differ between stores built from different roots.
        # (Hybrid scores are rank-based, so they too depend on the order of ties.)
        hits = sorted(
            (mode, r.path.rsplit("/", 1)[-1], r.text, round(r.score, 4))
            for mode in ("bm25", "vector")
            for r in idx.search("deploy rollback review", k=1000, mode=mode).results
        )
    return docs, chunks, vectors, hits


def can_mount() -> bool:
    """Whether this process may mount a tmpfs (root, outside a locked-down container)."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    probe = Path("/tmp") / f"quarry-mount-probe-{os.getpid()}"
    probe.mkdir(exist_ok=True)
    try:
        ok = (
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(probe)], capture_output=True
            ).returncode
            == 0
        )
        if ok:
            subprocess.run(["umount", str(probe)], capture_output=True)
        return ok
    finally:
        probe.rmdir()


@contextlib.contextmanager
def tmpfs(path: Path, size: str = "256m"):
    """A tmpfs of ``size`` mounted at ``path`` for the block."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def resize(path: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], check=True)


def can_chattr(tmp: Path) -> bool:
    d = tmp / "chattr-probe"
    d.mkdir(exist_ok=True)
    ok = subprocess.run(["chattr", "+i", str(d)], capture_output=True).returncode == 0
    if ok:
        subprocess.run(["chattr", "-i", str(d)], capture_output=True)
    return ok


def immutable(path: Path, on: bool) -> None:
    """Make every file and folder under ``path`` unwritable, even for root (``chattr -R +i``)."""
    subprocess.run(["chattr", "-R", "+i" if on else "-i", str(path)], check=True, capture_output=True)
