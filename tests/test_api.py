"""``quarry api`` as a client meets it: a real uvicorn process on 127.0.0.1, talked to with httpx.

Every endpoint and search option; the auth matrix (no key, bad, revoked, expired, admin, search-only);
bad input, each a JSON 4xx with the server unharmed; a new commit picked up without a restart, each
answer from one generation; a store on object storage; MCP through the SDK's own client over HTTP
and stdio, with the hits of /v1/search.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from apiserver import ROOT, api_server

from quarry.api.keys import FileKeys, KeyRing

RULES = """\
- path: "hr/**"
  principals: ["group:hr"]
- path: "eng/**"
  principals: ["group:eng", "group:hr"]
- path: "**"
  principals: ["public"]
"""
TOPICS = {
    "hr": ["salary bands and pay review", "parental leave policy", "performance review calibration"],
    "eng": ["okapi build system and compiler cache", "deploy rollback runbook", "on-call escalation"],
    "news": ["company okapi mascot quiz", "office move announcement", "quarterly all-hands summary"],
}


def write_tree(root: Path) -> Path:
    for folder, topics in TOPICS.items():
        for i, topic in enumerate(topics):
            sections = []
            for j in range(5):
                sections.append(
                    f"## Part {j} of {topic}\n\n"
                    + " ".join(
                        [f"This paragraph {j} covers {topic} for the okapi team, with salary and release notes."] * 4
                    )
                )
            path = root / folder / f"doc{i}.md"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"# {topic.title()}\n\n" + "\n\n".join(sections) + "\n", encoding="utf-8")
    return root


class Served:
    def __init__(self, base, tokens, db, tree, log, rules):
        self.base, self.tokens, self.db, self.tree, self.log, self.rules = base, tokens, db, tree, log, rules
        self.http = httpx.Client(base_url=base, timeout=60)

    def call(self, method, path, who=None, **kwargs):
        headers = kwargs.pop("headers", {})
        if who:
            headers["Authorization"] = f"Bearer {self.tokens.get(who, who)}"
        return self.http.request(method, path, headers=headers, **kwargs)

    def search(self, who, **body):
        return self.call("POST", "/v1/search", who, json=body)


@pytest.fixture(scope="module")
def served(tmp_path_factory, prefect_api):
    from quarry.flows.index import index_flow

    work = tmp_path_factory.mktemp("api")
    tree = write_tree(work / "tree")
    (work / "acl.yaml").write_text(RULES)
    db = work / "db"
    index_flow([str(tree)], db=str(db), overrides={"acl_rules": str(work / "acl.yaml")})
    ring = KeyRing(FileKeys(db / "keys.json"))
    t0 = time.time()
    tokens = {}
    for name, kwargs in {
        "admin": {"admin": True},
        "hr": {"principals": ["group:hr"]},
        "eng": {"principals": ["group:eng"]},
        "plain": {},
        "revoked": {"principals": ["group:hr"]},
        "expired": {"principals": ["group:hr"], "expires": t0 + 2},
        "limited": {"rate_limit": 5},
    }.items():
        tokens[name] = ring.create(name, **kwargs)[1]
    ring.revoke("revoked")
    log = work / "api.log"
    with api_server(db, "--rate-limit", "100000", log=log) as (base, _proc):
        served = Served(base, tokens, db, tree, log, work / "acl.yaml")
        time.sleep(max(0.0, t0 + 2.2 - time.time()))  # let "expired" expire
        yield served
        served.http.close()


def paths(body) -> list[str]:
    return [r["path"].split("/tree/")[-1] for r in body["results"]]


def is_error(response, status):
    assert response.status_code == status, (response.status_code, response.text[:300])
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    assert "Traceback" not in response.text and "/tmp/" not in response.text and "qk_" not in response.text
    return body["error"]


# --- endpoints ------------------------------------------------------------------------------------


def test_health_readiness_and_openapi(served):
    assert served.call("GET", "/healthz").json() == {"status": "ok"}
    ready = served.call("GET", "/readyz").json()
    assert ready["status"] == "ready" and ready["generation"] == 1
    docs = served.call("GET", "/docs")
    assert docs.status_code == 200
    import re

    assets = re.findall(r"""(?:src|href)=['"]([^'"]+)['"]""", docs.text) + re.findall(r"url: ?'([^']+)'", docs.text)
    assert len(assets) >= 3 and all(a.startswith("/") for a in assets), assets  # Swagger UI from this server
    assert all(served.call("GET", a).status_code == 200 for a in assets)
    assert served.call("GET", "/redoc").status_code == 404
    spec = served.call("GET", "/openapi.json").json()
    assert {"/v1/search", "/v1/documents/{doc_id}", "/v1/chunks/{chunk_id}", "/v1/status", "/v1/runs"} <= set(
        spec["paths"]
    )
    assert "window" in json.dumps(spec["components"]["schemas"]["SearchRequest"])


def test_search_answers_the_clis_json(served, cli):
    body = served.search("hr", query="okapi salary", k=5).json()
    out = cli("search", "okapi salary", "-k", "5", "--db", served.db, "--as", "group:hr", "--json")
    assert out.returncode == 0, out.stderr
    expected = json.loads(out.stdout)
    for doc in (body, expected):
        doc.pop("timings")
    assert body == expected  # one serialiser: the same document, field for field


@pytest.mark.parametrize(
    "options",
    [
        {"mode": "bm25"},
        {"mode": "vector"},
        {"mode": "hybrid", "fusion": "rrf", "rrf_k": 10},
        {"candidates": 7},
        {"weights": {"vector": 0.5, "bm25": 2, "documents": 0}},
        {"min_scores": {"bm25": 0.1}},
        {"where": "file_type = 'md'"},
        {"where": ["file_type = md", "chunk_index >= 1"]},
        {"path": "eng/**"},
        {"type": ["md"]},
        {"since": "2000-01-01", "until": "2999-01-01"},
        {"window": "1,1"},
        {"window": 2},
        {"window": [0, 1]},
        {"segments": "balanced"},
        {"segments": {"preset": "find_all", "max_length": 4, "relevance": "rank"}},
        {"explain": True},
    ],
)
def test_every_search_option(served, options):
    response = served.search("hr", query="okapi salary review", k=4, **options)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["generation"] >= 1 and response.headers["X-Quarry-Generation"] == str(body["generation"])
    assert 1 <= len(body["results"]) <= 4
    if "window" in options:
        assert body["windows"] and all(w["text"] for w in body["windows"])
    if "segments" in options:
        assert "segments" in body
    if options.get("explain"):
        assert set(body["results"][0]["explain"]) >= {"vector", "bm25", "fused"}
    if "path" in options:
        assert all(p.startswith("eng/") for p in paths(body))
    if options.get("where") == ["file_type = md", "chunk_index >= 1"]:
        assert all(r["chunk_index"] >= 1 for r in body["results"])
    if options.get("mode") in ("bm25", "vector"):
        assert body["mode"] == options["mode"] and body["fusion"] == ""


def test_doc_filter_and_rerank_gate(served):
    first = served.search("hr", query="okapi", k=1).json()["results"][0]
    body = served.search("hr", query="okapi", k=5, doc=first["doc_id"]).json()
    assert {r["doc_id"] for r in body["results"]} == {first["doc_id"]}
    error = is_error(served.search("hr", query="okapi", rerank="cross-encoder:/etc"), 400)
    assert "not enabled on this server" in error["message"]


def test_documents_and_chunks(served):
    hit = next(
        r for r in served.search("hr", query="salary bands", k=10).json()["results"] if r["path"].endswith("hr/doc0.md")
    )
    doc = served.call("GET", f"/v1/documents/{hit['doc_id']}", "hr").json()
    assert doc["doc_id"] == hit["doc_id"] and doc["generation"] >= 1 and doc["sections"]
    assert [c["chunk_id"] for c in doc["chunks"]][hit["chunk_index"]] == hit["chunk_id"]
    assert "text" not in doc["chunks"][0] and "principals" not in doc
    assert served.call("GET", f"/v1/documents/{hit['doc_id']}", "admin").json()["principals"] == ["group:hr"]
    chunk = served.call("GET", f"/v1/chunks/{hit['chunk_id']}", "hr").json()
    assert chunk["text"] == hit["text"] and "window" not in chunk
    around = served.call("GET", f"/v1/chunks/{hit['chunk_id']}?neighbours=1", "hr").json()
    assert hit["chunk_id"] in around["window"]["chunk_ids"] and len(around["window"]["chunk_ids"]) >= 2
    after = served.call("GET", f"/v1/chunks/{hit['chunk_id']}?before=0&after=2", "hr").json()
    assert after["window"]["first_chunk"] == hit["chunk_index"]
    # what a key may not read is not there at all: 404, the same as an id that never existed
    for who in ("eng", "plain"):
        assert is_error(served.call("GET", f"/v1/documents/{hit['doc_id']}", who), 404)["code"] == "not_found"
        is_error(served.call("GET", f"/v1/chunks/{hit['chunk_id']}", who), 404)
    missing = is_error(served.call("GET", "/v1/documents/0123456789abcdef0123", "hr"), 404)
    denied = is_error(served.call("GET", f"/v1/documents/{hit['doc_id']}", "eng"), 404)
    assert missing["message"].replace("0123456789abcdef0123", "X") == denied["message"].replace(hit["doc_id"], "X")


def test_status_and_runs(served):
    full = served.call("GET", "/v1/status", "admin").json()
    assert full["documents"] == 9 and full["last_run"]["added"] == 9
    eng = served.call("GET", "/v1/status", "eng").json()
    assert eng["documents"] == 6 and "store" not in eng and "last_run" not in eng
    plain = served.call("GET", "/v1/status", "plain").json()
    assert plain["documents"] == 3
    runs = served.call("GET", "/v1/runs?limit=5", "admin").json()
    assert runs["runs"][0]["added"] == 9 and runs["generation"] >= 1
    assert is_error(served.call("GET", "/v1/runs", "hr"), 403)["code"] == "forbidden"


# --- the auth matrix ------------------------------------------------------------------------------


ENDPOINTS = [
    ("POST", "/v1/search", {"json": {"query": "okapi"}}),
    ("GET", "/v1/status", {}),
    ("GET", "/v1/runs", {}),
    ("GET", "/v1/documents/0123456789abcdef0123", {}),
    ("GET", "/v1/chunks/0123456789abcdef0123:0", {}),
]


@pytest.mark.parametrize("who", [None, "qk_000000000000_" + "x" * 43, "garbage", "revoked", "expired"])
@pytest.mark.parametrize("method, path, kwargs", ENDPOINTS)
def test_no_valid_key_is_401(served, who, method, path, kwargs):
    error = is_error(served.call(method, path, who, **kwargs), 401)
    assert error["code"] == "unauthorized"


def test_who_sees_what(served):
    seen = {
        who: set(paths(served.search(who, query="okapi salary review team", k=50).json()))
        for who in ("admin", "hr", "eng", "plain")
    }
    hr, eng, news = ({f"{f}/doc{i}.md" for i in range(3)} for f in ("hr", "eng", "news"))
    assert seen["admin"] == hr | eng | news
    assert seen["hr"] == hr | eng | news
    assert seen["eng"] == eng | news
    assert seen["plain"] == news


def test_rate_limit_is_429_with_retry_after(served):
    codes = [served.call("GET", "/v1/status", "limited").status_code for _ in range(8)]
    assert codes[:5] == [200] * 5 and 429 in codes[5:]
    response = served.call("GET", "/v1/status", "limited")
    assert is_error(response, 429)["code"] == "rate_limited" and int(response.headers["Retry-After"]) >= 1
    assert served.call("GET", "/v1/status", "hr").status_code == 200  # other keys are not slowed


# --- bad input ------------------------------------------------------------------------------------


BAD = [
    ("malformed JSON", {"content": b"{not json", "headers": {"Content-Type": "application/json"}}, 400),
    ("not an object", {"json": ["okapi"]}, 422),
    ("unknown field", {"json": {"query": "okapi", "kk": 3}}, 422),
    ("no query", {"json": {"k": 3}}, 422),
    ("blank query", {"json": {"query": "   "}}, 422),
    ("k zero", {"json": {"query": "okapi", "k": 0}}, 422),
    ("k too large", {"json": {"query": "okapi", "k": 100000}}, 422),
    ("k a string", {"json": {"query": "okapi", "k": "ten"}}, 422),
    ("10,000-character query", {"json": {"query": "okapi " * 1667}}, 422),
    ("unknown mode", {"json": {"query": "okapi", "mode": "fuzzy"}}, 422),
    ("negative weight", {"json": {"query": "okapi", "weights": {"vector": -1}}}, 422),
    ("huge window", {"json": {"query": "okapi", "window": "1000,1000"}}, 422),
    ("window and segments", {"json": {"query": "okapi", "window": 1, "segments": "balanced"}}, 400),
    ("segments out of bounds", {"json": {"query": "okapi", "segments": {"results": 10**9}}}, 422),
    ("hostile where: OR", {"json": {"query": "okapi", "where": "file_type = 'md' OR 1=1"}}, 400),
    ("hostile where: statement", {"json": {"query": "okapi", "where": "1=1; DROP TABLE documents; --"}}, 400),
    ("hostile where: union", {"json": {"query": "okapi", "where": "title = x UNION SELECT * FROM documents"}}, 400),
    ("hostile where: principals", {"json": {"query": "okapi", "where": "principals IS NOT NULL"}}, 400),
    ("hostile where: subquery", {"json": {"query": "okapi", "where": "doc_id IN (SELECT doc_id FROM documents)"}}, 400),
    ("bad date", {"json": {"query": "okapi", "since": "yesterday-ish"}}, 400),
    (
        "2 MB body",
        {"content": b'{"query": "' + b"a" * (2 << 20) + b'"}', "headers": {"Content-Type": "application/json"}},
        413,
    ),
]


@pytest.mark.parametrize("label, kwargs, status", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_a_json_4xx_and_the_server_stays_up(served, label, kwargs, status):
    is_error(served.call("POST", "/v1/search", "hr", **kwargs), status)
    assert served.call("GET", "/healthz").status_code == 200
    assert served.search("hr", query="okapi", k=1).status_code == 200


@pytest.mark.parametrize(
    "kwargs, status, said",
    [
        ({"json": {"k": 3}}, 422, "query: required"),
        ({"json": {"query": "okapi", "k": "ten"}}, 422, "k: "),
        ({"json": {"query": "okapi", "kk": 3}}, 422, "kk: unknown field"),
        ({"json": ["okapi"]}, 422, "the body must be a JSON object sent as Content-Type: application/json, not a list"),
        (
            {"content": b'{"query": "okapi"}', "headers": {"Content-Type": "text/plain"}},
            422,
            "the body must be a JSON object sent as Content-Type: application/json (this one was sent as text/plain)",
        ),
        ({}, 422, "no body: the body must be a JSON object"),
        ({"json": {"query": "okapi", "where": "nonsense ==="}}, 400, "where 'nonsense ==='"),
        ({"json": {"query": "okapi", "where": ["file_type = md", "bogus ~ 1"]}}, 400, "where "),
    ],
)
def test_error_messages_name_the_field_and_the_cause(served, kwargs, status, said):
    message = is_error(served.call("POST", "/v1/search", "hr", **kwargs), status)["message"]
    assert said in message and "--where" not in message and "Input should be a valid dictionary" not in message


@pytest.mark.parametrize(
    "path",
    [
        "/v1/documents/..%2F..%2F..%2Fetc%2Fpasswd",
        "/v1/documents/%2e%2e",
        "/v1/chunks/..%2Fkeys.json",
        "/v1/documents/' OR 1=1 --",
        "/v1/chunks/" + "a" * 5000,
        "/v1/documents/%00",
    ],
)
def test_path_traversal_in_ids_is_404(served, path):
    is_error(served.call("GET", path, "admin"), 404)
    assert served.call("GET", "/healthz").status_code == 200


def test_wrong_method_and_route_are_json(served):
    assert is_error(served.call("GET", "/v1/search", "hr"), 405)["code"] == "method_not_allowed"
    assert is_error(served.call("GET", "/v1/nothing", "hr"), 404)["code"] == "not_found"


def test_no_token_reaches_the_log(served):
    served.search("hr", query="okapi")
    served.call("GET", "/v1/status", "qk_000000000000_" + "y" * 43)
    text = served.log.read_text()
    assert "POST /v1/search" in text  # the access log is on
    for token in served.tokens.values():
        assert token not in text and token.split("_", 2)[2] not in text  # qk_<id>_<secret>; the secret may hold "_"
    assert "y" * 43 not in text


def test_json_log_lines_parse_and_hold_no_key_or_secret_setting(served, tmp_path):
    """--log-format json: one object a line, tokens masked even where a client put one in the path,
    and no secret setting of the server's environment."""
    log = tmp_path / "api-json.log"
    secret_setting = "aws-secret-probe-0123456789"
    with api_server(served.db, log=log, env={"QUARRY_LOG_FORMAT": "json", "AWS_SECRET_ACCESS_KEY": secret_setting}) as (
        base,
        _proc,
    ):
        http = httpx.Client(base_url=base, timeout=60)
        hr = served.tokens["hr"]
        assert (
            http.post("/v1/search", json={"query": "okapi"}, headers={"Authorization": f"Bearer {hr}"}).status_code
            == 200
        )
        assert http.get(f"/v1/documents/{hr}", headers={"Authorization": f"Bearer {hr}"}).status_code == 404
        assert (
            http.get("/v1/status", headers={"Authorization": "Bearer qk_000000000000_" + "y" * 43}).status_code == 401
        )
        http.close()
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all({"time", "level", "logger", "message"} <= set(r) for r in records)
    assert any("POST /v1/search" in r["message"] for r in records)  # the access log is on
    text = log.read_text()
    for token in served.tokens.values():
        assert token not in text and token.split("_", 2)[2] not in text
    assert "qk_" + hr.split("_")[1] + "_***" in text  # the key id stays, to say which key it was
    assert secret_setting not in text


# --- generations ----------------------------------------------------------------------------------


def test_a_commit_is_picked_up_without_a_restart_each_answer_from_one_generation(served, run_flow):
    """A file's text names its version; while commits change it, every answer's hits carry the one
    version of the generation that answer names."""
    target = served.tree / "news" / "live.md"
    target.write_text("# Live\n\nokapi marker version v0 of the live page.\n")
    run_flow([served.tree], served.db)
    versions: dict[int, str] = {}
    answers: list[tuple[int, set]] = []
    stop = threading.Event()

    def ask():
        with httpx.Client(
            base_url=served.base, timeout=60, headers={"Authorization": f"Bearer {served.tokens['plain']}"}
        ) as http:
            while not stop.is_set():
                body = http.post(
                    "/v1/search", json={"query": "okapi marker version live page", "k": 3, "mode": "bm25"}
                ).json()
                found = {
                    w
                    for r in body["results"]
                    if r["path"].endswith("live.md")
                    for w in r["text"].split()
                    if w.startswith("v") and w[1:].isdigit()
                }
                answers.append((body["generation"], found))

    threads = [threading.Thread(target=ask) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for v in range(1, 4):
            target.write_text(f"# Live\n\nokapi marker version v{v} of the live page.\n")
            report = run_flow([served.tree], served.db)
            assert report["updated"] == 1
            with httpx.Client(base_url=served.base) as http:
                versions[http.get("/readyz").json()["generation"]] = f"v{v}"
            time.sleep(0.3)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert len(answers) > 10
    latest = max(versions)
    assert any(g == latest for g, _ in answers)  # picked up without a restart
    for generation, found in answers:
        assert len(found) == 1, (generation, found)  # never two versions in one answer
        if generation in versions:
            assert found == {versions[generation]}, (generation, found, versions)


def test_permissions_changed_by_a_run_apply_to_the_next_request(served, run_flow):
    hr_hit = next(
        r for r in served.search("admin", query="parental leave policy", k=5).json()["results"] if "/hr/" in r["path"]
    )
    assert served.call("GET", f"/v1/documents/{hr_hit['doc_id']}", "eng").status_code == 404
    served.rules.write_text(RULES.replace('principals: ["group:hr"]', 'principals: ["group:hr", "group:eng"]'))
    try:
        assert run_flow([served.tree], served.db)["permissions_updated"] == 3
        assert served.call("GET", f"/v1/documents/{hr_hit['doc_id']}", "eng").status_code == 200
    finally:
        served.rules.write_text(RULES)
        run_flow([served.tree], served.db)
    assert served.call("GET", f"/v1/documents/{hr_hit['doc_id']}", "eng").status_code == 404


# --- hosts, workers, object storage -----------------------------------------------------------------


def test_a_public_host_without_keys_is_refused_unless_insecure(tmp_path, prefect_api):
    from quarry.flows.index import index_flow

    tree = write_tree(tmp_path / "tree")
    db = tmp_path / "db"
    index_flow([str(tree)], db=str(db))
    out = subprocess.run(
        [sys.executable, "-m", "quarry.cli.main", "api", "--db", str(db), "--host", "0.0.0.0", "--port", "1"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 2 and "refusing to serve 0.0.0.0 without API keys" in out.stderr
    with api_server(db, "--host", "0.0.0.0", "--insecure-no-auth", log=tmp_path / "log") as (base, _):
        body = httpx.post(f"{base}/v1/search", json={"query": "okapi", "k": 50}).json()
        assert len(body["results"]) > 0  # anonymous: no ACL here, so every document is public
        assert httpx.get(f"{base}/v1/runs").status_code == 403  # anonymous callers never list runs
        for token in ("qk_000000000000_" + "x" * 43, "garbage"):  # a key where there are none is no key
            auth = {"Authorization": f"Bearer {token}"}
            error = is_error(httpx.post(f"{base}/v1/search", json={"query": "okapi"}, headers=auth), 401)
            assert "has no API keys" in error["message"]
            assert httpx.post(f"{base}/mcp", json={}, headers=auth).status_code == 401
    assert "WITHOUT authentication" in (tmp_path / "log").read_text()


def test_workers_and_a_store_on_object_storage(tmp_path, prefect_api, monkeypatch):
    """A file:// store goes through the object-storage code (pull, conditional puts, keys object)."""
    from quarry.flows.index import index_flow

    monkeypatch.setenv("QUARRY_STORE_CACHE", str(tmp_path / "cache-writer"))
    tree = write_tree(tmp_path / "tree")
    (tmp_path / "acl.yaml").write_text(RULES)
    url = f"file://{tmp_path}/bucket/store"
    index_flow([str(tree)], db=url, overrides={"acl_rules": str(tmp_path / "acl.yaml")})
    from quarry.api.keys import key_store
    from quarry.core.settings import store_path

    token = KeyRing(key_store(store_path(url))).create("eng", ["group:eng"])[1]
    assert (tmp_path / "bucket" / "store" / "keys.json").exists()  # the keys live with the store
    env = {"QUARRY_STORE_CACHE": str(tmp_path / "cache-server"), "QUARRY_KEYS_CHECK_SECONDS": "0"}
    with api_server(url, "--workers", "2", log=tmp_path / "log", env=env) as (base, _):
        auth = {"Authorization": f"Bearer {token}"}
        first = httpx.post(f"{base}/v1/search", json={"query": "okapi salary", "k": 50}, headers=auth).json()
        assert first["generation"] == 1 and not any("/hr/" in r["path"] for r in first["results"])
        assert httpx.post(f"{base}/v1/search", json={"query": "okapi"}).status_code == 401
        (tree / "news" / "extra.md").write_text("# Extra\n\nokapi zebra announcement\n")
        index_flow([str(tree)], db=url)
        for _ in range(8):  # both workers, each pulling the new generation on its next request
            body = httpx.post(f"{base}/v1/search", json={"query": "okapi zebra", "k": 3}, headers=auth).json()
            assert body["generation"] == 2 and body["results"][0]["path"].endswith("news/extra.md")
        # CURRENT cannot be read (a damaged object here; an outage alike): every worker serves the
        # generation at hand, also one that has served no request yet (each opens the index at start):
        # 2, or 1 for a worker the requests above never reached
        (tmp_path / "bucket" / "store" / "CURRENT").write_text("{not json")
        for _ in range(6):
            response = httpx.post(f"{base}/v1/search", json={"query": "okapi zebra", "k": 3}, headers=auth)
            assert response.status_code == 200 and response.json()["generation"] in (1, 2), response.text
        (tmp_path / "bucket" / "store" / "CURRENT").unlink()  # the store deleted: no index, and no path said
        response = httpx.post(f"{base}/v1/search", json={"query": "okapi zebra", "k": 3}, headers=auth)
        assert response.status_code == 503 and str(tmp_path) not in response.text, response.text


def test_a_worker_answers_from_the_generation_it_opened_at_start_while_current_cannot_be_read(
    tmp_path, prefect_api, monkeypatch
):
    """A worker opens the index when it starts, not at its first request: one that no request has
    reached yet still answers while CURRENT cannot be read (without it: 503)."""
    from fastapi.testclient import TestClient
    from quarry.flows.index import index_flow

    from quarry.api.app import ApiConfig, create_app

    monkeypatch.setenv("QUARRY_STORE_CACHE", str(tmp_path / "cache"))
    url = f"file://{tmp_path}/bucket/store"
    index_flow([str(write_tree(tmp_path / "tree"))], db=url)
    app = create_app(ApiConfig(db=url))
    with TestClient(app.state.asgi) as client:
        for thread in threading.enumerate():
            if thread.name == "quarry-warm":
                thread.join(60)
        (tmp_path / "bucket" / "store" / "CURRENT").write_text("{not json")
        response = client.post("/v1/search", json={"query": "okapi", "k": 3})
        assert response.status_code == 200, response.text
        assert response.json()["generation"] == 1


# --- MCP ------------------------------------------------------------------------------------------


def _mcp_http(served, who, calls):
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {served.tokens[who]}"} if who else {}

    async def run():
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
            async with Client(streamable_http_client(f"{served.base}/mcp", http_client=http)) as client:
                return await calls(client)

    return asyncio.run(run())


def _text(result) -> dict:
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


def test_mcp_over_http_lists_tools_and_answers_as_v1_search(served):
    async def calls(client):
        tools = await client.list_tools()
        hits = await client.call_tool("search", {"query": "okapi salary review", "k": 5})
        windowed = await client.call_tool("search", {"query": "okapi salary", "k": 2, "window": 1})
        status = await client.call_tool("status", {})
        return tools, hits, windowed, status

    tools, hits, windowed, status = _mcp_http(served, "eng", calls)
    assert {t.name for t in tools.tools} == {"search", "get_document", "get_context", "status", "answer"}
    assert all(t.description and len(t.description) > 60 for t in tools.tools)
    # all only read; answer alone reaches an outside system (a paid model)
    assert {t.name: (t.annotations.read_only_hint, t.annotations.open_world_hint) for t in tools.tools} == {
        "search": (True, False),
        "get_document": (True, False),
        "get_context": (True, False),
        "status": (True, False),
        "answer": (True, True),
    }
    expected = served.search("eng", query="okapi salary review", k=5).json()
    assert [r["chunk_id"] for r in _text(hits)["results"]] == [r["chunk_id"] for r in expected["results"]]
    assert _text(windowed)["windows"]
    assert _text(status)["documents"] == served.call("GET", "/v1/status", "eng").json()["documents"]


def test_mcp_help_and_instructions_name_every_tool():
    from click.testing import CliRunner

    from quarry.api.mcp import INSTRUCTIONS
    from quarry.cli.main import cli

    help_text = " ".join(CliRunner().invoke(cli, ["mcp", "--help"]).output.split())
    for name in ("search", "get_document", "get_context", "status", "answer"):
        assert f"`{name}`" in INSTRUCTIONS and name in help_text, name


def test_mcp_tools_hold_the_same_permissions(served):
    hr_doc = next(r for r in served.search("hr", query="salary bands", k=10).json()["results"] if "/hr/" in r["path"])

    async def calls(client):
        doc = await client.call_tool("get_document", {"doc_id": hr_doc["doc_id"]})
        ctx = await client.call_tool("get_context", {"chunk_id": hr_doc["chunk_id"], "before": 1, "after": 1})
        return doc, ctx

    doc, ctx = _mcp_http(served, "eng", calls)
    assert doc.is_error and "no document" in doc.content[0].text
    assert ctx.is_error and "no chunk" in ctx.content[0].text
    doc, ctx = _mcp_http(served, "hr", calls)
    assert _text(doc)["doc_id"] == hr_doc["doc_id"]
    assert hr_doc["chunk_id"] in _text(ctx)["window"]["chunk_ids"]

    async def segments(client):
        return await client.call_tool("get_context", {"chunk_id": hr_doc["chunk_id"], "query": "salary bands"})

    out = _text(_mcp_http(served, "hr", segments))
    assert out["segments"] and {s["doc_id"] for s in out["segments"]} == {hr_doc["doc_id"]}


def _rpc_error(response, status):
    assert response.status_code == status, (response.status_code, response.text[:300])
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None and body["error"]["data"] == {"status": status}, body
    assert "Traceback" not in response.text and "qk_" not in response.text
    return body["error"]["message"]


def test_mcp_over_http_needs_a_key(served):
    """The 401 is a JSON-RPC error, so the SDK's client shows why (not 'Server returned an error response')."""
    message = _rpc_error(
        served.call("POST", "/mcp", None, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}), 401
    )
    assert "needs an API key" in message
    assert "not valid" in _rpc_error(served.call("POST", "/mcp/", "revoked", json={}), 401)

    async def listed(client):
        return await client.list_tools()

    for who, said in ((None, "needs an API key"), ("revoked", "not valid (unknown, revoked or expired)")):
        with pytest.raises(BaseException) as err:
            _mcp_http(served, who, listed)
        assert said in _messages(err.value), _messages(err.value)


def _messages(exc: BaseException) -> str:
    """Every message in an exception and the groups it holds (anyio's task groups wrap the client's)."""
    out = [str(exc)]
    for inner in getattr(exc, "exceptions", ()):
        out.append(_messages(inner))
    return " | ".join(out)


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT"])
def test_mcp_takes_post_only(served, method):
    """Stateless JSON: no event stream to open with GET, no session to end: 405, not a stream that never speaks."""
    response = served.call(method, "/mcp", "eng", headers={"Accept": "text/event-stream"})
    assert "POST only" in _rpc_error(response, 405) and response.headers["Allow"] == "POST"
    assert response.headers["content-type"].startswith("application/json")


def test_mcp_tool_schemas_say_what_each_parameter_takes(served):
    async def calls(client):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        good = [
            await client.call_tool("search", args)
            for args in (
                {"query": "okapi salary", "k": 3, "where": "file_type = 'md'"},
                {"query": "okapi salary", "k": 3, "where": ["file_type = 'md'", "chunk_index >= 0"]},
                {"query": "okapi salary", "k": 2, "window": "0,1"},
            )
        ]
        bad = [
            await client.call_tool("search", args)
            for args in (
                {"query": "okapi", "where": "nonsense ==="},
                {"query": "okapi", "k": "ten"},
                {"query": "okapi", "k": 5000},
                {"query": "okapi", "window": "1;1"},
            )
        ]
        bad.append(await client.call_tool("get_context", {"chunk_id": "x:0", "before": 99}))
        return tools, good, bad

    tools, good, bad = _mcp_http(served, "eng", calls)
    search = tools["search"].input_schema["properties"]
    assert all(p.get("description") for p in search.values()), [
        n for n, p in search.items() if not p.get("description")
    ]
    assert search["k"]["maximum"] == 1000 and search["k"]["minimum"] == 1
    assert {"string", "array"} <= {t.get("type") for t in search["where"]["anyOf"]}
    assert {"string", "integer", "array"} <= {t.get("type") for t in search["window"]["anyOf"]}
    answer = tools["answer"].input_schema["properties"]  # the answer tool's: AnswerRequest's, filters shared
    assert all(p.get("description") for p in answer.values()), [
        n for n, p in answer.items() if not p.get("description")
    ]
    assert answer["k"]["maximum"] == 100 and {"where", "path", "type", "since", "until", "mode"} <= set(answer)
    assert answer["where"] == search["where"]
    context = tools["get_context"].input_schema["properties"]
    assert context["before"]["maximum"] == 50 and all(p.get("description") for p in context.values())
    expected = served.search("eng", query="okapi salary", k=3, where="file_type = 'md'").json()
    assert [r["chunk_id"] for r in _text(good[0])["results"]] == [r["chunk_id"] for r in expected["results"]]
    assert _text(good[1])["results"]
    assert _text(good[2])["windows"] == served.search("eng", query="okapi salary", k=2, window="0,1").json()["windows"]
    for result, field in zip(bad, ("where", "k", "k", "window", "before")):
        text = result.content[0].text
        assert result.is_error and len(text.splitlines()) == 1, text
        assert field in text and "pydantic" not in text and "http" not in text and "--where" not in text, text


def test_quarry_mcp_on_a_store_with_keys_needs_as_or_admin(served):
    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "quarry.cli.main", "mcp", "--db", str(served.db), *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )

    out = run()
    assert out.returncode == 2 and "has API keys: give --as PRINCIPAL" in out.stderr, out.stderr
    assert len(out.stderr.splitlines()) == 1
    assert run("--admin", "--as", "group:hr").returncode == 2
    assert run("--admin").returncode == 0  # stdin closed: the server ends at once


def test_quarry_mcp_finds_keys_kept_outside_the_store(tmp_path):
    """Keys in a --keys-file (or $QUARRY_KEYS_FILE), as `quarry api` is given them, make `quarry mcp`
    ask for --as or --admin too; the store alone has none."""
    db = tmp_path / "db"
    db.mkdir()
    keys = tmp_path / "outside.json"
    KeyRing(FileKeys(keys)).create("reader", ["group:hr"])
    env = {k: v for k, v in os.environ.items() if k != "QUARRY_KEYS_FILE"}

    def run(*args, **extra):
        return subprocess.run(
            [sys.executable, "-m", "quarry.cli.main", "mcp", "--db", str(db), *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
            stdin=subprocess.DEVNULL,
            env={**env, **extra},
        )

    assert "no index at" in run().stderr  # no keys with the store: on to opening it
    for out in (run("--keys-file", str(keys)), run(QUARRY_KEYS_FILE=str(keys))):
        assert out.returncode == 2 and "has API keys: give --as PRINCIPAL" in out.stderr, out.stderr
    assert "no index at" in run("--keys-file", str(keys), "--as", "group:hr").stderr


def test_mcp_over_stdio_answers_as_v1_search(served):
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "quarry.cli.main", "mcp", "--db", str(served.db), "--as", "group:eng"],
        env={**os.environ},
        cwd=str(ROOT),
    )

    async def run():
        async with Client(params) as client:
            tools = await client.list_tools()
            hits = await client.call_tool("search", {"query": "okapi salary review", "k": 5})
            return tools, hits

    tools, hits = asyncio.run(run())
    assert {t.name for t in tools.tools} == {"search", "get_document", "get_context", "status", "answer"}
    expected = served.search("eng", query="okapi salary review", k=5).json()
    assert [r["chunk_id"] for r in _text(hits)["results"]] == [r["chunk_id"] for r in expected["results"]]
