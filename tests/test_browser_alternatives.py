"""The page's pre-flight check and the nearest passing tables (issue 40), in Chromium.

While the user chooses a table the page checks it (``POST .../tables:check``, debounced):
whether it would be answered, how many cells, which withheld; a refused table shows the
nearest tables that pass as buttons, and choosing one builds it. The site is the demo's
rules (demo/site.toml) on the tests' demo survey.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from tablesafe._settings import load_site_config
from test_browser import browser, running  # noqa: F401  (the Chromium fixture)
from test_browser_page import _axe, _open

pytestmark = pytest.mark.system

RULES = {
    "max_dimensions": 3,
    "min_universe_size": 50,
    "min_cell_size": 3,
    "small_cell_action": "show_less_than",
    "max_cells": 2000,
    "sliver_min_difference": 10,
    # A table with cells withheld is answered, however many (the third test's).
    "max_withheld_share": 1.0,
}


@pytest.fixture(scope="module")
def url(demo_dir, tmp_path_factory):
    base = tmp_path_factory.mktemp("alternatives")
    (base / "secret").write_text("browser-alternatives-secret-" + "0" * 36)
    site = load_site_config(
        data={
            "base": str(base),
            "server": {"title": "Alternatives"},
            "datasets": [
                {
                    "name": "demo",
                    "path": str(demo_dir),
                    "protection": {"method": "ckm", "seeds": "keyed", "secret_file": "secret"},
                    "rules": RULES,
                }
            ],
        }
    )
    with running(site) as live:
        yield live


def _check(url: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = httpx.post(f"{url}/api/datasets/demo/tables:check", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


def test_a_refused_table_offers_tables_that_pass_and_one_is_built(url, browser):  # noqa: F811
    """Widowed people of one region (fewer than 50 records): the live check says it would be
    refused and offers the API's alternatives as buttons; the nearest one builds."""
    page, failures = _open(browser, url)
    page.wait_for_selector("#uvar option[value='REGION']", state="attached")
    page.select_option("#rows", "SEX")
    page.select_option("#cols", "AGEGRP")
    page.select_option("#uvar", "REGION")
    page.check("#ucats-list input[value='2']")
    page.select_option("#uvar", "MARSTAT")
    page.check("#ucats-list input[value='3']")
    body = {
        "dimensions": ["SEX", "AGEGRP"],
        "universe": {"REGION": [2], "MARSTAT": [3]},
        "statistic": "both",
        "margins": "all",
    }
    expected = _check(url, body)
    assert expected["passes"] is False and expected["alternatives"]
    page.wait_for_selector("#alternatives-list button.alternative")
    status = page.inner_text("#check-status")
    assert status == f"This table would be refused: {expected['refusal']['message']}"
    shown = page.locator("#alternatives-list button.alternative").all_inner_texts()
    assert shown == [a["change"] for a in expected["alternatives"]]
    _axe(page)
    # Nothing was built or published by the checks: the refused table is refused as checked.
    page.click("#build")
    expect(page.locator("#message")).to_have_text(expected["refusal"]["message"])
    assert page.locator("#alternatives-list button.alternative").all_inner_texts() == shown
    # Choosing the nearest builds it: the form holds its request, the table is shown.
    nearest = expected["alternatives"][0]
    page.click("#alternatives-list button.alternative >> nth=0")
    page.wait_for_selector("#footnotes")
    assert page.inner_text("#message") == ""
    wanted = nearest["request"]
    assert page.input_value("#rows") == wanted["dimensions"][0]
    assert page.input_value("#margins") == wanted.get("margins", "all")
    assert "Universe:" in page.inner_text("#universe-line")
    # The table built is the API's answer to that request (the same bytes, as JSON).
    api = httpx.post(f"{url}/api/datasets/demo/tables", json=wanted, timeout=60)
    assert api.status_code == 200
    total = next(
        c["n"] for c in api.json()["cells"] if all(c[d] == "_T" for d in wanted["dimensions"])
    )
    assert f"{total:,}" in page.inner_text("#result")
    # The one answer of 400 or more is the refusal asked for on purpose.
    assert [f for f in failures if "/tables" in f and f.startswith("403")] == failures
    assert len(failures) == 1
    page.close()


def test_the_check_follows_the_choices(url, browser):  # noqa: F811
    """A table the site answers is said to be answered, with its cells; changing the totals
    is checked again."""
    page, failures = _open(browser, url)
    page.wait_for_selector("#uvar option[value='REGION']", state="attached")
    page.select_option("#rows", "TENURE")
    page.select_option("#cols", "SEX")
    body = {"dimensions": ["TENURE", "SEX"], "universe": {}, "statistic": "both"}
    status = page.locator("#check-status")
    every = _check(url, {**body, "margins": "all"})["cells"]
    expect(status).to_have_text(f"This table would be answered: {every} cells, none withheld.")
    page.select_option("#margins", "none")
    inner = _check(url, {**body, "margins": "none"})["cells"]
    expect(status).to_have_text(f"This table would be answered: {inner} cells, none withheld.")
    assert inner < every
    assert page.locator("#alternatives").is_hidden()
    assert not failures, failures
    page.close()


def test_a_table_with_cells_withheld_offers_tables_answered_in_full(url, browser, demo_dir):  # noqa: F811
    """SEX by AGEGRP published, then the same without one employment status of which one
    age group holds a few records (tests/test_account.py): built on the page, cells are
    withheld, and the check that follows offers the API's alternatives."""
    import pandas as pd

    from tablesafe.catalog._dataset import Dataset
    from test_guard import _dimension_sliver

    data = pd.read_parquet(demo_dir / "microdata.parquet", columns=["AGE", "SEX", "EMPSTAT"])
    groups = Dataset.open(demo_dir).catalog.variable("AGEGRP")
    where = {a: c for c, ms in zip(groups.codes, groups.members, strict=True) for a in ms}
    data["AGEGRP"] = data["AGE"].map(where)
    status, _, _ = _dimension_sliver(data, 10)
    codes = [int(s) for s in sorted(data["EMPSTAT"].unique()) if s != status]
    first = {"dimensions": ["SEX", "AGEGRP"], "statistic": "both"}
    assert httpx.post(f"{url}/api/datasets/demo/tables", json=first, timeout=60).is_success
    page, failures = _open(browser, url)
    page.wait_for_selector("#uvar option[value='EMPSTAT']", state="attached")
    page.select_option("#rows", "SEX")
    page.select_option("#cols", "AGEGRP")
    page.select_option("#uvar", "EMPSTAT")
    for code in codes:
        page.check(f"#ucats-list input[value='{code}']")
    page.click("#build")
    page.wait_for_selector("#footnotes")
    body = {**first, "universe": {"EMPSTAT": codes}, "margins": "all"}
    expected = _check(url, body)
    assert expected["passes"] and expected["withheld"] and expected["alternatives"]
    page.wait_for_selector("#alternatives-list button.alternative")
    shown = page.locator("#alternatives-list button.alternative").all_inner_texts()
    assert shown == [a["change"] for a in expected["alternatives"]]
    withheld = len(expected["withheld"])
    expect(page.locator("#check-status")).to_contain_text(f"{withheld} of them withheld")
    assert not failures, failures
    page.close()
