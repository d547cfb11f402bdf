"""The sliver guard across keys and dimensions, in process through the HTTP API."""

from __future__ import annotations

import itertools
import re
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient

from tablesafe._errors import RefusedError
from tablesafe._request import TableRequest
from tablesafe._settings import RuleSettings
from tablesafe.catalog._dataset import Dataset
from tablesafe.engines import DuckDBEngine
from tablesafe.engines._sketch import key_buckets
from tablesafe.rules._guard import (
    BUCKETS,
    WHOLE,
    RecordSet,
    SetIndex,
    fingerprint,
    guard_check,
    record_sets,
    same_records_publicly,
    zero_boxes,
)
from tablesafe.rules._guard_families import derivable_atoms
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


# -- issue 25: atomic, shared across names, complete, never refusing a repeat --------------


def _full_frame(demo_dir) -> pd.DataFrame:
    return pd.read_parquet(demo_dir / "microdata.parquet")


def _sliver_pairs(data: pd.DataFrame, m: int, count: int) -> list[tuple[dict, dict]]:
    """Universes U (a region, four ages) and V = U without a category of another variable
    that U holds 1 .. m-1 records of: V is a sliver away from U (checked by brute force)."""
    out = []
    for start in (16, 18):
        for a in range(start, 88, 4):
            for r in sorted(int(x) for x in data["REGION"].unique()):
                ages = list(range(a, a + 4))
                u = data[(data["REGION"] == r) & data["AGE"].isin(ages)]
                if len(u) < 40:
                    continue
                for var in ("MARSTAT", "EMPSTAT", "EDUC", "OCC", "HHSIZE"):
                    small = [c for c, n in u[var].value_counts().sort_index().items() if n < m]
                    if small:
                        codes = sorted(int(c) for c in data[var].unique() if c != small[0])
                        assert 0 < len(u) - int(u[var].isin(codes).sum()) < m
                        out.append(
                            ({"REGION": [r], "AGE": ages}, {"REGION": [r], "AGE": ages, var: codes})
                        )
                        break
                if len(out) == count:
                    return out
    raise AssertionError("the demo data has too few sliver pairs")


def _race(
    client: TestClient, pairs: list[tuple[dict, dict]], keys: tuple[str, str]
) -> list[tuple[int, int]]:
    """Each pair's two requests sent at the same instant (a barrier per pair), pairs in parallel."""
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    def one(barrier: Barrier, universe: dict, key: str) -> int:
        barrier.wait()
        body = {"dimensions": ["SEX"], "universe": universe, "statistic": "count"}
        return client.post(TABLES, json=body, headers={"x-api-key": key}).status_code

    with ThreadPoolExecutor(max_workers=16) as pool:
        futures = []
        for u, v in pairs:
            barrier = Barrier(2)
            futures.append(
                (pool.submit(one, barrier, u, keys[0]), pool.submit(one, barrier, v, keys[1]))
            )
        return [(a.result(), b.result()) for a, b in futures]


def test_concurrent_sliver_pairs_are_never_both_answered(demo_dir, tmp_path):
    """Issue 25: 15 of 24 simultaneous pairs (one key) and 8 of 24 (two keys) were both
    answered. The check and the write are one transaction per microdata."""
    pairs = _sliver_pairs(_full_frame(demo_dir), 10, 100)
    app = create_app(
        site(demo_dir, tmp_path, rules={"sliver_min_difference": 10},
             server={"rate_limit_per_minute": 1_000_000})
    )  # fmt: skip
    with TestClient(app) as c:
        one_key = _race(c, pairs[:50], (USER_KEY, USER_KEY))
        two_keys = _race(c, pairs[50:], (USER_KEY, ADMIN_KEY))
    statuses = one_key + two_keys
    assert all(s in (200, 403) for pair in statuses for s in pair), statuses
    assert sum(pair == (200, 200) for pair in statuses) == 0
    # Every pair was a sliver: one of the two was answered, the other refused.
    assert sum(200 in pair for pair in statuses) >= 90


def _second_catalog(demo_dir, folder) -> str:
    """Another catalog over the same microdata file: another title, MARSTAT named MARITAL."""
    text = (demo_dir / "catalog.toml").read_text(encoding="utf-8")
    text = text.replace('name = "MARSTAT"', 'name = "MARITAL"\ncolumn = "MARSTAT"')
    text = text.replace("MARSTAT = [2, 3, 4]", "MARITAL = [2, 3, 4]")
    text = text.replace('file = "microdata.parquet"', f'file = "{demo_dir / "microdata.parquet"}"')
    text = text.replace("tablesafe demo survey (synthetic)", "the same survey, other catalog")
    folder.mkdir()
    (folder / "catalog.toml").write_text(text, encoding="utf-8")
    return str(folder)


def _two_names(demo_dir, tmp_path):
    from tablesafe._settings import load_site_config
    from tablesafe.server import hash_key

    second = _second_catalog(demo_dir, tmp_path / "demo2")
    rules = {"min_universe_size": 20, "sliver_min_difference": 10}
    data = {
        "base": str(tmp_path),
        "server": {"title": "two names", "audit_db": "audit.sqlite"},
        "datasets": [
            {
                "name": "demo",
                "path": str(demo_dir),
                "protection": {"method": "none"},
                "rules": rules,
            },
            {"name": "demo2", "path": second, "protection": {"method": "none"}, "rules": rules},
        ],
        "keys": [
            {"id": "user1", "hash": hash_key(USER_KEY), "role": "user"},
            {"id": "admin1", "hash": hash_key(ADMIN_KEY), "role": "admin"},
        ],
    }
    return create_app(load_site_config(data=data))


def test_a_sliver_refused_on_one_name_is_refused_on_another(demo_dir, tmp_path):
    """Issue 25: the guard's memory was per dataset name, so demo2 answered a sliver of demo."""
    (u, v), (u2, v2) = _sliver_pairs(_full_frame(demo_dir), 10, 2)
    renamed = {("MARITAL" if k == "MARSTAT" else k): c for k, c in v.items()}
    assert "MARSTAT" in v  # the first pair excludes a marital status
    with TestClient(_two_names(demo_dir, tmp_path)) as c:
        c.headers["x-api-key"] = USER_KEY
        body = {"dimensions": ["SEX"], "statistic": "count"}
        assert c.post(TABLES, json={**body, "universe": u}).status_code == 200
        other = c.post("/api/datasets/demo2/tables", json={**body, "universe": renamed})
        assert other.status_code == 403, other.text
        assert "differs by fewer than 10 records" in error_of(other)["message"]
        # The other way round, and a repeat under the other name is answered.
        assert (
            c.post("/api/datasets/demo2/tables", json={**body, "universe": u2}).status_code == 200
        )
        assert c.post(TABLES, json={**body, "universe": v2}).status_code == 403
        again = c.post("/api/datasets/demo2/tables", json={**body, "universe": u})
        assert again.status_code == 200


def _with_agegrp(demo_dir, data: pd.DataFrame) -> pd.DataFrame:
    groups = Dataset.open(demo_dir).catalog.variable("AGEGRP")
    where = {a: c for c, members in zip(groups.codes, groups.members, strict=True) for a in members}
    return data.assign(AGEGRP=data["AGE"].map(where))


def _two_category_sliver(data: pd.DataFrame, m: int) -> tuple[int, str, int]:
    """A region and a category of another variable whose records, removed from the region,
    change no 1-category slice of SEX x AGEGRP x EMPSTAT by 1 .. m-1 but some 2-category one."""
    dims = ("SEX", "AGEGRP", "EMPSTAT")
    for r in sorted(int(x) for x in data["REGION"].unique()):
        base = data[data["REGION"] == r]
        for var in ("EDUC", "MARSTAT", "OCC", "HHSIZE"):
            for code in sorted(int(x) for x in base[var].unique()):
                gone = base[base[var] == code]
                ones = [gone[d].value_counts() for d in dims]
                if len(gone) < m or any(((n > 0) & (n < m)).any() for n in ones):
                    continue
                twos = [gone.groupby(list(p)).size() for p in itertools.combinations(dims, 2)]
                if any(((n > 0) & (n < m)).any() for n in twos):
                    return r, var, code
    raise AssertionError("no such category in the demo data")


def test_two_category_slices_of_a_3d_table_are_compared(demo_dir, tmp_path):
    """Issue 25: in 3-D tables only 1-category slices were compared; a 12-record sliver of a
    2-category slice was rebuilt within +-1 per cell."""
    data = _with_agegrp(demo_dir, _full_frame(demo_dir))
    r, var, code = _two_category_sliver(data, 10)
    codes = sorted(int(c) for c in data[var].unique() if c != code)
    dims = ["SEX", "AGEGRP", "EMPSTAT"]
    with _client(demo_dir, tmp_path) as c:
        c.headers["x-api-key"] = USER_KEY
        first = c.post(TABLES, json={"dimensions": dims, "universe": {"REGION": [r]}})
        assert first.status_code == 200
        narrowed = {"dimensions": dims, "universe": {"REGION": [r], var: codes}}
        refused = c.post(TABLES, json=narrowed, headers={"x-api-key": ADMIN_KEY})
        assert refused.status_code == 403, refused.text
        message = error_of(refused)["message"]
        assert re.search(r"the records with \w+ = \w+ and \w+ = \w+ in this table", message)


def _parent_and_children(data: pd.DataFrame, m: int) -> tuple[dict, list[int], list[int]]:
    """A universe U and two disjoint sets of OCC codes A, B whose complement in U holds
    1 .. m-1 records, while U, U and A, U and B differ pairwise by m or more."""
    for r in sorted(int(x) for x in data["REGION"].unique()):
        for a in range(20, 60, 5):
            u = data[(data["REGION"] == r) & data["AGE"].between(a, a + 9)]
            counts = u["OCC"].value_counts()
            rest = [int(c) for c, n in counts.sort_index().items() if 0 < n < m]
            if not rest or len(u) < 100:
                continue
            left = sorted(int(c) for c in counts.index if int(c) != rest[0])
            half_a, half_b = left[: len(left) // 2], left[len(left) // 2 :]
            na, nb = int(u["OCC"].isin(half_a).sum()), int(u["OCC"].isin(half_b).sum())
            if min(na, nb) >= m and len(u) - na - nb < m:
                universe = {"REGION": [r], "AGE": list(range(a, a + 10))}
                return universe, half_a, half_b
    raise AssertionError("no such universe in the demo data")


def test_a_parent_minus_its_children_is_a_sliver(demo_dir, tmp_path):
    """Issue 25: a parent universe minus two child universes passed the pairwise check."""
    universe, part_a, part_b = _parent_and_children(_full_frame(demo_dir), 10)
    body = {"dimensions": ["SEX"], "statistic": "count"}
    with _client(demo_dir, tmp_path) as c:
        c.headers["x-api-key"] = USER_KEY
        assert c.post(TABLES, json={**body, "universe": universe}).status_code == 200
        first = c.post(TABLES, json={**body, "universe": {**universe, "OCC": part_a}})
        assert first.status_code == 200
        second = c.post(TABLES, json={**body, "universe": {**universe, "OCC": part_b}})
        assert second.status_code == 403, second.text
        assert "a group minus its parts" in error_of(second)["message"]
        # The same children broken down by another variable are no sliver of SEX tables...
        other = c.post(
            TABLES, json={**body, "dimensions": ["EDUC"], "universe": {**universe, "OCC": part_b}}
        )
        # ...but a universe is whole: compared whatever its breakdown.
        assert other.status_code == 403


# -- the guard's parts, by brute force -----------------------------------------------------


def _plan_and_aggregates(dataset, request):
    plan = request.bind(dataset.catalog)
    full = replace(plan, grouping_sets=replace(request, margins="all").grouping_sets())
    return plan, full, DuckDBEngine().tabulate(dataset, full)


def _select(data: pd.DataFrame, definition) -> pd.DataFrame:
    mask = np.ones(len(data), dtype=bool)
    for column, codes in definition:
        mask &= data[column].isin(list(codes)).to_numpy()
    return data[mask]


def test_record_sets_are_the_universe_and_every_slice(demo_dir):
    dataset = Dataset.open(demo_dir)
    data = _full_frame(demo_dir)
    request = TableRequest(
        ("SEX", "AGEGRP", "EMPSTAT"), universe={"REGION": [2, 3]}, statistic="count"
    )
    plan, full, agg = _plan_and_aggregates(dataset, request)
    sketch = key_buckets(DuckDBEngine(), dataset, full, BUCKETS)
    sets = record_sets(plan, agg, sketch, dataset.catalog)
    inside = data[data["REGION"].isin([2, 3])]
    with_groups = _with_agegrp(demo_dir, inside)
    dims = ("SEX", "AGEGRP", "EMPSTAT")
    # Brute force: every non-empty cell of every grouping set but the inner one.
    expected = 1 + sum(
        int((with_groups.groupby(list(g)).size() > 0).sum())
        for r in (1, 2)
        for g in itertools.combinations(dims, r)
    )
    assert len(sets) == expected
    assert sets[0].label == "this table's universe" and sets[0].columns == {
        "SEX",
        "AGE",
        "EMPSTAT",
        WHOLE,
    }
    by_fp = {s.fingerprint: s for s in sets}
    for s in sets:
        records = _select(data, s.definition)
        assert s.size == len(records) > 0
        keys = records["RKEY"].to_numpy().astype(np.int64)
        assert np.array_equal(s.sketch, np.bincount(keys % BUCKETS, minlength=BUCKETS))
        fixed = s.label.count(" = ")  # the slice's categories; broken down by the others
        assert len(s.columns - {WHOLE}) == 3 - fixed
        assert 0 < len(s.ancestors) <= 2**fixed - 1 or fixed == 0
        for a in s.ancestors:  # the sets of the table that contain it
            assert set(records.index) <= set(_select(data, by_fp[a].definition).index)
    # Definitions are canonical: REGION = 2, 3 is a condition, all of SEX is none.
    assert sets[0].definition == (("REGION", (2, 3)),)


def test_sketch_distance_is_a_lower_bound_on_the_difference(demo_dir):
    rng = np.random.default_rng(25)
    data = _full_frame(demo_dir)
    keys = data["RKEY"].to_numpy().astype(np.int64)
    for _ in range(200):
        x = rng.random(len(data)) < rng.uniform(0.001, 0.05)
        y = x.copy()
        flip = rng.choice(len(data), size=int(rng.integers(0, 30)), replace=False)
        y[flip] = ~y[flip]
        sx = np.bincount(keys[x] % BUCKETS, minlength=BUCKETS)
        sy = np.bincount(keys[y] % BUCKETS, minlength=BUCKETS)
        assert np.abs(sx - sy).sum() <= int((x != y).sum())


@pytest.mark.parametrize("engine", ["memory", "cube"])
def test_sketches_are_the_same_on_every_engine(demo_dir, engine):
    from tablesafe.engines import CubeCache, MemoryEngine

    dataset = Dataset.open(demo_dir)
    request = TableRequest(("AGEGRP", "TENURE"), universe={"EDUC": [1, 2, 6]}, statistic="count")
    _, full, _ = _plan_and_aggregates(dataset, request)
    other = MemoryEngine() if engine == "memory" else CubeCache(DuckDBEngine())
    expected = key_buckets(DuckDBEngine(), dataset, full, BUCKETS)
    assert np.array_equal(key_buckets(other, dataset, full, BUCKETS), expected)


@pytest.mark.parametrize(
    ("old", "new", "atoms"),
    [
        ([{1, 2, 3, 4, 5}], [{1, 2}, {3}], [{4, 5}]),  # a parent minus its children
        ([{1, 2, 3, 4, 5}, {1, 2}], [{3}], [{4, 5}]),
        ([{1, 2}, {2, 3}], [{1, 2, 3}], [{1}, {3}, {2}]),  # overlaps resolved by a union
        ([{1, 2}, {2, 3}], [], []),  # {1} - {3} alone is no set
        ([{1, 2, 3, 4, 5}, {1, 2}, {3}], [{4}], [{5}]),  # {4, 5} was; now {5} alone
        ([{1, 2, 3, 4, 5}, {1, 2}, {3}], [{4, 5}], []),  # derivable before, now published
        ([{1, 2, 3}], [{4, 5}], []),  # disjoint: nothing to subtract
    ],
)
def test_derivable_atoms(old, new, atoms):
    got = derivable_atoms([1, 2, 3, 4, 5], [frozenset(s) for s in old], [frozenset(s) for s in new])
    assert sorted(map(sorted, got)) == sorted(map(sorted, atoms))
    # Brute force: an atom is derivable iff some +-1/0 combination of the sets gives it.
    sets = [frozenset(s) for s in (*old, *new)]
    for atom in got:
        target = np.array([c in atom for c in range(1, 6)], dtype=int)
        assert any(
            np.array_equal(
                sum(
                    w * np.array([c in s for c in range(1, 6)])
                    for w, s in zip(ws, sets, strict=True)
                ),
                target,
            )
            for ws in itertools.product((-1, 0, 1), repeat=len(sets))
        )


class _Counting:
    """Exact counts by brute force over synthetic record sets (ids), counting the queries."""

    def __init__(self, members: dict[str, set[int]]) -> None:
        self.members = members
        self.queries = 0

    def intersection(self, a, b) -> int:
        self.queries += 1
        return len(self.members[a[0][1][0]] & self.members[b[0][1][0]])


def _synthetic(name: str, ids: set[int], keys: np.ndarray, columns=("SEX",)) -> RecordSet:
    sketch = np.bincount(keys[sorted(ids)] % BUCKETS, minlength=BUCKETS).astype(np.int64)
    return RecordSet(
        definition=(("ID", (name,)),),
        columns=frozenset(columns),
        size=len(ids),
        fingerprint=fingerprint(len(ids), int(keys[sorted(ids)].sum()) % 2**32),
        sketch=sketch,
    )


@pytest.mark.parametrize("cap", [None, 1])
def test_no_comparison_budget_thousands_of_near_sets(cap):
    """Issue 25: 2,000 comparisons (sliver_max_candidates) ran out after two large tables,
    then ordinary requests and repeats were refused. The sketches leave only true
    candidates for an exact count; the old setting is accepted and has no effect."""
    rng = np.random.default_rng(2025)
    keys = rng.integers(0, 2**32, size=200_000, dtype=np.int64)
    members = {
        f"s{i}": set(rng.choice(200_000, size=100 + i % 3, replace=False).tolist())
        for i in range(5_000)
    }
    base = members["s0"]
    members["near"] = (base - set(sorted(base)[:4])) | {199_999}  # 5 records from s0
    members["far"] = set(rng.choice(200_000, size=101, replace=False).tolist())
    index = SetIndex()
    index.add(
        (i + 1, "k", _synthetic(n, ids, keys))
        for i, (n, ids) in enumerate(members.items())
        if n.startswith("s")
    )
    rules = RuleSettings.model_validate(
        {"sliver_min_difference": 10, **({} if cap is None else {"sliver_max_candidates": cap})}
    )
    counts = _Counting(members)
    fresh = guard_check(index, [_synthetic("far", members["far"], keys)], key_id="k", rules=rules,
                        counts=counts, all_codes={})  # fmt: skip
    assert len(fresh) == 1 and counts.queries == 0  # 5,000 near in size, none in sketch
    with pytest.raises(RefusedError, match="fewer than 10 records"):
        guard_check(index, [_synthetic("near", members["near"], keys)], key_id="k", rules=rules,
                    counts=counts, all_codes={})  # fmt: skip
    assert counts.queries == 1  # s0 only


def _store_set(size: int, seed: int) -> RecordSet:
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 2**32, size=size, dtype=np.int64)
    return _synthetic(f"set{seed}", set(range(size)), keys)


def _random_requests(demo_dir, rng: np.random.Generator, count: int) -> list[dict]:
    """Tables a busy site gets: 1 to 3 dimensions, universes of 0 to 2 conditions, some
    custom groupings; many are near each other."""
    catalog = Dataset.open(demo_dir).catalog
    names = ["REGION", "SEX", "AGEGRP", "MARSTAT", "EDUC", "EMPSTAT", "TENURE", "HHSIZE", "OCC"]
    out = []
    for _ in range(count):
        dims = list(rng.choice(names, size=int(rng.integers(1, 4)), replace=False))
        body: dict = {"dimensions": dims, "statistic": "count"}
        universe = {}
        for var in rng.choice(names, size=int(rng.integers(0, 3)), replace=False):
            codes = list(catalog.variable(str(var)).codes)
            keep = rng.choice(len(codes), size=int(rng.integers(1, len(codes) + 1)), replace=False)
            universe[str(var)] = [codes[int(i)] for i in sorted(keep)]
        if rng.random() < 0.5:
            ages = int(rng.integers(0, 80))
            universe["AGE"] = list(range(ages, min(91, ages + int(rng.integers(3, 40)))))
        if universe:
            body["universe"] = universe
        if rng.random() < 0.15:
            body["groupings"] = [{"name": "G", "variable": "EDUC", "groups": [
                {"code": "low", "label": "low", "members": [1, 2]},
                {"code": "high", "label": "high", "members": [5, 6]}], "other": "other"}]  # fmt: skip
            body["dimensions"] = [*dims[:2], "G"] if "EDUC" not in dims else dims
        out.append(body)
    return out


def _ask_all(demo_dir, tmp_path, bodies, keys) -> list[tuple[int, bytes]]:
    app = create_app(
        site(demo_dir, tmp_path, rules={"sliver_min_difference": 10},
             server={"rate_limit_per_minute": 1_000_000, "cache_tables": 0})
    )  # fmt: skip
    with TestClient(app) as c:
        out = []
        for body, key in zip(bodies, keys, strict=True):
            r = c.post(TABLES + "?format=csv", json=body, headers={"x-api-key": key})
            assert r.status_code in (200, 400, 403), r.text
            out.append((r.status_code, r.content))
        return out


def _repeats(demo_dir, tmp_path, count: int) -> tuple[int, int]:
    rng = np.random.default_rng(26)
    bodies = _random_requests(demo_dir, rng, count)
    keys = [USER_KEY if i % 2 else ADMIN_KEY for i in range(count)]
    first = _ask_all(demo_dir, tmp_path, bodies, keys)
    answered = [i for i, (status, _) in enumerate(first) if status == 200]
    # Again, in reverse order and after a restart (the same audit database), each
    # answered request by the other key: the same bytes.
    order = answered[::-1]
    again = _ask_all(demo_dir, tmp_path, [bodies[i] for i in order], [keys[i - 1] for i in order])
    assert [a for a in again] == [first[i] for i in order]
    order = list(rng.permutation(answered))
    third = _ask_all(demo_dir, tmp_path, [bodies[i] for i in order], [keys[i] for i in order])
    assert third == [first[i] for i in order]
    return len(answered), count - len(answered)


def test_an_answered_request_is_answered_again_with_the_same_bytes(demo_dir, tmp_path):
    """Issue 25: a request answered twice was refused 49 times after the comparison budget
    ran out (also after a restart)."""
    answered, refused = _repeats(demo_dir, tmp_path, 60)
    assert answered >= 30 and refused >= 1


@pytest.mark.system
def test_after_many_answered_tables_every_one_is_answered_again(demo_dir, tmp_path):
    # 1,000 tables took over 15 minutes on a loaded 2-core machine; the
    # benchmark (benchmarks/bench_guard.py) runs 10,000.
    answered, _ = _repeats(demo_dir, tmp_path, 200)
    assert answered >= 100


def test_definitions_that_differ_only_by_structural_zeros_are_the_same_records(demo_dir):
    dataset = Dataset.open(demo_dir)
    cat = dataset.catalog
    data = _full_frame(demo_dir)
    zeros = zero_boxes(cat)
    all_codes = {v.column: v.codes for v in cat.source_variables}
    children = (("AGE", tuple(range(15))),)
    cases = {
        (("EMPSTAT", (4,)),): True,  # AGEGRP 1 x EMPSTAT 1-3 and AGEGRP 2-8 x EMPSTAT 4 are zeros
        (("AGE", tuple(range(15))), ("MARSTAT", (1,))): True,  # AGEGRP 1 x MARSTAT 2-4
        (("MARSTAT", (1,)),): False,
        (("AGE", tuple(range(16))),): False,
    }
    for other, same in cases.items():
        assert same_records_publicly(children, other, zeros, all_codes) is same
        if same:  # the data agrees (it is validated against the zeros)
            assert set(_select(data, children).index) == set(_select(data, other).index)


def _guard_service(demo_dir, tmp_path):
    from tablesafe._settings import load_site_config
    from tablesafe.server._auth import Principal
    from tablesafe.server._service import TableService

    rules = {"min_universe_size": 20, "sliver_min_difference": 10}
    data = {
        "base": str(tmp_path),
        "server": {"title": "attacks", "audit_db": "audit.sqlite", "cache_tables": 0},
        "datasets": [
            {"name": n, "path": str(demo_dir), "protection": {"method": "ckm"}, "rules": rules}
            for n in ("demo", "demo2")
        ],
    }
    service = TableService(load_site_config(data=data))

    def ask(name, request, key):
        return service.table(Principal(key, "user", 10**9), name, request)

    return service, ask


@pytest.mark.parametrize("attack", ["concurrent", "names", "slices", "children"])
def test_the_guard_attacks_publish_no_sliver(demo_dir, tmp_path, attack):
    """`tablesafe attack guard` as a test (issue 25): every sliver was published before."""
    from tablesafe.attacks._guard import (
        children_attack,
        concurrent_attack,
        names_attack,
        slices_attack,
    )

    dataset = Dataset.open(demo_dir)
    service, ask = _guard_service(demo_dir, tmp_path)
    try:
        if attack == "concurrent":
            results = concurrent_attack(ask, dataset, "demo", m=10, pairs=20)
        elif attack == "names":
            results = [names_attack(ask, dataset, ("demo", "demo2"), m=10, pairs=10)]
        elif attack == "slices":
            results = [slices_attack(ask, dataset, "demo", m=10, tries=5)]
        else:
            results = [children_attack(ask, dataset, "demo", m=10, tries=5)]
    finally:
        service.close()
    assert all(r.tries >= 5 for r in results), results
    assert [r.published for r in results] == [0] * len(results)


@pytest.mark.parametrize("identical_is_near", [True, False])
def test_refusals_do_not_tell_empty_cells_from_small_ones(
    demo_dir, tmp_path, monkeypatch, identical_is_near
):
    """A record set equal to a published one under another definition is refused as near
    (IDENTICAL_IS_NEAR, the default): a refusal then says "fewer than m records", for an
    empty cell as for one of 1 .. m-1 records. Answering it (False) made every refusal
    show a cell published as 0 to be non-empty."""
    import tablesafe.rules._guard as guard
    from tablesafe.attacks._guard import refusal_zeros

    assert guard.IDENTICAL_IS_NEAR
    monkeypatch.setattr(guard, "IDENTICAL_IS_NEAR", identical_is_near)
    service, ask = _guard_service(demo_dir, tmp_path)
    try:
        res = refusal_zeros(ask, Dataset.open(demo_dir), "demo", m=10, tables=12, rng=3)
    finally:
        service.close()
    assert res.hidden >= 2 and res.empty >= 10, res
    assert res.hidden_refused == res.hidden
    assert res.empty_refused == (res.empty if identical_is_near else 0)


def test_without_sketches_every_set_near_in_size_is_counted(demo_dir):
    """An engine that cannot sketch (Spark) gives None: the guard then counts every
    published set within m in size, and still finds the sliver."""
    dataset = Dataset.open(demo_dir)
    request = TableRequest(("SEX",), statistic="count")
    _, full, _ = _plan_and_aggregates(dataset, request)
    from tablesafe.engines import Engine, MemoryEngine

    class _NoSketches(MemoryEngine):  # as Spark: the default of the Engine interface
        bucket_counts = Engine.bucket_counts

    assert key_buckets(_NoSketches(), dataset, full, BUCKETS) is None
    rng = np.random.default_rng(7)
    keys = rng.integers(0, 2**32, size=1_000, dtype=np.int64)
    members = {f"s{i}": set(rng.choice(1_000, size=100, replace=False).tolist()) for i in range(50)}
    members["near"] = members["s3"] - {min(members["s3"])}  # one record fewer than s3
    index = SetIndex()
    index.add(
        (i + 1, "k", replace(_synthetic(n, ids, keys), sketch=None))
        for i, (n, ids) in enumerate(members.items())
        if n.startswith("s")
    )
    counts = _Counting(members)
    rules = RuleSettings.model_validate({"sliver_min_difference": 10})
    new = replace(_synthetic("near", members["near"], keys), sketch=None)
    with pytest.raises(RefusedError):
        guard_check(index, [new], key_id="k", rules=rules, counts=counts, all_codes={})
    assert counts.queries == 4  # s0, s1, s2 (100 records each, as s3) counted first


def test_a_family_kept_up_to_date_agrees_with_one_computed_afresh():
    """Sets added one at a time or in batches (a restart reads them back in one),
    the atoms a new table makes derivable are those of a rank computed afresh,
    and their records follow from the sets' sizes."""
    from tablesafe.rules._guard_families import Family

    rng = np.random.default_rng(27)
    codes = list(range(12))

    def in_span(v, rows):
        if not rows:
            return False
        m = np.array(rows, dtype=float)
        return np.linalg.matrix_rank(np.vstack([m, v])) == np.linalg.matrix_rank(m)

    def vec(s):
        return np.array([c in s for c in codes], dtype=float)

    for _ in range(200):
        sets = [
            frozenset(int(c) for c in rng.choice(12, size=int(rng.integers(1, 13)), replace=False))
            for _ in range(int(rng.integers(1, 25)))
        ]
        new = [
            frozenset(int(c) for c in rng.choice(12, size=int(rng.integers(1, 6)), replace=False))
        ]
        records = rng.integers(0, 9, size=12)  # per code: a set's size is their sum
        size = {s: int(sum(records[c] for c in s)) for s in [*sets, *new]}
        family = Family(tuple(codes))
        cut = int(rng.integers(0, len(sets) + 1))
        for s in sets[:cut]:
            family.add(s)
        family.add_many(sets[cut:], [size[s] for s in sets[cut:]])
        for s in sets[:cut]:
            family.sizes.setdefault(s, size[s])
        derived = family.newly_derivable(new)
        got = {frozenset(a) for a in derived}
        # Each atom's records, from the sets' sizes alone, are the sum over its codes.
        counts = family.counts(derived, {s: size[s] for s in new})
        assert counts == [int(sum(records[c] for c in a)) for a in derived]
        # Afresh: the atoms of all sets, derivable now and not before, not published.
        everything = [*sets, *new]
        covered = {c for s in everything for c in s}
        label = {c: tuple(c in s for s in everything) for c in covered}
        atoms = {frozenset(c for c in covered if label[c] == lab) for lab in set(label.values())}
        old_rows = [vec(s) for s in sets]
        expected = {
            a
            for a in atoms
            if a not in set(everything)
            and in_span(vec(a), old_rows + [vec(s) for s in new])
            and not in_span(vec(a), old_rows)
        }
        assert got == expected, (sets, new)
