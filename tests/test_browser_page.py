"""The table builder page as a member of the public meets it (issue 30), in Chromium.

Each test drives the page in a real headless Chromium (Playwright), as
``tests/test_browser.py`` does, against a site served by uvicorn: the
cell-key method and differential privacy on the demo survey, then a site
with API keys. With ``TABLESAFE_SCREENSHOTS=docs`` the tests write the
gallery of ``docs/builder-page.md`` into ``docs/images/``.
"""

from __future__ import annotations

import io
import math
import re
import struct
import xml.etree.ElementTree as ET
from typing import Any

import httpx
import pandas as pd
import pytest

from tablesafe._settings import load_site_config
from tablesafe.server import hash_key
from test_browser import _screenshots, browser, running  # noqa: F401  (the Chromium fixture)
from test_server import ADMIN_KEY, USER_KEY

pytestmark = pytest.mark.system

# An ampersand and a colon: the title is HTML-escaped into the page, shown as written.
TITLE = "Office of Statistics & Census: table builder"
RULES = {"min_universe_size": 50, "sliver_min_difference": 0}


def _site(demo_dir, base, keys: bool = False):
    data: dict[str, Any] = {
        "base": str(base),
        "server": {"title": TITLE},
        "datasets": [
            {
                "name": "demo",
                "path": str(demo_dir),
                "protection": {"method": "ckm"},
                "rules": RULES,
            },
            {
                "name": "demo-dp",
                "path": str(demo_dir),
                "title": "Demo survey, differential privacy",
                "protection": {"method": "dp", "epsilon": 1.0},
                "rules": RULES,
            },
        ],
    }
    if keys:
        data["keys"] = [
            {"id": "user1", "hash": hash_key(USER_KEY), "role": "user"},
            {"id": "admin1", "hash": hash_key(ADMIN_KEY), "role": "admin"},
        ]
    return load_site_config(data=data)


@pytest.fixture(scope="module")
def url(demo_dir, tmp_path_factory):
    with running(_site(demo_dir, tmp_path_factory.mktemp("page"))) as live:
        yield live


@pytest.fixture(scope="module")
def keyed_url(demo_dir, tmp_path_factory):
    with running(_site(demo_dir, tmp_path_factory.mktemp("keyed"), keys=True)) as live:
        yield live


def _api(url: str, body: dict[str, Any], dataset: str = "demo", **params: str) -> httpx.Response:
    response = httpx.post(
        f"{url}/api/datasets/{dataset}/tables", json=body, params=params, timeout=60
    )
    assert response.status_code == 200, response.text
    return response


def _open(browser, url: str, **options: Any):  # noqa: F811
    options.setdefault("viewport", {"width": 1100, "height": 900})
    page = browser.new_page(**options)
    failures: list[str] = []
    page.on(
        "response", lambda r: failures.append(f"{r.status} {r.url}") if r.status >= 400 else None
    )
    page.on(
        "console",
        lambda m: failures.append(m.text) if "Content Security Policy" in m.text else None,
    )
    page.goto(url)
    return page, failures


def _build(page) -> str:
    page.click("#build")
    page.wait_for_selector("#footnotes")
    assert page.inner_text("#message") == ""
    return page.inner_text("#result")


def _axe(page) -> None:
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page)
    assert results.violations_count == 0, results.generate_report()


def _roots(url: str) -> dict[str, str]:
    """Each variable's microdata variable (a grouping's source's), from the description."""
    variables = httpx.get(f"{url}/api/datasets/demo").json()["variables"]
    source = {v["name"]: v["grouping_of"] for v in variables}

    def root(name: str) -> str:
        return root(source[name]) if source[name] else name

    return {name: root(name) for name in source}


def test_a_fresh_page_builds_its_default_table(url, browser, tmp_path):  # noqa: F811
    """Defaults classify two different variables; levels and search never make a clash."""
    page, failures = _open(browser, url)
    page.wait_for_selector("#rows option[value='AGEGRP']", state="attached")
    roots = _roots(url)
    rows, cols = page.input_value("#rows"), page.input_value("#cols")
    assert rows and cols and roots[rows] != roots[cols]
    assert (rows, cols) == ("REGION", "SEX")  # the demo's first variable, then not Zone
    page.screenshot(path=str(_screenshots(tmp_path) / "builder-fresh.png"))
    text = _build(page)
    total = next(
        c["n"]
        for c in _api(url, {"dimensions": [rows, cols]}).json()["cells"]
        if c[rows] == "_T" and c[cols] == "_T"
    )
    assert f"{total:,}" in text
    # A level of the classification in the rows takes the rows' place.
    page.click("button.level[data-level='ZONE']")
    assert (page.input_value("#rows"), page.input_value("#cols")) == ("ZONE", cols)
    _build(page)
    # With the classification in the columns, a level replaces it there, not in the rows.
    page.select_option("#rows", "SEX")
    page.select_option("#cols", "REGION")
    page.click("button.level[data-level='ZONE']")
    assert (page.input_value("#rows"), page.input_value("#cols")) == ("SEX", "ZONE")
    _build(page)
    # A search result put where a grouping of it already is: the other place gives way.
    page.fill("#var-search", "Region")
    page.click("#var-results button[aria-label='Use Region as rows']")
    assert page.input_value("#rows") == "REGION"
    assert page.input_value("#cols") == "SEX"  # the rows' previous variable
    assert "Columns changed from Zone (groups of regions) to Sex" in page.inner_text("#dims-status")
    _build(page)
    # Every table above was built: no answer of 400 or more, no policy violation.
    assert not failures, failures
    page.close()


def test_ticking_categories_is_the_universe(url, browser):  # noqa: F811
    """No hidden step: what is ticked is the universe, said in words above the table."""
    page, _ = _open(browser, url)
    page.wait_for_selector("#uvar option[value='REGION']", state="attached")
    page.select_option("#rows", "AGEGRP")
    page.select_option("#cols", "SEX")
    page.select_option("#uvar", "REGION")
    assert page.inner_text("#universe-words") == "Universe: All records."
    page.check("#ucats-list input[value='1']")
    page.check("#ucats-list input[value='2']")
    words = "Universe: Region is North or North East."
    assert page.inner_text("#universe-words") == words
    text = _build(page)
    body = {"dimensions": ["AGEGRP", "SEX"], "universe": {"REGION": [1, 2]}}
    meta = _api(url, body).json()
    assert (
        page.inner_text("#universe-line") == f"Universe: {meta['meta']['universe_label']}." == words
    )
    total = next(c["n"] for c in meta["cells"] if c["AGEGRP"] == "_T" and c["SEX"] == "_T")
    assert f"{total:,}" in text
    # A second variable's condition; the first stays ticked when its list is shown again.
    page.select_option("#uvar", "SEX")
    page.check("#ucats-list input[value='2']")
    assert page.inner_text("#universe-words") == f"{words[:-1]}; Sex is Female."
    page.select_option("#uvar", "REGION")
    assert page.is_checked("#ucats-list input[value='1']")
    # Unticking and removing take the conditions away, from the words and the request.
    page.uncheck("#ucats-list input[value='1']")
    page.click("#conditions button:has-text('Remove the condition on Sex')")
    assert page.inner_text("#universe-words") == "Universe: Region is North East."
    _build(page)
    assert page.inner_text("#universe-line") == "Universe: Region is North East."
    # A tree's Filter button is a condition like any: its category shows ticked.
    page.click("details[data-hierarchy='AGE_TREE'] > summary")
    page.click("button.filter[data-level='AGEGRP'][data-code='3']")
    page.select_option("#uvar", "AGEGRP")
    assert page.is_checked("#ucats-list input[value='3']")
    assert "Age group is 25-34" in page.inner_text("#universe-words")
    # Unticking a variable's last category takes its condition away.
    page.uncheck("#ucats-list input[value='3']")
    page.select_option("#uvar", "REGION")
    page.uncheck("#ucats-list input[value='2']")
    assert page.inner_text("#universe-words") == "Universe: All records."
    # A condition on custom groups goes when the groups change (their codes then mean
    # other records).
    page.select_option("#gvar", "AGE")
    page.select_option("#gcats", [str(a) for a in range(30)])
    page.fill("#glabel", "Under 30")
    page.click("#add-group")
    page.select_option("#uvar", "AGE_C")
    page.check("#ucats-list input[value='g1']")
    assert page.inner_text("#universe-words") == (
        "Universe: Age in single years (custom groups) is Under 30."
    )
    page.select_option("#gcats", [str(a) for a in range(30, 60)])
    page.fill("#glabel", "30 to 59")
    page.click("#add-group")
    assert page.inner_text("#universe-words") == "Universe: All records."
    page.close()


def test_a_refusal_leaves_nothing_of_the_previous_table(url, browser, tmp_path):  # noqa: F811
    page, _ = _open(browser, url)
    page.wait_for_selector("#rows option[value='AGEGRP']", state="attached")
    page.select_option("#rows", "AGEGRP")
    page.select_option("#cols", "SEX")
    _build(page)
    assert page.is_visible("#outputs") and page.is_visible("#chart-box")
    assert "table=" in page.url
    # A universe under the site's 50 records: refused.
    page.select_option("#uvar", "AGE")
    page.check("#ucats-list input[value='88']")
    page.click("#build")
    page.locator("#message").filter(has_text=re.compile(r"\S")).wait_for()
    assert "universe is too small" in page.inner_text("#message")
    assert page.locator("table.cross").count() == 0 and page.inner_text("#result") == ""
    assert page.is_hidden("#chart-box") and page.is_hidden("#outputs")
    assert "table=" not in page.url
    page.locator("#universe-words").scroll_into_view_if_needed()
    page.screenshot(path=str(_screenshots(tmp_path) / "builder-refusal.png"))
    # The download buttons, even clicked from a script, fetch nothing: there is no table.
    tables: list[str] = []
    # (The pre-flight check, tables:check, may run meanwhile: it builds no table.)
    built = re.compile(r"/tables(\?|$)")
    page.on("request", lambda r: tables.append(r.url) if built.search(r.url) else None)
    for button in ("#download-csv", "#download-xlsx", "#download-svg", "#download-png"):
        page.dispatch_event(button, "click")
    page.wait_for_timeout(300)  # a bound on waiting for a request that must not come
    assert tables == []
    _axe(page)
    page.close()


def test_a_three_way_table_shows_one_layer_at_a_time(url, browser, tmp_path):  # noqa: F811
    page, _ = _open(browser, url)
    page.wait_for_selector("#rows option[value='AGEGRP']", state="attached")
    page.select_option("#rows", "AGEGRP")
    page.select_option("#cols", "SEX")
    page.select_option("#layers", "REGION")
    _build(page)
    body = {"dimensions": ["AGEGRP", "SEX", "REGION"]}
    cells = _api(url, body).json()["cells"]
    layers = page.locator("#layer option")
    assert layers.count() == 8 + 1  # eight regions and their total
    assert page.locator("table.cross").count() == 1  # one estimate, one layer at a time
    page.select_option("#layer", "3")
    captions = page.locator("table.cross caption").all_inner_texts()
    assert captions == ["Unweighted counts — Region: North West"]
    # The layer's figures are the API's for that region.
    counts = page.locator("table.cross").inner_text()
    for c in cells:
        if c["REGION"] == 3 and c["SEX"] == "_T":
            assert f"{c['n']:,}" in counts
    assert "Region: North West" in page.inner_html("#chart")
    _axe(page)
    page.locator("#result").screenshot(path=str(_screenshots(tmp_path) / "builder-layers.png"))
    # The link keeps the layer shown.
    link = page.get_attribute("#share", "href")
    assert link and "layer=3" in link
    again = browser.new_page()
    again.goto(link)
    again.wait_for_selector("#layer")
    assert again.input_value("#layer") == "3"
    again.close()
    page.close()


def test_title_icon_and_phone_width(url, browser, tmp_path):  # noqa: F811
    page, failures = _open(browser, url, viewport={"width": 390, "height": 844}, is_mobile=True)
    page.wait_for_selector("#rows option[value='AGEGRP']", state="attached")
    assert page.title() == TITLE and page.inner_text("#site-title") == TITLE
    icon = httpx.get(f"{url}/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/x-icon"
    assert icon.content[:4] == b"\x00\x00\x01\x00"  # an ICO file
    assert page.get_attribute("link[rel='icon']", "href") == "/favicon.ico"
    # A wide table: every age band by occupation (11 columns of long labels).
    page.select_option("#rows", "AGE5")
    page.select_option("#cols", "OCC")
    _build(page)
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= 390, f"the page scrolls sideways: {width} px wide"
    box = page.locator(".table-scroll").first
    assert box.evaluate("e => e.scrollWidth > e.clientWidth")  # the table scrolls in its box
    assert box.get_attribute("tabindex") == "0"  # and Tab reaches the box
    page.locator("#table-title").scroll_into_view_if_needed()
    page.screenshot(path=str(_screenshots(tmp_path) / "builder-phone.png"))
    assert page.title().endswith(f" — {TITLE}")
    _axe(page)
    assert not failures, failures
    page.close()


def _ticks_and_bars(svg: ET.Element) -> tuple[list[tuple[float, float]], list[float]]:
    """A chart's axis ticks (x, value) and its bars' widths."""
    ns = "{http://www.w3.org/2000/svg}"
    ticks = [
        (float(t.get("x", "0")), float((t.text or "").replace(",", "")))
        for t in svg.iter(f"{ns}text")
        if t.get("class") == "tick"
    ]
    bars = [float(r.get("width", "0")) for r in svg.iter(f"{ns}rect")][1:]
    return ticks, bars


def _pixels_per_unit(axis: list[tuple[float, float]]) -> float:
    """One axis's scale, checking its ticks: round, evenly spaced from 0, at one scale."""
    axis = sorted(axis, key=lambda t: t[1])
    assert axis[0][1] == 0 and len(axis) >= 3
    step = axis[1][1]
    assert step / 10 ** math.floor(math.log10(step)) in (1, 2, 2.5, 5)
    assert [v for _, v in axis] == pytest.approx([i * step for i in range(len(axis))])
    per_unit = abs(axis[-1][0] - axis[0][0]) / axis[-1][1]
    assert all(math.isclose(abs(x - axis[0][0]), v * per_unit, rel_tol=1e-6) for x, v in axis)
    return per_unit


def _check_axis(svg: ET.Element, values: list[float], pyramid: bool) -> None:
    """A bar of value v is as long as the axis says v is; the largest fits on the axis."""
    ticks, bars = _ticks_and_bars(svg)
    zero = next(x for x, v in ticks if v == 0)
    # The pyramid's left half (its right half is the same scale, without a second 0).
    axis = [t for t in ticks if t[0] <= zero] if pyramid else ticks
    per_unit = _pixels_per_unit(axis)
    assert sorted(bars) == pytest.approx(sorted(v * per_unit for v in values), rel=1e-6)
    assert max(values) <= max(v for _, v in axis)


def test_charts_have_a_value_axis_and_exports_say_source_and_protection(
    url,
    browser,  # noqa: F811
    tmp_path,
):
    page, _ = _open(browser, url, accept_downloads=True)
    page.wait_for_selector("#rows option[value='AGEGRP']", state="attached")
    page.select_option("#rows", "AGEGRP")
    page.select_option("#cols", "SEX")
    page.check("input[name='statistic'][value='count']")
    page.select_option("#uvar", "REGION")
    page.check("#ucats-list input[value='4']")
    _build(page)
    files = {}
    for fmt, button in (
        ("svg", "#download-svg"),
        ("png", "#download-png"),
        ("csv", "#download-csv"),
    ):
        with page.expect_download() as info:
            page.click(button)
        files[fmt] = info.value.suggested_filename
        info.value.save_as(tmp_path / f"chart.{fmt}")
    # The chart's file is named as the table's download is (by the server).
    assert (
        files["svg"]
        == files["csv"].replace(".csv", "-chart.svg")
        == "AGEGRP-by-SEX-Capital-chart.svg"
    )
    text = (tmp_path / "chart.svg").read_text()
    svg = ET.fromstring(text)
    body = {"dimensions": ["AGEGRP", "SEX"], "universe": {"REGION": [4]}, "statistic": "count"}
    meta = _api(url, body).json()["meta"]
    notes = " ".join(t.text or "" for t in svg.iter("{http://www.w3.org/2000/svg}text"))
    source = next(s for s in meta["footnotes"]["statement"] if s.startswith("Source:"))
    protection = next(s for s in meta["footnotes"]["statement"] if s.startswith("Protection:"))
    for line in (source, protection, f"Universe: {meta['universe_label']}."):
        assert line in notes, line
    csv = pd.read_csv(io.StringIO(_api(url, body, format="csv").text), comment="#")
    inner = csv[(csv["AGEGRP"] != "_T") & (csv["SEX"] != "_T")]
    _check_axis(svg, inner["n"].astype(float).tolist(), pyramid=True)
    # The PNG is the same drawing, notes included, at twice the size.
    png = (tmp_path / "chart.png").read_bytes()
    w, h = struct.unpack(">II", png[16:24])
    assert (w, h) == (2 * int(svg.get("width", "0")), 2 * int(svg.get("height", "0")))
    # A bar chart (no age by sex) has the same kind of axis.
    page.select_option("#rows", "EDUC")
    _build(page)
    with page.expect_download() as info:
        page.click("#download-svg")
    info.value.save_as(tmp_path / "bars.svg")
    body["dimensions"] = ["EDUC", "SEX"]
    csv = pd.read_csv(io.StringIO(_api(url, body, format="csv").text), comment="#")
    inner = csv[(csv["EDUC"] != "_T") & (csv["SEX"] != "_T")]
    bars = ET.fromstring((tmp_path / "bars.svg").read_text())
    _check_axis(bars, inner["n"].astype(float).tolist(), pyramid=False)
    page.close()


def test_the_technical_line_says_what_epsilon_and_delta_are(url, browser):  # noqa: F811
    page, _ = _open(browser, url)
    page.wait_for_selector("#rows option[value='AGEGRP']", state="attached")
    for dataset, words, worst in (
        (
            "demo",
            "largest change D = 3, variance of the change V = 1",
            "Both are the table's worst case over all counts.",
        ),
        (
            "demo-dp",
            "largest change cap = 7",
            "Epsilon is the one the site set; delta is the table's worst case over all counts.",
        ),
    ):
        page.select_option("#dataset", dataset)
        page.wait_for_selector("#uvar option[value='AGE']", state="attached")
        _build(page)
        described = httpx.get(f"{url}/api/datasets/{dataset}").json()["protection"]
        eps, delta = described["epsilon"], described["delta"]
        figures = page.inner_text("#privacy-figures")
        assert f"epsilon = {float(f'{eps:.3g}'):g}, delta = {float(f'{delta:.3g}'):g}." in figures
        assert f"e^epsilon (here {float(f'{math.exp(eps):.3g}'):g})" in figures
        assert "between a count and the same count with one record more" in figures
        assert worst in figures
        technical = page.locator("#footnotes .technical").first.inner_text()
        assert words in technical and "epsilon" not in technical
    page.close()


def test_a_key_field_when_the_site_uses_keys(keyed_url, browser):  # noqa: F811
    """The key is asked for on the page, kept in sessionStorage, never put in an address."""
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    page = context.new_page()
    sent: list[str | None] = []
    page.on(
        "request", lambda r: sent.append(r.headers.get("x-api-key")) if "/api/" in r.url else None
    )
    page.goto(keyed_url)
    page.wait_for_selector("#key-form:not([hidden])")
    assert "needs an API key" in page.inner_text("#key-status")
    assert "X-API-Key" not in page.inner_text("body")
    assert page.locator("#dataset option").count() == 0 and sent == []
    _axe(page)
    page.fill("#api-key", USER_KEY)
    page.click("#key-use")
    page.wait_for_selector("#rows option[value='AGEGRP']", state="attached")
    assert page.evaluate("() => sessionStorage.getItem('tablesafe-key')") == USER_KEY
    assert page.evaluate("() => localStorage.getItem('tablesafe-key')") is None
    assert page.input_value("#api-key") == ""
    _build(page)
    assert sent and all(k == USER_KEY for k in sent)
    link = page.get_attribute("#share", "href")
    assert link and USER_KEY not in link and "key=" not in link and USER_KEY not in page.url
    context.close()
    # The link in a new browser session: the page asks for the key, then builds the table.
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    page = context.new_page()
    page.goto(link)
    page.wait_for_selector("#key-form:not([hidden])")
    page.fill("#api-key", USER_KEY)
    page.click("#key-use")
    page.wait_for_selector("#footnotes")
    assert "key=" not in page.get_attribute("#share", "href")
    context.close()
    # An old link with ?key=: the key moves to sessionStorage and leaves the address at once.
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{keyed_url}/?key={USER_KEY}")
    page.wait_for_selector("#rows option[value='AGEGRP']", state="attached")
    assert USER_KEY not in page.url
    _build(page)
    assert USER_KEY not in page.url and USER_KEY not in page.get_attribute("#share", "href")
    page.click("#key-forget")
    assert page.evaluate("() => sessionStorage.getItem('tablesafe-key')") is None
    page.click("#build")
    page.locator("#message").filter(has_text=re.compile(r"\S")).wait_for()
    assert "needs an API key" in page.inner_text("#message")
    context.close()


@pytest.fixture(scope="module")
def dated_url(demo_dir, tmp_path_factory):
    """The demo survey with a reference date and a date of update in its catalog."""
    import shutil

    folder = tmp_path_factory.mktemp("dated")
    shutil.copy(demo_dir / "microdata.parquet", folder / "microdata.parquet")
    text = (demo_dir / "catalog.toml").read_text()
    dates = 'reference_date = "2021-03-21"\nupdated = "2024-05-02"\n'
    (folder / "catalog.toml").write_text(text.replace("[dataset]\n", "[dataset]\n" + dates, 1))
    with running(_site(folder, tmp_path_factory.mktemp("dated-site"))) as live:
        yield live


GROUPS = [("Married or in a civil partnership", [2]), ("Divorced, widowed", [3, 4])]


def test_every_download_states_the_table_and_is_named_by_the_server(
    dated_url,
    browser,  # noqa: F811
    tmp_path,
):
    """Issue 30: quoted labels in the universe, the date and source, file names from meta."""
    from openpyxl import load_workbook

    page, failures = _open(browser, dated_url, accept_downloads=True)
    page.wait_for_selector("#gvar option[value='MARSTAT']", state="attached")
    # Custom groups whose labels hold "or" and a comma, taken as the universe.
    page.select_option("#gvar", "MARSTAT")
    for label, members in GROUPS:
        page.select_option("#gcats", [str(m) for m in members])
        page.fill("#glabel", label)
        page.click("#add-group")
    page.select_option("#rows", "AGEGRP")
    page.select_option("#cols", "SEX")
    page.select_option("#uvar", "MARSTAT_C")
    page.check("#ucats-list input[value='g1']")
    page.check("#ucats-list input[value='g2']")
    words = 'Marital status (custom groups) is "Married or in a civil partnership" or "Divorced, widowed"'
    assert page.inner_text("#universe-words") == f"Universe: {words}."
    _build(page)
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if "/tables?" in r.url else None)
    files = {}
    for fmt in ("csv", "xlsx", "svg"):
        with page.expect_download() as info:
            page.click(f"#download-{fmt}")
        files[fmt] = info.value.suggested_filename
        info.value.save_as(tmp_path / f"out.{fmt}")
    groups = {
        "name": "MARSTAT_C",
        "variable": "MARSTAT",
        "label": "Marital status (custom groups)",
        "groups": [
            {"code": f"g{i + 1}", "label": label, "members": members}
            for i, (label, members) in enumerate(GROUPS)
        ],
        "other": "Other",
    }
    body = {
        "dimensions": ["AGEGRP", "SEX"],
        "universe": {"MARSTAT_C": ["g1", "g2"]},
        "groupings": [groups],
    }
    meta = _api(dated_url, body).json()["meta"]
    assert meta["universe_label"] == words
    assert page.inner_text("#universe-line") == f"Universe: {words}."
    statement = meta["footnotes"]["statement"]
    notes = page.inner_text("#footnotes")
    for line in ("Reference date of the data: 2021-03-21.", "Data last updated: 2024-05-02."):
        assert line in statement and line in notes
    # Every file is named by the server (meta.file_stem), the chart's too.
    stem = meta["file_stem"]
    assert files == {"csv": f"{stem}.csv", "xlsx": f"{stem}.xlsx", "svg": f"{stem}-chart.svg"}
    # Both table files are asked for with labels.
    assert all("labels=true" in r for r in requests) and len(requests) == 2
    csv_text = (tmp_path / "out.csv").read_text()
    assert f"# Universe: {words}.\n" in csv_text
    assert "# Reference date of the data: 2021-03-21.\n" in csv_text
    book = load_workbook(tmp_path / "out.xlsx")
    about = {r[0]: r[1] for r in book["about"].iter_rows(values_only=True)}
    assert (about["Universe"], about["Reference date"]) == (words, "2021-03-21")
    assert book.worksheets[0]["A2"].value == f"Universe: {words}"
    header = next(book["cells"].iter_rows(values_only=True))
    assert header[:4] == ("AGEGRP", "AGEGRP_label", "SEX", "SEX_label")
    chart = ET.fromstring((tmp_path / "out.svg").read_text())
    text = " ".join(t.text or "" for t in chart.iter("{http://www.w3.org/2000/svg}text"))
    for line in (f"Universe: {words}.", "Reference date of the data: 2021-03-21."):
        assert line in text, line
    assert not failures, failures
    page.close()
