"""Withheld cells on the builder page (issue 37), in Chromium.

SEX by AGEGRP is published; the same table in a universe without one
employment status, of which one age group holds a few records, has that age
group's cells withheld (the site's ``max_withheld_share`` is 1, so the table
is answered). The page shows each withheld figure as the mark ``c`` and no
number, each total that leaves withheld cells out with the mark ``t``, both
explained by tooltips and the legend in the footnotes' words, and the chart
draws no bar for a withheld cell.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

import httpx
import pandas as pd
import pytest

from tablesafe._settings import load_site_config
from tablesafe.catalog._dataset import Dataset
from tablesafe.output._render import EXCLUDES_WITHHELD_MARK, WITHHELD_MARK
from test_browser import (  # noqa: F401  (browser: the Chromium fixture)
    _screenshots,
    browser,
    running,
    show_statistic,
)
from test_browser_page import _axe, _build, _open
from test_guard import _dimension_sliver

pytestmark = pytest.mark.system

SVG = "{http://www.w3.org/2000/svg}"


def _site(demo_dir, base):
    return load_site_config(
        data={
            "base": str(base),
            "datasets": [
                {
                    "name": "demo",
                    "path": str(demo_dir),
                    "protection": {"method": "ckm"},
                    "rules": {
                        "min_universe_size": 50,
                        "sliver_min_difference": 10,
                        "max_withheld_share": 1.0,
                    },
                }
            ],
        }
    )


@pytest.fixture(scope="module")
def sliver(demo_dir) -> tuple[int, int, list[int]]:
    """The employment status, the age group it isolates a few records of, the other statuses."""
    data = pd.read_parquet(demo_dir / "microdata.parquet", columns=["AGE", "SEX", "EMPSTAT"])
    groups = Dataset.open(demo_dir).catalog.variable("AGEGRP")
    where = {a: c for c, ms in zip(groups.codes, groups.members, strict=True) for a in ms}
    data["AGEGRP"] = data["AGE"].map(where)
    status, group, _ = _dimension_sliver(data, 10)
    others = [int(s) for s in sorted(data["EMPSTAT"].unique()) if s != status]
    return status, group, others


@pytest.fixture(scope="module")
def url(demo_dir, tmp_path_factory):
    with running(_site(demo_dir, tmp_path_factory.mktemp("withheld"))) as live:
        yield live


def _api(url: str, body: dict[str, Any], **params: str) -> httpx.Response:
    response = httpx.post(f"{url}/api/datasets/demo/tables", json=body, params=params, timeout=60)
    assert response.status_code == 200, response.text
    return response


def _shown(page) -> dict[tuple[str, str], Any]:
    """The table shown: (row label, column label) -> its cell element."""
    table = page.locator("table.cross")
    heads = table.locator("tr").first.locator("th").all_inner_texts()[1:]
    out = {}
    for row in table.locator("tr").all()[1:]:
        label = row.locator("th").inner_text()
        for head, td in zip(heads, row.locator("td").all(), strict=True):
            out[(label, head)] = td
    return out


def test_withheld_cells_are_marked_with_their_legend_and_have_no_bar(
    url,
    browser,  # noqa: F811
    sliver,
    tmp_path,
):
    _, group, others = sliver
    _api(url, {"dimensions": ["SEX", "AGEGRP"], "statistic": "count"})
    page, failures = _open(browser, url, accept_downloads=True)
    page.wait_for_selector("#rows option[value='AGEGRP']", state="attached")
    page.select_option("#rows", "SEX")
    page.select_option("#cols", "AGEGRP")
    page.select_option("#uvar", "EMPSTAT")
    for code in others:
        page.check(f"#ucats-list input[value='{code}']")
    page.check("input[name='statistic'][value='count']")
    page.check("input[name='percent'][value='row']")
    _build(page)
    # The same request through the API: answered again, the same figures and flags.
    body = {
        "dimensions": ["SEX", "AGEGRP"],
        "universe": {"EMPSTAT": others},
        "statistic": "count,percent:row",
        "margins": "all",
    }
    answer = _api(url, body).json()
    flags = answer["meta"]["footnotes"]["flags"]
    labels = {
        d["name"]: {str(c["code"]): c["label"] for c in d["categories"]}
        for d in httpx.get(f"{url}/api/datasets/demo").json()["variables"]
        if d["name"] in ("SEX", "AGEGRP")
    }

    def label(dim: str, code: Any) -> str:
        return "Total" if code == "_T" else labels[dim][str(code)]

    withheld = [c for c in answer["cells"] if c["withheld"]]
    excluding = [c for c in answer["cells"] if c["excludes_withheld"]]
    assert any(c["AGEGRP"] == group for c in withheld) and excluding
    for caption, stat in (("Unweighted counts", "n"), ("Row percentage", "percent_row")):
        show_statistic(page, caption)
        shown = _shown(page)
        assert len(shown) == len(answer["cells"])
        for cell in answer["cells"]:
            td = shown[(label("SEX", cell["SEX"]), label("AGEGRP", cell["AGEGRP"]))]
            text = td.inner_text().strip()
            if cell["withheld"]:
                # The mark alone, no number; its tooltip is the legend's meaning.
                assert text == WITHHELD_MARK, (cell, text)
                assert td.locator("span.withheld").get_attribute("title") == flags["withheld"]
                assert not re.search(r"\d", text)
                continue
            value = cell[stat]
            number = f"{value:,}" if stat == "n" else f"{value:.2f}"
            if cell["excludes_withheld"]:
                assert text == f"{number} {EXCLUDES_WITHHELD_MARK}", (cell, text)
                mark = td.locator("sup.flag")
                assert mark.inner_text() == EXCLUDES_WITHHELD_MARK
                assert mark.get_attribute("title") == flags["excludes_withheld"]
            else:
                assert text == number, (cell, text)
    page.locator("#result").screenshot(path=str(_screenshots(tmp_path) / "builder-withheld.png"))
    # The legend: each mark with the footnotes' words.
    terms = page.locator("#footnotes dl.legend dt").all_inner_texts()
    meanings = page.locator("#footnotes dl.legend dd").all_inner_texts()
    legend = dict(zip(terms, meanings, strict=True))
    assert legend[WITHHELD_MARK] == flags["withheld"]
    assert legend[EXCLUDES_WITHHELD_MARK] == flags["excludes_withheld"]
    assert any("withheld" in s for s in answer["meta"]["footnotes"]["statement"])
    # The chart: one bar per inner cell published, none for a withheld one, which is marked.
    with page.expect_download() as info:
        page.click("#download-svg")
    info.value.save_as(tmp_path / "chart.svg")
    svg = ET.fromstring((tmp_path / "chart.svg").read_text())
    inner = [c for c in answer["cells"] if "_T" not in (c["SEX"], c["AGEGRP"])]
    bars = list(svg.iter(f"{SVG}rect"))[1:]  # the first is the background
    hidden = [c for c in inner if c["withheld"]]
    assert hidden and len(bars) == len(inner) - len(hidden)
    marks = [t for t in svg.iter(f"{SVG}text") if t.get("class") == "withheld"]
    assert [t.text for t in marks] == [WITHHELD_MARK] * len(hidden)
    notes = " ".join(t.text or "" for t in svg.iter(f"{SVG}text"))
    assert f"Withheld cells ({WITHHELD_MARK}) have no bar." in notes
    assert "Withheld cells" in page.inner_text("#chart-caption")
    _axe(page)
    assert not failures, failures
    page.close()
