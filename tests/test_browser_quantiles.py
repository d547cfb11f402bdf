"""Medians and quartiles on the builder page (issue 29), in Chromium.

The page asks for the weighted median and quartiles of income, shows each
as a table of its own with the numbers the API gives for the same request
(as published, to 3 significant figures, blank where the site does not publish one), and the link
restores the choice; the page stays free of axe-core violations.
"""

from __future__ import annotations

import math

import httpx
import pytest

from tablesafe._settings import load_site_config
from test_browser import browser, running  # noqa: F401  (the Chromium fixture)
from test_browser_page import _axe, _build, _open
from test_browser_precision import _cell_texts

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def url(demo_dir, tmp_path_factory):
    site = load_site_config(
        data={
            "base": str(tmp_path_factory.mktemp("quantiles")),
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


def test_median_and_quartiles_as_the_api_gives_them(url, browser):  # noqa: F811
    page, failures = _open(browser, url)
    page.wait_for_selector("#magvar option[value='INCOME']", state="attached")
    page.select_option("#rows", "EDUC")
    page.select_option("#cols", "SEX")
    page.check("input[name='statistic'][value='weighted']")
    page.select_option("#magvar", "INCOME")
    page.uncheck("input[name='magstat'][value='sum']")
    page.check("input[name='magstat'][value='median']")
    page.check("input[name='magstat'][value='quartiles']")
    text = _build(page)
    assert "Weighted median of Annual income" in text
    assert "Weighted 25th percentile of Annual income" in text
    body = {
        "dimensions": ["EDUC", "SEX"],
        "universe": {},
        "statistic": "weighted",
        "margins": "all",
        "magnitudes": ["median:INCOME", "quantile:INCOME:0.25", "quantile:INCOME:0.75"],
    }
    answer = httpx.post(f"{url}/api/datasets/demo/tables", json=body, timeout=60).json()
    cells = [c for c in answer["cells"] if str(c["EDUC"]) == str(answer["cells"][0]["EDUC"])]
    for caption, column in (
        ("Weighted median of Annual income", "median_INCOME_weighted"),
        ("Weighted 75th percentile of Annual income", "p75_INCOME_weighted"),
    ):
        shown = _cell_texts(page, caption)
        for i, cell in enumerate(cells):
            value = cell[column]
            # As published (3 significant figures), with thousands separators.
            expect = "" if value is None else _as_published(value)
            assert shown[i].split(" ")[0] == expect, (caption, i, shown[i], value)
    # The shared link restores the boxes.
    link = page.url
    again, _ = _open(browser, link)
    again.wait_for_selector("#result table", state="attached")
    assert again.is_checked("input[name='magstat'][value='median']")
    assert again.is_checked("input[name='magstat'][value='quartiles']")
    assert not again.is_checked("input[name='magstat'][value='sum']")
    _axe(page)
    assert not failures, failures
    page.close()
    again.close()


def test_means_show_one_number_of_decimals_per_column(url, browser):  # noqa: F811
    # Issue 38: 52,028.1 beside 18,790.66 no more: every mean of a table has the decimals
    # of the one that needs most for 4 significant digits, at most the published ones.
    page, failures = _open(browser, url)
    page.wait_for_selector("#magvar option[value='HOURS']", state="attached")
    page.select_option("#rows", "REGION")
    page.select_option("#cols", "SEX")
    page.check("input[name='statistic'][value='weighted']")
    page.select_option("#magvar", "HOURS")
    page.uncheck("input[name='magstat'][value='sum']")
    page.check("input[name='magstat'][value='mean']")
    _build(page)
    body = {
        "dimensions": ["REGION", "SEX"],
        "statistic": "weighted",
        "margins": "all",
        "magnitudes": ["mean:HOURS"],
    }
    answer = httpx.post(f"{url}/api/datasets/demo/tables", json=body, timeout=60).json()
    values = [c["mean_HOURS_weighted"] for c in answer["cells"]]
    numbers = [v for v in values if isinstance(v, float | int) and v != 0]
    needed = max(max(0, 3 - math.floor(math.log10(abs(v)))) for v in numbers)
    places = [len(repr(float(v)).split(".")[1].rstrip("0")) for v in numbers]
    decimals = min(needed, max(places))
    # The check has teeth: some published mean has fewer decimals than its column shows.
    assert decimals > 0 and min(places) < decimals
    shown = _cell_texts(page, "Weighted mean of Weekly hours worked")
    assert len(shown) == len(values)
    for i, value in enumerate(values):
        expect = "" if value is None else f"{value:,.{decimals}f}"
        assert shown[i].split(" ")[0] == expect, (i, shown[i], value)
    assert not failures, failures


def _as_published(value: float) -> str:
    """A figure as the page shows a quantile: its published digits, thousands separated."""
    if float(value).is_integer():
        return f"{int(value):,}"
    decimals = len(repr(float(value)).split(".")[1])
    return f"{value:,.{decimals}f}"
