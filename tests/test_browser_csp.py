"""The web page under its Content-Security-Policy, in Chromium (issue 26, item 9).

The page builds a table, draws and exports its chart and downloads files with
no CSP violation reported, and no other page can frame it.
"""

from __future__ import annotations

import pytest

from test_browser import browser  # noqa: F401  (the Chromium fixture)
from test_server import site
from test_server_live import serving

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def url(demo_dir, tmp_path_factory):
    cfg = site(demo_dir, tmp_path_factory.mktemp("csp"), keys=False)
    with serving(cfg) as live:
        yield f"http://127.0.0.1:{live.port}"


def test_the_page_works_under_its_policy(url, browser, tmp_path):  # noqa: F811
    page = browser.new_page(accept_downloads=True)
    messages: list[str] = []
    page.on("console", lambda m: messages.append(m.text))
    response = page.goto(url)
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    page.wait_for_selector("#rows option[value='AGEGRP']", state="attached")
    page.select_option("#rows", "AGEGRP")
    page.select_option("#cols", "SEX")
    page.click("#build")
    page.wait_for_selector("#footnotes")
    for button in ("#download-png", "#download-svg", "#download-csv"):
        with page.expect_download() as info:
            page.click(button)
        assert info.value.path().stat().st_size > 100
    page.close()
    assert not [m for m in messages if "Content Security Policy" in m], messages


def test_no_page_can_frame_the_site(url, browser):  # noqa: F811
    page = browser.new_page()
    messages: list[str] = []
    page.on("console", lambda m: messages.append(m.text))
    page.set_content(f'<iframe id="f" src="{url}/"></iframe>')
    page.wait_for_timeout(1500)  # a bound on waiting for the frame, not a measure
    frame = page.frame_locator("#f")
    assert frame.locator("#build").count() == 0
    page.close()
    assert any("frame-ancestors" in m for m in messages), messages
