"""The documentation site as a reader sees it: built as the README says, served over HTTP, every
page opened in a real headless browser (Debian's Chromium, driven by Selenium and Chromium's own
chromedriver), its visible text judged; each page's first screen kept as a screenshot in
``test-artifacts/site/`` (CI keeps that folder)."""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlparse

import filelock
import pytest

from tests.conftest import ROOT
from torchbake.tasks import ns

SCREENSHOTS = ROOT / "test-artifacts" / "site"
CHROMIUM, CHROMEDRIVER = shutil.which("chromium") or "/usr/bin/chromium", shutil.which("chromedriver") or "/usr/bin/chromedriver"
# a Markdown table the renderer left as text: its delimiter row "|---|:---:|" in a paragraph
RAW_TABLE = re.compile(r"\|\s*:?-{3,}:?\s*\|")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The site, built strictly (scripts/docs.sh), served on a free loopback port."""
    where = tmp_path_factory.mktemp("site") / "site"
    built = subprocess.run(["bash", "scripts/docs.sh", "build", str(where)], cwd=ROOT, capture_output=True, text=True,
                           timeout=180, stdin=subprocess.DEVNULL)
    assert built.returncode == 0, built.stdout + built.stderr
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(where))
    handler.log_message = lambda *args: None  # type: ignore[method-assign]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    pages = sorted(str(path.parent.relative_to(where)) for path in where.rglob("index.html")
                   if not path.relative_to(where).parts[0] in ("search", "assets"))
    yield f"http://127.0.0.1:{server.server_port}/", [("" if page == "." else page + "/") for page in pages]
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Chromium with a temporary folder of the test's: it leaves a folder of its own
    (org.chromium.Chromium.*) in TMPDIR at every start, which nothing removed."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1280,900"):
        options.add_argument(argument)
    shared = Path(tempfile.gettempdir())
    before = set(shared.glob("org.chromium.*"))
    own = tmp_path_factory.mktemp("chromium-tmp")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER, env={**os.environ, "TMPDIR": str(own)}), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()
    assert set(shared.glob("org.chromium.*")) == before, "Chromium left a folder in the shared temporary folder"


def visit(browser, url: str) -> dict:
    """The page at ``url`` as the browser shows it: the article's visible text, the elements the
    browser did not know (an unescaped ``<suite>`` becomes one, and shows nothing), the ids on the
    page, and where its links go."""
    browser.get(url)
    return browser.execute_script("""
        const article = document.querySelector('article');
        return {
            text: article.innerText,
            paragraphs: [...article.querySelectorAll('p')].map(p => p.innerText),
            unknown: [...article.querySelectorAll('*')].filter(e => e instanceof HTMLUnknownElement)
                .map(e => '<' + e.tagName.toLowerCase() + '> in: ' + e.parentElement.innerText.slice(0, 120)),
            ids: [...document.querySelectorAll('[id]')].map(e => e.id),
            links: [...article.querySelectorAll('a[href]')].map(a => a.href),
        };""")


# The search's index and its worker: every page loads them and builds the whole site's index anew
# (4 of the 11 s of CPU the pages took here, 2026-11-30). The pages are read without them; the
# search's own test below has them.
SEARCH = ["*/search/search_index.json", "*/assets/javascripts/workers/search.*"]


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory) -> Path:
    """This process's folder of the pages' first screens (``pages`` fills it)."""
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture(scope="module")
def pages(served, browser, screenshots):
    """Every page, visited once (the search left out: SEARCH); its first screen saved in
    ``screenshots``, which then replaces SCREENSHOTS whole: two workers that each run this module
    (pytest -n 2 without --dist loadfile) leave one whole set, never a mix."""
    base, names = served
    seen = {}
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": SEARCH})
    try:
        for name in names:
            seen[name] = visit(browser, base + name)
            browser.save_screenshot(str(screenshots / f"{name.strip('/').replace('/', '-') or 'index'}.png"))
    finally:
        browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})
    SCREENSHOTS.parent.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(SCREENSHOTS.parent / ".site.lock"):  # one worker at a time replaces the kept set
        shutil.rmtree(SCREENSHOTS, ignore_errors=True)
        shutil.copytree(screenshots, SCREENSHOTS)
    return seen


def test_the_site_has_its_pages_and_a_screenshot_of_each(served, pages, screenshots):
    assert {"", "reference/tasks/", "reference/options/", "platforms/", "troubleshooting/"} <= set(pages)
    for folder in (screenshots, SCREENSHOTS):  # this process's, and the set CI keeps
        shots = sorted(folder.glob("*.png"))
        assert len(shots) == len(pages) and all(shot.stat().st_size > 10_000 for shot in shots), (folder, shots)


def test_no_page_shows_a_markdown_table_row_as_text(pages):
    """A table without a blank line before it renders as its pipes (docs/platforms.md's did)."""
    shown = {name: [text[:160] for text in page["paragraphs"] if RAW_TABLE.search(text)]
             for name, page in pages.items()}  # (a table shown in a code block is meant as text)
    assert {name: rows for name, rows in shown.items() if rows} == {}


def test_no_placeholder_is_dropped_by_the_browser(pages):
    """`debian:<suite>` in a help text, unescaped, is an element to a browser: it shows "debian:"."""
    assert {name: page["unknown"] for name, page in pages.items() if page["unknown"]} == {}
    assert "debian:<suite>" in pages["reference/options/"]["text"]


def test_every_internal_link_reaches_an_element(served, pages):
    base, _ = served
    broken = []
    for name, page in pages.items():
        for link in page["links"]:
            target, fragment = urldefrag(link)
            if not target.startswith(base):
                continue
            path = urlparse(target).path.lstrip("/")
            if path not in pages:
                broken.append(f"{name}: {link} (no such page)")
            elif fragment and fragment not in pages[path]["ids"]:
                broken.append(f"{name}: {link} (no element #{fragment})")
    assert broken == []


def test_the_help_anchors_of_every_flag_are_on_the_tasks_page(pages):
    """`invoke --help TASK` says each flag is at #TASK--FLAG of the tasks reference."""
    from torchbake.tasks import help as task_help

    ids = set(pages["reference/tasks/"]["ids"])
    missing = [task_help.anchor(name, flag) for name in ns.tasks for flag in ns.tasks[name].flags
               if task_help.anchor(name, flag) not in ids]
    assert missing == []


def test_the_search_finds_each_task_by_name(served, browser):
    """Typed into the site's search box, each task's name lists its section of the tasks reference
    (one page, the box cleared between names, as a reader searching again does)."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    base, _ = served
    browser.get(base)
    box = browser.find_element(By.CSS_SELECTOR, "input.md-search__input")
    box.click()
    missed = []
    for task in sorted(ns.tasks):
        name = task.replace("_", "-")
        box.send_keys(Keys.CONTROL, "a")
        box.send_keys(Keys.BACKSPACE)
        box.send_keys(name)
        wanted = urldefrag(urljoin(base, f"reference/tasks/#invoke-{name}"))[1]

        def found(driver, wanted=wanted) -> bool:  # (read in one go: the list is redrawn as the search narrows)
            hrefs = driver.execute_script(
                "return [...document.querySelectorAll('.md-search-result__item a')].map(a => a.href)")
            return any(urldefrag(href)[1] == wanted and "reference/tasks/" in href for href in hrefs)

        try:
            WebDriverWait(browser, 20, poll_frequency=0.05).until(found)
        except TimeoutException:
            missed.append(name)
    assert missed == [], f"searching these names lists no link to their section of the tasks reference: {missed}"
