"""Load on ``quarry api`` against the same searches in-process, on the same cores.

Builds (once, cached under bench/results/stores/api-<size>/) a store of ``--size`` chunks the way
bench/query_latency.py does (real sentences, random 384-d vectors, the ``hash`` embedder for
queries), gives its documents principals (a quarter public, the rest one of four groups), and
creates a key reading as one group (no rate limit). Then, for each number of concurrent clients:

- HTTP: ``quarry api --workers W``, ``c`` clients each sending ``POST /v1/search`` (hybrid, k 10,
  as the key) back to back over a kept-alive connection for ``--seconds``; small asyncio clients
  (raw HTTP/1.1, up to 8 connections per client process, 4 processes) keep the load generator's
  own CPU low;
- in-process: the same queries through ``Index.search(principals=...)`` in W processes with
  ``c / W`` threads each (the same processes, cores and concurrency; no HTTP, no JSON), for as long.

Latency is per request (p50/p95/p99), throughput requests/s, errors any answer but 200.
Then ``--commit-seconds`` of 8 clients while ``quarry index`` commits new generations in a loop:
one file of a small tree is rewritten with a new version word before each run, and a share of
the queries asks for it; every answer must be 200 and, where it holds that file, hold exactly the
version of the generation it names (one whole generation per answer).

``--memory`` measures what a deployment holds: the resident and unique memory of each worker of
``quarry api`` serving this store (hash embedder) and a small store embedded with the default
model (onnx-int8 all-MiniLM-L6-v2), with 1 and 2 workers.

    python bench/api_load.py [--size 100000] [--clients 1,8,32] [--workers 2] [--seconds 20]
                             [--commit-seconds 150] [--memory] [--json]
    python bench/api_load.py --observability ROUNDS [--clients 8] ...   # metrics+tracing on vs off

Prints a table (stderr with --json) and writes bench/results/api_load.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import RESULTS, ROOT, log, machine, write_json

DIM = 384
GROUPS = ["group:team0", "group:team1", "group:team2", "group:team3"]
CALLER = ["group:team1"]  # the key reads as this, plus public
STORE_FORMAT = 1
ENV = {"QUARRY_EMBED_BACKEND": "hash", "QUARRY_EMBED_DIM": str(DIM), "LANCEDB_LOG": "error"}


# --- the store -------------------------------------------------------------------------------------


def ensure_store(size: int, sents, rebuild: bool) -> Path:
    """A cached store of ``size`` chunks whose documents carry principals."""
    import query_latency as ql

    folder = RESULTS / "stores" / f"api-{size}"
    marker = folder / "built.json"
    if not rebuild and marker.exists() and json.loads(marker.read_text()).get("format") == STORE_FORMAT:
        return folder / "store"
    log(f"building a {size}-chunk store in {folder} ...")
    info = ql.build_store(size, folder, sents)
    store = folder / "store"
    from quarry.core.settings import Settings  # noqa: F401 - settings come from ENV below
    from quarry.store.writer import StoreWriter

    writer = StoreWriter(store, ql.MODEL, DIM).open()
    try:
        ids = [d for (d,) in writer.con.execute("SELECT doc_id FROM documents ORDER BY doc_id").fetchall()]
        changed = writer.set_document_principals(
            {d: (["public"] if i % 4 == 0 else [GROUPS[i % len(GROUPS)]]) for i, d in enumerate(ids)}
        )
        import datetime as dt

        writer.commit(
            {
                "run_id": "bench-acl",
                "started": dt.datetime.now(),
                "status": "completed",
                "roots": ["/corpus"],
                "errors": [],
                "durations": {},
                "settings": {},
            },
            {},
        )
    finally:
        writer.close()
    marker.write_text(json.dumps({**info, "format": STORE_FORMAT, "principals_set": changed}, indent=2))
    return store


def make_bodies(queries: list[str], k: int = 10) -> list[bytes]:
    return [json.dumps({"query": q, "k": k, "mode": "hybrid"}).encode() for q in queries]


# --- HTTP ------------------------------------------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``quarry api`` in a subprocess."""

    def __init__(self, store, workers: int, log_path: Path, env: dict | None = None):
        self.port = _free_port()
        self.log_path = log_path
        cmd = [
            sys.executable,
            "-m",
            "quarry.cli.main",
            "api",
            "--db",
            str(store),
            "--port",
            str(self.port),
            "--workers",
            str(workers),
            "--log-level",
            "warning",
            "--no-mcp",
        ]
        self.fh = open(log_path, "w")
        self.proc = subprocess.Popen(
            cmd, stdout=self.fh, stderr=subprocess.STDOUT, cwd=ROOT, env={**os.environ, **ENV, **(env or {})}
        )
        import httpx

        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"quarry api did not start: {log_path.read_text()[-1500:]}")
            time.sleep(0.3)

    def pids(self) -> list[int]:
        """The processes that serve: the workers with ``--workers N > 1``, else the one process."""
        import psutil

        parent = psutil.Process(self.proc.pid)
        workers = [c for c in parent.children(recursive=True) if "resource_tracker" not in " ".join(c.cmdline())]
        return [c.pid for c in workers] or [parent.pid]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.fh.close()


def _answer(status: int, payload: bytes, live_path: str | None) -> tuple:
    """What the parent needs of one answer: (generation, versions of the live file) when checking
    generations, else nothing (parsing every answer would load the client)."""
    if live_path is None or status != 200:
        return (None, None, payload[:300].decode("utf-8", "replace") if status != 200 else None)
    import orjson

    body = orjson.loads(payload)
    if body["query"] != LIVE_QUERY:
        return (body["generation"], None, None)
    found = {w for r in body["results"] if r["path"] == live_path for w in re.findall(r"\bv\d+\b", r["text"])}
    return (body["generation"], sorted(found), None)


async def _client(
    port: int, token: str, bodies: list[bytes], start: int, deadline: float, out: list, live_path: str | None
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        f"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
        "Content-Type: application/json\r\n"
    ).encode()
    i = start
    try:
        while time.time() < deadline:
            body = bodies[i % len(bodies)]
            i += 1
            t = time.perf_counter()
            writer.write(head + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            try:
                await writer.drain()
                status_line = await reader.readline()
                status = int(status_line.split()[1])
                length = 0
                while True:
                    line = await reader.readline()
                    if line in (b"\r\n", b""):
                        break
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                payload = await reader.readexactly(length)
            except (OSError, ValueError, IndexError, asyncio.IncompleteReadError) as exc:
                out.append((time.perf_counter() - t, 0, None, None, repr(exc)))
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                continue
            out.append((time.perf_counter() - t, status, *_answer(status, payload, live_path)))
    finally:
        writer.close()


def _load_process(port, token, bodies, connections, offset, deadline, live_path, queue) -> None:
    out: list = []

    async def main():
        await asyncio.gather(
            *(_client(port, token, bodies, (offset + c) * 7919, deadline, out, live_path) for c in range(connections))
        )

    asyncio.run(main())
    queue.put(out)


def http_load(
    port: int, token: str, bodies: list[bytes], clients: int, seconds: float, live_path: str | None = None
) -> list:
    """``clients`` kept-alive connections sending back to back for ``seconds``, spread over up to 4
    client processes (8 connections each: one Python thread cannot feed 32 connections on a busy
    machine, and would be measured instead of the server). Returns [(latency s, status, generation,
    live versions, error)]."""
    procs = max(1, min(4, (clients + 7) // 8))
    per = [clients // procs + (1 if n < clients % procs else 0) for n in range(procs)]
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    deadline = time.time() + 1.0 + seconds  # the processes start first
    pool = [
        ctx.Process(target=_load_process, args=(port, token, bodies, per[n], sum(per[:n]), deadline, live_path, queue))
        for n in range(procs)
    ]
    for p in pool:
        p.start()
    out = []
    for _ in pool:
        out += queue.get()
    for p in pool:
        p.join()
    return out


# --- in-process --------------------------------------------------------------------------------------


def _inprocess_worker(store: str, queries: list[str], threads: int, seconds: float, start_at: float, queue) -> None:
    os.environ.update(ENV)
    import quarry
    from quarry.core.settings import Settings

    idx = quarry.open(store, Settings.from_env(embed_backend="hash", embed_dim=DIM))
    for q in queries[:30]:  # warm-up, as the server's
        idx.search(q, k=10, mode="hybrid", principals=CALLER)
    samples: list[float] = []
    guard = threading.Lock()

    def loop(offset: int):
        mine = []
        deadline = start_at + seconds
        i = offset
        while time.time() < deadline:
            q = queries[i % len(queries)]
            i += 1
            t = time.perf_counter()
            idx.search(q, k=10, mode="hybrid", principals=CALLER)
            mine.append(time.perf_counter() - t)
        with guard:
            samples.extend(mine)

    while time.time() < start_at:
        time.sleep(0.01)
    pool = [threading.Thread(target=loop, args=(n * 7919 + os.getpid(),)) for n in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    idx.close()
    queue.put(samples)


def inprocess_load(store: Path, queries: list[str], clients: int, workers: int, seconds: float) -> list[float]:
    procs = min(clients, workers)
    per = [clients // procs + (1 if n < clients % procs else 0) for n in range(procs)]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    start_at = time.time() + 8  # after every process has opened the index and warmed up
    pool = [
        ctx.Process(target=_inprocess_worker, args=(str(store), queries, per[n], seconds, start_at, queue))
        for n in range(procs)
    ]
    for p in pool:
        p.start()
    samples = []
    for _ in pool:
        samples += queue.get()
    for p in pool:
        p.join()
    return samples


# --- numbers -------------------------------------------------------------------------------------------


def summary(latencies: list[float], seconds: float, errors: int = 0) -> dict:
    ordered = sorted(latencies)
    if not ordered:
        return {"requests": 0, "errors": errors, "rps": 0.0, "p50_ms": None, "p95_ms": None, "p99_ms": None}

    def pct(p):
        return round(ordered[min(len(ordered) - 1, int(round(p * (len(ordered) - 1))))] * 1000, 2)

    return {
        "requests": len(ordered),
        "errors": errors,
        "rps": round(len(ordered) / seconds, 1),
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p95_ms": pct(0.95),
        "p99_ms": pct(0.99),
    }


# --- commits while serving -----------------------------------------------------------------------------


LIVE_QUERY = "zebraquill livepage marker"


def commit_loop(store: Path, tree: Path, stop: threading.Event, versions: dict, errors: list) -> None:
    """``quarry index`` the small tree again and again, a new version word in live.md before each run;
    records generation -> version after each commit."""
    n = 0
    while not stop.is_set():
        n += 1
        (tree / "live.md").write_text(f"# Live\n\nzebraquill livepage marker version v{n} of the live page.\n")
        proc = subprocess.run(
            [sys.executable, "-m", "quarry.cli.main", "index", str(tree), "--db", str(store)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, **ENV},
        )
        if proc.returncode != 0:
            errors.append(proc.stderr.strip()[-500:])
            return
        from quarry.store.pointer import read_pointer

        versions[read_pointer(store).generation] = f"v{n}"
        log(f"    commit {n}: generation {read_pointer(store).generation}")


def during_commits(store: Path, token: str, queries: list[str], workers: int, seconds: float, logs: Path) -> dict:
    tree = store.parent / "live-tree"  # one root, run after run, so no older copy of live.md stays in the store
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    for i in range(20):
        (tree / f"page{i}.md").write_text(f"# Page {i}\n\nA page of the small tree, number {i}, about okapis.\n")
    (tree / "live.md").write_text("# Live\n\nzebraquill livepage marker version v0 of the live page.\n")
    subprocess.run(
        [sys.executable, "-m", "quarry.cli.main", "index", str(tree), "--db", str(store)],
        check=True,
        capture_output=True,
        cwd=ROOT,
        env={**os.environ, **ENV},
    )
    from quarry.store.pointer import read_pointer

    versions = {read_pointer(store).generation: "v0"}
    server = Server(store, workers, logs / "api-commits.log")
    live = json.dumps({"query": LIVE_QUERY, "k": 3, "mode": "bm25"}).encode()
    bodies = []
    for i, body in enumerate(make_bodies(queries)):
        bodies.append(body)
        if i % 4 == 0:
            bodies.append(live)
    stop, loop_errors = threading.Event(), []
    looper = threading.Thread(target=commit_loop, args=(store, tree, stop, versions, loop_errors))
    looper.start()
    try:
        answers = http_load(server.port, token, bodies, 8, seconds, live_path=str(tree / "live.md"))
    finally:
        stop.set()
        looper.join()
        server.stop()
    failed = sum(1 for a in answers if a[1] != 200)
    generations, mixed, unknown, checked = set(), 0, 0, 0
    for _, status, generation, found, _ in answers:
        if status != 200:
            continue
        generations.add(generation)
        if found is None:
            continue
        checked += 1
        if len(found) != 1:
            mixed += 1
        elif generation in versions and found != [versions[generation]]:
            mixed += 1
        elif generation not in versions:
            unknown += 1
    return {
        **summary([a[0] for a in answers if a[1] == 200], seconds, failed),
        "clients": 8,
        "commits": len(versions) - 1,
        "generations_seen": sorted(generations),
        "live_answers_checked": checked,
        "answers_not_from_one_generation": mixed,
        "answers_of_unrecorded_generation": unknown,
        "indexer_errors": loop_errors,
    }


# --- memory ------------------------------------------------------------------------------------------


def worker_memory(server: Server) -> list[dict]:
    import psutil

    out = []
    for pid in server.pids():
        mem = psutil.Process(pid).memory_full_info()
        out.append(
            {
                "rss_mb": round(mem.rss / 2**20, 1),
                "uss_mb": round(mem.uss / 2**20, 1),
                "pss_mb": round(getattr(mem, "pss", 0) / 2**20, 1),
            }
        )
    return out


def warm(port: int, token: str | None, queries: list[str]) -> None:
    """Searches on fresh connections, so that every worker process (whichever accepts) serves some."""
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    for q in queries[:80]:
        httpx.post(f"http://127.0.0.1:{port}/v1/search", json={"query": q}, headers=headers, timeout=60)


def measure_memory(store: Path, token: str, queries: list[str], logs: Path) -> list[dict]:
    import httpx

    rows = []
    for workers in (1, 2):
        server = Server(store, workers, logs / f"api-mem-{workers}.log")
        try:
            warm(server.port, token, queries)
            rows.append(
                {"store": store.parent.name, "embedder": "hash", "workers": workers, "processes": worker_memory(server)}
            )
        finally:
            server.stop()
    # the default model: a small store embedded with onnx-int8 all-MiniLM-L6-v2
    small = Path(tempfile.mkdtemp(prefix="quarry-api-mem-"))
    env = {k: v for k, v in os.environ.items() if k not in ("QUARRY_EMBED_BACKEND", "QUARRY_EMBED_DIM")}
    subprocess.run(
        [sys.executable, "-m", "quarry.cli.main", "index", str(ROOT / "data" / "sample"), "--db", str(small / "db")],
        check=True,
        capture_output=True,
        cwd=ROOT,
        env=env,
    )
    for workers in (1, 2):
        saved = {k: os.environ.pop(k, None) for k in ("QUARRY_EMBED_BACKEND", "QUARRY_EMBED_DIM")}
        try:
            server = Server(
                small / "db",
                workers,
                logs / f"api-mem-model-{workers}.log",
                env={"QUARRY_EMBED_BACKEND": "onnx-int8", "QUARRY_EMBED_DIM": "0"},
            )
            try:
                for _ in range(40):  # the index opened in every worker, the model not loaded yet
                    httpx.get(f"http://127.0.0.1:{server.port}/v1/status", timeout=60)
                before = worker_memory(server)
                warm(server.port, None, queries)
                rows.append(
                    {
                        "store": "data/sample",
                        "embedder": "onnx-int8",
                        "workers": workers,
                        "processes": worker_memory(server),
                        "before_first_search": before,
                    }
                )
            finally:
                server.stop()
        finally:
            os.environ.update({k: v for k, v in saved.items() if v is not None})
    shutil.rmtree(small, ignore_errors=True)
    return rows


# --- main ----------------------------------------------------------------------------------------------


# metrics off; metrics on and a span per request made by OpenTelemetry's SDK, sent nowhere
OBSERVABILITY = {
    "off": {"QUARRY_API_METRICS": "0"},
    "on": {
        "QUARRY_API_METRICS": "1",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
        "OTEL_TRACES_EXPORTER": "none",
    },
}


def asgi_cost(store: Path, token: str, queries: list[str], requests: int = 400, stub_requests: int = 20000) -> dict:
    """What metrics and tracing cost per request, measured in this process without sockets: the
    observer around a stub app that answers at once (CPU microseconds per request: none, metrics off,
    metrics on, metrics and spans made by the SDK and sent nowhere), against the CPU of one
    ``POST /v1/search`` through the whole app (milliseconds)."""
    import asyncio

    from fastapi.testclient import TestClient

    from quarry.api.app import ApiConfig, create_app
    from quarry.api.observe import Observer
    from quarry.core import tracing

    class State:  # what the observer reads of a server's state on a 200
        store = None

    async def stub(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def drive(app, n):
        scope = {"type": "http", "method": "POST", "path": "/v1/search", "headers": [], "client": ("127.0.0.1", 1)}

        async def receive():
            return {"type": "http.request", "body": b'{"query": "x", "mode": "hybrid"}', "more_body": False}

        async def send(message):
            pass

        t = time.process_time()
        for _ in range(n):
            await app(scope, receive, send)
        return (time.process_time() - t) / n * 1e6

    tracing._state.clear()
    micro = {
        "stub": asyncio.run(drive(stub, stub_requests)),
        "metrics off": asyncio.run(drive(Observer(stub, State, metrics=False), stub_requests)),
        "metrics on": asyncio.run(drive(Observer(stub, State), stub_requests)),
    }
    os.environ.update({k: v for k, v in OBSERVABILITY["on"].items() if k.startswith("OTEL_")})
    try:
        micro["metrics and spans"] = asyncio.run(drive(Observer(stub, State), stub_requests))
    finally:
        for k in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_EXPORTER"):
            os.environ.pop(k, None)
        tracing._state.clear()
    headers = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(ApiConfig(db=str(store), rate_limit=0)).state.asgi) as client:
        for q in queries[:20]:
            client.post("/v1/search", json={"query": q}, headers=headers)
        t = time.process_time()
        for q in queries[:requests]:
            answer = client.post("/v1/search", json={"query": q}, headers=headers)
            assert answer.status_code == 200, answer.text[:300]
        search_ms = (time.process_time() - t) / min(requests, len(queries)) * 1000
    overhead = micro["metrics and spans"] - micro["metrics off"]
    return {
        "observer_us": {k: round(v, 1) for k, v in micro.items()},
        "search_cpu_ms": round(search_ms, 3),
        "overhead_share": round(overhead / (search_ms * 1000), 4),
    }


def observability(store: Path, token: str, queries: list[str], clients: int, args, logs: Path) -> None:
    """HTTP throughput with metrics and tracing off and on, alternating (off, on, off, on, …) so
    that both meet the same machine load; the totals per setting and their ratio."""
    rows = []
    for round_ in range(args.observability):
        for name, env in OBSERVABILITY.items():
            server = Server(store, args.workers, logs / f"api-{name}.log", env=env)
            try:
                http_load(server.port, token, make_bodies(queries), args.workers * 2, 3)  # warm every worker
                log(
                    f"HTTP, metrics and tracing {name}, {clients} clients, {args.seconds:.0f} s (round {round_ + 1}) ..."
                )
                answers = http_load(server.port, token, make_bodies(queries), clients, args.seconds)
            finally:
                server.stop()
            errors = sum(1 for a in answers if a[1] != 200)
            rows.append(
                {
                    "observability": name,
                    "round": round_ + 1,
                    "clients": clients,
                    "workers": args.workers,
                    "load": round(os.getloadavg()[0], 1),
                    **summary([a[0] for a in answers if a[1] == 200], args.seconds, errors),
                }
            )
            log(f"  {rows[-1]}")
    cost = asgi_cost(store, token, queries)
    log(f"  in one process, without sockets: {cost}")
    total = {name: sum(r["requests"] for r in rows if r["observability"] == name) for name in OBSERVABILITY}
    ratio = round(total["on"] / total["off"], 3) if total["off"] else None
    out = {
        "size": args.size,
        "workers": args.workers,
        "seconds": args.seconds,
        "clients": clients,
        "rows": rows,
        "requests": total,
        "on_over_off": ratio,
        "asgi_cost": cost,
        "machine": machine(),
    }
    write_json(RESULTS / "api_load_observability.json", out)
    lines = [f"{'metrics+tracing':<15} {'round':>5} {'req/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'errors':>6} {'load':>5}"]
    for r in rows:
        lines.append(
            f"{r['observability']:<15} {r['round']:>5} {r['rps']:>8} {r['p50_ms']:>8} {r['p95_ms']:>8} "
            f"{r['errors']:>6} {r['load']:>5}"
        )
    lines.append(f"on/off throughput {ratio} (goal >= 0.95)")
    lines.append(
        "CPU per request around a stub app: "
        + ", ".join(f"{k} {v} us" for k, v in cost["observer_us"].items())
        + f"; one search {cost['search_cpu_ms']} ms: metrics and spans add {100 * cost['overhead_share']:.2f}%"
    )
    print("\n".join(lines), file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=100_000, help="chunks in the store")
    ap.add_argument("--clients", default="1,8,32", help="concurrent clients, comma-separated")
    ap.add_argument("--workers", type=int, default=2, help="server processes (and in-process processes)")
    ap.add_argument("--seconds", type=float, default=20, help="length of each measurement")
    ap.add_argument("--commit-seconds", type=float, default=150, help="load while quarry index commits (0: skip)")
    ap.add_argument("--queries", type=int, default=400)
    ap.add_argument("--memory", action="store_true", help="also measure worker memory")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the cached store")
    ap.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    ap.add_argument(
        "--observability",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="only compare HTTP throughput with metrics and tracing (no exporter) on and off, "
        "ROUNDS alternations at the first --clients count",
    )
    args = ap.parse_args()
    os.environ.update(ENV)
    import numpy as np
    import query_latency as ql

    sents = ql.sentences()
    store = ensure_store(args.size, sents, args.rebuild)
    queries = ql.make_queries(args.queries, sents, np.random.default_rng(11))
    logs = RESULTS / "api_load_logs"
    logs.mkdir(parents=True, exist_ok=True)
    from quarry.api.keys import KeyRing, key_store

    ring = KeyRing(key_store(store))
    bench_keys = [k for k in ring.list() if k.name.startswith("bench-") and k.status() == "active"]
    for k in bench_keys:
        ring.revoke(k.id)
    token = ring.create(f"bench-{int(time.time())}", CALLER, rate_limit=0)[1]

    rows = []
    clients = [int(c) for c in args.clients.split(",") if c.strip()]
    if args.observability:
        return observability(store, token, queries, clients[0], args, logs)
    if clients:
        server = Server(store, args.workers, logs / "api.log")
        try:
            http_load(server.port, token, make_bodies(queries), args.workers * 2, 5)  # warm every worker
            for c in clients:  # HTTP and in-process back to back, so that both meet the same machine load
                log(f"HTTP, {c} clients, {args.seconds:.0f} s ...")
                answers = http_load(server.port, token, make_bodies(queries), c, args.seconds)
                errors = sum(1 for a in answers if a[1] != 200)
                if errors:
                    log(f"  first error: {next(a for a in answers if a[1] != 200)}")
                rows.append(
                    {
                        "path": "http",
                        "clients": c,
                        "workers": args.workers,
                        "load": round(os.getloadavg()[0], 1),
                        **summary([a[0] for a in answers if a[1] == 200], args.seconds, errors),
                    }
                )
                log(f"  {rows[-1]}")
                log(f"in-process, {c} callers in {min(c, args.workers)} processes, {args.seconds:.0f} s ...")
                samples = inprocess_load(store, queries, c, args.workers, args.seconds)
                rows.append(
                    {
                        "path": "in-process",
                        "clients": c,
                        "workers": min(c, args.workers),
                        "load": round(os.getloadavg()[0], 1),
                        **summary(samples, args.seconds),
                    }
                )
                log(f"  {rows[-1]}")
        finally:
            server.stop()
    goals = []
    for c in clients:
        http = next(r for r in rows if r["path"] == "http" and r["clients"] == c)
        local = next(r for r in rows if r["path"] == "in-process" and r["clients"] == c)
        ratio = http["rps"] / local["rps"] if local["rps"] else None
        goals.append(
            {
                "clients": c,
                "throughput_ratio": round(ratio, 3) if ratio else None,
                "p95_http_ms": http["p95_ms"],
                "p95_inprocess_ms": local["p95_ms"],
                "p95_bound_ms": round(2 * local["p95_ms"] + 5, 2) if local["p95_ms"] else None,
                "errors": http["errors"],
            }
        )
    commits = None
    if args.commit_seconds > 0:
        log(f"HTTP, 8 clients, {args.commit_seconds:.0f} s while quarry index commits in a loop ...")
        commits = during_commits(store, token, queries, args.workers, args.commit_seconds, logs)
        log(f"  {commits}")
    memory = measure_memory(store, token, queries, logs) if args.memory else None
    out = {
        "size": args.size,
        "workers": args.workers,
        "seconds": args.seconds,
        "caller": CALLER,
        "rows": rows,
        "goals": goals,
        "during_commits": commits,
        "memory": memory,
        "machine": machine(),
    }
    write_json(RESULTS / "api_load.json", out)
    lines = [
        f"{'path':<11} {'clients':>7} {'procs':>5} {'req/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} "
        f"{'errors':>6} {'load':>5}"
    ]
    for r in rows:
        lines.append(
            f"{r['path']:<11} {r['clients']:>7} {r['workers']:>5} {r['rps']:>8} {r['p50_ms']:>8} "
            f"{r['p95_ms']:>8} {r['p99_ms']:>8} {r['errors']:>6} {r['load']:>5}"
        )
    lines.append("")
    for g in goals:
        lines.append(
            f"{g['clients']:>3} clients: HTTP/in-process throughput {g['throughput_ratio']} (goal >= 0.7); "
            f"p95 {g['p95_http_ms']} ms vs bound {g['p95_bound_ms']} ms (2x in-process + 5)"
        )
    if commits:
        lines.append(
            f"during commits: {commits['requests']} requests, {commits['errors']} failed, "
            f"{commits['commits']} commits, generations {commits['generations_seen']}, "
            f"{commits['answers_not_from_one_generation']} of {commits['live_answers_checked']} checked "
            f"answers not from one generation; p95 {commits['p95_ms']} ms"
        )
    for m in memory or []:
        lines.append(
            f"memory {m['store']} {m['embedder']} x{m['workers']}: "
            + ", ".join(f"rss {p['rss_mb']} MB, pss {p['pss_mb']} MB, uss {p['uss_mb']} MB" for p in m["processes"])
            + (
                "; before the first search: " + ", ".join(f"uss {p['uss_mb']} MB" for p in m["before_first_search"])
                if m.get("before_first_search")
                else ""
            )
        )
    print("\n".join(lines), file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
