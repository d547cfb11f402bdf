"""The streamed CSV writer (issue 31): the bytes of to_csv, a piece of cells at a time."""

from __future__ import annotations

import itertools

import pytest

from profiles import profiles
from tablesafe._request import TableRequest
from tablesafe._settings import load_site_config
from tablesafe.output._stream import csv_pieces
from tablesafe.server import Principal, TableService

SECRET_ENV = "TABLESAFE_STREAM_SECRET"
PROFILES = profiles(SECRET_ENV)

#: Requests with margins, labels that need quoting, blanks, percentages, SEs, sums, groupings.
REQUESTS = [
    TableRequest(("AGEGRP", "SEX")),
    TableRequest(("AGE5", "OCC", "SEX"), universe={"REGION": [1, 2]}, statistic="both"),
    TableRequest(("EDUC", "TENURE"), statistic="weighted,percent:row", replicates=True),
    TableRequest(("REGION",), statistic="count,sum:INCOME,mean:HOURS"),
    TableRequest(("AGE", "SEX"), margins="none"),
    TableRequest(("MARSTAT", "SEX"), statistic="weighted", replicates=True),
]


@pytest.fixture(scope="module")
def services(demo_dir, tmp_path_factory):
    import os

    os.environ[SECRET_ENV] = "stream-writer-secret-0123456789"
    out = {}
    for name, (protection, magnitudes, rules) in PROFILES.items():
        site = load_site_config(
            data={
                "base": str(tmp_path_factory.mktemp(name)),
                "server": {"audit_db": "audit.sqlite"},
                "datasets": [
                    {
                        "name": "demo",
                        "path": str(demo_dir),
                        "protection": protection,
                        "magnitudes": magnitudes,
                        "rules": {
                            "min_universe_size": 0,
                            "sliver_min_difference": 0,
                            "max_rse": 30,
                            "unreliable_action": "np" if len(name) % 2 else "flag",
                            **rules,
                        },
                    }
                ],
            }
        )
        out[name] = TableService(site)
    yield out
    for service in out.values():
        service.close()


@pytest.mark.parametrize("profile", list(PROFILES))
def test_the_pieces_join_into_the_bytes_of_to_csv(services, profile):
    service = services[profile]
    who = Principal("user1", "user", 1000)
    checked = 0
    for request in REQUESTS:
        try:
            table = service.table(who, "demo", request)
        except Exception as exc:  # a profile that cannot publish the statistic: skipped
            assert type(exc).__name__ in ("RequestError", "ParameterError"), exc
            continue
        for footnotes, labels in ((True, True), (False, False), (True, False)):
            expected = table.to_csv(footnotes=footnotes, labels=labels).encode()
            for piece_cells in (7, 16_384) if checked else (1, 7, 16_384):
                pieces = list(
                    csv_pieces(table, footnotes=footnotes, labels=labels, piece_cells=piece_cells)
                )
                assert b"".join(p for p, _ in pieces) == expected
                rows = [n for _, n in pieces]
                assert rows == sorted(rows) and rows[-1] == int(table.computed.sum())
                if piece_cells == 7:
                    # A piece holds the rows of at most 7 cells.
                    assert max(b - a for a, b in itertools.pairwise(rows)) <= 7
        checked += 1
    assert checked >= 4
