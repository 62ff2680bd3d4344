"""The web pages of ``quarry api`` on a 100K-chunk store: time to first byte, full load and weight.

Uses the store of bench/api_load.py (built once and cached under bench/results/stores/api-<size>/:
real sentences, random 384-d vectors, the ``hash`` embedder for queries, documents with principals)
and adds 100 index runs with stage durations, failures and unsupported files to its committed
catalog (written straight into that cached catalog: a bench store, never a user's), so the runs
page has a full chart and table. Then, against ``quarry api`` (one worker) on this machine:

- **TTFB** and **HTML**: each page requested ``--repeat`` times over HTTP (httpx, kept-alive; each
  search with another query): the time to the first byte of the answer and to its last, median
  and p95;
- **load** in Debian's chromium (headless, through chromium-driver): the page opened with an
  empty cache (``cold``: HTML, CSS, script and icon transferred) and again ``--repeat`` times with
  the static files cached (``warm``), from the navigation's start to its ``load`` event, median;
  **transferred**: the bytes the cold load moved over the wire (the Navigation and Resource Timing
  ``transferSize`` of the page and everything it loaded). Skipped, saying so, without chromium.

Searches run as a key reading one group of four (plus public), as bench/api_load.py's do; the
runs pages need the admin key. Goals: every page at most 200 KB transferred; the search page
loaded in at most 300 ms.

    python bench/web.py [--size 100000] [--repeat 15] [--json]

Prints a table (stderr with --json) and writes bench/results/web.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path

from common import RESULTS, log, machine, write_json

RUNS = 100
GOAL_BYTES = 200_000
GOAL_SEARCH_MS = 300
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def add_runs(store: Path, n: int = RUNS) -> None:
    """``n`` timed runs in the committed catalog (once): a run a day, some partial with failures."""
    import duckdb

    from quarry.core.models import STAGES
    from quarry.store.pointer import read_pointer
    from quarry.store.writer import insert_run

    pointer = read_pointer(store)
    con = duckdb.connect(str(store / pointer.catalog))
    try:
        have = con.execute("SELECT count(*) FROM runs WHERE run_id LIKE 'bench-web-%'").fetchone()[0]
        if have >= n:
            return
        rng = random.Random(7)
        start = dt.datetime(2026, 1, 1, 2, 0)
        for i in range(have, n):
            scale = 1 + i / n
            durations = {}
            for stage in STAGES:
                seconds = (
                    {"parse": 40, "embed": 90, "load": 12, "commit": 8}.get(stage, 0.5) * scale * rng.uniform(0.7, 1.3)
                )
                durations[stage] = {
                    "seconds": round(seconds, 3),
                    "busy_seconds": round(seconds * 1.6, 3),
                    "rows": 1000 + i,
                    "rows_per_s": round((1000 + i) / seconds, 1),
                }
            durations["total"] = {
                "seconds": round(sum(v["seconds"] for v in durations.values()) * 0.7, 3),
                "busy_seconds": None,
                "rows": None,
                "rows_per_s": None,
            }
            failed = [
                {"path": f"/corpus/team{j}/broken{i}-{j}.pdf", "error": "not valid PDF: EOF marker not found"}
                for j in range(i % 7 == 0 and 3 or 0)
            ]
            unsupported = [{"path": f"/corpus/team1/video{i}.mp4", "reason": "media"}] if i % 5 == 0 else []
            started = start + dt.timedelta(days=i)
            insert_run(
                con,
                {
                    "run_id": f"bench-web-{i:03d}",
                    "started": started,
                    "finished": started + dt.timedelta(seconds=durations["total"]["seconds"]),
                    "status": "partial" if failed else "completed",
                    "roots": ["/corpus"],
                    "added": 20 + i,
                    "updated": 40,
                    "deleted": 2,
                    "skipped": 20_000,
                    "failed": len(failed),
                    "unsupported": len(unsupported),
                    "unsupported_files": unsupported,
                    "chunks": 1000 + i,
                    "embedded_chunks": 900,
                    "reused_vectors": 100 + i,
                    "model_calls": 30,
                    "errors": failed,
                    "durations": durations,
                    "settings": {"chunk_size": 800},
                    "runner": "threads",
                },
            )
        con.execute("CHECKPOINT")
    finally:
        con.close()


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return round(values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))], 1)


def pages(store: Path, queries: list[str]) -> list[dict]:
    """The pages measured: name, URL (a function of the repetition, so searches vary), key."""
    from api_load import CALLER

    import quarry

    with quarry.open(store) as idx:
        hit = idx.search(queries[0], k=1, principals=CALLER).results[0]
        run_id = next(r["run_id"] for r in idx.runs(5) if r["run_id"].startswith("bench-web-"))
    return [
        {"page": "sign-in", "url": lambda i: "/login", "who": None},
        {"page": "search (form)", "url": lambda i: "/", "who": "reader"},
        {"page": "search", "url": lambda i: f"/?q={queries[i % len(queries)]}", "who": "reader"},
        {
            "page": "search, explain + window",
            "url": lambda i: f"/?q={queries[-1 - i % len(queries)]}&explain=1&window=1,1",
            "who": "reader",
        },
        {
            "page": "results fragment",
            "url": lambda i: f"/fragments/results?q={queries[(i + 7) % len(queries)]}",
            "who": "reader",
            "fragment": True,
        },
        {
            "page": "document",
            "url": lambda i: f"/documents/{hit.doc_id}?chunk={hit.chunk_id}&q=x#c-{hit.chunk_index}",
            "who": "reader",
        },
        {"page": f"runs ({RUNS + 1})", "url": lambda i: "/runs", "who": "admin"},
        {"page": "run", "url": lambda i: f"/runs/{run_id}", "who": "admin"},
        {"page": "status", "url": lambda i: "/status", "who": "reader"},
    ]


def http_times(base: str, tokens: dict, page: dict, repeat: int) -> dict:
    import httpx

    first, whole, size = [], [], 0
    cookies = {"quarry_key": tokens[page["who"]]} if page["who"] else {}
    with httpx.Client(base_url=base, cookies=cookies, timeout=60) as http:
        http.get(page["url"](repeat)).raise_for_status()  # warm the connection and the page's caches
        for i in range(repeat):
            t = time.perf_counter()
            with http.stream("GET", page["url"](i)) as r:
                r.raise_for_status()
                chunks = r.iter_raw()
                body = next(chunks, b"")
                first.append((time.perf_counter() - t) * 1000)
                body += b"".join(chunks)
            whole.append((time.perf_counter() - t) * 1000)
            size = len(body)
    return {
        "ttfb_p50_ms": pct(first, 50),
        "ttfb_p95_ms": pct(first, 95),
        "html_p50_ms": pct(whole, 50),
        "html_p95_ms": pct(whole, 95),
        "html_bytes": size,
    }


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,900",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


TIMING = """
const nav = performance.getEntriesByType('navigation')[0];
const res = performance.getEntriesByType('resource');
return {ttfb: nav.responseStart - nav.startTime, load: nav.loadEventEnd - nav.startTime,
        transferred: nav.transferSize + res.reduce((s, r) => s + r.transferSize, 0),
        decoded: nav.decodedBodySize + res.reduce((s, r) => s + r.decodedBodySize, 0),
        resources: res.length, foreign: res.filter(r => !r.name.startsWith(location.origin)).length};
"""


def browser_times(driver, base: str, tokens: dict, page: dict, repeat: int) -> dict:
    driver.delete_all_cookies()
    if page["who"]:
        driver.add_cookie({"name": "quarry_key", "value": tokens[page["who"]], "path": "/", "httpOnly": True})

    def load(i: int) -> dict:
        driver.get("about:blank")
        driver.get(base + page["url"](i))
        while driver.execute_script("return document.readyState") != "complete":
            time.sleep(0.005)
        time.sleep(0.02)  # loadEventEnd is set just after readyState turns complete
        return driver.execute_script(TIMING)

    driver.execute_cdp_cmd("Network.clearBrowserCache", {})
    cold = load(repeat)
    warm = [load(i) for i in range(repeat)]
    return {
        "cold_load_ms": round(cold["load"], 1),
        "cold_ttfb_ms": round(cold["ttfb"], 1),
        "transferred_bytes": cold["transferred"],
        "decoded_bytes": cold["decoded"],
        "resources": cold["resources"],
        "foreign_resources": cold["foreign"],
        "warm_load_p50_ms": pct([w["load"] for w in warm], 50),
        "warm_load_p95_ms": pct([w["load"] for w in warm], 95),
        "warm_ttfb_p50_ms": pct([w["ttfb"] for w in warm], 50),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=100_000, help="chunks in the store")
    ap.add_argument("--repeat", type=int, default=15, help="requests (and warm loads) per page")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the cached store")
    ap.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    args = ap.parse_args()
    import api_load
    import numpy as np
    import query_latency as ql

    os.environ.update(api_load.ENV)
    sents = ql.sentences()
    store = api_load.ensure_store(args.size, sents, args.rebuild)
    add_runs(store)
    queries = [q.replace("&", " ").replace("#", " ") for q in ql.make_queries(60, sents, np.random.default_rng(5))]
    from quarry.api.keys import KeyRing, key_store

    ring = KeyRing(key_store(store))
    for key in ring.list():
        if key.name.startswith("bench-web-") and key.status() == "active":
            ring.revoke(key.id)
    stamp = int(time.time())
    tokens = {
        "reader": ring.create(f"bench-web-reader-{stamp}", api_load.CALLER, rate_limit=0)[1],
        "admin": ring.create(f"bench-web-admin-{stamp}", admin=True, rate_limit=0)[1],
    }
    measured = pages(store, queries)
    logs = RESULTS / "web_logs"
    logs.mkdir(parents=True, exist_ok=True)
    have_browser = Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()
    if not have_browser:
        log(f"{CHROMIUM} or {CHROMEDRIVER} missing (`make browser`): load times and weights are left out")
    server = api_load.Server(store, 1, logs / "api.log")
    rows = []
    try:
        driver = browser() if have_browser else None
        try:
            for page in measured:
                log(f"{page['page']} ...")
                row = {"page": page["page"], **http_times(f"http://127.0.0.1:{server.port}", tokens, page, args.repeat)}
                if driver is not None and not page.get("fragment"):
                    row.update(browser_times(driver, f"http://127.0.0.1:{server.port}", tokens, page, args.repeat))
                rows.append(row)
                log(f"  {row}")
        finally:
            if driver is not None:
                driver.quit()
    finally:
        server.stop()
    search = next(r for r in rows if r["page"] == "search")
    goals = {
        "max_transferred_bytes": max((r.get("transferred_bytes") or 0) for r in rows),
        "all_pages_within_200kb": all((r.get("transferred_bytes") or r["html_bytes"]) <= GOAL_BYTES for r in rows),
        "search_cold_load_ms": search.get("cold_load_ms"),
        "search_warm_load_p50_ms": search.get("warm_load_p50_ms"),
        "search_within_300ms": (search.get("cold_load_ms") or 1e9) <= GOAL_SEARCH_MS,
        "foreign_resources": sum(r.get("foreign_resources") or 0 for r in rows),
    }
    out = {
        "size": args.size,
        "repeat": args.repeat,
        "rows": rows,
        "goals": goals,
        "browser": shutil.which("chromium") and os.popen("chromium --version 2>/dev/null").read().strip(),
        "machine": machine(),
    }
    write_json(RESULTS / "web.json", out)
    header = (
        f"{'page':<26} {'TTFB p50':>8} {'p95':>6} {'HTML p50':>8} {'HTML KB':>7} {'cold load':>9} "
        f"{'warm p50':>8} {'transfer KB':>11}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(
            f"{r['page']:<26} {r['ttfb_p50_ms']:>8} {r['ttfb_p95_ms']:>6} {r['html_p50_ms']:>8} "
            f"{r['html_bytes'] / 1000:>7.1f} {r.get('cold_load_ms', '–'):>9} {r.get('warm_load_p50_ms', '–'):>8} "
            f"{(r['transferred_bytes'] / 1000) if 'transferred_bytes' in r else float('nan'):>11.1f}"
        )
    lines.append(
        f"goals: every page <= 200 KB transferred: {goals['all_pages_within_200kb']} (largest "
        f"{goals['max_transferred_bytes'] / 1000:.1f} KB); search page loaded <= 300 ms: "
        f"{goals['search_within_300ms']} (cold {goals['search_cold_load_ms']} ms, warm p50 "
        f"{goals['search_warm_load_p50_ms']} ms); resources from other hosts: {goals['foreign_resources']}"
    )
    print("\n".join(lines), file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
