"""Corpus signals of a document and of its chunks: near-duplicate signatures (minhash) and their
clusters (clusters), boilerplate lines (boilerplate), personal data and secrets (pii), language,
quality heuristics (quality). Each is a plain function of a text or of stored signals;
:mod:`.signals` puts them together for a record. A batch computes them (quarry/ingest/process.py),
a commit recomputes clusters and flags from them (quarry/store/dedup.py, boilerplate.py), and the
query side reads them (quarry/search/collapse.py, export.py): they live below all three.
"""
