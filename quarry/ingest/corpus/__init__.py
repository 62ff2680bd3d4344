"""Corpus signals computed per document and chunk while a batch is processed: near-duplicate
signatures (minhash), personal data and secrets (pii), language, quality heuristics (quality).
Each is a plain function of a text; :mod:`.signals` puts them together for a record."""
