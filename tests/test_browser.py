"""The web page in a real headless Chromium (Debian's package), driven by Playwright."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import socket
import threading
import time

import httpx
import pandas as pd
import pytest

from tablesafe._settings import load_site_config
from tablesafe.output._render import column_decimals
from tablesafe.server import create_app

pytestmark = pytest.mark.system

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running(site):
    """Serve ``site`` with uvicorn on a free port, in a thread; yield its URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(site), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            if httpx.get(f"{url}/api/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def show_statistic(page, label: str) -> str:
    """Pick the estimate whose name starts with ``label`` (where the table has several).

    Returns:
        The text of the one table then shown.
    """
    if page.locator("#stat-pick").count():
        options = page.locator("#stat-pick option")
        texts = options.all_inner_texts()
        found = next(i for i, t in enumerate(texts) if t.startswith(label))
        page.select_option("#stat-pick", options.nth(found).get_attribute("value"))
    caption = page.locator("table.cross caption")
    assert caption.count() == 1 and caption.inner_text().startswith(label)
    return page.locator("table.cross").inner_text()


@pytest.fixture(scope="module")
def served(demo_dir, tmp_path_factory):
    base = tmp_path_factory.mktemp("site")
    site = load_site_config(
        data={
            "base": str(base),
            "datasets": [
                {
                    "name": "demo",
                    "path": str(demo_dir),
                    "protection": {"method": "none"},
                    "rules": {"min_universe_size": 10, "sliver_min_difference": 0},
                }
            ],
        }
    )
    with running(site) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.fail(
            "Chromium is not installed: the browser tests need Debian's chromium package "
            "(make test installs it with apt-get)"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        yield b
        b.close()


def test_build_a_table_and_download_csv(served, browser, tmp_path):
    page = browser.new_page(accept_downloads=True)
    page.goto(served)
    page.wait_for_selector("#rows option[value='AGEGRP']", state="attached")
    page.select_option("#rows", "AGEGRP")
    page.select_option("#cols", "SEX")
    page.select_option("#uvar", "REGION")
    page.check("#ucats-list input[value='1']")
    page.check("#ucats-list input[value='2']")
    assert page.inner_text("#universe-words") == "Universe: Region is North or North East."
    page.check("input[name='statistic'][value='count']")
    page.click("#build")
    page.wait_for_selector("table.cross")
    text = page.inner_text("#result")
    assert "Unweighted counts" in text and "Female" in text and "Total" in text
    # The site's protection is "none": the page says so above the table (issue 38).
    assert page.inner_text("#table-title").startswith("UNPROTECTED: ")
    with page.expect_download() as info:
        page.click("#download-csv")
    path = tmp_path / "table.csv"
    info.value.save_as(path)
    downloaded = pd.read_csv(path, comment="#")
    # The page's CSV is the API's with labels beside the codes.
    api = httpx.post(
        f"{served}/api/datasets/demo/tables?format=csv&labels=true",
        json={
            "dimensions": ["AGEGRP", "SEX"],
            "universe": {"REGION": [1, 2]},
            "statistic": "count",
        },
    )
    expected = pd.read_csv(io.StringIO(api.text), comment="#")
    pd.testing.assert_frame_equal(downloaded, expected)
    # The page's numbers are the API's numbers.
    total = expected.loc[(expected["AGEGRP"] == "_T") & (expected["SEX"] == "_T"), "n"].item()
    assert f"{total:,}" in text
    page.close()


def test_errors_are_shown_to_the_user(served, browser):
    page = browser.new_page()
    page.goto(served)
    page.wait_for_selector("#rows option[value='SEX']", state="attached")
    page.select_option("#rows", "SEX")
    page.select_option("#cols", "SEX")
    page.click("#build")
    # A locator wait, not wait_for_function: the page's Content-Security-Policy
    # forbids evaluating strings (unsafe-eval), as it should.
    page.locator("#message").filter(has_text=re.compile(r"\S")).wait_for()
    assert "given twice" in page.inner_text("#message")
    page.close()


def test_keyboard_only_use(served, browser):
    page = browser.new_page()
    page.goto(served)
    page.wait_for_selector("#rows option[value='EDUC']", state="attached")
    page.focus("#rows")
    page.keyboard.type("Highest")  # select by typing, as a keyboard user would
    page.focus("#build")
    page.keyboard.press("Enter")
    page.wait_for_selector("table.cross")
    labels = page.eval_on_selector_all("select", "els => els.map(e => e.labels.length)")
    assert all(n >= 1 for n in labels)
    page.close()


def _screenshots(tmp_path):
    """Where screenshots go: docs/images when TABLESAFE_SCREENSHOTS=docs, else a temp folder.

    The suite must not rewrite tracked files; regenerate the guide's images with
    ``TABLESAFE_SCREENSHOTS=docs .venv/bin/python -m pytest tests/test_browser.py``.
    """
    import os
    from pathlib import Path

    if os.environ.get("TABLESAFE_SCREENSHOTS") == "docs":
        folder = Path(__file__).resolve().parent.parent / "docs" / "images"
    else:
        folder = tmp_path / "images"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_custom_groups_footnotes_chart_downloads_and_shared_url(served, browser, tmp_path):
    """The issue-16 walk-through; screenshots go to docs/images/ for docs/builder-page.md."""

    from axe_playwright_python.sync_playwright import Axe

    images = _screenshots(tmp_path)
    page = browser.new_page(accept_downloads=True, viewport={"width": 1100, "height": 900})
    page.goto(served)
    page.wait_for_selector("#gvar option[value='AGE']", state="attached")
    # Variable search across names, labels and categories.
    page.fill("#var-search", "married")
    assert "Marital status" in page.inner_text("#var-results")
    page.screenshot(path=str(images / "builder-search.png"))
    # Custom age groups: 0-29 and 30-59; the rest goes to "Other".
    page.select_option("#gvar", "AGE")
    page.select_option("#gcats", [str(a) for a in range(30)])
    page.fill("#glabel", "Under 30")
    page.click("#add-group")
    page.select_option("#gcats", [str(a) for a in range(30, 60)])
    page.fill("#glabel", "30 to 59")
    page.click("#add-group")
    assert "Under 30" in page.inner_text("#groups")
    page.select_option("#rows", "AGE_C")
    page.select_option("#cols", "SEX")
    page.check("input[name='statistic'][value='count']")
    page.click("#build")
    page.wait_for_selector("#footnotes")
    text = page.inner_text("#result")
    assert "Under 30" in text and "30 to 59" in text and "Other" in text
    notes = page.inner_text("#footnotes")
    assert "Protection:" in notes and "Source:" in notes
    # The page's numbers are the API's numbers for the same custom grouping.
    body = {
        "dimensions": ["AGE_C", "SEX"],
        "statistic": "count",
        "groupings": [
            {
                "name": "AGE_C",
                "variable": "AGE",
                "groups": [
                    {"code": "g1", "label": "Under 30", "members": list(range(30))},
                    {"code": "g2", "label": "30 to 59", "members": list(range(30, 60))},
                ],
                "other": "Other",
            }
        ],
    }
    api = httpx.post(f"{served}/api/datasets/demo/tables", json=body).json()
    total = next(c["n"] for c in api["cells"] if c["AGE_C"] == "_T" and c["SEX"] == "_T")
    assert f"{total:,}" in text
    page.screenshot(path=str(images / "builder-table.png"), full_page=True)
    # The chart: a population pyramid of the protected counts, exported as SVG and PNG.
    svg = page.inner_html("#chart")
    assert "Population pyramid" in svg and svg.count("<rect") == 1 + 3 * 2
    # Of an unprotected site's table: never called protected (issue 38).
    assert "UNPROTECTED weighted counts" in svg or "UNPROTECTED unweighted counts" in svg
    assert "Drawn from the UNPROTECTED (true) values" in page.inner_text("#chart-caption")
    page.locator("#chart-box").screenshot(path=str(images / "builder-chart.png"))
    for fmt, button in (
        ("svg", "#download-svg"),
        ("png", "#download-png"),
        ("csv", "#download-csv"),
        ("xlsx", "#download-xlsx"),
    ):
        with page.expect_download() as info:
            page.click(button)
        path = tmp_path / f"out.{fmt}"
        info.value.save_as(path)
        assert path.stat().st_size > 100
    assert (tmp_path / "out.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    csv = pd.read_csv(tmp_path / "out.csv", comment="#")
    assert csv["n"].tolist() == [c["n"] for c in api["cells"]]
    about = pd.read_excel(tmp_path / "out.xlsx", sheet_name="about", header=None)
    assert about[0].tolist()[:3] == ["About this table", "Title", "Universe"]
    # Accessibility: axe-core finds no violation on the page with a table and chart.
    results = Axe().run(page)
    assert results.violations_count == 0, results.generate_report()
    # The shared URL (no API key in it) rebuilds the same table.
    shared = page.get_attribute("#share", "href")
    assert shared and "key=" not in shared and "table=" in shared
    again = browser.new_page(viewport={"width": 1100, "height": 900})
    again.goto(shared)
    again.wait_for_selector("#footnotes")
    assert again.inner_text("#result") == text
    again.screenshot(path=str(images / "builder-shared.png"))
    again.close()
    page.close()


def test_a_zone_level_table_from_the_hierarchy(served, browser, tmp_path):
    """Pick the upper level of GEOGRAPHY, filter by an AGE_TREE node; the page shows the tree."""
    images = _screenshots(tmp_path)
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    page.goto(served)
    page.wait_for_selector("button.level[data-level='ZONE']")
    page.click("button.level[data-level='ZONE']")
    assert page.input_value("#rows") == "ZONE"
    page.select_option("#cols", "SEX")
    page.check("input[name='statistic'][value='count']")
    # Open the age tree and its 25-34 band; filter the universe to the band (AGEGRP level).
    page.click("details[data-hierarchy='AGE_TREE'] > summary")
    page.click("button.filter[data-level='AGEGRP'][data-code='3']")
    assert "Age group is 25-34" in page.inner_text("#universe-words")
    page.click("details[data-hierarchy='GEOGRAPHY'] > summary")
    page.locator("details[data-hierarchy='GEOGRAPHY'] li > details > summary").first.click()
    tree = page.inner_text("details[data-hierarchy='GEOGRAPHY']")
    assert "North (3)" in tree and "North East" in tree and "South and islands (2)" in tree
    page.click("#build")
    page.wait_for_selector("#footnotes")
    text = page.inner_text("#result")
    assert "Zone (groups of regions)" in text and "South and islands" in text
    page.screenshot(path=str(images / "builder-hierarchy.png"), full_page=True)
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page)  # with both trees open
    assert results.violations_count == 0, results.generate_report()
    # The page's numbers are the API's; and (protection 'none' on this test site) the
    # zone's count is the sum of its regions' counts: the same records at both levels.
    universe = {"AGEGRP": [3]}
    zone = httpx.post(
        f"{served}/api/datasets/demo/tables",
        json={"dimensions": ["ZONE", "SEX"], "universe": universe, "statistic": "count"},
    ).json()["cells"]
    region = httpx.post(
        f"{served}/api/datasets/demo/tables",
        json={"dimensions": ["REGION", "SEX"], "universe": universe, "statistic": "count"},
    ).json()["cells"]
    north = next(c["n"] for c in zone if c["ZONE"] == "N" and c["SEX"] == "_T")
    assert north == sum(c["n"] for c in region if c["REGION"] in (1, 2, 3) and c["SEX"] == "_T")
    assert f"{north:,}" in text
    page.close()


def test_a_long_request_shows_progress_and_can_be_cancelled(served, browser):
    """The table request is held in the browser's network layer; the page can cancel it."""
    page = browser.new_page()
    held: list[object] = []
    page.route("**/api/datasets/demo/tables", lambda route: held.append(route))
    page.goto(served)
    page.wait_for_selector("#rows option[value='EDUC']", state="attached")
    page.select_option("#rows", "EDUC")
    page.click("#build")
    page.wait_for_selector("#progress-box:not([hidden])")
    assert "Building the table" in page.inner_text("#progress-text")
    assert page.is_enabled("#cancel")
    page.click("#cancel")
    # A locator wait, not wait_for_function: the page's Content-Security-Policy
    # forbids evaluating strings (unsafe-eval), as it should.
    page.locator("#message").filter(has_text=re.compile(r"\S")).wait_for()
    assert "Cancelled" in page.inner_text("#message")
    assert page.is_hidden("#progress-box") and page.is_disabled("#cancel")
    assert page.inner_text("#result") == ""
    # Let requests through again: the same page builds the table.
    page.unroute("**/api/datasets/demo/tables")
    page.click("#build")
    page.wait_for_selector("table.cross")
    assert page.inner_text("#message") == ""
    page.close()


def test_sums_and_means_of_a_continuous_variable(served, browser):
    """Pick sum and mean of INCOME; the page's figures are the API's; axe finds nothing."""
    from axe_playwright_python.sync_playwright import Axe

    page = browser.new_page(viewport={"width": 1100, "height": 900})
    page.goto(served)
    page.wait_for_selector("#magvar option[value='INCOME']", state="attached")
    assert page.is_visible("#magnitude-box")
    page.select_option("#rows", "REGION")
    page.select_option("#cols", "SEX")
    page.check("input[name='statistic'][value='count']")
    page.select_option("#magvar", "INCOME")
    page.check("input[name='magstat'][value='mean']")
    page.click("#build")
    page.wait_for_selector("#footnotes")
    # One table at a time: the statistic list names each estimate, the sum shown first.
    assert page.locator("table.cross").count() == 1
    captions = page.locator("#stat-pick option").all_inner_texts()
    assert captions[0] == "Unweighted counts"
    assert any(c.startswith("Sum of Annual income") for c in captions)
    assert any(c.startswith("Mean of Annual income") for c in captions)
    assert page.inner_text("table.cross caption").startswith("Sum of Annual income")
    api = httpx.post(
        f"{served}/api/datasets/demo/tables",
        json={
            "dimensions": ["REGION", "SEX"],
            "statistic": "count",
            "magnitudes": ["sum:INCOME", "mean:INCOME"],
        },
    ).json()
    total = next(c for c in api["cells"] if c["REGION"] == "_T" and c["SEX"] == "_T")
    sum_table = show_statistic(page, "Sum of Annual income")
    mean_table = show_statistic(page, "Mean of Annual income")
    assert f"{round(total['sum_INCOME']):,}" in sum_table
    # One number of decimals for the column of means (the text format's rule, also the page's).
    decimals = column_decimals("mean_INCOME", [c["mean_INCOME"] for c in api["cells"]])
    assert f"{total['mean_INCOME']:,.{decimals}f}" in mean_table
    results = Axe().run(page)
    assert results.violations_count == 0, results.generate_report()
    # The shared link rebuilds the same table, magnitudes included.
    link = page.get_attribute("#share", "href")
    again = browser.new_page()
    again.goto(link)
    again.wait_for_selector("table.cross caption:has-text('Mean of Annual income')")
    assert again.input_value("#magvar") == "INCOME"
    again.close()
    # Over the survey weights, each caption says so, and its figures are the API's
    # sum_INCOME_weighted and mean_INCOME_weighted (issue 30: one name per statistic).
    page.check("input[name='statistic'][value='both']")
    page.click("#build")
    page.wait_for_selector(
        "#stat-pick option:has-text('Weighted mean of Annual income')", state="attached"
    )
    captions = page.locator("#stat-pick option").all_inner_texts()
    assert captions == [
        "Unweighted counts",
        "Weighted counts",
        "Weighted sum of Annual income (currency units)",
        "Weighted mean of Annual income (currency units)",
    ]
    weighted = httpx.post(
        f"{served}/api/datasets/demo/tables",
        json={"dimensions": ["REGION", "SEX"], "statistic": "both,sum:INCOME,mean:INCOME"},
    ).json()
    total = next(c for c in weighted["cells"] if c["REGION"] == "_T" and c["SEX"] == "_T")
    assert "sum_INCOME" not in total and "mean_INCOME" not in total
    sum_table = show_statistic(page, "Weighted sum of Annual income")
    assert f"{round(total['sum_INCOME_weighted']):,}" in sum_table
    page.close()
