"""The leak suite: try to read what a caller may not, every way the index answers.

Documents of several principals share most of their text (so a forbidden document is a near
duplicate of an allowed one and would win places among the top k if permissions were checked
after ranking). Hundreds of generated searches (modes, fusions, candidates, filters, windows,
segments, explain) as each of several callers, through the Python API, the HTTP API and MCP, plus
every document and chunk id: no answer may hold a forbidden document, chunk or even one word only a
forbidden document has, and every answer must still hold ``k`` results when the caller may read
``k`` that match. The suite must catch enforcement moved after top-k, and it does (tested below by
moving it there).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from apiserver import api_server

import quarry
from quarry.api.keys import FileKeys, KeyRing
from quarry.search.filters import Filter

GROUPS = {  # folder: (documents, principals)
    "alpha": (10, ["group:alpha"]),
    "beta": (10, ["group:beta"]),
    "shared": (5, ["group:alpha", "group:beta"]),
    "carol": (4, ["user:carol"]),
    "open": (6, ["public"]),
    "locked": (3, None),  # no rule matches: no one but the owner
}
RULES = (
    "\n".join(
        f'- path: "{folder}/**"\n  principals: {json.dumps(p)}' for folder, (_, p) in GROUPS.items() if p is not None
    )
    + "\n"
)
CALLERS = {  # name: principals
    "alpha": ["group:alpha"],
    "beta": ["group:beta"],
    "both": ["group:alpha", "group:beta"],
    "carol": ["user:carol"],
    "nobody": [],
    "stranger": ["group:gamma", "user:dave"],
}
BOILERPLATE = [
    "The okapi quarterly report reviews revenue, hiring and the release calendar for every team in detail.",
    "Each okapi program tracks its budget, its risks and the decisions taken at the weekly steering meeting.",
    "Okapi staff should file expenses within thirty days and attach receipts for anything above fifty euros.",
    "The okapi platform group maintains the deploy pipeline, the build cache and the incident runbooks.",
]
VOCAB = [
    "okapi",
    "quarterly",
    "report",
    "revenue",
    "budget",
    "risks",
    "deploy",
    "pipeline",
    "expenses",
    "receipts",
    "steering",
    "meeting",
    "incident",
    "runbooks",
    "hiring",
    "calendar",
    "release",
]


def marker(folder: str, i: int) -> str:
    """A word only this document holds (a leak of any of its text shows it)."""
    return f"zq{folder}{i}x"


def build_tree(root: Path) -> dict[str, tuple[str, list[str] | None]]:
    """The files; returns {rel_path: (marker, principals)}."""
    rng = random.Random(7)
    out = {}
    for folder, (n, principals) in GROUPS.items():
        for i in range(n):
            ext = "txt" if i % 3 == 2 else "md"
            rel = f"{folder}/doc{i:02d}.{ext}"
            word = marker(folder, i)
            paras = []
            for j in range(4):  # ~4 chunks a document, nearly all text shared with every other document
                base = " ".join(BOILERPLATE[(j + k) % 4] for k in range(3 + rng.randrange(3)))
                paras.append(f"{'## ' if ext == 'md' else ''}Part {j}\n\n{base} Reference {word} part {j}.")
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"Okapi report {word}\n\n" + "\n\n".join(paras) + "\n", encoding="utf-8")
            os.utime(path, (1_700_000_000 + i * 86400 * 30,) * 2)
            out[rel] = (word, principals)
    return out


@dataclass
class World:
    db: Path
    tree: Path
    files: dict[str, tuple[str, list[str] | None]]
    doc_of_path: dict[str, str] = field(default_factory=dict)  # rel_path -> doc_id
    principals_of: dict[str, list[str] | None] = field(default_factory=dict)  # doc_id -> principals
    marker_of: dict[str, str] = field(default_factory=dict)  # doc_id -> its marker word
    chunks_of: dict[str, list[str]] = field(default_factory=dict)  # doc_id -> chunk ids

    def allowed(self, caller: list[str] | None, doc_id: str) -> bool:
        if caller is None:
            return True
        granted = self.principals_of[doc_id]
        return bool(granted) and bool({"public", *caller} & set(granted))

    def forbidden_markers(self, caller) -> list[str]:
        return [m for d, m in self.marker_of.items() if not self.allowed(caller, d)]


@pytest.fixture(scope="module")
def world(tmp_path_factory, prefect_api):
    from quarry.flows.index import index_flow

    work = tmp_path_factory.mktemp("leaks")
    tree = work / "tree"
    files = build_tree(tree)
    (work / "acl.yaml").write_text(RULES)
    db = work / "db"
    index_flow([str(tree)], db=str(db), overrides={"acl_rules": str(work / "acl.yaml")})
    w = World(db, tree, files)
    with quarry.open(db) as idx:
        con = idx.snapshot.con
        for doc_id, rel in con.execute("SELECT doc_id, rel_path FROM documents").fetchall():
            w.doc_of_path[rel] = doc_id
            w.marker_of[doc_id], w.principals_of[doc_id] = files[rel]
        for chunk_id, doc_id in con.execute("SELECT chunk_id, doc_id FROM chunks ORDER BY chunk_id").fetchall():
            w.chunks_of.setdefault(doc_id, []).append(chunk_id)
    assert len(w.doc_of_path) == sum(n for n, _ in GROUPS.values())
    return w


# --- the generated requests -------------------------------------------------------------------------


FILTERS = [
    {},
    {"where": "file_type = 'md'"},
    {"type": ["txt"]},
    {"path": ["alpha/**", "open/**"]},
    {"where": "chunk_index >= 2"},
    {"since": "2024-01-01"},
    {"path": "carol"},
    {"where": ["file_type = md", "chunk_index <= 1"]},
]


def requests(n: int, seed: int, world: World) -> list[dict]:
    """``n`` search requests: random words (shared ones, and markers of documents to try to pull in),
    modes, fusions, small candidate pools, filters, windows, segments, explain."""
    rng = random.Random(seed)
    markers = [m for m, _ in world.files.values()]
    out = []
    for _ in range(n):
        words = rng.sample(VOCAB, rng.randint(1, 3)) + rng.sample(markers, rng.randint(0, 2))
        k = rng.choice([1, 3, 5, 8, 12, 20])
        body = {
            "query": " ".join(["okapi", *words]),
            "k": k,
            "mode": rng.choice(["hybrid", "hybrid", "vector", "bm25"]),
            **rng.choice(FILTERS),
        }
        if rng.random() < 0.4:
            body["candidates"] = k + rng.randint(0, 5)  # a pool just above k: post-filtering would starve it
        if rng.random() < 0.3:
            body["fusion"] = "rrf"
        extra = rng.random()
        if extra < 0.25:
            body["window"] = rng.choice(["1,1", "0,2", "2,0"])
        elif extra < 0.45:
            body["segments"] = rng.choice(["balanced", "find_all", "precision"])
        body["explain"] = rng.random() < 0.5
        out.append(body)
    return out


def expected_count(world: World, idx, body: dict, caller) -> int:
    """How many results a caller must get: ``k``, or fewer only when fewer chunks it may read pass the
    filter (every chunk holds "okapi", so every one matches the query in every mode)."""
    flt = Filter.build(
        where=body.get("where") or (),
        path=body.get("path") or (),
        since=body.get("since"),
        file_type=body.get("type") or (),
    )
    mask, _ = idx.filter_mask(flt or None)
    rows = range(idx.snapshot.index.n_rows) if mask is None else [int(r) for r in mask.nonzero()[0]]
    ids = idx.snapshot.index.chunk_ids(rows)
    readable = sum(1 for c in ids if world.allowed(caller, c.split(":")[0]))
    return min(body["k"], readable)


def problems_in(answer: dict, world: World, caller, want: int | None, where: str) -> list[str]:
    """Everything wrong with one answer: a forbidden document, chunk or word anywhere in it; k not filled."""
    out = []
    docs = [r["doc_id"] for r in answer.get("results", [])]
    for part in ("windows", "segments"):
        for item in answer.get(part) or []:
            docs.append(item["doc_id"])
            docs += [c.split(":")[0] for c in item.get("chunk_ids", [])]
    for doc_id in docs:
        if not world.allowed(caller, doc_id):
            out.append(f"LEAK {where}: document {doc_id} of {world.principals_of.get(doc_id)} for {caller}")
    text = json.dumps({k: v for k, v in answer.items() if k not in ("query", "filter")})  # those echo the request
    for word in world.forbidden_markers(caller):
        if word in text:
            out.append(f"LEAK {where}: text of a forbidden document ({word}) for {caller}")
    if "counts" in answer and caller is not None:  # no count of rows the caller may not read
        readable = sum(len(c) for d, c in world.chunks_of.items() if world.allowed(caller, d))
        if answer["counts"]["rows"] != readable:
            out.append(f"LEAK {where}: counts.rows {answer['counts']['rows']}, {readable} readable for {caller}")
    if want is not None and len(answer.get("results", [])) != want:
        out.append(f"k not filled {where}: {len(answer.get('results', []))} results, {want} readable for {caller}")
    return out


def python_suite(world: World, n: int = 60, seed: int = 1) -> list[str]:
    """The generated searches and every document and chunk id, through the Python API, as each caller."""
    from quarry.api.schemas import SearchRequest
    from quarry.core.errors import NotFound

    problems = []
    with quarry.open(world.db) as idx:
        for name, caller in CALLERS.items():
            for body in requests(n, seed + zlib.crc32(name.encode()) % 1000, world):
                answer = SearchRequest(**body).run(idx, caller)
                problems += problems_in(
                    answer, world, caller, expected_count(world, idx, body, caller), f"python {name} {body}"
                )
            for doc_id, chunk_ids in world.chunks_of.items():
                ok = world.allowed(caller, doc_id)
                for call in (
                    lambda: idx.document(doc_id, principals=caller),
                    lambda: idx.chunk(chunk_ids[len(chunk_ids) // 2], neighbours=2, principals=caller),
                ):
                    try:
                        got = call()
                    except NotFound:
                        if ok:
                            problems.append(f"{name} cannot read {doc_id}, which it may")
                        continue
                    if not ok:
                        problems.append(f"LEAK python {name}: read {doc_id} of {world.principals_of[doc_id]}")
                    elif "window" in got and any(c.split(":")[0] != doc_id for c in got["window"]["chunk_ids"]):
                        problems.append(f"LEAK python {name}: a window of {doc_id} reached another document")
            status = idx.status(principals=caller)
            readable = sum(len(c) for d, c in world.chunks_of.items() if world.allowed(caller, d))
            if status["chunks"] != readable:
                problems.append(f"status of {name} counts {status['chunks']} chunks, {readable} readable")
    return problems


# --- the suite, three ways -------------------------------------------------------------------------


def test_no_leak_through_the_python_api(world):
    problems = python_suite(world, n=60)
    assert not problems, "\n".join(problems[:20])


def test_the_suite_catches_enforcement_moved_after_top_k(world, monkeypatch):
    """Permissions applied to the top k instead of inside the retrievers: nothing forbidden is shown,
    but forbidden near-duplicates take places, and the suite sees k not filled."""
    from quarry.search.query import Index

    real_search = Index.search

    def post_filtered(self, query, k=10, mode="hybrid", *, principals=None, **kwargs):
        response = real_search(self, query, k, mode, principals=None, **kwargs)
        if principals is not None:
            keep = lambda d: world.allowed(list(principals), d)  # noqa: E731
            response.results = [r for r in response.results if keep(r.doc_id)]
            if response.windows is not None:
                response.windows = [w for w in response.windows if keep(w.doc_id)]
            if response.segments is not None:
                response.segments = [s for s in response.segments if keep(s.doc_id)]
        return response

    monkeypatch.setattr(Index, "search", post_filtered)
    problems = python_suite(world, n=20)
    assert any(p.startswith("k not filled") for p in problems), "the suite missed post-filtering"


def test_the_suite_catches_no_enforcement(world, monkeypatch):
    from quarry.search.query import Index

    monkeypatch.setattr(Index, "access_filter", lambda self, principals=None: None)
    problems = python_suite(world, n=10)
    assert any(p.startswith("LEAK") for p in problems), "the suite missed a leak"


def test_no_leak_through_http_and_mcp(world, tmp_path):
    ring = KeyRing(FileKeys(world.db / "keys.json"))
    tokens = {name: ring.create(f"leak-{name}", caller, rate_limit=0)[1] for name, caller in CALLERS.items()}
    problems = []
    with api_server(world.db, log=tmp_path / "api.log") as (base, _), quarry.open(world.db) as idx:
        with httpx.Client(base_url=base, timeout=60) as http:
            for name, caller in CALLERS.items():
                auth = {"Authorization": f"Bearer {tokens[name]}"}
                for body in requests(25, 100 + zlib.crc32(name.encode()) % 1000, world):
                    response = http.post("/v1/search", json=body, headers=auth)
                    assert response.status_code == 200, response.text
                    problems += problems_in(
                        response.json(), world, caller, expected_count(world, idx, body, caller), f"http {name} {body}"
                    )
                for doc_id, chunk_ids in world.chunks_of.items():
                    ok = world.allowed(caller, doc_id)
                    for path in (f"/v1/documents/{doc_id}", f"/v1/chunks/{chunk_ids[-1]}?neighbours=3"):
                        response = http.get(path, headers=auth)
                        if response.status_code != (200 if ok else 404):
                            problems.append(f"{'LEAK ' if not ok else ''}http {name} {path}: {response.status_code}")
                        elif not ok:
                            problems += problems_in(response.json(), world, caller, None, f"http {name} {path}")
        problems += mcp_suite(world, base, tokens)
    assert not problems, "\n".join(problems[:20])


def mcp_suite(world: World, base: str, tokens: dict[str, str]) -> list[str]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    problems: list[str] = []

    async def run(name, caller):
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {tokens[name]}"}, timeout=60) as http:
            async with Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client:
                for body in requests(8, 500 + zlib.crc32(name.encode()) % 1000, world):
                    args = {k: v for k, v in body.items() if k in ("query", "k", "mode", "segments", "explain")}
                    if isinstance(body.get("window"), str):
                        args["window"] = int(body["window"].split(",")[0]) or 1
                    result = await client.call_tool("search", args)
                    answer = json.loads(result.content[0].text)
                    problems.extend(problems_in(answer, world, caller, None, f"mcp {name} {args}"))
                for doc_id, chunk_ids in list(world.chunks_of.items())[::3]:
                    for tool, args in (
                        ("get_document", {"doc_id": doc_id}),
                        ("get_context", {"chunk_id": chunk_ids[0], "before": 3, "after": 3}),
                        ("get_context", {"chunk_id": chunk_ids[0], "query": "okapi budget"}),
                    ):
                        result = await client.call_tool(tool, args)
                        if result.is_error != (not world.allowed(caller, doc_id)):
                            problems.append(f"LEAK mcp {name} {tool} {doc_id}: error={result.is_error}")
                        elif not result.is_error:
                            problems.extend(
                                problems_in(
                                    json.loads(result.content[0].text), world, caller, None, f"mcp {name} {tool}"
                                )
                            )
                status = json.loads((await client.call_tool("status", {})).content[0].text)
                readable = sum(1 for d in world.marker_of if world.allowed(caller, d))
                if status["documents"] != readable:
                    problems.append(f"mcp status of {name}: {status['documents']} documents, {readable} readable")

    for name, caller in CALLERS.items():
        asyncio.run(run(name, caller))
    return problems


def test_forbidden_document_evidence_never_moves_allowed_scores(world):
    """Document cards (path words) add evidence to the fused score, normalised by the best card: only
    cards of documents the caller may read count. A query naming a folder the caller cannot read
    leaves the boost of its own best-matching document whole."""
    from quarry.search.fusion import DOC_WEIGHT

    with quarry.open(world.db) as idx:
        query = "okapi carol open doc00"  # cards: 'carol/doc00.md' (forbidden to alpha) and 'open/doc00.md'
        kwargs = {"k": 40, "mode": "hybrid", "principals": ["group:alpha"], "candidates": 200}
        with_cards = {r.chunk_id: r.score for r in idx.search(query, **kwargs).results}
        without = {r.chunk_id: r.score for r in idx.search(query, weights={"documents": 0}, **kwargs).results}
        best_doc = world.doc_of_path["open/doc00.md"]
        boosted = [c for c in with_cards if c.startswith(best_doc) and c in without]
        assert boosted
        for chunk_id in boosted:  # the best readable card gets the full weight: no forbidden card above it
            assert with_cards[chunk_id] - without[chunk_id] == pytest.approx(DOC_WEIGHT, abs=1e-6)


# --- numbers: nothing a restricted key is told may depend on what it may not read -----------------


NUMBER_RULES = '- path: "mine/**"\n  principals: ["group:alpha"]\n- path: "open/**"\n  principals: ["public"]\n'


def _numbers(http, token: str, base: str, mcp_status) -> dict:
    """Everything numeric a key gets from status (HTTP, MCP, the page) and a few searches, with the
    generation (a commit counter, which says a commit happened, not what it held) and timings
    left out; scores are compared too."""
    import re

    from quarry.api.web.session import COOKIE

    auth = {"Authorization": f"Bearer {token}"}
    out = {"status": http.get("/v1/status", headers=auth).json(), "mcp status": mcp_status}
    for name, body in {
        "hybrid": {"query": "okapi budget", "k": 8, "explain": True},
        "bm25": {"query": "okapi budget", "k": 8, "mode": "bm25", "explain": True},
        "vector": {"query": "okapi budget", "k": 8, "mode": "vector"},
        "filtered": {"query": "okapi", "k": 3, "where": "file_type = 'md'"},
        "segments": {"query": "okapi budget", "segments": "balanced"},
        "window": {"query": "okapi budget", "k": 2, "window": "1,1"},
    }.items():
        answer = http.post("/v1/search", json=body, headers=auth).json()
        answer.pop("timings")
        out[f"search {name}"] = answer
    page = httpx.get(f"{base}/status", cookies={COOKIE: token}, timeout=60).text
    out["status page"] = {
        dt: dd for dt, dd in re.findall(r"<dt>([^<]*)</dt><dd>(.*?)</dd>", page) if dt != "generation"
    }
    for part in out.values():
        if isinstance(part, dict):
            part.pop("generation", None)
    return out


def _unscored(value):
    """``value`` without its scores: BM25's idf and length normalisation are the whole index's
    statistics (docs/api.md says so), so scores move when any document is added; ranks must not."""
    if isinstance(value, dict):
        return {
            k: _unscored(v) for k, v in value.items() if k not in ("score", "scores", "fused", "relevance", "value")
        }
    if isinstance(value, list):
        return [_unscored(v) for v in value]
    return value


def test_no_number_a_restricted_key_gets_depends_on_what_it_may_not_read(tmp_path, run_flow):
    """A key's status (HTTP, MCP, the page) and searches (results, scores, counts, segments, windows)
    are the same before and after documents it may not read are added, changed and removed: nothing
    it is told counts them (search_index rows, segments, per-generation rows and terms included)."""
    import re

    tree = tmp_path / "tree"
    for folder, n in (("mine", 3), ("open", 2), ("secret", 4)):
        for i in range(n):
            path = tree / folder / f"doc{i}.md"
            path.parent.mkdir(parents=True, exist_ok=True)
            body = "\n\n".join(
                f"## Part {j}\n\n{BOILERPLATE[(i + j) % 4]} Reference {marker(folder, i)}." for j in range(3)
            )
            path.write_text(f"# Okapi {folder} {i}\n\n{body}\n")
    rules = tmp_path / "acl.yaml"
    rules.write_text(NUMBER_RULES)
    db = tmp_path / "db"
    run_flow([tree], db, overrides={"acl_rules": str(rules)})
    ring = KeyRing(FileKeys(db / "keys.json"))
    token = ring.create("alpha", ["group:alpha"], rate_limit=0)[1]
    admin = ring.create("admin", admin=True, rate_limit=0)[1]

    async def mcp_status(base):
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
            async with Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client:
                return json.loads((await client.call_tool("status", {})).content[0].text)

    with api_server(db, log=tmp_path / "api.log") as (base, _), httpx.Client(base_url=base, timeout=60) as http:
        before = _numbers(http, token, base, asyncio.run(mcp_status(base)))
        whole_before = http.get("/v1/status", headers={"Authorization": f"Bearer {admin}"}).json()
        # hidden documents added, changed and removed: a new generation with a segment of its own
        for i in range(4, 9):
            (tree / "secret" / f"doc{i}.md").write_text(
                f"# Secret {i}\n\nOkapi budget {marker('secret', i)} newword{i} and more hidden text.\n"
            )
        (tree / "secret" / "doc0.md").write_text("# Changed\n\nOkapi budget rewritten, a new hidden word zzhid.\n")
        (tree / "secret" / "doc1.md").unlink()
        run_flow([tree], db, overrides={"acl_rules": str(rules)})
        after = _numbers(http, token, base, asyncio.run(mcp_status(base)))
        whole_after = http.get("/v1/status", headers={"Authorization": f"Bearer {admin}"}).json()
    assert whole_after["generation"] == whole_before["generation"] + 1
    assert whole_after["documents"] == whole_before["documents"] + 4  # the admin key sees the whole index
    assert len(whole_after["search_index"]["segments"]) == 2
    assert whole_after["search_index"]["terms"] > whole_before["search_index"]["terms"]  # the whole vocabulary
    assert before["status"]["documents"] == 5 and before["search hybrid"]["results"]
    for part in before:
        a, b = _unscored(after[part]), _unscored(before[part])
        assert a == b, (
            part,
            [
                (x, y)
                for x, y in zip(json.dumps(a, sort_keys=True).split(","), json.dumps(b, sort_keys=True).split(","))
                if x != y
            ][:6],
        )
    assert not re.search(r"search_index|terms|segments", json.dumps(before["status"]))


# --- answers: no forbidden passage reaches a prompt, an answer or a citation --------------------------


def echoing_model(body: dict) -> str:
    """A model that repeats the start of every passage it was given and cites it (and one number it
    was not given): whatever reaches the prompt comes back in the answer and its citations."""
    import re

    prompt = "\n".join(str(m.get("content", "")) for m in body["messages"])
    passages = re.findall(r'<passage number="(\d+)"[^>]*>\n(.*?)\n</passage>', prompt, re.DOTALL)
    sentences = [f"{' '.join(text.split()[:12])} [{n}]." for n, text in passages]
    return " ".join(sentences + ["Also see [99]."])


def questions(n: int, seed: int, world: World) -> list[dict]:
    """``n`` questions: shared words and markers of documents to try to pull in, modes, filters."""
    rng = random.Random(seed)
    markers = [m for m, _ in world.files.values()]
    out = []
    for _ in range(n):
        words = rng.sample(VOCAB, rng.randint(1, 3)) + rng.sample(markers, rng.randint(0, 3))
        body = {
            "question": f"What does the okapi {' '.join(words)} say?",
            "k": rng.choice([1, 3, 5, 8]),
            "mode": rng.choice(["hybrid", "hybrid", "vector", "bm25"]),
            **rng.choice(FILTERS),
        }
        body["style"] = rng.choice(["text", "json"])
        out.append(body)
    return out


def answer_problems(answer: dict, prompts: list[str], world: World, caller, where: str) -> list[str]:
    out = []
    docs = [c["doc_id"] for c in answer.get("citations", [])] + [p["doc_id"] for p in answer.get("evidence", [])]
    docs += [
        c.split(":")[0]
        for part in ("citations", "evidence")
        for item in answer.get(part, [])
        for c in item.get("chunk_ids", [])
    ]
    for doc_id in docs:
        if not world.allowed(caller, doc_id):
            out.append(f"LEAK {where}: document {doc_id} of {world.principals_of.get(doc_id)} for {caller}")
    text = json.dumps({k: v for k, v in answer.items() if k not in ("question", "standalone_question", "searched")})
    for word in world.forbidden_markers(caller):
        if word in text:
            out.append(f"LEAK {where}: text of a forbidden document ({word}) in the answer for {caller}")
        for prompt in prompts:
            if word in prompt.split("Question:")[0]:  # the question itself may name a marker
                out.append(f"LEAK {where}: text of a forbidden document ({word}) in a prompt for {caller}")
                break
    return out


def answer_suite(world: World, server, n: int, seed: int = 3) -> tuple[list[str], int]:
    """The generated questions as each caller through ``Index.answer``; (problems, prompts recorded)."""
    from quarry.api.answering import AnswerRequest
    from quarry.core.settings import Settings

    problems, prompts = [], 0
    settings = Settings.from_env(llm_base_url=server.base_url, llm_model="fake-chat", llm_api_key="sk-leak")
    with quarry.open(world.db, settings) as idx:
        for name, caller in CALLERS.items():
            for body in questions(n, seed + zlib.crc32(name.encode()) % 1000, world):
                before = len(server.prompts)
                answer = AnswerRequest(**body).run(idx, caller)
                recorded = server.prompts[before:]
                prompts += len(recorded)
                problems += answer_problems(answer, recorded, world, caller, f"answer {name} {body}")
    return problems, prompts


@pytest.fixture
def model():
    from fakeopenai import FakeOpenAI

    with FakeOpenAI() as server:
        server.chat_handler = echoing_model
        yield server


def test_no_leak_through_answers(world, model):
    problems, prompts = answer_suite(world, model, n=50)
    assert prompts >= 200, f"only {prompts} prompts reached the model"
    assert not problems, "\n".join(problems[:20])


def test_the_answer_suite_catches_evidence_retrieved_without_principals(world, model, monkeypatch):
    import quarry.search.answer as answering

    real = answering.gather

    def everything(index, question, *, principals=None, **kwargs):
        return real(index, question, principals=None, **kwargs)

    monkeypatch.setattr(answering, "gather", everything)
    problems, _ = answer_suite(world, model, n=8)
    assert any("in a prompt" in p for p in problems), "the suite missed forbidden passages in prompts"
    assert any("in the answer" in p for p in problems)


def test_no_leak_through_http_answers_and_streams(world, model, tmp_path):
    ring = KeyRing(FileKeys(world.db / "keys.json"))
    tokens = {
        name: ring.create(f"answer-{name}", caller, rate_limit=0, answer_rate_limit=0)[1]
        for name, caller in CALLERS.items()
    }
    env = {"QUARRY_LLM_BASE_URL": model.base_url, "QUARRY_LLM_MODEL": "fake-chat"}
    problems = []
    with api_server(world.db, log=tmp_path / "api.log", env=env) as (base, _):
        with httpx.Client(base_url=base, timeout=60) as http:
            for name, caller in CALLERS.items():
                auth = {"Authorization": f"Bearer {tokens[name]}"}
                for i, body in enumerate(questions(10, 900 + zlib.crc32(name.encode()) % 1000, world)):
                    before = len(model.prompts)
                    if i % 2:
                        body.pop("style")
                        with http.stream("POST", "/v1/answer", json={**body, "stream": True}, headers=auth) as r:
                            assert r.status_code == 200
                            lines = [line for line in r.iter_lines() if line.startswith("data: ")]
                        answer = json.loads(lines[-1].removeprefix("data: "))
                        streamed = "".join(lines[:-1])
                        for word in world.forbidden_markers(caller):
                            if word in streamed:
                                problems.append(f"LEAK http stream {name}: {word}")
                    else:
                        response = http.post("/v1/answer", json=body, headers=auth)
                        assert response.status_code == 200, response.text
                        answer = response.json()
                    problems += answer_problems(answer, model.prompts[before:], world, caller, f"http {name} {body}")
    assert not problems, "\n".join(problems[:20])
