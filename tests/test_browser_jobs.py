"""The page offers a job for a table over the direct limit, shows its progress, downloads it."""

from __future__ import annotations

import io
import threading

import httpx
import pandas as pd
import pytest

from tablesafe._settings import load_site_config
from tablesafe.server._jobs import Worker
from test_browser import browser, running  # noqa: F401  (the browser fixture)

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def site(demo_dir, tmp_path_factory):
    return load_site_config(
        data={
            "base": str(tmp_path_factory.mktemp("jobs-site")),
            "datasets": [
                {
                    "name": "demo",
                    "path": str(demo_dir),
                    "protection": {"method": "ckm"},
                    "rules": {"min_universe_size": 10, "max_cells": 500},
                }
            ],
        }
    )


def test_a_table_over_the_limit_is_built_as_a_job_from_the_page(site, browser, tmp_path):  # noqa: F811
    from axe_playwright_python.sync_playwright import Axe

    worker = Worker(site)
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), kwargs={"poll_seconds": 0.2})
    with running(site) as url:
        thread.start()
        try:
            page = browser.new_page(accept_downloads=True)
            page.goto(url)
            page.wait_for_selector("#rows option[value='AGE']", state="attached")
            page.select_option("#rows", "AGE")
            page.select_option("#cols", "OCC")
            page.check("input[name='statistic'][value='count']")
            page.click("#build")
            page.wait_for_selector("#job-box", state="visible")
            assert "1,012 cells" in page.inner_text("#message")  # 92 ages x 11 with totals
            assert page.is_hidden("#job-download")
            results = Axe().run(page)
            assert results.violations_count == 0, results.generate_report()
            page.click("#job-build")
            page.wait_for_selector("#job-download", state="visible", timeout=60_000)
            assert page.inner_text("#job-status") == "Done: the file is ready"
            assert page.get_attribute("#job-progress", "value") == "1"
            results = Axe().run(page)
            assert results.violations_count == 0, results.generate_report()
            with page.expect_download() as info:
                page.click("#job-download")
            path = tmp_path / "job.csv"
            info.value.save_as(path)
            assert info.value.suggested_filename == "AGE-by-OCC.csv"
            # A new request clears the job's box.
            page.select_option("#rows", "SEX")
            page.click("#build")
            page.wait_for_selector("table.cross")
            assert page.is_hidden("#job-box")
            page.close()
            direct = httpx.post(
                f"{url}/api/datasets/demo/jobs?format=csv&labels=true",
                json={"dimensions": ["AGE", "OCC"], "statistic": "count"},
            )
        finally:
            stop.set()
            thread.join(timeout=60)
            worker.close()
    frame = pd.read_csv(io.StringIO(path.read_text()), comment="#")
    assert len(frame) == 92 * 11 and list(frame.columns[:4]) == [
        "AGE",
        "AGE_label",
        "OCC",
        "OCC_label",
    ]
    assert direct.status_code == 202
