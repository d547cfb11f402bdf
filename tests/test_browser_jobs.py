"""The page offers a job for a table over the direct limit, shows its progress, downloads it.

On the demo's own site configuration (``demo/site.toml``, served by ``tablesafe
serve`` as ``make demo`` serves it): the server builds the job itself, with no
worker started beside it (issue 40).
"""

from __future__ import annotations

import io
import re
import signal
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import httpx
import pandas as pd
import pytest

from tablesafe._settings import load_site_config
from tablesafe.server._jobs import NO_WORKER
from tablesafe.state import open_state
from tablesafe.state._jobs import JobQueue
from test_browser import browser, free_port, running  # noqa: F401  (the browser fixture)

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def demo_config(demo_dir, tmp_path_factory) -> Path:
    """``demo/site.toml`` as it is, with its three paths moved to the tests' data and folder."""
    folder = tmp_path_factory.mktemp("demo-site")
    (folder / "secret").write_text("the demo's secret, for the browser test of its jobs")
    text = (ROOT / "demo" / "site.toml").read_text()
    for setting, value in (("audit_db", folder / "audit.sqlite"), ("path", demo_dir),
                           ("secret_file", folder / "secret")):  # fmt: skip
        text, n = re.subn(rf'(?m)^{setting} = ".*"$', f'{setting} = "{value}"', text)
        assert n == 1, setting
    config = folder / "site.toml"
    config.write_text(text)
    return config


def serve(config: Path) -> tuple[subprocess.Popen[str], str]:
    """``tablesafe serve --config`` in a process of its own, answering; it and its URL."""
    port = free_port()
    command = [sys.executable, "-m", "tablesafe._cli", "serve", "--config", str(config),
               "--port", str(port)]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/api/health", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise AssertionError("tablesafe serve did not answer")


def test_the_demo_builds_a_table_over_its_limit_as_a_job_from_the_page(
    demo_config,
    browser,  # noqa: F811
    tmp_path,
):
    from axe_playwright_python.sync_playwright import Axe

    site = load_site_config(demo_config)
    limit = site.datasets[0].rules.max_cells
    process, url = serve(demo_config)
    try:
        page = browser.new_page(accept_downloads=True)
        page.goto(url)
        page.wait_for_selector("#rows option[value='AGE']", state="attached")
        page.select_option("#rows", "AGE")
        page.select_option("#cols", "OCC")
        page.select_option("#layers", "SEX")
        page.check("input[name='statistic'][value='count']")
        page.click("#build")
        page.wait_for_selector("#job-box", state="visible")
        # Ages by occupations by sex with totals: over the demo's limit, under the job limit.
        message = page.inner_text("#message")
        cells = int(re.search(r"would have ([\d,]+) cells", message)[1].replace(",", ""))
        assert limit < cells <= site.datasets[0].rules.max_job_cells
        assert f"at most {limit:,}" in message
        assert page.is_hidden("#job-download")
        results = Axe().run(page)
        assert results.violations_count == 0, results.generate_report()
        page.click("#job-build")
        page.wait_for_selector("#job-download", state="visible", timeout=120_000)
        assert page.inner_text("#job-status") == "Done: the file is ready"
        assert page.get_attribute("#job-progress", "value") == "1"
        results = Axe().run(page)
        assert results.violations_count == 0, results.generate_report()
        with page.expect_download() as info:
            page.click("#job-download")
        path = tmp_path / "job.csv"
        info.value.save_as(path)
        assert info.value.suggested_filename == "AGE-by-OCC-by-SEX.csv"
        # A new request clears the job's box.
        page.select_option("#rows", "SEX")
        page.select_option("#cols", "")
        page.select_option("#layers", "")
        page.click("#build")
        page.wait_for_selector("table.cross")
        assert page.is_hidden("#job-box")
        page.close()
    finally:
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=120)
    # uvicorn ends a clean shutdown by raising the signal again (as test_operations.py reads).
    assert process.returncode in (0, -signal.SIGTERM), out
    frame = pd.read_csv(io.StringIO(path.read_text()), comment="#")
    assert len(frame) == cells and list(frame.columns[:6]) == [
        "AGE", "AGE_label", "OCC", "OCC_label", "SEX", "SEX_label",
    ]  # fmt: skip
    # The server's worker built it, and stopped with the server.
    with closing(open_state(site)) as store:
        rows = [r for r in store.query(limit=1000) if r["endpoint"].startswith("JOB ")]
        assert JobQueue(store).live_workers(3600) == 0
    assert len(rows) == 1 and rows[0]["status"] == 200 and ":serve:" in rows[0]["client"]


def test_the_page_says_when_no_worker_runs(demo_config, browser):  # noqa: F811
    text = demo_config.read_text().replace("[server]\n", '[server]\nembedded_worker = "off"\n')
    site = load_site_config(data=_toml(text) | {"base": str(demo_config.parent)})
    with running(site) as url:
        page = browser.new_page()
        page.goto(url)
        page.wait_for_selector("#rows option[value='AGE']", state="attached")
        page.select_option("#rows", "AGE")
        page.select_option("#cols", "OCC")
        page.select_option("#layers", "EDUC")
        page.click("#build")
        page.wait_for_selector("#job-box", state="visible")
        page.click("#job-build")
        page.wait_for_selector("#job-status:has-text('no worker')")
        assert page.inner_text("#job-status") == f"Queued: {NO_WORKER}"
        page.close()


def _toml(text: str) -> dict:
    import tomllib

    return tomllib.loads(text)
