"""Tables the rules refuse for their size are refused with a 4xx before any data is read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tablesafe._settings import load_site_config
from tablesafe.server import create_app, hash_key
from tablesafe.service._service import TableService

KEY = "ts_alice_key_for_tests_0123456789"
HEADERS = {"x-api-key": KEY}
RULES = {
    "min_universe_size": 20,
    "sliver_min_difference": 0,
    "max_cells": 2_000,
    "max_dimensions": 3,
    "max_custom_groups": 2,
    # The refusal itself reads nothing; the alternatives it would offer are dry runs of
    # other, smaller tables, bounded by this setting (tests/test_alternatives.py).
    "alternatives_max_dry_runs": 0,
}


class Reads:
    """Counts the engine's reads of the microdata (the real engine does the work)."""

    def __init__(self, engine: Any) -> None:
        self.calls = 0
        for name in ("tabulate", "ensure_valid"):
            real = getattr(engine, name)

            def counted(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
                self.calls += 1
                return _real(*args, **kwargs)

            setattr(engine, name, counted)


@pytest.fixture(scope="module")
def served(demo_dir, tmp_path_factory) -> Iterator[tuple[TestClient, Reads]]:
    site = load_site_config(
        data={
            "base": str(tmp_path_factory.mktemp("long")),
            "server": {"audit_db": "audit.sqlite"},
            "keys": [{"id": "alice", "hash": hash_key(KEY), "role": "user"}],
            "datasets": [
                {
                    "name": "demo",
                    "path": str(demo_dir),
                    "protection": {"method": "ckm", "max_deviation": 3, "variance": 1.0},
                    "rules": RULES,
                }
            ],
        }
    )
    service = TableService(site)
    reads = Reads(service.served("demo").builder.engine)
    with TestClient(create_app(site, service=service)) as client:
        yield client, reads


def _post(client: TestClient, body: dict[str, Any]) -> Any:
    return client.post("/api/datasets/demo/tables", json=body, headers=HEADERS)


def _groups(k: int) -> list[dict[str, Any]]:
    return [
        {
            "name": f"G{i}",
            "variable": "AGE",
            "groups": [{"code": "a", "members": [i]}],
            "other": "rest",
        }
        for i in range(k)
    ]


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        # 92 single years x 7 x 11 with margins = 7,084 cells > 2,000.
        (
            {"dimensions": ["AGE", "EDUC", "OCC"]},
            403,
            "the table would have 7,084 cells (with margins); this dataset allows at most 2,000",
        ),
        (
            {"dimensions": ["AGE", "EDUC", "OCC", "SEX"]},
            400,
            "this dataset allows at most 3 dimensions; 4 were given",
        ),
        (
            {"dimensions": ["AGE", "SEX"], "groupings": _groups(3)},
            400,
            "at most 2",
        ),
        ({"dimensions": ["DISTRICT"]}, 400, "unknown variable 'DISTRICT'"),
    ],
)
def test_refused_before_any_data_is_read(served, body, status, message):
    client, reads = served
    before = reads.calls
    response = _post(client, body)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["status"] == status and message in error["message"]
    assert reads.calls == before, "the request read microdata before it was refused"


def test_an_allowed_table_reads_the_data(served):
    client, reads = served
    before = reads.calls
    response = _post(client, {"dimensions": ["AGEGRP", "SEX"]})
    assert response.status_code == 200
    assert reads.calls > before
