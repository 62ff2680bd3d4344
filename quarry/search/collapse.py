"""Search results with duplicates collapsed: one hit per passage, its copies listed with it.

Two hits are the same passage when their chunks' normalised texts are equal (``chunks.norm_hash``)
or when their documents are in one duplicate cluster (``documents.dup_cluster``, kept by each
commit: quarry/store/dedup.py) and the chunks' own MinHash similarity reaches the store's
threshold. The best-ranked hit stands for the passage; ``copies`` lists the others — the hits
folded into it and every other chunk with the same normalised text that the search's filter keeps
(the permission check included: a copy the caller may not read is neither listed nor counted).
A near copy that is not itself among the candidates is not listed. A passage in thousands of
files (a licence header, a footer) lists at most :data:`COPIES_LIMIT` copies, the SQL included;
``copies_total`` counts them all.

What can fold at all is read once per committed generation (:func:`candidates`: the chunks whose
passage another chunk holds, and those of clustered documents), so a search whose hits are all
unique reads nothing from the catalog: at a million chunks, looking every hit up cost a search
about 115 ms of catalog scans.
"""

from __future__ import annotations

from quarry.core.sqlfiles import load_sql
from quarry.retrieval.corpus import minhash
from quarry.search.filters import with_filter
from quarry.search.windows import id_lines

__all__ = ["COPIES_LIMIT", "POOL_FACTOR", "candidates", "collapse"]

POOL_FACTOR = 3  # a collapsing search ranks this many times k, so that k distinct passages remain
COPIES_LIMIT = 20  # most copies a hit lists (``copies_total`` counts every readable one)


def candidates(con) -> dict[str, tuple[str | None, str | None]]:
    """``chunk_id -> (norm_hash, dup_cluster)`` of every chunk a search can fold (see the module
    docstring); a chunk not in it has a passage no other chunk holds and no cluster."""
    return {
        chunk_id: (norm, cluster) for chunk_id, norm, cluster in con.execute(load_sql("collapse_candidates")).fetchall()
    }


def collapse(con, results: list, filters=None, threshold: float = 0.8, keys: dict | None = None) -> list:
    """``results`` (ranked :class:`~quarry.search.results.SearchResult`) with each passage once,
    re-ranked from 1, every kept hit's ``copies`` (at most :data:`COPIES_LIMIT`) and ``copies_total`` filled.
    ``keys``: :func:`candidates` of the catalog, when the caller keeps them (else the hits' own are read)."""
    if not results:
        return results
    if keys is None:
        rows = con.execute(load_sql("collapse_keys"), [id_lines([r.chunk_id for r in results])]).fetchall()
        keys = {chunk_id: (norm, cluster) for chunk_id, norm, cluster in rows}
    kept: list = []
    hashes: list[set[str]] = []
    folded: list[list[str]] = []  # chunk ids folded into each kept hit
    signatures: dict[str, object] = {}

    def signature(r):
        if r.chunk_id not in signatures:
            signatures[r.chunk_id] = minhash.signature(r.text)
        return signatures[r.chunk_id]

    for r in results:
        norm, cluster = keys.get(r.chunk_id, (None, None))
        home = None
        for i, rep in enumerate(kept):
            rep_norm, rep_cluster = keys.get(rep.chunk_id, (None, None))
            if norm is not None and norm in hashes[i]:
                home = i
            elif cluster is not None and cluster == rep_cluster and rep.doc_id != r.doc_id:
                a, b = signature(r), signature(rep)
                if a is not None and b is not None and minhash.similarity(a, b) >= threshold:
                    home = i
            if home is not None:
                break
        if home is None:
            r.copies = []
            kept.append(r)
            hashes.append({norm} if norm else set())
            folded.append([])
            continue
        rep = kept[home]
        folded[home].append(r.chunk_id)
        if len(rep.copies) < COPIES_LIMIT:
            rep.copies.append({"chunk_id": r.chunk_id, "doc_id": r.doc_id, "path": r.path})
        if norm:
            hashes[home].add(norm)
    counts = _add_exact_copies(con, kept, hashes, filters, len(results))
    for r, hs, ids in zip(kept, hashes, folded):
        # every readable chunk of the hit's hashes (itself and the folded hits with a hash among
        # them), plus the hits folded in by MinHash alone, less the hit itself
        outside = sum(1 for c in ids if keys.get(c, (None, None))[0] not in hs)
        inside = sum(counts.get(h, 0) for h in hs)
        r.copies_total = max(len(r.copies), inside + outside - (1 if keys.get(r.chunk_id, (None,))[0] in hs else 0))
    for rank, r in enumerate(kept, start=1):
        r.rank = rank
    return kept


def _add_exact_copies(con, kept: list, hashes: list[set[str]], filters, pool: int) -> dict[str, int]:
    """Other readable chunks with the same normalised text as a kept hit, listed as copies up to
    :data:`COPIES_LIMIT`; returns the number of readable chunks per hash (all of them)."""
    wanted = sorted({h for hs in hashes for h in hs})
    if not wanted:
        return {}
    sql, params = with_filter(load_sql("collapse_copies"), filters)
    by_hash: dict[str, list[tuple]] = {}
    counts: dict[str, int] = {}
    # per hash, enough rows to fill the list whatever the pool's hits already listed
    for chunk_id, doc_id, path, norm, total in con.execute(
        sql, [id_lines(wanted), *params, COPIES_LIMIT + pool]
    ).fetchall():
        by_hash.setdefault(norm, []).append((chunk_id, doc_id, path))
        counts[norm] = total
    for r, hs in zip(kept, hashes):
        listed = {r.chunk_id, *(c["chunk_id"] for c in r.copies)}
        for h in sorted(hs):
            for chunk_id, doc_id, path in by_hash.get(h, ()):
                if len(r.copies) >= COPIES_LIMIT:
                    break
                if chunk_id not in listed:
                    listed.add(chunk_id)
                    r.copies.append({"chunk_id": chunk_id, "doc_id": doc_id, "path": path})
    return counts
