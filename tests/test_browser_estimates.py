"""Estimates with their precision on the builder page, and its JSON-stat and SDMX downloads.

Issue 38, item 8: row percentages with standard errors came as nine stacked
tables (a page over 5,000 px high) and no relative standard error was shown.
The page now shows one table, of the estimate picked in a list (as ABS
TableBuilder does), each cell with its 95% interval and RSE under it, and
downloads the table as JSON-stat, SDMX-CSV and SDMX-JSON as the API gives
them. Chromium (Debian's package) through Playwright; axe-core finds nothing.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tablesafe._settings import load_site_config
from test_browser import browser, running, show_statistic  # noqa: F401  (the Chromium fixture)
from test_browser_page import _axe, _build, _open

pytestmark = pytest.mark.system

BODY: dict[str, Any] = {
    "dimensions": ["REGION", "SEX"],
    "universe": {},
    "statistic": "weighted,percent:row",
    "margins": "all",
    "se": True,
}


@pytest.fixture(scope="module")
def url(demo_dir, tmp_path_factory):
    site = load_site_config(
        data={
            "base": str(tmp_path_factory.mktemp("estimates")),
            "datasets": [
                {
                    "name": "demo",
                    "path": str(demo_dir),
                    "protection": {"method": "ckm"},
                    "rules": {"min_universe_size": 50, "sliver_min_difference": 0},
                }
            ],
        }
    )
    with running(site) as live:
        yield live


def _row_percentages_with_se(page) -> None:
    page.wait_for_selector("#rows option[value='AGEGRP']", state="attached")
    page.select_option("#rows", "REGION")
    page.select_option("#cols", "SEX")
    page.check("input[name='statistic'][value='weighted']")
    page.check("input[name='percent'][value='row']")
    page.check("#se")
    _build(page)


def _cells(page) -> list[list[str]]:
    """Each data cell's lines: the estimate, then its interval and RSE where shown."""
    texts = page.locator("table.cross td").all_inner_texts()
    return [[line.strip() for line in t.strip().splitlines()] for t in texts]


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def test_one_table_with_each_estimate_its_interval_and_rse(url, browser):  # noqa: F811
    page, failures = _open(browser, url)
    _row_percentages_with_se(page)
    # One table, not one per statistic and companion (there were eight here, nine with counts).
    assert page.locator("table.cross").count() == 1
    options = page.locator("#stat-pick option").all_inner_texts()
    assert options == ["Weighted counts", "Row percentage"]
    caption = page.inner_text("table.cross caption")
    assert caption == (
        "Row percentage, with its 95% confidence interval and relative standard error (RSE)"
    )
    # Bounded: the page was 5,193 px high at this size with eight stacked tables.
    height = page.evaluate("document.documentElement.scrollHeight")
    table_height = page.locator("table.cross").bounding_box()["height"]
    assert height < 3_600 and table_height < 800, (height, table_height)
    answer = httpx.post(f"{url}/api/datasets/demo/tables", json=BODY, timeout=60).json()
    by_key = {(str(c["REGION"]), str(c["SEX"])): c for c in answer["cells"]}
    shown = _cells(page)
    rows = ["1", "2", "3", "4", "5", "6", "7", "8", "_T"]
    keys = [(r, s) for r in rows for s in ("1", "2", "_T")]
    assert len(shown) == len(keys)
    with_rse = 0
    for lines, key in zip(shown, keys, strict=True):
        cell = by_key[key]
        value, se = cell["percent_row"], cell["percent_row_se"]
        assert _number(lines[0]) == pytest.approx(value, abs=0.005)
        if se is None:
            assert lines == [lines[0]]
            continue
        low, high = lines[1].split("–")
        assert (_number(low), _number(high)) == pytest.approx(
            (cell["percent_row_ci_low"], cell["percent_row_ci_high"]), abs=0.005
        )
        # The RSE: the published standard error over the published estimate, in percent.
        assert lines[2] == f"RSE {100 * se / value:.1f}%"
        with_rse += 1
    assert with_rse >= 18  # every inner cell of the demo's regions has its standard error
    # The weighted counts, picked in the list: their own interval and RSE.
    show_statistic(page, "Weighted counts")
    shown = _cells(page)
    first = by_key[("1", "1")]
    assert _number(shown[0][0]) == first["weighted"]
    assert shown[0][1] == f"{first['ci_low']:,.0f}–{first['ci_high']:,.0f}"
    assert shown[0][2] == f"RSE {100 * first['se'] / first['weighted']:.1f}%"
    _axe(page)
    # The link keeps the estimate shown.
    link = page.get_attribute("#share", "href")
    assert link and "show=weighted" in link
    again, _ = _open(browser, link)
    again.wait_for_selector("table.cross caption", state="attached")
    assert again.inner_text("table.cross caption").startswith("Weighted counts, with its 95%")
    assert again.input_value("#stat-pick") == "weighted"
    again.close()
    assert not failures, failures
    page.close()


def test_jsonstat_and_sdmx_downloads_are_the_apis(url, browser, tmp_path):  # noqa: F811
    page, failures = _open(browser, url, accept_downloads=True)
    _row_percentages_with_se(page)
    names = {}
    for fmt in ("jsonstat", "sdmx-csv", "sdmx-json", "sdmx-structure"):
        with page.expect_download() as info:
            page.click(f"#download-{fmt}")
        path = tmp_path / info.value.suggested_filename
        info.value.save_as(path)
        names[fmt] = info.value.suggested_filename
        api = httpx.post(
            f"{url}/api/datasets/demo/tables?format={fmt}&labels=true", json=BODY, timeout=60
        )
        assert api.status_code == 200
        assert path.read_bytes() == api.content, fmt
    assert names == {
        "jsonstat": "REGION-by-SEX.jsonstat.json",
        "sdmx-csv": "REGION-by-SEX.sdmx.csv",
        "sdmx-json": "REGION-by-SEX.sdmx.json",
        "sdmx-structure": "REGION-by-SEX.structure.xml",
    }
    doc = json.loads((tmp_path / names["jsonstat"]).read_text())
    assert doc["class"] == "dataset" and doc["id"] == ["REGION", "SEX", "STATISTIC"]
    sdmx = json.loads((tmp_path / names["sdmx-json"]).read_text())
    assert sdmx["data"]["dataSets"][0]["observations"]
    header = (tmp_path / names["sdmx-csv"]).read_text().splitlines()[0]
    assert header.startswith("STRUCTURE,STRUCTURE_ID,ACTION,REGION: Region,SEX: Sex,")
    # The SDMX data name the dataflow the structure downloaded beside them defines.
    flow = (tmp_path / names["sdmx-csv"]).read_text().splitlines()[1].split(",")[1]
    dataflow_id = flow.split(":")[1].split("(")[0]
    assert f'<str:Dataflow id="{dataflow_id}"' in (tmp_path / names["sdmx-structure"]).read_text()
    assert not failures, failures
    page.close()
