"""The sliver guard across keys and dimensions, in process through the HTTP API."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient

from tablesafe._dataset import Dataset
from tablesafe._errors import RefusedError
from tablesafe._request import TableRequest
from tablesafe._rules import PublishedSet, cell_sliver_guard, published_sets, sliver_guard
from tablesafe._settings import RuleSettings
from tablesafe.engines import DuckDBEngine
from tablesafe.server import create_app
from test_server import ADMIN_KEY, USER_KEY, error_of, site

TABLES = "/api/datasets/demo/tables"


def _client(demo_dir, tmp_path, **rules):
    app = create_app(site(demo_dir, tmp_path, rules={"sliver_min_difference": 10, **rules}))
    return TestClient(app)


@pytest.fixture(scope="module")
def frame(demo_dir) -> pd.DataFrame:
    data = pd.read_parquet(demo_dir / "microdata.parquet", columns=["AGE", "SEX", "EMPSTAT"])
    groups = Dataset.open(demo_dir).catalog.variable("AGEGRP")
    where = {
        a: code for code, members in zip(groups.codes, groups.members, strict=True) for a in members
    }
    data["AGEGRP"] = data["AGE"].map(where)
    return data


def _numbers(message: str) -> set[int]:
    return {int(x) for x in re.findall(r"\d+", message)}


def _dimension_sliver(frame: pd.DataFrame, m: int) -> tuple[int, int, int]:
    """An age group and an employment status that isolate 1 .. m-1 records of the group,
    while the status itself is common (the universes differ by many records)."""
    for status in sorted(frame["EMPSTAT"].unique()):
        common = int((frame["EMPSTAT"] == status).sum())
        for group in sorted(frame["AGEGRP"].unique()):
            few = int(((frame["EMPSTAT"] == status) & (frame["AGEGRP"] == group)).sum())
            rest = int(((frame["EMPSTAT"] != status) & (frame["AGEGRP"] == group)).sum())
            if 0 < few < m and common > 10 * m and rest >= m:
                return int(status), int(group), few
    raise AssertionError("the demo data has no such sliver")


def test_two_keys_cannot_split_a_universe_sliver(demo_dir, tmp_path, frame):
    ages = list(range(30, 41))
    widowed = {"AGE": ages, "MARSTAT": [1, 2, 4]}
    with _client(demo_dir, tmp_path / "a") as c:
        c.headers["x-api-key"] = USER_KEY
        first = c.post(TABLES, json={"dimensions": ["SEX"], "universe": {"AGE": ages}})
        assert first.status_code == 200
        second = c.post(
            TABLES,
            json={"dimensions": ["SEX"], "universe": widowed},
            headers={"x-api-key": ADMIN_KEY},
        )
        assert second.status_code == 403
        message = error_of(second)["message"]
        assert "already published from this dataset" in message
        assert _numbers(message) <= {10}  # the rule's m, never a count
    # Per key, as an option: the other key is judged on its own.
    with _client(demo_dir, tmp_path / "b", sliver_scope="key") as c:
        assert (
            c.post(
                TABLES,
                json={"dimensions": ["SEX"], "universe": {"AGE": ages}},
                headers={"x-api-key": USER_KEY},
            ).status_code
            == 200
        )
        other = c.post(
            TABLES,
            json={"dimensions": ["SEX"], "universe": widowed},
            headers={"x-api-key": ADMIN_KEY},
        )
        assert other.status_code == 200


def test_a_dimension_made_sliver_is_refused_across_keys(demo_dir, tmp_path, frame):
    """SEX by AGEGRP, then the same in a universe without one employment status: the
    universes differ by thousands, one age group's slices by a few records."""
    m = 10
    status, group, few = _dimension_sliver(frame, m)
    codes = [int(s) for s in sorted(frame["EMPSTAT"].unique()) if s != status]
    narrowed = {"dimensions": ["SEX", "AGEGRP"], "universe": {"EMPSTAT": codes}}
    with _client(demo_dir, tmp_path / "a") as c:
        c.headers["x-api-key"] = USER_KEY
        assert c.post(TABLES, json={"dimensions": ["SEX", "AGEGRP"]}).status_code == 200
        refused = c.post(TABLES, json=narrowed, headers={"x-api-key": ADMIN_KEY})
        assert refused.status_code == 403, refused.text
        message = error_of(refused)["message"]
        assert f"AGEGRP = {group}" in message
        assert "differ by fewer than 10 records" in message
        sizes = {few, int((frame["AGEGRP"] == group).sum()), len(frame)}
        assert not (_numbers(message) - {m, group}) & sizes
        assert _numbers(message) <= {m, group}
        # The refusal is in the audit log, the table is not served.
        rows = c.get("/api/admin/audit", headers={"x-api-key": ADMIN_KEY}).json()["requests"]
        assert any(r["status"] == 403 for r in rows)
    # Without the cell-level guard, the universe guard alone lets it through.
    with _client(demo_dir, tmp_path / "b", sliver_cells=False) as c:
        c.headers["x-api-key"] = USER_KEY
        assert c.post(TABLES, json={"dimensions": ["SEX", "AGEGRP"]}).status_code == 200
        assert c.post(TABLES, json=narrowed, headers={"x-api-key": ADMIN_KEY}).status_code == 200


def test_ordinary_tables_are_not_slivers(demo_dir, tmp_path):
    """A table and its breakdowns by another variable (dominant categories included)
    publish their differences anyway: no refusal."""
    with _client(demo_dir, tmp_path) as c:
        c.headers["x-api-key"] = USER_KEY
        for dims in (["AGEGRP"], ["AGEGRP", "MARSTAT"], ["AGEGRP", "EMPSTAT"], ["SEX", "AGEGRP"]):
            r = c.post(TABLES, json={"dimensions": dims})
            assert r.status_code == 200, (dims, r.text)
        # The same tables again, from another key.
        for dims in (["AGEGRP", "MARSTAT"], ["SEX", "AGEGRP"]):
            r = c.post(TABLES, json={"dimensions": dims}, headers={"x-api-key": ADMIN_KEY})
            assert r.status_code == 200, (dims, r.text)


def test_published_sets_are_the_tables_slices(demo_dir, frame):
    dataset = Dataset.open(demo_dir)
    request = TableRequest(("SEX", "AGEGRP"), universe={"EMPSTAT": [2, 3, 4]}, statistic="count")
    plan = request.bind(dataset.catalog)
    from dataclasses import replace

    full = replace(plan, grouping_sets=replace(request, margins="all").grouping_sets())
    agg = DuckDBEngine().tabulate(dataset, full)
    sets = published_sets("demo", dataset.catalog, {"EMPSTAT": [2, 3, 4]}, plan, agg)
    inside = frame[frame["EMPSTAT"].isin([2, 3, 4])]
    assert sets[0].size == len(inside) and sets[0].parent == ""
    assert len(sets) == 1 + 2 + 8
    for s in sets[1:]:
        assert s.parent == sets[0].fingerprint
        name, codes = next((k, v) for k, v in s.definition.items() if k != "EMPSTAT")
        column = "AGE" if name == "AGE" else name
        truth = int(inside[column].isin(codes).sum())
        assert s.size == truth
        assert len(s.breakdown) == 1
    assert np.all([s.size >= 0 for s in sets])


class _Store:
    """An audit store holding earlier universes and record sets, all near in size."""

    def __init__(self, n: int) -> None:
        self.n = n

    def answered_universes_all(self, dataset: str, low: int, high: int) -> list[Any]:
        return [({"REGION": [i]}, 100 + i % 3, f"fp{i}", False) for i in range(self.n)]

    def published_sets_near(
        self, dataset: str, low: int, high: int, only: str | None, key_id: str
    ) -> list[Any]:
        return [
            (PublishedSet({"REGION": [i]}, ("SEX",), 100, f"fp{i}", "", "x"), False)
            for i in range(self.n)
        ]


def _cap_rules(cap: int) -> RuleSettings:
    return RuleSettings.model_validate({"sliver_min_difference": 10, "sliver_max_candidates": cap})


@pytest.mark.parametrize("guard", ["universe", "cells"])
def test_more_candidates_than_the_cap_are_refused_without_a_count(guard: str) -> None:
    calls: list[int] = []

    def count(a: Any, b: Any) -> int:
        calls.append(1)
        return 0  # disjoint: no sliver

    def run(n: int, cap: int) -> None:
        if guard == "universe":
            sliver_guard(
                store=_Store(n),
                key_id="k",
                dataset="demo",
                universe={"SEX": [1]},
                size=101,
                fingerprint="new",
                rules=_cap_rules(cap),
                count=count,
            )
        else:
            new = PublishedSet({"SEX": [1]}, ("SEX",), 101, "new", "parent", "the records")
            cell_sliver_guard(
                store=_Store(n),
                key_id="k",
                dataset="demo",
                sets=[new],
                rules=_cap_rules(cap),
                count=count,
            )

    run(5, 5)  # at the cap: every candidate is counted, none is a sliver
    assert len(calls) == 5
    calls.clear()
    with pytest.raises(RefusedError) as refused:
        run(6, 5)
    assert calls == []  # refused before any count of the microdata
    message = str(refused.value)
    assert "at most 5" in message
    assert _numbers(message) == {5}  # the cap (a published setting), no count


def test_the_cap_is_a_documented_setting() -> None:
    assert RuleSettings().sliver_max_candidates >= 1
    with pytest.raises(ValueError):
        RuleSettings.model_validate({"sliver_max_candidates": 0})
