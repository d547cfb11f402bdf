"""The server's table cache answers exactly the request it was asked (issue 26 item 1).

The cache is keyed on the whole checked request. A request that differs from
a cached one in any field (magnitudes, replicates, rounding, groupings...)
is built afresh; the sweep of the request fuzz gives the same bytes with
the caches (table cache and cube cache) on and off, in any order.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tablesafe._settings import load_site_config
from tablesafe.catalog._catalog import Catalog
from tablesafe.catalog._dataset import Dataset
from tablesafe.server import create_app
from tablesafe.server._auth import hash_key
from test_request_fuzz import table_bodies

KEY = "table-cache-test-key-0123456789"

#: Served datasets (one protection each): counts and magnitudes under ckm and DP.
PROFILES: dict[str, dict[str, Any]] = {
    "ckm": {"protection": {"method": "ckm"}},
    "dp": {
        "protection": {"method": "dp", "epsilon": 1.0, "cap": 5},
        "magnitudes": {"method": "dp"},
    },
}


def _site(demo_dir: Path, base: Path, *, cached: bool) -> Any:
    return load_site_config(
        data={
            "base": str(base),
            "server": {
                "title": "cache",
                "audit_db": "audit.sqlite",
                "cache_tables": 256 if cached else 0,
                "rate_limit_per_minute": 1_000_000,
            },
            "engine": {"kind": "duckdb", "cube_cache": cached},
            "datasets": [
                {
                    "name": name,
                    "path": str(demo_dir),
                    **profile,
                    # The guard off: its refusals depend on the order of requests.
                    "rules": {
                        "min_universe_size": 20,
                        "max_dimensions": 4,
                        "sliver_min_difference": 0,
                        "max_cells": 6000,
                    },
                }
                for name, profile in PROFILES.items()
            ],
            "keys": [{"id": "u", "hash": hash_key(KEY), "role": "user"}],
        }
    )


def _client(demo_dir: Path, base: Path, *, cached: bool) -> TestClient:
    client = TestClient(create_app(_site(demo_dir, base, cached=cached)))
    client.headers["x-api-key"] = KEY
    return client


def test_a_request_with_more_statistics_is_not_answered_from_the_cache(
    demo_dir: Path, tmp_path: Path
) -> None:
    """Failed before the fix: the second answer was the cached count-only table."""
    with _client(demo_dir, tmp_path, cached=True) as c:
        url = "/api/datasets/ckm/tables?format=csv"
        first = c.post(url, json={"dimensions": ["REGION"], "statistic": "count"})
        second = c.post(url, json={"dimensions": ["REGION"], "statistic": "count,sum:INCOME"})
        assert first.status_code == second.status_code == 200
        assert "sum_INCOME" not in first.text.splitlines()[0]
        assert "sum_INCOME" in second.text.splitlines()[0]
        # Replicates and a rounding are part of the request too.
        plain = c.post(url, json={"dimensions": ["REGION"], "statistic": "weighted"})
        with_se = c.post(
            url, json={"dimensions": ["REGION"], "statistic": "weighted", "replicates": True}
        )
        rounded = c.post(
            url, json={"dimensions": ["REGION"], "statistic": "weighted", "rounding": "1000"}
        )
        assert len({plain.text, with_se.text, rounded.text}) == 3


@pytest.fixture(scope="module")
def clients(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    on = _client(demo_dir, tmp_path_factory.mktemp("on"), cached=True)
    off = _client(demo_dir, tmp_path_factory.mktemp("off"), cached=False)
    with on, off:
        yield {"on": on, "off": off}


@pytest.fixture(scope="module")
def catalog(demo_dir: Path) -> Catalog:
    return Dataset.open(demo_dir).catalog


def _answer(client: TestClient, profile: str, body: dict[str, Any], fmt: str) -> tuple[int, bytes]:
    r = client.post(f"/api/datasets/{profile}/tables?format={fmt}", json=body)
    return r.status_code, r.content


@settings(
    derandomize=True,
    deadline=None,
    max_examples=20,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
@given(data=st.data())
def test_the_same_bytes_with_caches_on_and_off_in_any_order(
    data: st.DataObject, clients: dict[str, TestClient], catalog: Catalog
) -> None:
    asks = data.draw(
        st.lists(
            st.tuples(
                st.sampled_from(sorted(PROFILES)),
                table_bodies(catalog),
                st.sampled_from(["json", "csv"]),
            ),
            min_size=2,
            max_size=4,
        ),
        label="requests",
    )
    # Variants of one request (statistic, magnitudes, rounding) are what a
    # hand-written key can miss: ask each body with another statistic too.
    variants = []
    for profile, body, fmt in asks:
        variants.append((profile, body, fmt))
        variants.append((profile, {**body, "statistic": "count,sum:INCOME"}, fmt))
    order = data.draw(st.permutations(range(len(variants))), label="order")
    off = [_answer(clients["off"], *v) for v in variants]
    on = {i: _answer(clients["on"], *variants[i]) for i in order}
    # Twice: the second time from the cache.
    again = {i: _answer(clients["on"], *variants[i]) for i in reversed(order)}
    for i, expected in enumerate(off):
        assert on[i] == expected, variants[i]
        assert again[i] == expected, variants[i]
