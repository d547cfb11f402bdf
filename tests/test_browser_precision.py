"""Percentages, standard errors and the precision rule on the builder page (issue 29), in Chromium.

The page asks for row percentages and standard errors, shows each as a
table of its own, with the numbers the API gives for the same request; a
site with ``max_rse`` shows "np" where the API does, with its legend; the
page stays free of axe-core violations.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tablesafe._settings import load_site_config
from test_browser import browser, running, show_statistic  # noqa: F401  (the Chromium fixture)
from test_browser_page import _axe, _build, _open

pytestmark = pytest.mark.system


def _site(demo_dir, base, **rules: Any):
    """The demo survey twice: unreliable estimates shown "np", and flagged."""
    return load_site_config(
        data={
            "base": str(base),
            "datasets": [
                {
                    "name": name,
                    "path": str(demo_dir),
                    "protection": {"method": "ckm"},
                    "rules": {
                        "min_universe_size": 50,
                        "sliver_min_difference": 0,
                        "unreliable_action": action,
                        **rules,
                    },
                }
                for name, action in (("demo", "np"), ("demo-flag", "flag"))
            ],
        }
    )


@pytest.fixture(scope="module")
def url(demo_dir, tmp_path_factory):
    with running(_site(demo_dir, tmp_path_factory.mktemp("pct"), max_rse=3)) as live:
        yield live


def _cell_texts(page, caption: str) -> list[str]:
    """The estimates of the table of this statistic (picked in the list), row by row.

    Each cell's first line: the estimate and its flags (its interval and RSE follow).
    """
    show_statistic(page, caption)
    table = page.locator("table.cross")
    return [t.strip().splitlines()[0] for t in table.locator("td").all_inner_texts()]


def test_row_percentages_with_standard_errors_and_np(url, browser):  # noqa: F811
    page, failures = _open(browser, url)
    page.wait_for_selector("#rows option[value='AGEGRP']", state="attached")
    page.select_option("#rows", "REGION")
    page.select_option("#cols", "SEX")
    page.check("input[name='statistic'][value='weighted']")
    page.check("input[name='percent'][value='row']")
    page.check("#se")
    text = _build(page)
    assert "Row percentage, with its 95% confidence interval and relative standard error" in text
    body = {
        "dimensions": ["REGION", "SEX"],
        "universe": {},
        "statistic": "weighted,percent:row",
        "margins": "all",
        "se": True,
    }
    answer = httpx.post(f"{url}/api/datasets/demo/tables", json=body, timeout=60).json()
    cells = {(str(c["REGION"]), str(c["SEX"])): c for c in answer["cells"]}
    shown = _cell_texts(page, "Row percentage")
    # The page's first row: region 1, then SEX 1, 2 and the total; np where the API says np.
    for i, sex in enumerate(("1", "2", "_T")):
        value = cells[("1", sex)]["percent_row"]
        expect = "np" if value == "np" else f"{value:.2f}"
        assert shown[i].split(" ")[0] == expect
    marked = [c for c in answer["cells"] if c["weighted"] == "np"]
    assert marked, "max_rse = 3 marks some weighted counts of this table"
    weighted = _cell_texts(page, "Weighted counts")
    assert weighted.count("np") == len(marked)
    # An estimate not published shows "np" alone: no interval, no RSE under it.
    whole = [t.strip() for t in page.locator("table.cross td").all_inner_texts()]
    assert [t for t in whole if t.startswith("np")] == ["np"] * len(marked)
    assert "not published" in page.inner_text("#footnotes")
    _axe(page)
    # The site that flags: the values stay, each unreliable one marked u.
    page.select_option("#dataset", "demo-flag")
    page.wait_for_selector("#rows option[value='AGEGRP']", state="attached")
    page.select_option("#rows", "REGION")
    page.select_option("#cols", "SEX")
    page.check("input[name='statistic'][value='weighted']")
    _build(page)
    weighted = _cell_texts(page, "Weighted counts")
    assert "np" not in weighted
    assert sum(t.endswith(" u") for t in weighted) == len(marked)
    _axe(page)
    assert not failures, failures
    page.close()
