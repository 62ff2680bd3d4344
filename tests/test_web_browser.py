"""The web pages in a real browser: Debian's chromium driven through chromium-driver by selenium,
against a real ``quarry api`` process. Sign in, search, open a result and find its chunk
highlighted and in view with its header; the runs chart with one bar per stage; a key without the
restricted document's principal finds it on no page, fragment or link; nothing is loaded from
another host; the pages at phone width. A screenshot of each page is saved under the test's
temporary folder (the path is printed).

Skipped, saying why, where chromium or chromium-driver is missing (``make browser`` installs them
as root); under ``CI=true`` that is a failure instead."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from apiserver import api_server
from conftest import shared
from webstore import SECRET_LINES, SECRET_TITLE, SECRET_WORD, build

import quarry
from quarry.core.models import STAGES

pytestmark = pytest.mark.slow
CHROMIUM = os.environ.get("QUARRY_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("QUARRY_CHROMEDRIVER", "/usr/bin/chromedriver")
WAIT = 20  # seconds for a page or fragment to appear


def _browser_missing() -> str | None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not (Path(p).exists() or shutil.which(p))]
    if not missing:
        return None
    return (
        f"{' and '.join(missing)} not found: Debian's chromium and chromium-driver drive these tests "
        "(`make browser` installs them, as root)"
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory, prefect_api):
    why = _browser_missing()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {why}")
        pytest.skip(why)
    from fakeopenai import FakeOpenAI

    work = tmp_path_factory.mktemp("webui")
    store = build(work, extra=[shared("scanned", "loremipsum-flat.pdf")])  # a page read by OCR
    with FakeOpenAI() as model:  # the chat endpoint of the Answer panel
        model.chat_handler = lambda body: "Roll back with the deploy tool [1]. Watch the dashboards after [2]."
        env = {"QUARRY_LLM_BASE_URL": model.base_url, "QUARRY_LLM_MODEL": "fake-chat"}
        with api_server(store.db, "--rate-limit", "0", log=work / "api.log", env=env) as (base, _proc):
            yield base, store, work


@pytest.fixture(scope="module")
def shots(site):
    folder = site[2] / "screenshots"
    folder.mkdir()
    print(f"\nscreenshots of the pages: {folder}")
    return folder


def browser(width: int = 1280, height: int = 900, logging: dict | None = None):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    if logging:
        options.set_capability("goog:loggingPrefs", logging)
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={width},{height}",
        "--lang=en-US",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


@pytest.fixture
def driver():
    d = browser()
    yield d
    d.quit()


def wait_for(driver, css: str):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT).until(ec.presence_of_element_located((By.CSS_SELECTOR, css)))


def sign_in(driver, base: str, token: str, target: str = "/") -> None:
    from selenium.webdriver.common.by import By

    driver.get(base + target)
    box = wait_for(driver, "#token")  # every page sends a visitor without a key to the sign-in page
    assert "/login" in driver.current_url
    box.send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "form.stack button[type=submit]").click()
    wait_for(driver, "header.top .who")


def shot(driver, folder: Path, name: str) -> Path:
    path = folder / f"{name}.png"
    # the whole page: as tall as its content (headless chromium sizes its screenshot to the window)
    width = driver.get_window_size()["width"]
    driver.set_window_size(width, 900)
    height = driver.execute_script("return Math.max(document.body.scrollHeight, window.innerHeight)")
    driver.set_window_size(width, min(int(height) + 140, 5000))
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path


def resources_from_elsewhere(driver, base: str) -> list[str]:
    """Every resource the page loaded whose URL is not on this server."""
    names = driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name).concat([document.location.href])"
    )
    return [n for n in names if not n.startswith(base + "/")]


def test_sign_in_search_and_open_a_result_at_its_chunk(site, shots, driver):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    base, store, _ = site
    sign_in(driver, base, store.tokens["admin"])
    box = wait_for(driver, "#q")
    driver.find_element(By.TAG_NAME, "body").send_keys("/")  # the keyboard way to the search box
    assert driver.switch_to.active_element == box
    driver.find_element(By.CSS_SELECTOR, "input[name=explain]").click()
    box.send_keys("how do we roll back a bad deploy", Keys.ENTER)
    first = wait_for(driver, "#results li.result")
    assert "q=how+do+we+roll+back" in driver.current_url  # the URL follows the search
    assert driver.find_elements(By.CSS_SELECTOR, "#results mark"), "matched terms are highlighted"
    assert driver.find_elements(By.CSS_SELECTOR, "#results dl.explain")
    header = first.find_element(By.CSS_SELECTOR, ".header").text
    assert header.strip()
    context = first.find_element(By.CSS_SELECTOR, "details.context summary")
    context.click()  # the hit's neighbours, fetched as a fragment
    wait_for(driver, "#results details.context[open] .context-text")
    shot(driver, shots, "search")
    assert resources_from_elsewhere(driver, base) == []

    link = first.find_element(By.CSS_SELECTOR, "a.title")
    chunk_index = int(link.get_attribute("href").rsplit("#c-", 1)[1])
    link.click()
    hit = wait_for(driver, "article.chunk.hit")
    assert hit.get_attribute("id") == f"c-{chunk_index}"
    assert hit.find_element(By.CSS_SELECTOR, ".header").text.strip() == header.strip()
    top, bottom, view = driver.execute_script(
        "const r = arguments[0].getBoundingClientRect(); return [r.top, r.bottom, window.innerHeight];", hit
    )
    assert top < view and bottom > 0, "the linked chunk is scrolled into view"
    color = driver.execute_script("return getComputedStyle(arguments[0]).backgroundColor", hit)
    plain = driver.find_elements(By.CSS_SELECTOR, "article.chunk:not(.hit)")
    if plain:
        assert color != driver.execute_script("return getComputedStyle(arguments[0]).backgroundColor", plain[0])
    assert driver.find_elements(By.CSS_SELECTOR, ".outline li")
    shot(driver, shots, "document")
    assert resources_from_elsewhere(driver, base) == []


def test_answer_panel_cites_and_links_to_the_cited_chunk(site, shots, driver):
    from selenium.webdriver.common.by import By

    base, store, _ = site
    sign_in(driver, base, store.tokens["admin"])
    box = wait_for(driver, "#q")
    box.send_keys("how do we roll back a bad deploy")
    driver.find_element(By.CSS_SELECTOR, "button.ask").click()
    cite = wait_for(driver, "section.answer .atext a.cite")
    assert "/answer?" in driver.current_url and cite.text == "[1]"
    assert driver.find_elements(By.CSS_SELECTOR, "section.answer ol.sources li blockquote")
    assert driver.find_elements(By.CSS_SELECTOR, "#results li.result"), "the results stay below the answer"
    shot(driver, shots, "answer")
    assert resources_from_elsewhere(driver, base) == []
    chunk_index = int(cite.get_attribute("href").rsplit("#c-", 1)[1])
    cite.click()
    hit = wait_for(driver, "article.chunk.hit")
    assert hit.get_attribute("id") == f"c-{chunk_index}"


def test_document_view_of_a_paged_and_an_ocr_document(site, shots, driver):
    from selenium.webdriver.common.by import By

    base, store, _ = site
    sign_in(driver, base, store.tokens["admin"])
    with quarry.open(store.db) as idx:
        scan = idx.search("lorem ipsum consequat", k=1, filters="path GLOB '*loremipsum*'").results[0]
        report = idx.search("incident review payments", k=1, filters="path GLOB '*quarterly*'").results[0]
    driver.get(f"{base}/documents/{scan.doc_id}?chunk={scan.chunk_id}")
    assert wait_for(driver, ".pagebreak.ocr").text.strip() == "page 1 · OCR"
    shot(driver, shots, "document-ocr")
    driver.get(f"{base}/documents/{report.doc_id}?chunk={report.chunk_id}&q=rollback")
    wait_for(driver, "article.chunk.hit")
    breaks = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".pagebreak")]
    assert breaks[:2] == ["page 1", "page 2"]
    warnings = driver.find_element(By.CSS_SELECTOR, "section.warnings").text
    assert "could not read the file again" in warnings
    shot(driver, shots, "document-pdf")


def test_runs_chart_has_one_bar_per_stage(site, shots, driver):
    from selenium.webdriver.common.by import By

    base, store, _ = site
    sign_in(driver, base, store.tokens["admin"], "/runs")
    wait_for(driver, "figure.chart svg")
    with quarry.open(store.db) as idx:
        runs = [r for r in idx.runs(10) if r["durations"]]
    for run in runs:
        bars = driver.find_elements(By.CSS_SELECTOR, f'rect.bar[data-run="{run["run_id"]}"]')
        stages = sorted(b.get_attribute("data-stage") for b in bars)
        assert stages == sorted([s for s in STAGES if s in run["durations"]] + ["total"])
        assert all(float(b.get_attribute("height")) > 0 for b in bars)
    assert {b.get_attribute("data-stage") for b in driver.find_elements(By.CSS_SELECTOR, "rect.bar")} >= set(STAGES)
    failed = driver.find_element(By.CSS_SELECTOR, "tr.more details")
    failed.click()
    assert "quarterly.pdf" in failed.text
    shot(driver, shots, "runs")
    bar = driver.find_element(By.CSS_SELECTOR, 'a rect.bar[data-stage="embed"]')
    driver.execute_script("arguments[0].parentNode.dispatchEvent(new MouseEvent('click', {bubbles: true}))", bar)
    wait_for(driver, "table.stages")
    assert "/runs/" in driver.current_url
    shot(driver, shots, "run")
    driver.get(base + "/status")
    wait_for(driver, "dl.facts.big")
    assert driver.find_element(By.CSS_SELECTOR, 'a[href="/docs"]')
    shot(driver, shots, "status")
    assert resources_from_elsewhere(driver, base) == []


def test_a_key_without_the_principal_sees_the_restricted_document_nowhere(site, shots, driver):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    base, store, _ = site
    with quarry.open(store.db) as idx:
        secret = idx.search(SECRET_WORD, k=1, mode="bm25").results[0]
    assert secret.path.endswith("salaries.md")
    sign_in(driver, base, store.tokens["outsider"])
    seen = {}
    box = wait_for(driver, "#q")
    box.send_keys("salary bands " + SECRET_WORD, Keys.ENTER)
    wait_for(driver, "#results .summary")
    for summary in driver.find_elements(By.CSS_SELECTOR, "#results details.context summary")[:3]:
        summary.click()  # each hit's context fragment
    time.sleep(1)
    seen["search"] = driver.page_source
    shot(driver, shots, "search-outsider")
    for path in (
        "/status",
        "/runs",
        f"/documents/{secret.doc_id}",
        f"/documents/{secret.doc_id}?chunk={secret.chunk_id}",
        f"/fragments/context/{secret.chunk_id}?n=2",
        f"/fragments/results?q={SECRET_WORD}&window=3,3",
        f"/?q={SECRET_WORD}&mode=vector&explain=1&segments=find_all",
    ):
        driver.get(base + path)
        wait_for(driver, "body")
        seen[path] = driver.page_source
        hrefs = driver.execute_script(
            "return Array.from(document.querySelectorAll('[href],[src],[action]'))"
            ".map(e => e.getAttribute('href') || e.getAttribute('src') || e.getAttribute('action'))"
        )
        assert not [h for h in hrefs if secret.doc_id in h or "salaries" in h], path
    for path, html in seen.items():
        for leak in (SECRET_TITLE, "salaries.md", *SECRET_LINES):
            assert leak not in html, (path, leak)
        if secret.doc_id not in path:
            assert secret.doc_id not in html, path
    assert "Not found" in seen[f"/documents/{secret.doc_id}"]
    assert "Not for this key" in seen["/runs"]


def test_pages_at_phone_width(site, shots):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    base, store, _ = site
    d = browser(390, 844)
    try:
        sign_in(d, base, store.tokens["hr"])
        wait_for(d, "#q").send_keys("deploy rollback", Keys.ENTER)
        wait_for(d, "#results li.result")
        overflow = d.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1, "no sideways scrolling at phone width"
        assert d.find_element(By.CSS_SELECTOR, "#q").get_attribute("id") == "q"
        shot(d, shots, "search-phone")
        d.find_element(By.CSS_SELECTOR, "#results a.title").click()
        wait_for(d, "article.chunk.hit")
        assert d.execute_script("return document.documentElement.scrollWidth - window.innerWidth") <= 1
        shot(d, shots, "document-phone")
    finally:
        d.quit()


def requests_made(driver) -> list[str]:
    """Every URL the browser asked for since the last call (Chrome's performance log: the DevTools
    Network events, so a request that failed or was never answered counts too)."""
    import json

    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def test_api_docs_render_with_no_request_to_another_host(site, shots):
    """Swagger UI comes from the server itself (no CDN): /docs renders the operations of
    /openapi.json, and no request the browser made went to another host."""
    from selenium.webdriver.common.by import By

    base, _, _ = site
    d = browser(logging={"performance": "ALL"})
    try:
        d.get(base + "/docs")
        wait_for(d, ".swagger-ui .opblock-summary-path")
        assert "/v1/search" in d.find_element(By.TAG_NAME, "body").text
        shot(d, shots, "docs")
        made = requests_made(d)
        assert any(u.startswith(base + "/docs/assets/") for u in made), made
        assert [u for u in made if not u.startswith((base + "/", f"blob:{base}/", "data:"))] == []
    finally:
        d.quit()


def test_what_a_stranger_meets_reads_right(site, shots, driver):
    """The filter placeholders fit their boxes; the open Context panel marks the hit; a result's score
    shows once and its snippet without Markdown's '##'; a 403 shows its command as code; an unknown
    page is a page, not JSON."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    base, store, _ = site
    sign_in(driver, base, store.tokens["hr"])
    box = wait_for(driver, "#q")
    for name in ("where", "path", "type", "since", "until"):
        field = driver.find_element(By.CSS_SELECTOR, f"input[name={name}]")
        needed, room = driver.execute_script(
            "const e = arguments[0], s = getComputedStyle(e), c = document.createElement('canvas').getContext('2d');"
            "c.font = s.font; return [c.measureText(e.placeholder).width,"
            " e.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight)];",
            field,
        )
        assert needed <= room, f"the {name} placeholder is cut: {needed:.0f} px in {room:.0f}"
    driver.find_element(By.CSS_SELECTOR, "input[name=explain]").click()
    box.send_keys("how do we roll back a bad deploy", Keys.ENTER)
    first = wait_for(driver, "#results li.result")
    assert not first.find_elements(By.XPATH, ".//dt[text()='fused']")  # the head's score is the fused one
    texts = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#results p.text")]
    assert texts and not [t for t in texts if any(line.lstrip().startswith("#") for line in t.splitlines())]
    first.find_element(By.CSS_SELECTOR, "details.context summary").click()
    hit = wait_for(driver, "#results details.context[open] mark.hit-chunk")
    assert hit.text.strip() and hit.value_of_css_property("background-color") not in ("rgba(0, 0, 0, 0)", "transparent")
    shot(driver, shots, "context-hit")
    driver.get(base + "/runs")
    alert = wait_for(driver, "p.error[role=alert]")
    assert "`" not in alert.text and alert.find_element(By.TAG_NAME, "code").text == "quarry keys create NAME --admin"
    driver.get(base + "/no/such/page")
    assert wait_for(driver, "h1").text == "Not found" and '{"error"' not in driver.page_source
    shot(driver, shots, "not-found")
