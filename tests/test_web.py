"""The web pages of ``quarry api`` without a browser: each page's HTML through the real app
(FastAPI's TestClient over a real store), sign-in and its cookie, what a key short of a principal
sees (nothing of the restricted document, on any page, fragment or link), and that no page names
another host. The browser drives the same pages in tests/test_web_browser.py."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient
from webstore import SECRET_LINES, SECRET_TITLE, SECRET_WORD, build

import quarry
from quarry.api.app import ApiConfig, create_app
from quarry.api.web import views
from quarry.core.models import STAGES
from quarry.search.highlight import split_marked, term_spans


@pytest.fixture(scope="module")
def store(tmp_path_factory, prefect_api):
    return build(tmp_path_factory.mktemp("web"))


@pytest.fixture(scope="module")
def app(store):
    return create_app(ApiConfig(db=str(store.db)))


def client(app, store, who: str | None = None, base: str = "http://testserver") -> TestClient:
    c = TestClient(app, base_url=base, follow_redirects=False)
    if who:
        r = c.post("/login", data={"token": store.tokens[who], "next": "/"})
        assert r.status_code == 303, r.text
    return c


@pytest.fixture(scope="module")
def secret(store):
    with quarry.open(store.db) as idx:
        hit = idx.search(SECRET_WORD, k=1, mode="bm25").results[0]
    assert hit.path.endswith("hr/salaries.md")
    return hit


class Links(HTMLParser):
    """Every URL a page names (href, src, action) and its visible text."""

    def __init__(self):
        super().__init__()
        self.urls, self.text = [], []

    def handle_starttag(self, tag, attrs):
        self.urls += [v for k, v in attrs if k in ("href", "src", "action", "data-src", "srcset") and v]

    def handle_data(self, data):
        self.text.append(data)


def parsed(html: str) -> Links:
    p = Links()
    p.feed(html)
    return p


def hrefs(html: str, prefix: str) -> list[str]:
    return [u for u in parsed(html).urls if u.startswith(prefix)]


# --- signing in -----------------------------------------------------------------------------------


def test_pages_need_a_key_and_sign_in_sets_a_strict_httponly_cookie(app, store):
    c = client(app, store)
    for path in ("/", "/status", "/runs", "/documents/x"):
        r = c.get(path)
        assert r.status_code == 303 and r.headers["location"].startswith("/login?next="), (path, r.status_code)
    assert c.get("/fragments/results?q=deploy").status_code == 401
    page = c.get("/login")
    assert page.status_code == 200 and 'type="password"' in page.text and '<label for="token">' in page.text
    bad = c.post("/login", data={"token": "qk_000000000000_" + "x" * 43, "next": "/"})
    assert bad.status_code == 401 and "not a valid API key" in bad.text and "set-cookie" not in bad.headers
    good = c.post("/login", data={"token": store.tokens["hr"], "next": "/status"})
    assert good.status_code == 303 and good.headers["location"] == "/status"
    cookie = good.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie and "secure" not in cookie
    assert c.get("/status").status_code == 200
    out = c.post("/logout")
    assert out.status_code == 303 and 'quarry_key=""' in out.headers["set-cookie"]


def test_the_cookie_is_secure_under_tls_and_posts_from_another_site_are_refused(app, store):
    c = client(app, store, base="https://testserver")
    r = c.post("/login", data={"token": store.tokens["hr"], "next": "/"})
    assert "secure" in r.headers["set-cookie"].lower()
    foreign = client(app, store).post(
        "/login", data={"token": store.tokens["hr"], "next": "/"}, headers={"Origin": "http://evil.example"}
    )
    assert foreign.status_code == 403 and "set-cookie" not in foreign.headers
    assert (
        client(app, store)
        .post("/login", data={"token": store.tokens["hr"], "next": "//evil.example/x"})
        .headers["location"]
        == "/"
    )


def test_a_revoked_key_is_signed_out_at_its_next_page(app, store):
    from quarry.api.keys import FileKeys, KeyRing

    ring = KeyRing(FileKeys(store.db / "keys.json"))
    token = ring.create("shortlived", principals=["group:hr"])[1]
    c = client(app, store)
    c.post("/login", data={"token": token, "next": "/"})
    assert c.get("/status").status_code == 200
    ring.revoke("shortlived")
    r = c.get("/status")
    assert r.status_code == 303 and r.headers["location"].startswith("/login")


# --- each page ------------------------------------------------------------------------------------


def test_search_page_highlights_terms_and_links_each_result_to_its_chunk(app, store):
    c = client(app, store, "admin")
    empty = c.get("/")
    assert empty.status_code == 200 and 'id="q"' in empty.text and 'role="search"' in empty.text
    r = c.get("/", params={"q": "rollback deploy", "explain": "1"})
    assert r.status_code == 200 and r.headers["content-encoding"] == "gzip"  # httpx asked for it, and unpacked it
    results = r.text.count('<li class="result">')
    assert results >= 3
    assert "<mark>rollback</mark>" in r.text.lower() or "<mark>rollback" in r.text.lower()
    assert r.text.count('<dl class="explain"') == results and "bm25</dt>" in r.text
    links = hrefs(r.text, "/documents/")
    assert len(links) >= results
    doc_id, query = re.match(r"/documents/([^?]+)\?chunk=([^&]+)&", links[0]).groups()
    assert query.startswith(doc_id) and links[0].endswith("#c-" + query.rsplit("%3A", 1)[-1])
    assert 'class="header"' in r.text  # contextual headers shown
    fragment = c.get("/fragments/results", params={"q": "rollback deploy"})
    assert fragment.status_code == 200 and "<html" not in fragment.text and '<li class="result">' in fragment.text


@pytest.mark.parametrize(
    "params, expect",
    [
        ({"window": "1,1"}, "chunks "),
        ({"mode": "bm25"}, "bm25"),
        ({"mode": "vector"}, "vector"),
        ({"fusion": "rrf"}, "(rrf)"),
        ({"type": "pdf"}, "quarterly.pdf"),
        ({"path": "*/runbooks/**"}, "runbooks/"),
        ({"where": "file_type = 'md'"}, "filter <code>"),
        ({"since": "2000-01-01", "k": "5"}, '<li class="result">'),
        ({"segments": "balanced"}, '<ol class="results">'),
    ],
)
def test_search_options_reach_the_library(app, store, params, expect):
    r = client(app, store, "admin").get("/", params={"q": "deploy rollback", **params})
    assert r.status_code == 200 and expect in r.text, r.text[-2000:]
    if "type" in params:
        assert all(p.endswith(".pdf") for p in re.findall(r'<span class="path">([^<]+)</span>', r.text))


@pytest.mark.parametrize(
    "params, message",
    [
        ({"where": "no_such_column = 1"}, "no_such_column"),
        ({"window": "1,1", "segments": "balanced"}, "segments"),
        ({"k": "5000"}, "k:"),
        ({"since": "yesterday-ish"}, "since"),
    ],
)
def test_a_refused_search_is_a_400_page_with_the_reason(app, store, params, message):
    r = client(app, store, "admin").get("/", params={"q": "deploy", **params})
    assert r.status_code == 400 and 'class="error"' in r.text and message in r.text, r.text[-1500:]
    assert "Traceback" not in r.text and str(store.db) not in r.text


def test_document_view_draws_chunks_headers_pages_and_marks_the_linked_chunk(app, store):
    c = client(app, store, "admin")
    with quarry.open(store.db) as idx:
        hit = idx.search("incident review payments", k=1, filters="file_type = 'pdf'").results[0]
    r = c.get(f"/documents/{hit.doc_id}", params={"chunk": hit.chunk_id, "q": "rollback"})
    assert r.status_code == 200
    assert r.text.count('<article class="chunk') == hit_doc_chunks(store, hit.doc_id)
    marked = re.search(r'<article class="chunk hit" id="c-(\d+)"', r.text)
    assert marked and int(marked.group(1)) == hit.chunk_index
    assert "page 1</span>" in r.text and "page 2</span>" in r.text  # page breaks from the stored offsets
    assert "<mark>rollback</mark>" in r.text.lower() or "<mark>Rollback</mark>" in r.text
    assert 'class="header"' in r.text and "Outline" in r.text
    # the second run could not read the changed PDF: the page says so, and links the run
    assert "Parse warnings" in r.text and "could not read the file again" in r.text and "/runs/" in r.text


def test_the_library_keeps_a_documents_pages_warnings_and_later_failures(store):
    from webstore import REPORT_PAGES

    from quarry.core.errors import NotFound

    with quarry.open(store.db) as idx:
        hit = idx.search("incident review payments", k=1, filters="file_type = 'pdf'").results[0]
        doc = idx.document(hit.doc_id, text=(0, 0))
        runs = idx.runs(5)
        assert idx.run(runs[0]["run_id"]) == runs[0]
        with pytest.raises(NotFound):
            idx.run("nope")
    assert doc["n_pages"] == 2 and len(doc["page_offsets"]) == 2 and doc["page_offsets"][0] == 0
    assert doc["chunks"][0]["text"].startswith(REPORT_PAGES[0].splitlines()[0])
    assert doc["ocr_page_numbers"] == [] and doc["warnings"] == []
    assert [f["run_id"] for f in doc["failures"]] == [runs[0]["run_id"]]
    assert "not valid PDF" in doc["failures"][0]["error"]


def hit_doc_chunks(store, doc_id: str) -> int:
    with quarry.open(store.db) as idx:
        return len(idx.document(doc_id)["chunks"])


def test_runs_page_charts_one_bar_per_stage_of_each_timed_run(app, store):
    c = client(app, store, "admin")
    r = c.get("/runs")
    assert r.status_code == 200
    with quarry.open(store.db) as idx:
        runs = idx.runs(10)
    timed = [run for run in runs if run["durations"]]
    assert len(timed) >= 2
    for run in timed:
        stages = re.findall(rf'data-stage="([a-z]+)" data-run="{re.escape(run["run_id"])}"', r.text)
        assert sorted(stages) == sorted([s for s in STAGES if s in run["durations"]] + ["total"]), run["run_id"]
    assert "failed" in r.text and "quarterly.pdf" in r.text  # the second run's failure is named
    assert 'id="quality"' not in r.text  # no evaluation yet
    from quarry.store import evals

    for generation, recall, flagged in ((1, 0.9, None), (2, 0.7, "recall@10 0.700 < 0.900 (generation 1) - 0.05")):
        evals.record(
            store.db,
            {
                "eval_id": f"e{generation}",
                "created": "2026-01-0{generation}T00:00:00",
                "set_name": "nightly",
                "method": "known-item",
                "generation": generation,
                "mode": "hybrid",
                "k": 10,
                "questions": 200,
                "recall": recall,
                "mrr": 0.5,
                "metrics": {"recall@10": recall, "chunk_recall@10": 0.25},
                "flagged": flagged,
            },
        )
    page = c.get("/runs").text
    assert page.index('data-eval="nightly/hybrid/2"') < page.index(
        'data-eval="nightly/hybrid/1"'
    )  # a trend, newest first
    assert "0.700" in page and "0.250" in page and "recall@10 0.700 &lt; 0.900" in page
    detail = c.get(f"/runs/{timed[0]['run_id']}")
    assert detail.status_code == 200 and "Stages" in detail.text and "Settings" in detail.text
    assert c.get("/runs/nope").status_code == 404


def test_status_page_counts_and_links_the_api_docs(app, store):
    r = client(app, store, "admin").get("/status")
    with quarry.open(store.db) as idx:
        info = idx.status()
    assert r.status_code == 200 and f"{info['chunks']:,}" in r.text and info["model"] in r.text
    assert 'href="/docs"' in r.text and "store on disk" in r.text and "Last run" in r.text


def test_corpus_page_shows_the_corpus_report_to_admins_only(app, store):
    """The corpus report as a page: the same numbers as ``Index.corpus_report`` (what ``quarry
    corpus report`` prints); it counts every document, so a key short of admin gets a 403 and no
    link to it."""
    with quarry.open(store.db) as idx:
        report = idx.corpus_report()
    admin = client(app, store, "admin")
    page = admin.get("/corpus")
    assert page.status_code == 200, page.text
    text = " ".join(" ".join(parsed(page.text).text).split())
    assert f"documents {report['documents']:,}" in text and f"chunks {report['chunks']:,}" in text
    for section in ("Duplicates by folder", "Languages", "Personal data and secrets", "Boilerplate"):
        assert section in text
    for lang in report["languages"]:
        assert f"{lang['lang']} {lang['chunks']:,} {lang['documents']:,}" in text
    for kind in report["pii"]:
        assert f"{kind['kind']} {kind['total']:,} {kind['chunks']:,}" in text
    assert 'href="/corpus"' in admin.get("/status").text
    outsider = client(app, store, "outsider")
    refused = outsider.get("/corpus")
    assert refused.status_code == 403 and "admin key" in refused.text
    assert 'href="/corpus"' not in outsider.get("/status").text
    assert client(app, store).get("/corpus").status_code == 303  # signed out: to the sign-in page


# --- permissions: a key without the principal sees nothing of the restricted document ------------


def test_a_key_without_the_principal_finds_the_restricted_document_nowhere(app, store, secret):
    hr = client(app, store, "hr")
    assert SECRET_TITLE in hr.get("/", params={"q": SECRET_WORD}).text
    assert hr.get(f"/documents/{secret.doc_id}").status_code == 200
    c = client(app, store, "outsider")
    pages = {
        "/": {},
        "/status": {},
        "/runs": {},
        "/fragments/results": {"q": SECRET_WORD},
        f"/documents/{secret.doc_id}": {},
        f"/documents/{secret.doc_id}?chunk={secret.chunk_id}": {},
        f"/fragments/context/{secret.chunk_id}": {"n": "3"},
    }
    for query in (SECRET_WORD, "salary bands", "engineering salary bands on-call", "hr"):
        for mode in ("hybrid", "bm25", "vector"):
            pages[f"/?q={query}&mode={mode}&explain=1&window=3,3"] = {}
    pages[f"/?q={SECRET_WORD}&segments=find_all"] = {}
    for path, params in pages.items():
        r = c.get(path, params=params)
        text = r.text
        asked = path + str(params)  # what the page was asked for may echo (the 404 names the id it got)
        for leak in (SECRET_TITLE, secret.doc_id, "salaries.md", *SECRET_LINES):
            assert leak not in asked and leak.lower() not in text.lower() or leak in asked, (path, leak)
        for url in parsed(text).urls:
            assert secret.doc_id not in url and "salaries" not in url, (path, url)
    assert c.get(f"/documents/{secret.doc_id}").status_code == 404
    assert c.get(f"/fragments/context/{secret.chunk_id}").status_code == 404
    assert c.get("/runs").status_code == 403  # runs name files of every permission: admin keys only
    with quarry.open(store.db) as idx:
        readable = idx.status(principals=["group:eng", "public"])
    assert f">{readable['documents']:,}<" in c.get("/status").text


# --- the answer panel ------------------------------------------------------------------------------


def test_answer_panel_links_each_citation_to_its_chunk_and_shows_nothing_forbidden(store, secret, monkeypatch):
    from fakeopenai import FakeOpenAI

    with FakeOpenAI() as fake:
        fake.chat_handler = lambda body: "Roll back with the deploy tool [1]. Check the dashboards after [2]."
        monkeypatch.setenv("QUARRY_LLM_BASE_URL", fake.base_url)
        monkeypatch.setenv("QUARRY_LLM_MODEL", "fake-chat")
        app = create_app(ApiConfig(db=str(store.db)))  # its index reads the endpoint from the environment
        admin = client(app, store, "admin")
        r = admin.get("/answer", params={"q": "how do we roll back a bad deploy"})
        assert r.status_code == 200
        panel = r.text.split('<section class="answer"', 1)[1].split("</section>", 1)[0]
        assert 'data-status="answered"' in panel and '<ol class="sources">' in panel
        cites = hrefs(panel, "/documents/")
        assert len(cites) >= 2
        doc_id, chunk = re.match(r"/documents/([^?]+)\?chunk=([^&]+)&", cites[0]).groups()
        assert chunk.startswith(doc_id) and cites[0].endswith("#c-" + chunk.rsplit("%3A", 1)[-1])
        assert '<li class="result">' in r.text  # the search's results stay below the answer
        assert admin.get(cites[0].split("#")[0]).status_code == 200
        none = admin.get("/answer", params={"q": "zyxxqv plorbnik frumious"})
        assert 'data-status="not_found"' in none.text
        asked = fake.calls
        outsider = client(app, store, "outsider")
        for question in (SECRET_WORD, "engineering salary bands on-call", "what does the committee decide in March?"):
            text = outsider.get("/answer", params={"q": question}).text
            for leak in (SECRET_TITLE, secret.doc_id, "salaries.md", *SECRET_LINES):
                assert leak.lower() not in text.lower(), (question, leak)
        for prompt in fake.prompts[asked:]:
            assert not any(line in prompt for line in SECRET_LINES) and "salaries.md" not in prompt
        page = admin.get("/", params={"q": "deploy"}).text
        assert 'formaction="/answer"' in page and '<section class="answer"' not in page


# --- nothing from another host --------------------------------------------------------------------


def test_no_page_names_another_host_and_the_policy_forbids_it(app, store, secret):
    c = client(app, store, "admin")
    with quarry.open(store.db) as idx:
        run_id = idx.runs(1)[0]["run_id"]
    for path in (
        "/",
        "/?q=deploy&explain=1",
        f"/documents/{secret.doc_id}",
        "/runs",
        f"/runs/{run_id}",
        "/status",
        "/login",
    ):
        r = c.get(path)
        assert r.status_code == 200, path
        policy = r.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "http" not in policy and "*" not in policy
        for url in parsed(r.text).urls:
            parts = urlsplit(url)
            assert not parts.scheme and not parts.netloc, (path, url)
        assert "@import" not in r.text and "url(http" not in r.text
    for name in ("web.css", "web.js", "icon.svg"):
        body = c.get(f"/static/{name}").text
        assert "http://" not in body.replace("http://www.w3.org/2000/svg", "") and "https://" not in body, name


# --- the pieces -----------------------------------------------------------------------------------


def test_terms_are_marked_as_bm25_reads_them():
    text = "Deploys of v1.4.4 and the Deployment rollback; naïve café"
    marked = [text[a:b] for a, b in term_spans(text, "deploy 1.4.4 the naive")]
    assert marked == ["Deploys", "v1.4.4", "Deployment", "naïve"]
    assert "".join(p for p, _ in split_marked(text, "rollback")) == text
    assert term_spans(text, "the of and") == []


def test_page_breaks_fall_inside_and_between_chunks():
    text = "aaaa bbbb\n\ncccc dddd\n\neeee"
    doc = {
        "page_offsets": [0, 11, 22],
        "ocr_page_numbers": [2],
        "chunks": [
            {"chunk_index": 0, "start_char": 0, "end_char": 16, "text": text[0:16]},
            {"chunk_index": 1, "start_char": 18, "end_char": 26, "text": text[18:26]},
        ],
    }
    first, second = views.layout(doc, 0, 1, hit=1, query="cccc")
    assert first.parts == [
        ("page", 1, False),
        ("text", [("aaaa bbbb\n\n", False)]),
        ("page", 2, True),
        ("text", [("cccc", True), (" ", False)]),
    ]
    assert second.hit and second.parts == [
        ("text", [("dd\n\n", False)]),
        ("page", 3, False),
        ("text", [("eeee", False)]),
    ]
    alone = views.layout(doc, 1, 1, hit=None)
    assert alone[0].parts[0] == ("page", 2, True)  # the first chunk shown says which page it is on
    # a catalog from before page offsets were kept: a break where a chunk starts on a later page
    old = {
        "chunks": [
            {**doc["chunks"][0], "page_start": 1, "page_end": 1},
            {**doc["chunks"][1], "page_start": 2, "page_end": 3},
        ]
    }
    assert [b.parts[0] for b in views.layout(old, 0, 1, None)] == [("page", 1, False), ("page", 2, False)]
    old["chunks"][0]["page_end"] = 2  # chunk 1 goes on with the page chunk 0 ended on
    assert views.layout(old, 0, 1, None)[1].parts[0][0] == "text"


def test_overlapping_chunks_show_shared_text_once():
    text = "one two three four five six"
    doc = {
        "chunks": [
            {"chunk_index": 0, "start_char": 0, "end_char": 13, "text": text[:13]},
            {"chunk_index": 1, "start_char": 8, "end_char": 27, "text": text[8:27]},
        ]
    }
    blocks = views.layout(doc, 0, 1, None)
    shown = "".join(piece for b in blocks for kind, *rest in b.parts if kind == "text" for piece, _ in rest[0])
    assert shown == text and blocks[1].overlap == 5


def test_the_chart_scales_each_lane_and_skips_untimed_runs():
    runs = [
        {
            "run_id": "b",
            "started": "2026-01-02T00:00:00Z",
            "durations": {"parse": {"seconds": 2.0}, "embed": {"seconds": 1.0}, "total": {"seconds": 3.5}},
        },
        {"run_id": "s", "started": "2026-01-01T12:00:00Z", "durations": {}, "status": "skipped"},
        {"run_id": "a", "started": "2026-01-01T00:00:00Z", "durations": {"parse": {"seconds": 1.0}, "total": 1.5}},
    ]
    chart = views.stage_chart(runs)
    assert [lane.stage for lane in chart.lanes] == ["parse", "embed", "total"]
    parse = chart.lanes[0]
    assert [b.run_id for b in parse.bars] == ["a", "b"] and parse.peak == 2.0
    assert parse.bars[1].height == pytest.approx(2 * parse.bars[0].height)
    assert [b.run_id for b in chart.lanes[1].bars] == ["b"]
    assert views.stage_chart([runs[1]]) is None


# --- the small things a stranger notices -----------------------------------------------------------


def test_an_unknown_page_is_an_html_404_for_a_browser_and_json_for_the_api(app, store):
    c = client(app, store, "admin")
    page = c.get("/no/such/page", headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    assert page.status_code == 404 and page.headers["content-type"].startswith("text/html")
    assert "<h1>Not found</h1>" in page.text and "no such page" in page.text and '{"error"' not in page.text
    for path, accept in (("/no/such/page", "application/json"), ("/v1/nothing", "text/html")):
        r = c.get(path, headers={"Accept": accept})
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


def test_an_error_page_shows_commands_as_code_not_backticks(app, store):
    page = client(app, store, "hr").get("/runs")
    assert page.status_code == 403 and "<code>quarry keys create NAME --admin</code>" in page.text
    assert "`" not in page.text.split('role="alert"')[1].split("</p>")[0]


def test_a_result_shows_its_score_once_and_no_markdown_heading_marks(app, store):
    page = client(app, store, "admin").get("/", params={"q": "deploy rollback runbook", "explain": "1"})
    assert page.status_code == 200 and "<dt>vector</dt>" in page.text
    assert "<dt>fused</dt>" not in page.text  # the head's score is the fused one: not said twice
    snippets = re.findall(r'<p class="text">(.*?)</p>', page.text, re.S)
    assert snippets and not [s for s in snippets if re.search(r"(^|\n)\s*#{1,6} ", s)], snippets


def test_the_context_panel_marks_the_hit(app, store):
    with quarry.open(store.db) as idx:
        hit = idx.search("deploy rollback runbook", k=1).results[0]
    fragment = client(app, store, "admin").get(f"/fragments/context/{hit.chunk_id}", params={"n": 1, "q": "rollback"})
    assert fragment.status_code == 200
    marked = re.search(r'<mark class="hit-chunk"[^>]*>(.*?)</mark>(?!</mark>)', fragment.text, re.S)
    assert marked and re.sub(r"<[^>]+>", "", marked.group(1)).strip()[:40] in hit.text.replace("&", "&amp;")
