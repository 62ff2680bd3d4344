"""Operating quarry: the run metrics (textfile and ``quarry serve``), ``quarry api``'s ``/metrics``,
every metric docs/operations.md lists, the alert rules under ``promtool``, JSON logs and spans; a
slow test has Debian's Prometheus scrape a running ``quarry api`` and ``quarry serve``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from apiserver import ROOT, api_server
from localserver import free_port
from prometheus_client.parser import text_string_to_metric_families

from quarry.api.keys import KeyRing, key_store
from quarry.core.errors import RunRefused
from quarry.store.handle import open_store

PROMTOOL = "/usr/bin/promtool"
PROMETHEUS = "/usr/bin/prometheus"
RULES = ROOT / "deploy" / "prometheus"


def _need(*programs: str) -> None:
    missing = [p for p in programs if not Path(p).exists()]
    if missing:
        why = f"{' and '.join(missing)} not found: Debian's prometheus package has them (`make prometheus`, as root)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {why}")
        pytest.skip(why)


def _samples(text: str) -> dict[tuple, float]:
    """{(sample name, sorted labels): value} of an exposition text."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _value(samples: dict, name: str, **labels) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def _tree(root: Path, n: int = 12) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (root / f"note{i:02d}.md").write_text(f"# Note {i}\n\nThe heron colony number {i} nests by the reservoir.\n")
    return root


def _documented() -> list[str]:
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    return re.findall(r"^\| `(quarry_[a-z_]+)` \|", text, flags=re.M)


# --- alert rules ----------------------------------------------------------------------------------


def test_the_alert_rules_pass_promtool_and_their_unit_tests(tmp_path):
    _need(PROMTOOL)
    done = subprocess.run([PROMTOOL, "check", "rules", "quarry-rules.yml"], cwd=RULES, capture_output=True, text=True)
    assert done.returncode == 0 and "SUCCESS: 7 rules found" in done.stdout, done.stdout + done.stderr
    done = subprocess.run(
        [PROMTOOL, "test", "rules", "quarry-rules.test.yml"], cwd=RULES, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr
    # the unit tests can fail: a stale-index rule that waits 30 intervals misses the failing runs
    for name in ("quarry-rules.yml", "quarry-rules.test.yml"):
        shutil.copy(RULES / name, tmp_path / name)
    rules = tmp_path / "quarry-rules.yml"
    rules.write_text(
        rules.read_text().replace("> 3 * quarry_schedule_interval_seconds", "> 30 * quarry_schedule_interval_seconds")
    )
    done = subprocess.run(
        [PROMTOOL, "test", "rules", "quarry-rules.test.yml"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0 and "alertname: QuarryIndexStale, time: 1h" in done.stdout + done.stderr


# --- run metrics ----------------------------------------------------------------------------------


def test_every_run_writes_the_metrics_file(tmp_path, monkeypatch):
    import quarry

    metrics = tmp_path / "textfile" / "quarry.prom"
    metrics.parent.mkdir()
    monkeypatch.setenv("QUARRY_EMBED_BACKEND", "hash")
    monkeypatch.setenv("QUARRY_METRICS_FILE", str(metrics))
    tree, db = _tree(tmp_path / "tree"), tmp_path / "db"
    quarry.index([tree], db)
    first = _samples(metrics.read_text())
    assert _value(first, "quarry_run_last_status", status="completed") == 1
    assert _value(first, "quarry_run_last_status", status="failed") == 0
    assert _value(first, "quarry_run_last_documents", outcome="added") == 12
    assert _value(first, "quarry_run_last_chunks_embedded") == 12
    assert _value(first, "quarry_run_last_written_bytes") > 10_000
    assert _value(first, "quarry_index_generation") == 1
    assert 0 <= _value(first, "quarry_index_seconds_since_commit") < 300
    assert {"discover", "plan", "parse", "embed", "load", "commit"} <= {
        dict(labels)["stage"] for (name, labels) in first if name == "quarry_run_last_stage_seconds"
    }
    committed = _value(first, "quarry_index_last_commit_timestamp_seconds")
    assert abs(committed - time.time()) < 300

    gone = tmp_path / "gone"
    gone.mkdir()
    for i in range(8):
        shutil.move(tree / f"note{i:02d}.md", gone)
    with pytest.raises(RunRefused):
        quarry.index([tree], db)
    refused = _samples(metrics.read_text())
    assert _value(refused, "quarry_run_last_status", status="refused") == 1
    assert _value(refused, "quarry_run_last_status", status="completed") == 0
    assert _value(refused, "quarry_index_last_commit_timestamp_seconds") == committed  # nothing committed
    assert _value(refused, "quarry_index_generation") == 1


def test_the_stale_gauge_counts_schedule_intervals(tmp_path, monkeypatch):
    from prometheus_client import generate_latest
    from quarry.flows.orchestration import schedule_seconds

    import quarry
    from quarry.core.metrics import run_registry
    from quarry.store.metrics import run_facts

    assert schedule_seconds("*/15 * * * *") == 900 and schedule_seconds("@hourly") == 3600
    assert schedule_seconds("0 9,17 * * *") == 16 * 3600  # irregular: the longest gap
    monkeypatch.setenv("QUARRY_EMBED_BACKEND", "hash")
    db = tmp_path / "db"
    never = _samples(generate_latest(run_registry(lambda: run_facts(db, schedule_seconds=60))).decode())
    assert _value(never, "quarry_index_stale") == 1  # never committed
    quarry.index([_tree(tmp_path / "tree", 2)], db)
    fresh = _samples(generate_latest(run_registry(lambda: run_facts(db, schedule_seconds=60))).decode())
    assert _value(fresh, "quarry_index_stale") == 0 and _value(fresh, "quarry_schedule_interval_seconds") == 60
    stale = _samples(generate_latest(run_registry(lambda: run_facts(db, schedule_seconds=0.01))).decode())
    assert _value(stale, "quarry_index_stale") == 1


# --- the API --------------------------------------------------------------------------------------


def test_api_metrics_and_every_documented_metric(tmp_path, monkeypatch):
    """One run and a few requests: /metrics needs an admin key (or --metrics-port), counts routes by
    template and keys by name, never a token; every metric docs/operations.md lists exists."""
    from prometheus_client import generate_latest

    import quarry
    from quarry.core.metrics import run_registry
    from quarry.store.metrics import run_facts

    monkeypatch.setenv("QUARRY_EMBED_BACKEND", "hash")
    metrics_file = tmp_path / "quarry.prom"
    monkeypatch.setenv("QUARRY_METRICS_FILE", str(metrics_file))
    db = tmp_path / "db"
    quarry.index([_tree(tmp_path / "tree", 4)], db)
    ring = KeyRing(key_store(open_store(db)))
    ops, admin = ring.create("ops", admin=True)
    _, reader = ring.create("reader", ["group:hr"], rate_limit=1)
    port = free_port()
    with api_server(
        db, "--metrics-port", str(port), log=tmp_path / "api.log", env={"QUARRY_EMBED_BACKEND": "hash"}
    ) as (base, _):
        http = httpx.Client(base_url=base, timeout=30)
        as_reader = {"Authorization": f"Bearer {reader}"}
        assert http.post("/v1/search", json={"query": "heron", "mode": "bm25"}, headers=as_reader).status_code == 200
        assert http.post("/v1/search", json={"query": "heron"}, headers=as_reader).status_code == 429
        doc = http.post("/v1/search", json={"query": "heron"}, headers={"Authorization": f"Bearer {admin}"}).json()
        doc_id = doc["results"][0]["doc_id"]
        assert http.get(f"/v1/documents/{doc_id}", headers={"Authorization": f"Bearer {admin}"}).status_code == 200
        assert http.get("/metrics").status_code == 401
        bad = "qk_000000000000_" + "z" * 43
        assert http.get("/metrics", headers={"Authorization": f"Bearer {bad}"}).status_code == 401
        forged = f"qk_{ops.id}_" + "y" * 43  # names the admin key's id, without its secret
        assert http.get("/v1/status", headers={"Authorization": f"Bearer {forged}"}).status_code == 401
        assert http.get("/metrics", headers={"Authorization": f"Bearer {reader}"}).status_code in (403, 429)
        answer = http.get("/metrics", headers={"Authorization": f"Bearer {admin}"})
        assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
        loopback = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30)
        assert loopback.status_code == 200
    for text in (answer.text, loopback.text):
        assert admin not in text and reader not in text and doc_id not in text and "z" * 43 not in text
    api = _samples(answer.text)
    assert _value(api, "quarry_api_requests_total", route="/v1/search", method="POST", status="200") == 2
    assert _value(api, "quarry_api_requests_total", route="/v1/search", method="POST", status="429") == 1
    assert _value(api, "quarry_api_requests_total", route="/v1/documents/{doc_id}", method="GET", status="200") == 1
    assert _value(api, "quarry_api_search_duration_seconds_count", endpoint="search", mode="bm25") == 1
    assert _value(api, "quarry_api_search_duration_seconds_count", endpoint="search", mode="hybrid") == 1
    assert _value(api, "quarry_api_rate_limited_requests_total", key="reader") >= 1
    assert _value(api, "quarry_api_denied_requests_total", key="none", claimed_key="", status="401") == 1
    assert _value(api, "quarry_api_denied_requests_total", key="unknown", claimed_key="", status="401") == 1
    assert _value(api, "quarry_api_denied_requests_total", key="unknown", claimed_key="ops", status="401") == 1
    assert _value(api, "quarry_api_denied_requests_total", key="ops", claimed_key="", status="401") is None
    assert _value(api, "quarry_api_served_generation") == 1 and _value(api, "quarry_index_documents") == 4

    served = generate_latest(run_registry(lambda: run_facts(db, schedule_seconds=900))).decode()
    names = {
        name for name, _ in {**api, **_samples(loopback.text), **_samples(served), **_samples(metrics_file.read_text())}
    }
    documented = _documented()
    assert len(documented) >= 20
    missing = [m for m in documented if not ({m, f"{m}_bucket"} & names)]
    assert not missing, f"docs/operations.md lists metrics no run or request produced: {missing}"
    undocumented = {re.sub(r"_(total|bucket|count|sum|created)$", "", n) for n in names if n.startswith("quarry_")}
    assert undocumented <= set(documented) | {m.removesuffix("_total") for m in documented}, (
        f"metrics missing from docs/operations.md: {sorted(undocumented - set(documented))}"
    )


def test_workers_requests_are_summed(tmp_path, monkeypatch):
    import quarry

    monkeypatch.setenv("QUARRY_EMBED_BACKEND", "hash")
    db = tmp_path / "db"
    quarry.index([_tree(tmp_path / "tree", 2)], db)
    port = free_port()
    with api_server(
        db,
        "--workers",
        "2",
        "--metrics-port",
        str(port),
        log=tmp_path / "api.log",
        env={"QUARRY_EMBED_BACKEND": "hash"},
    ) as (base, _):
        for _ in range(8):  # new connections: the kernel spreads them over both workers
            assert httpx.post(f"{base}/v1/search", json={"query": "heron"}, timeout=30).status_code == 200
        # a store without keys: its callers read only public documents, so /metrics (which counts
        # every document) is only on the loopback --metrics-port
        refused = httpx.get(f"{base}/metrics", timeout=30)
        on_port = _samples(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text)
    assert refused.status_code == 403 and "--metrics-port" in refused.json()["error"]["message"]
    assert "quarry_index_documents" not in refused.text
    for samples in (on_port,):
        assert _value(samples, "quarry_api_requests_total", route="/v1/search", method="POST", status="200") == 8
        assert _value(samples, "quarry_api_search_duration_seconds_count", endpoint="search", mode="hybrid") == 8
        assert _value(samples, "quarry_api_served_generation") == 1


# --- JSON logs and traces -------------------------------------------------------------------------

SECRET = "sk-log-probe-secret-4711"


def test_json_logs_of_a_run_parse_and_hold_no_secret(cli, tmp_path):
    tree, db = _tree(tmp_path / "tree", 3), tmp_path / "db"
    env = {
        "QUARRY_EMBED_BACKEND": "hash",
        "QUARRY_LOG_FORMAT": "json",
        "QUARRY_LLM_API_KEY": SECRET,
        "OPENAI_API_KEY": SECRET,
    }
    done = cli("-v", "index", tree, "--db", db, env=env)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all({"time", "level", "logger", "message"} <= set(r) for r in records)
    assert any(r.get("run_id") and r.get("stage") for r in records), records
    assert SECRET not in done.stdout + done.stderr


def test_spans_of_runs_and_requests_carry_into_json_logs(tmp_path, monkeypatch):
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import quarry
    from quarry.core import logs, tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(provider)
    else:
        trace.get_tracer_provider().add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")  # never reached: our provider is kept
    monkeypatch.setenv("QUARRY_EMBED_BACKEND", "hash")
    tracing._state.clear()
    lines = []

    class Keep(__import__("logging").Handler):
        def emit(self, record):
            lines.append(logs.JsonFormatter().format(record))

    import logging

    keep = Keep()
    logging.getLogger("quarry").addHandler(keep)
    try:
        db = tmp_path / "db"
        quarry.index([_tree(tmp_path / "tree", 3)], db)
        with tracing.span("probe"):
            logging.getLogger("quarry.test").warning("inside a span")
        from fastapi.testclient import TestClient

        from quarry.api.app import ApiConfig, create_app

        app = create_app(ApiConfig(db=str(db)))
        with TestClient(app.state.asgi) as client:
            assert client.post("/v1/search", json={"query": "heron"}).status_code == 200
            assert client.get("/v1/documents/probe-doc-4711").status_code == 404
    finally:
        logging.getLogger("quarry").removeHandler(keep)
        tracing._state.clear()
    names = [s.name for s in exporter.get_finished_spans()]
    assert "quarry.index" in names and {"quarry.discover", "quarry.plan", "quarry.parse", "quarry.load"} <= set(names)
    assert "POST /v1/search" in names and "GET /v1/documents/{doc_id}" in names
    ours = [s for s in exporter.get_finished_spans() if s.instrumentation_scope.name == "quarry"]
    assert "GET /v1/documents/{doc_id}" in [s.name for s in ours]
    assert not [s for s in ours if "probe-doc-4711" in s.name or "probe-doc-4711" in str(dict(s.attributes or {}))]
    run = next(s for s in exporter.get_finished_spans() if s.name == "quarry.index")
    stage = next(s for s in exporter.get_finished_spans() if s.name == "quarry.plan")
    assert stage.context.trace_id == run.context.trace_id
    probe = [json.loads(line) for line in lines if "inside a span" in line][0]
    assert re.fullmatch(r"[0-9a-f]{32}", probe["trace_id"])


def test_without_an_endpoint_spans_are_free_and_import_no_sdk():
    code = (
        "import sys, quarry.core.tracing as t\n"
        "assert t.span('x') is t.span('y')\n"
        "with t.span('run'): pass\n"
        "assert t.current_trace_id() is None\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry.sdk')], 'SDK imported'\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


# --- Debian's Prometheus scraping quarry ------------------------------------------------------------


@pytest.mark.slow
def test_prometheus_scrapes_quarry_api_and_quarry_serve(tmp_path, monkeypatch):
    _need(PROMETHEUS)
    import quarry

    # quarry serve answers /metrics on --port from its own private Prefect server: without the
    # PREFECT_API_URL an earlier test's fixture may have left in this process's environment
    env = {
        **{k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"},
        "QUARRY_EMBED_BACKEND": "hash",
        "PYTHONUNBUFFERED": "1",
    }
    tree, db = _tree(tmp_path / "tree", 4), tmp_path / "db"
    # (monkeypatch: the session's own value comes back after; popping it left every later test of
    # the session on the real model, whose int8 vectors depend on the batch)
    monkeypatch.setenv("QUARRY_EMBED_BACKEND", "hash")
    quarry.index([tree], db)
    api_metrics, serve_port, prom_port = free_port(), free_port(), free_port()
    serve_log = open(tmp_path / "serve.log", "w")
    serve = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "quarry.cli.main",
            "serve",
            str(tree),
            "--db",
            str(db),
            "--cron",
            "*/5 * * * *",
            "--port",
            str(serve_port),
        ],
        stdout=serve_log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=ROOT,
    )
    prometheus = None
    try:
        with api_server(
            db, "--metrics-port", str(api_metrics), log=tmp_path / "api.log", env={"QUARRY_EMBED_BACKEND": "hash"}
        ) as (base, _):
            assert httpx.post(f"{base}/v1/search", json={"query": "heron"}, timeout=30).status_code == 200
            config = tmp_path / "prometheus.yml"
            config.write_text(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                f"rule_files:\n  - {RULES / 'quarry-rules.yml'}\n"
                "scrape_configs:\n"
                f"  - job_name: quarry-api\n    static_configs:\n      - targets: ['127.0.0.1:{api_metrics}']\n"
                f"  - job_name: quarry-serve\n    static_configs:\n      - targets: ['127.0.0.1:{serve_port}']\n"
            )
            prometheus = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{prom_port}",
                ],
                stdout=open(tmp_path / "prometheus.log", "w"),
                stderr=subprocess.STDOUT,
            )

            def query(expr: str) -> list:
                answer = httpx.get(f"http://127.0.0.1:{prom_port}/api/v1/query", params={"query": expr}, timeout=10)
                return answer.json()["data"]["result"] if answer.status_code == 200 else []

            wanted = {
                "requests": 'quarry_api_requests_total{job="quarry-api",route="/v1/search",status="200"}',
                "generation": 'quarry_api_served_generation{job="quarry-api"}',
                "stale": 'quarry_index_stale{job="quarry-serve"}',
                "commit": 'quarry_index_generation{job="quarry-serve"}',
            }
            got: dict = {}
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and len(got) < len(wanted):
                for name, expr in wanted.items():
                    if name not in got:
                        try:
                            result = query(expr)
                        except (httpx.HTTPError, ValueError, KeyError):
                            result = []
                        if result:
                            got[name] = float(result[0]["value"][1])
                time.sleep(1)
            assert set(got) == set(wanted), (
                got,
                (tmp_path / "prometheus.log").read_text()[-2000:],
                (tmp_path / "serve.log").read_text()[-2000:],
            )
            assert got["requests"] == 1 and got["generation"] == 1 and got["stale"] == 0 and got["commit"] >= 1
            rules = httpx.get(f"http://127.0.0.1:{prom_port}/api/v1/rules", timeout=10).json()
            assert {r["name"] for g in rules["data"]["groups"] for r in g["rules"]} >= {
                "QuarryIndexStale",
                "QuarryApiErrors",
            }
    finally:
        for proc in (prometheus, serve):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        serve_log.close()
