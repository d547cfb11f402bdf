"""The page's admin section (cumulative disclosure risk) in a real headless Chromium."""

from __future__ import annotations

import httpx
import pytest

from tablesafe._settings import load_site_config
from tablesafe.server import hash_key
from test_browser import browser, running  # noqa: F401  (the Chromium fixture)
from test_server import ADMIN_KEY, USER_KEY

pytestmark = pytest.mark.system


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
                    "rules": {"min_universe_size": 10},
                }
            ],
            "keys": [
                {"id": "user1", "hash": hash_key(USER_KEY), "role": "user"},
                {"id": "admin1", "hash": hash_key(ADMIN_KEY), "role": "admin"},
            ],
        }
    )
    with running(site) as url:
        for dims in (["SEX", "AGEGRP"], ["SEX", "REGION"], ["AGEGRP", "REGION"]):
            r = httpx.post(
                f"{url}/api/datasets/demo/tables",
                json={"dimensions": dims},
                headers={"x-api-key": USER_KEY},
                timeout=30,
            )
            assert r.status_code == 200, r.text
        yield url


def test_admin_sees_the_cumulative_risk_and_runs_an_audit(keyed_site, browser):  # noqa: F811
    page = browser.new_page()
    page.goto(f"{keyed_site}/?key={ADMIN_KEY}")
    section = page.locator("#risk-admin")
    section.wait_for(state="visible", timeout=15_000)
    assert "No reconstruction audit of demo yet" in page.locator("#risk-body").inner_text()
    page.click("#risk-run")
    page.locator("#risk-body table").wait_for(timeout=60_000)
    rows = page.locator("#risk-body tbody tr")
    assert rows.count() == 1
    cells = rows.first.locator("td").all_inner_texts()
    assert cells[2] == "3"  # three tables served
    assert cells[3].endswith("%") and cells[6].endswith("%")
    assert page.locator("#risk-body svg[role=img]").count() == 1
    page.close()


def test_a_user_key_does_not_see_the_section(keyed_site, browser):  # noqa: F811
    page = browser.new_page()
    page.goto(f"{keyed_site}/?key={USER_KEY}")
    page.wait_for_timeout(1500)
    assert page.locator("#risk-admin").is_hidden()
    page.close()
