"""A reader of a store on object storage: first-query and warm latency, against a local store.

Starts moto's S3 server on 127.0.0.1 (the project's venv), indexes TREE into ``s3://…/store`` and
into a local folder with the same settings, then times, for each store:

- ``cold process``: wall time of ``quarry search`` in a fresh process with an empty store cache
  (for s3: read CURRENT, download the generation's catalog and index files, open, search);
- ``cached process``: the same command again (cache hit: one GET of CURRENT, no download);
- ``open``, ``open + first query``: in one process, ``quarry.open(url)`` and its snapshot (on s3:
  read CURRENT, download, open), then the first ``search`` (loads the model, embeds the query);
- ``warm query``: later searches on the same handle (p50 / p95; each reads CURRENT once on s3;
  ``s3, check 1 s`` is the same store read with ``QUARRY_REMOTE_CHECK_SECONDS=1``).

Query embeddings are cached by the handle after the first query, so warm numbers are search plus
the pointer check. Local moto answers in about a millisecond; add a real store's round trip
(about 10-30 ms to S3 in the same region) per GET.

    python bench/remote_reader.py TREE [--queries 50] [--embed-backend onnx-int8]

Prints a table and writes bench/results/remote_reader.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from common import ROOT

QUERIES = [
    "expense policy for travel",
    "how do I request time off",
    "security incident response",
    "onboarding checklist for new hires",
    "performance review cycle",
    "who approves a purchase",
]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(args, env, check=True):
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "quarry.cli", *args], env=env, capture_output=True, text=True)
    if check and done.returncode:
        sys.exit(f"quarry {' '.join(args[:1])} failed: {done.stderr.strip().splitlines()[-1:]}")
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tree", type=Path)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--embed-backend", default=os.environ.get("QUARRY_EMBED_BACKEND", "onnx-int8"))
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="quarry-remote-bench-"))
    port = _port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(endpoint, timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/bench", method="PUT")).close()
        env = {
            **os.environ,
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
            "AWS_EC2_METADATA_DISABLED": "true",
            "QUARRY_EMBED_BACKEND": args.embed_backend,
            "QUARRY_STORE_CACHE": str(work / "cache-writer"),
        }
        os.environ.update({k: v for k, v in env.items() if k.startswith(("AWS_", "QUARRY_"))})
        stores = {"s3": "s3://bench/store", "s3, check 1 s": "s3://bench/store", "local": str(work / "local")}
        for db in set(stores.values()):
            _run(["index", str(args.tree), "--db", db], env)
        results = []
        for n, (name, db) in enumerate(stores.items()):
            check = "1" if "check 1 s" in name else "0"
            os.environ["QUARRY_REMOTE_CHECK_SECONDS"] = check
            reader = {**env, "QUARRY_STORE_CACHE": str(work / f"cache-{n}-cli"), "QUARRY_REMOTE_CHECK_SECONDS": check}
            cold = _run(["search", QUERIES[0], "--db", db, "--json"], reader)
            cached = _run(["search", QUERIES[0], "--db", db, "--json"], reader)

            os.environ["QUARRY_STORE_CACHE"] = str(work / f"cache-{n}-api")
            import quarry

            t0 = time.perf_counter()
            idx = quarry.open(db)
            snap = idx.snapshot  # s3: read CURRENT, download the generation, open it
            opened = time.perf_counter() - t0
            idx.search(QUERIES[0], k=10)  # loads the embedding model and embeds the query
            first = time.perf_counter() - t0
            del snap
            for q in QUERIES:  # embeddings cached: the warm loop times search + the pointer check
                idx.search(q, k=10)
            times = []
            for i in range(args.queries):
                t0 = time.perf_counter()
                idx.search(QUERIES[i % len(QUERIES)], k=10)
                times.append(time.perf_counter() - t0)
            chunks = idx.status()["chunks"]
            idx.close()
            times.sort()
            results.append(
                {
                    "store": name,
                    "chunks": chunks,
                    "cold_process_s": round(cold, 3),
                    "cached_process_s": round(cached, 3),
                    "open_ms": round(opened * 1000, 1),
                    "open_first_query_ms": round(first * 1000, 1),
                    "warm_p50_ms": round(statistics.median(times) * 1000, 2),
                    "warm_p95_ms": round(times[int(0.95 * (len(times) - 1))] * 1000, 2),
                }
            )
        cache = work / "cache-0-api"
        size = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file())
        print(
            f"{'store':<14} {'chunks':>6} {'cold process':>13} {'cached process':>15} {'open':>10} "
            f"{'open+1st query':>15} {'warm p50':>9} {'warm p95':>9}"
        )
        for r in results:
            print(
                f"{r['store']:<14} {r['chunks']:>6} {r['cold_process_s']:>11.2f} s {r['cached_process_s']:>13.2f} s "
                f"{r['open_ms']:>7.1f} ms {r['open_first_query_ms']:>12.1f} ms {r['warm_p50_ms']:>6.2f} ms "
                f"{r['warm_p95_ms']:>6.2f} ms"
            )
        print(f"reader cache for the s3 store: {size / 1e6:.1f} MB (one generation)")
        out = ROOT / "bench" / "results" / "remote_reader.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(
            json.dumps(
                {"tree": str(args.tree), "embed_backend": args.embed_backend, "results": results, "cache_bytes": size},
                indent=2,
            )
        )
    finally:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
