"""The page's admin section (issue 28) in a real headless Chromium.

With an admin key the section shows the privacy ledger and the reconstruction
audits over time with the admin API's own figures (read from the API here and
compared); with a user key it is absent; axe-core finds no violation. The
section "The admin section" of docs/builder-page.md says what it shows; the
tests check each of its statements.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import httpx
import pytest

from tablesafe._settings import load_site_config
from tablesafe.server import hash_key
from test_browser import browser, running  # noqa: F401  (the Chromium fixture)
from test_server import ADMIN_KEY, USER_KEY

pytestmark = pytest.mark.system

DOC = Path(__file__).resolve().parents[1] / "docs" / "builder-page.md"
SHARES = ("cells_exact_share", "uniques_exact_share", "uniques_precision")


@pytest.fixture(scope="module")
def keyed_site(demo_dir, tmp_path_factory):
    base = tmp_path_factory.mktemp("admin-site")
    site = load_site_config(
        data={
            "base": str(base),
            "datasets": [
                {
                    "name": "demo",
                    "path": str(demo_dir),
                    "protection": {"method": "ckm"},
                    # The cell-key method is not DP: each figure has a chance of 0.63 of an
                    # outcome only one neighbouring count gives, so an epsilon holds only at a
                    # delta above what its figures compose to (docs/attacks.md).
                    "rules": {
                        "min_universe_size": 10,
                        "privacy_budget_epsilon_per_key": 500,
                        "privacy_budget_delta": 0.99,
                    },
                }
            ],
            "keys": [
                {"id": "user1", "hash": hash_key(USER_KEY), "role": "user"},
                {"id": "admin1", "hash": hash_key(ADMIN_KEY), "role": "admin"},
            ],
        }
    )
    with running(site) as url:
        for dims, key in (
            (["SEX", "MARSTAT", "OCC"], USER_KEY),
            (["SEX", "MARSTAT", "TENURE"], USER_KEY),
            (["SEX", "OCC", "TENURE"], ADMIN_KEY),
        ):
            r = httpx.post(
                f"{url}/api/datasets/demo/tables",
                json={"dimensions": dims},
                headers={"x-api-key": key},
                timeout=30,
            )
            assert r.status_code == 200, r.text
        yield url


def _api(url: str, path: str, key: str = ADMIN_KEY) -> httpx.Response:
    return httpx.get(
        f"{url}/api/admin/datasets/demo/{path}", headers={"x-api-key": key}, timeout=60
    )


def _close(text: str, value: float) -> bool:
    """A figure shown to 6 significant digits is the API's value."""
    return math.isclose(float(text), value, rel_tol=1e-5, abs_tol=1e-12)


def _share(text: str, value: float) -> bool:
    """A share shown as a percentage to 1 decimal is the API's value."""
    return text.endswith("%") and abs(float(text[:-1]) / 100 - value) <= 0.0005 + 1e-9


def _rows(page, selector: str) -> list[list[str]]:
    rows = page.locator(f"{selector} tbody tr")
    return [rows.nth(i).locator("td").all_inner_texts() for i in range(rows.count())]


def _check_ledger(page, report: dict) -> None:
    field = lambda name: page.locator(f"#ledger-figures dd[data-field={name}]").inner_text()  # noqa: E731
    # ckm's epsilon is 0 at a delta above the chance of an outcome only one neighbour gives
    # (its figures' composed 0.63s), infinite below it: here a number, shown as the report's.
    assert report["epsilon_spent"] is not None
    assert _close(field("epsilon_spent"), report["epsilon_spent"])
    assert _close(field("delta"), report["delta"]) and report["delta"] == 0.99
    assert int(field("tables")) == report["tables"] == 3
    assert int(field("figures")) == report["figures"]
    assert int(field("figures_per_record")) == report["figures_per_record"]
    # The site sets a budget per key and none for the dataset.
    assert report["budget"] == {"epsilon": None, "epsilon_per_key": 500, "delta": 0.99}
    assert field("budget") == "epsilon 500 per key"
    assert field("epsilon_left") == "no budget set"
    # The cell-key method is not DP: the page says the figures are a bound on it.
    assert report["note"] and "not DP" in report["note"]
    note = page.locator("#ledger-note").inner_text()
    assert note.startswith("Not a DP guarantee. The protection is not")
    assert report["note"][1:] in note and "describe a mechanism that is not DP" in note
    assert report["accounting"] in page.locator("#ledger-body").inner_text()
    shown = {row[0]: row for row in _rows(page, "#ledger-keys")}
    assert set(shown) == {k["key_id"] for k in report["keys"]} == {"user1", "admin1"}
    for k in report["keys"]:
        row = shown[k["key_id"]]
        assert _close(row[1], k["epsilon_spent"]) and _close(row[2], k["epsilon_left"])
        assert [int(v) for v in row[3:]] == [k["figures_per_record"], k["tables"], k["figures"]]
    assert shown["user1"][4] == "2" and shown["admin1"][4] == "1"


def _check_audits(page, history: list[dict], tables: list[int]) -> None:
    rows = _rows(page, "#putative-table")
    assert len(rows) == len(history) == len(tables)
    for i, (row, audit) in enumerate(zip(rows, history, strict=True)):
        assert row[:3] == [str(i + 1), audit["time"], str(tables[i])]
        putative = audit["putative"]
        assert putative["found"] and putative["cells_exact_share"] > 0
        for j, name in enumerate(SHARES):
            assert _share(row[3 + 2 * j], putative[name]), (name, row)
            assert _share(row[4 + 2 * j], putative["baseline"][name]), (name, row)
    # The chart: a solid line per share and a dashed one per baseline, with its axes.
    chart = page.locator("#putative-chart")
    assert chart.get_attribute("role") == "img"
    assert chart.locator("polyline").count() == 6
    assert chart.locator("polyline[stroke-dasharray]").count() == 3
    ticks = chart.locator("text").all_text_contents()
    numbers = {str(i + 1) for i in range(len(history))}
    assert {"0%", "50%", "100%", "audit (oldest first)"} | numbers <= set(ticks)
    # Its points are the table's figures: each circle's height is its share.
    circles = chart.locator("circle")
    assert circles.count() == 6 * len(history)
    heights = sorted(
        float(c) for c in circles.evaluate_all("cs => cs.map(c => c.getAttribute('cy'))")
    )
    top, bottom = 10, 220 - 38
    expected = sorted(
        bottom - v * (bottom - top)
        for audit in history
        for v in [audit["putative"][n] for n in SHARES]
        + [audit["putative"]["baseline"][n] for n in SHARES]
    )
    assert heights == pytest.approx(expected)
    provable = _rows(page, "#provable-table")
    assert [row[2] for row in provable] == [str(n) for n in tables]
    for row, audit in zip(provable, history, strict=True):
        assert row[6] == f"{100 * audit['unprotected']['records_exact_share']:.1f}%"


def test_admin_sees_the_ledger_and_the_audits_over_time(keyed_site, browser):  # noqa: F811
    from axe_playwright_python.sync_playwright import Axe

    page = browser.new_page(viewport={"width": 1100, "height": 900})
    page.goto(f"{keyed_site}/?key={ADMIN_KEY}")
    page.locator("#risk-admin").wait_for(state="visible", timeout=15_000)
    page.locator("#ledger-keys").wait_for(timeout=15_000)
    _check_ledger(page, _api(keyed_site, "ledger").json())
    assert "No reconstruction audit of demo yet" in page.locator("#risk-body").inner_text()
    page.click("#risk-run")
    page.locator("#putative-table").wait_for(timeout=120_000)
    _check_audits(page, _api(keyed_site, "reconstruction").json()["history"], [3])
    # Another table served, another audit: the chart and the tables follow, oldest first.
    r = httpx.post(
        f"{keyed_site}/api/datasets/demo/tables",
        json={"dimensions": ["MARSTAT", "TENURE"]},
        headers={"x-api-key": USER_KEY},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    page.click("#risk-run")
    page.locator("#putative-table tbody tr").nth(1).wait_for(timeout=120_000)
    _check_audits(page, _api(keyed_site, "reconstruction").json()["history"], [3, 4])
    results = Axe().run(page)
    assert results.violations_count == 0, results.generate_report()
    page.close()


def test_a_user_key_does_not_see_the_section(keyed_site, browser):  # noqa: F811
    assert _api(keyed_site, "ledger", key=USER_KEY).status_code == 403
    assert _api(keyed_site, "reconstruction", key=USER_KEY).status_code == 403
    page = browser.new_page()
    page.goto(f"{keyed_site}/?key={USER_KEY}")
    page.wait_for_selector("#rows option[value='AGEGRP']", state="attached")
    page.wait_for_timeout(1500)
    assert page.locator("#risk-admin").is_hidden()
    assert page.locator("#ledger-body").inner_text() == ""
    assert page.locator("#risk-body").inner_text() == ""
    page.close()


def test_the_docs_name_what_the_section_shows():
    text = DOC.read_text()
    section = text.split("## The admin section", 1)[1].split("\n## ", 1)[0]
    assert "tests/test_browser_admin.py" in section
    # Every label the docs quote in bold is on the page (the labels of admin.js and index.html).
    static = Path(__file__).resolve().parents[1] / "src" / "tablesafe" / "server" / "static"
    page = (static / "admin.js").read_text() + (static / "index.html").read_text()
    labels = re.findall(r"\*\*(.+?)\*\*", section)
    assert len(labels) >= 5
    for label in labels:
        assert label in page, label
