"""The account of every published figure (issue 37): exact parts, attacks, honest use, state.

The parts by brute force (the span, the blocks, the canonical definitions);
the group-difference attack and its variants through the served path, with
the account and without it (the attack's gain is shown where it exists, so
each assertion could fail); equal record sets under declared relations;
withheld cells in the published table; the stored decision of a repeat; the
DP equal-set zero test.
"""

from __future__ import annotations

import itertools
import os
import random
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tablesafe._request import TableRequest
from tablesafe._settings import load_site_config
from tablesafe.attacks._groups import group_attack, group_targets
from tablesafe.catalog._catalog import Catalog
from tablesafe.catalog._dataset import Dataset
from tablesafe.catalog._definitions import DefinitionSpace
from tablesafe.rules._family import Atoms, Span, indicator, partition, position, published
from tablesafe.service import Principal
from tablesafe.service._service import TableService
from tsdata import write_dataset

SECRET_ENV = "TS_ACCOUNT_TEST_SECRET"
os.environ.setdefault(SECRET_ENV, "account-test-secret-0123456789abcdef")

CKM = {
    "method": "ckm",
    "max_deviation": 3,
    "variance": 1.0,
    "seeds": "keyed",
    "secret_env": SECRET_ENV,
}


def _service(path: Path, tmp: Path, protection: dict, **rules) -> TableService:
    site = load_site_config(
        data={
            "base": str(tmp),
            "server": {"title": "t", "audit_db": "state.sqlite", "cache_tables": 0},
            "datasets": [
                {
                    "name": "demo",
                    "path": str(path),
                    "protection": protection,
                    "rules": {"min_universe_size": 0, "min_cell_size": 0, **rules},
                }
            ],
        }
    )
    return TableService(site)


WHO = Principal("user1", "user", 10**9)


# -- the exact parts ---------------------------------------------------------------------


def _rank(rows: list[list[int]]) -> int:
    """Rank over the rationals by plain Gaussian elimination on Fractions (brute force)."""
    m = [[Fraction(x) for x in r] for r in rows]
    rank, cols = 0, len(m[0]) if m else 0
    for c in range(cols):
        pivot = next((i for i in range(rank, len(m)) if m[i][c] != 0), None)
        if pivot is None:
            continue
        m[rank], m[pivot] = m[pivot], m[rank]
        for i in range(len(m)):
            if i != rank and m[i][c] != 0:
                f = m[i][c] / m[rank][c]
                m[i] = [a - f * b for a, b in zip(m[i], m[rank], strict=True)]
        rank += 1
    return rank


def test_span_membership_and_combinations_match_brute_force():
    rng = random.Random(3)
    for _ in range(200):
        width = rng.randint(2, 7)
        sets = [[rng.random() < 0.4 for _ in range(width)] for _ in range(rng.randint(1, 6))]
        span = Span()
        for i, s in enumerate(sets):
            span.add({j: 1 for j, x in enumerate(s) if x}, published(i))
        rows = [[int(x) for x in s] for s in sets]
        base = _rank(rows)
        for b in range(width):
            unit = [int(j == b) for j in range(width)]
            inside = _rank([*rows, unit]) == base
            assert span.contains(indicator((b,))) == inside
            combination = span.express(indicator((b,)))
            if inside:
                # The combination adds up to the block's indicator, exactly.
                total = [Fraction(0)] * width
                for name, coefficient in combination.items():
                    i = position(name)
                    total = [t + coefficient * x for t, x in zip(total, rows[i], strict=True)]
                assert total == unit
            else:
                assert combination is None


def test_blocks_are_the_partition_the_sets_generate():
    sets = [frozenset({1, 2, 3, 4}), frozenset({3, 4, 5}), frozenset({5, 6})]
    block = partition(sets)
    groups: dict[int, set[int]] = {}
    for code, b in block.items():
        groups.setdefault(b, set()).add(code)
    assert sorted(map(sorted, groups.values())) == [[1, 2], [3, 4], [5], [6]]


def test_the_account_s_spans_skip_only_sets_already_in_them():
    """Atoms refine as partition() does; a span that skips a set splitting no block when
    its rank equals the number of blocks holds exactly what the full span holds."""
    rng = random.Random(5)
    for _ in range(300):
        width = rng.randint(2, 8)
        # Unions of a few fixed groups first (as age groups), then sets that split them.
        groups = [list(range(i, min(i + 2, width))) for i in range(0, width, 2)]
        sets = [frozenset(c for g in rng.sample(groups, rng.randint(1, len(groups))) for c in g)
                for _ in range(rng.randint(1, 10))]  # fmt: skip
        sets += [frozenset(c for c in range(width) if rng.random() < 0.4) for _ in range(2)]
        sets = [s for s in sets if s]
        atoms, full, skipping = Atoms(), Span(), Span()
        for i, codes in enumerate(sets):
            vector = dict.fromkeys(codes, 1)
            full.add(vector, published(i))
            if atoms.add(vector) or len(skipping) < len(atoms):
                skipping.add(vector, published(i))
        blocks = partition(sets)
        assert len(atoms) == len(set(blocks.values()))
        assert all((atoms.of[a] == atoms.of[b]) == (blocks[a] == blocks[b])
                   for a in blocks for b in blocks)  # fmt: skip
        for _ in range(10):
            probe = {j: 1 for j in range(width) if rng.random() < 0.5}
            assert skipping.contains(probe) == full.contains(probe)


RELATED = {
    "dataset": {"title": "related", "record_key": "RKEY"},
    "variables": [
        {"name": "AGE", "categories": [{"code": a, "label": str(a)} for a in range(8)]},
        {"name": "ECON", "categories": [{"code": e, "label": str(e)} for e in range(1, 4)]},
        {"name": "SEX", "categories": [{"code": s, "label": str(s)} for s in (1, 2)]},
    ],
    # Ages 0-2 are children: ECON = 3 for every child, never for anyone else.
    "structural_zeros": [{"AGE": [0, 1, 2], "ECON": [1, 2]}, {"AGE": [3, 4, 5, 6, 7], "ECON": [3]}],
}


def test_canonical_definitions_cover_the_same_records_by_brute_force():
    space = DefinitionSpace.of(Catalog.from_dict(RELATED))
    codes = {"AGE": list(range(8)), "ECON": [1, 2, 3], "SEX": [1, 2]}
    zeros = space.zeros

    def possible(cell: dict) -> bool:
        return not any(all(cell[c] in z[c] for c in z) for z in zeros)

    cells = [dict(zip(codes, v, strict=True)) for v in itertools.product(*codes.values())]
    rng = random.Random(5)
    seen: dict[tuple, frozenset] = {}
    for _ in range(400):
        box = {
            c: frozenset(rng.sample(v, rng.randint(1, len(v))))
            for c, v in codes.items()
            if rng.random() < 0.7
        }
        held = frozenset(
            tuple(cell.values())
            for cell in cells
            if possible(cell) and all(cell[c] in box[c] for c in box)
        )
        definition = space.canonical(box)
        assert (definition is None) == (not held)
        if definition is not None:
            # One canonical definition per set of possible records, and back.
            assert seen.setdefault(definition, held) == held
    # The declared relation: a child's age and a child's economic activity are one set.
    assert space.canonical({"AGE": {0}, "ECON": {3}}) == space.canonical({"AGE": {0}})
    assert space.canonical({"ECON": {3}}) == space.canonical({"AGE": {0, 1, 2}})


# -- the attacks through the served path -------------------------------------------------


def _frame(demo_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(demo_dir / "microdata.parquet")


def _attack(demo_dir, tmp_path, variant: str, protection: dict, m: int):
    dataset = Dataset.open(demo_dir)
    service = _service(
        demo_dir, tmp_path, protection, sliver_min_difference=m, max_withheld_share=1.0
    )
    try:
        space = service.served("demo").builder.definition_space
        cat = dataset.catalog

        def public_zero(conditions) -> bool:
            box = {cat.variable(k).column: set(v) for k, v in conditions.items()}
            return space.canonical(box) is None

        universes = [{"REGION": [r], "EMPSTAT": [1]} for r in range(1, 9)]
        targets = group_targets(
            _frame(demo_dir),
            "AGE",
            universes,
            codes=list(cat.variable("AGE").codes),
            second="SEX" if variant == "group-2d" else None,
            partners=8,
            public_zero=public_zero,
        )
        return group_attack(
            lambda r: service.table(WHO, "demo", r),
            dataset,
            targets,
            variable="AGE",
            variant=variant,
        )
    finally:
        service.close()


@pytest.mark.system
@pytest.mark.parametrize("variant", ["group", "group-2d", "merged-universe"])
def test_a_merged_group_minus_a_published_cell_recovers_nothing(demo_dir, tmp_path, variant):
    # Without the account the attack gains: its estimates beat the published cells.
    before = _attack(demo_dir, tmp_path / "before", variant, CKM, 0)
    assert before.small >= 8 and before.differences > 0
    if variant != "group-2d":
        assert before.exact_attack > before.exact_published
    # With it: no difference to take for a small or empty target, no gain.
    after = _attack(demo_dir, tmp_path / "after", variant, CKM, 10)
    assert after.differences == 0
    assert after.exact_attack <= after.exact_published + 1
    assert after.told_attack <= after.told_published


@pytest.mark.system
@pytest.mark.parametrize("method", ["dp", "q-records"])
def test_the_group_attack_gains_nothing_under_dp_and_q_records(demo_dir, tmp_path, method):
    protection = {"method": method, "seeds": "keyed", "secret_env": SECRET_ENV}
    after = _attack(demo_dir, tmp_path, "group", protection, 10)
    assert after.differences == 0
    assert after.exact_attack <= after.exact_published + 1


@pytest.mark.system
def test_a_hierarchy_level_minus_its_children_measures_once_per_level(demo_dir, tmp_path):
    # A catalog level can be asked in as many ways as the catalog has levels: it
    # is published, and the attack's estimate is no better than the cell's.
    after = _attack(demo_dir, tmp_path, "hierarchy", CKM, 10)
    assert after.exact_attack <= after.exact_published + 1


# -- equal record sets, withheld cells, repeats -----------------------------------------


def _related_frame(n: int = 3000, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    age = rng.integers(0, 8, n)
    econ = np.where(age < 3, 3, rng.integers(1, 3, n))
    return pd.DataFrame(
        {
            "AGE": age,
            "ECON": econ,
            "SEX": rng.integers(1, 3, n),
            "RKEY": rng.integers(0, 2**32, n, dtype=np.uint32),
        }
    )


def test_equal_record_sets_under_a_declared_relation_are_one_figure(tmp_path):
    dataset = write_dataset(tmp_path / "data", _related_frame(), RELATED)
    service = _service(dataset.path.parent, tmp_path, CKM, sliver_min_difference=10)
    try:
        ages = service.table(WHO, "demo", TableRequest(("AGE",), statistic="count"))
        both = service.table(WHO, "demo", TableRequest(("AGE", "ECON"), statistic="count"))
    finally:
        service.close()
    assert both.withheld is None or not both.withheld.any()
    # A child's row: one cell (ECON = 3) holding the age's records, the same value.
    for a in range(3):
        assert both.counts[a, 2] == ages.counts[a]
        assert both.structural_zero[a, 0] and both.structural_zero[a, 1]


def test_without_the_relation_equal_sets_are_still_answered(tmp_path):
    undeclared = {**RELATED, "structural_zeros": []}
    dataset = write_dataset(tmp_path / "data", _related_frame(), undeclared)
    service = _service(dataset.path.parent, tmp_path, CKM, sliver_min_difference=10)
    try:
        service.table(WHO, "demo", TableRequest(("AGE",), statistic="count"))
        both = service.table(WHO, "demo", TableRequest(("AGE", "ECON"), statistic="count"))
    finally:
        service.close()
    # A breakdown of a published figure is ordinary use: nothing withheld.
    assert both.withheld is None or not both.withheld.any()


def test_a_restarted_service_reads_the_account_before_its_first_table(tmp_path):
    dataset = write_dataset(tmp_path / "data", _related_frame(), RELATED)
    service = _service(dataset.path.parent, tmp_path, CKM, sliver_min_difference=10)
    try:
        assert service.warm_accounts() == 0
        service.table(WHO, "demo", TableRequest(("AGE", "ECON"), statistic="count"))
        with service.state._connection() as sql:
            stored = int(
                sql.execute("SELECT COUNT(DISTINCT digest) FROM publications").fetchone()[0]
            )
    finally:
        service.close()
    assert stored > 0
    again = _service(dataset.path.parent, tmp_path, CKM, sliver_min_difference=10)
    try:
        # Every figure of the store, read once: the first table's transaction reads none.
        assert again.warm_accounts() == stored
        assert again.warm_accounts() == stored
    finally:
        again.close()


def test_a_store_of_the_sliver_guard_starts_its_account_empty(tmp_path):
    """docs/attacks.md, "What remains": the guard's record sets are dropped, not migrated."""
    import sqlite3

    from tablesafe.state._sqlite import MIGRATIONS, SQLiteState

    path = tmp_path / "state.sqlite"
    con = sqlite3.connect(path)
    for step in MIGRATIONS[:4]:  # the schema of the sliver guard's release
        step(con)
    con.execute(
        "INSERT INTO guard_sets (identity, time, key_id, fingerprint, size, columns, definition,"
        " ancestors) VALUES ('i', 't', 'k', x'00', 5, 'AGE', 'AGE=1', x'00')"
    )
    con.execute("PRAGMA user_version = 4")
    con.commit()
    con.close()
    SQLiteState(path).close()
    con = sqlite3.connect(path)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    published = con.execute("SELECT COUNT(*) FROM publications").fetchone()[0]
    con.close()
    assert "guard_sets" not in tables and published == 0


def test_a_table_s_digest_is_the_one_stored_decisions_were_keyed_by():
    """One buffer hashed gives the digest of one update per number (stores keep theirs)."""
    import hashlib
    from types import SimpleNamespace

    from tablesafe.rules._admission import table_digest

    rng = random.Random(9)
    for size in (0, 1, 7, 300):
        figures = [SimpleNamespace(index=rng.randrange(10**6), digest=rng.randrange(-(2**63), 2**63))
                   for _ in range(size)]  # fmt: skip
        h = hashlib.blake2b(digest_size=8, person=b"tablesafe-table")
        h.update(repr((3, 4)).encode())
        for f in figures:
            h.update(f.index.to_bytes(8, "little"))
            h.update(f.digest.to_bytes(8, "little", signed=True))
        assert table_digest(figures, (3, 4)) == int.from_bytes(h.digest(), "little", signed=True)


def test_a_refusal_is_a_stored_decision(demo_dir, tmp_path):
    """A refused table is refused again with the same words, by another key and after a
    restart, and the state store keeps it as the table's decision (docs/attacks.md)."""
    from tablesafe._errors import RefusedError
    from tablesafe.service._bodies import TableBody
    from test_guard import _full_frame, _sliver_pairs

    ((u, v),) = _sliver_pairs(_full_frame(demo_dir), 10, 1)  # v: u less 1 to 9 records
    bodies = [TableBody(dimensions=["SEX"], statistic="count", universe=w) for w in (u, v)]
    service = _service(demo_dir, tmp_path, CKM, sliver_min_difference=10)
    try:
        service.table(WHO, "demo", bodies[0].to_request())
        with pytest.raises(RefusedError) as first:
            service.table(WHO, "demo", bodies[1].to_request())
        with service.state._connection() as sql:
            stored = [bytes(r[0]) for r in sql.execute("SELECT withheld FROM decisions")]
    finally:
        service.close()
    assert any(str(first.value).encode() in blob for blob in stored)
    again = _service(demo_dir, tmp_path, CKM, sliver_min_difference=10)
    try:
        other = Principal("user2", "user", 10**9)
        with pytest.raises(RefusedError) as second:
            again.table(other, "demo", bodies[1].to_request())
    finally:
        again.close()
    assert str(second.value) == str(first.value)


# -- DP keyed by definition: the equal-set zero test ---------------------------------------

PAIRS = {
    "dataset": {"title": "pairs", "record_key": "RKEY"},
    "variables": [{"name": "A", "categories": [{"code": c, "label": str(c)} for c in range(600)]}],
}


def _pairs_frame(seed: int = 4) -> pd.DataFrame:
    """300 partners k = 2i of 20 records, each with a target t = 2i + 1: empty for half."""
    rng = np.random.default_rng(seed)
    codes = []
    for i in range(300):
        codes += [2 * i] * 20 + ([2 * i + 1] if i % 2 else [])
    return pd.DataFrame({"A": codes, "RKEY": rng.integers(0, 2**32, len(codes), dtype=np.uint32)})


def test_dp_keyed_by_definition_keeps_its_stated_delta_between_equal_sets(tmp_path):
    """Issue 37: keyed by record set, a group {k, t} with t empty *is* k's record set, so it
    got k's noise and the difference was exactly 0 (observed delta about 1). Keyed by
    definition, the pair tells empty from one record no better than the stated (epsilon,
    delta) of the one figure that differs (the group), within 3 standard errors."""
    from tablesafe.catalog._custom import CustomGroup, CustomGrouping

    dataset = write_dataset(tmp_path / "data", _pairs_frame(), PAIRS)
    protection = {"method": "dp", "epsilon": 1.0, "cap": 40, "seeds": "keyed",
                  "secret_env": SECRET_ENV}  # fmt: skip
    service = _service(
        dataset.path.parent, tmp_path, protection,
        sliver_min_difference=0, privacy_budget_epsilon=3.0,
    )  # fmt: skip
    try:
        cells = service.table(WHO, "demo", TableRequest(("A",), statistic="count"))
        zero = {True: 0, False: 0}
        for i in range(300):
            k, t = 2 * i, 2 * i + 1
            grouping = CustomGrouping("G", "A", (CustomGroup("kt", "k and t", (k, t)),))
            request = TableRequest(
                ("G",), universe={"A": [k, t]}, statistic="count", groupings=(grouping,)
            )
            group = service.table(WHO, "demo", request)
            difference = int(group.counts[0]) - int(cells.counts[k])
            zero[i % 2 == 0] += difference == 0  # i even: t is empty
    finally:
        service.close()
    stated = service.served("demo").builder.protection.describe()
    eps, delta = float(stated["epsilon"]), float(stated["delta"])
    p_empty, p_one = zero[True] / 150, zero[False] / 150
    se = np.sqrt(p_empty * (1 - p_empty) / 150 + p_one * (1 - p_one) / 150)
    # The event "difference 0" under an empty target and under one record.
    assert p_empty <= np.exp(eps) * p_one + delta + 3 * se
    assert p_one <= np.exp(eps) * p_empty + delta + 3 * se
    assert p_empty < 0.9  # keyed by record set it was 1


# -- withheld cells in every format --------------------------------------------------------


def test_withheld_cells_are_blank_and_flagged_in_every_format(demo_dir, tmp_path):
    """SEX by AGEGRP, then the same without one employment status of which one age group
    holds a few records: that group's margin and its cells are withheld; the totals add up
    the cells published and say so; no format shows a value for a withheld cell."""
    import io
    import json
    import zipfile

    from test_guard import _dimension_sliver, frame  # noqa: F401  (frame: a fixture)

    data = pd.read_parquet(demo_dir / "microdata.parquet", columns=["AGE", "SEX", "EMPSTAT"])
    groups = Dataset.open(demo_dir).catalog.variable("AGEGRP")
    where = {a: c for c, ms in zip(groups.codes, groups.members, strict=True) for a in ms}
    data["AGEGRP"] = data["AGE"].map(where)
    status, group, _ = _dimension_sliver(data, 10)
    codes = [int(s) for s in sorted(data["EMPSTAT"].unique()) if s != status]
    service = _service(demo_dir, tmp_path, CKM, sliver_min_difference=10, max_withheld_share=1.0)
    try:
        service.table(WHO, "demo", TableRequest(("SEX", "AGEGRP"), statistic="both"))
        table = service.table(
            WHO, "demo", TableRequest(("SEX", "AGEGRP"), universe={"EMPSTAT": codes},
                                      statistic="both,percent:row"),
        )  # fmt: skip
    finally:
        service.close()
    g = list(table.dimensions[1].codes).index(group)
    assert table.withheld is not None and table.withheld[-1, g] and table.withheld[0, g]
    # Margins add up the inner cells published, and are marked where some are withheld.
    inner = table.counts[:-1, :-1]
    shown = np.where(table.withheld[:-1, :-1], 0, inner)
    assert table.counts[-1, -1] == shown.sum() and table.excludes_withheld[-1, -1]
    assert (table.counts[:-1, -1] == shown.sum(axis=1)).all()
    cells = json.loads(table.render("json"))["cells"]
    hidden = [c for c in cells if c["withheld"]]
    assert hidden and all(c["n"] is None and c["weighted"] is None for c in hidden)
    assert all(c["percent_row"] is None for c in hidden)
    assert any(
        "withheld" in s for s in json.loads(table.render("json"))["meta"]["footnotes"]["statement"]
    )
    csv = table.to_csv()
    header = (
        csv.splitlines()[0].split(",")
        if not csv.startswith("#")
        else csv.splitlines()[1].split(",")
    )
    assert "withheld" in header and "excludes_withheld" in header
    stat = json.loads(table.render("jsonstat"))
    marked = [int(i) for i, v in stat["status"].items() if v == "C"]
    assert marked and all(stat["value"][i] is None for i in marked)
    sdmx = table.render("sdmx-csv")
    rows = [r.split(",") for r in sdmx.splitlines()[1:]]
    assert any("C" in r for r in rows)
    import openpyxl

    book = openpyxl.load_workbook(io.BytesIO(table.to_xlsx_bytes()))
    rows = list(book["cells"].iter_rows(values_only=True))
    head = next(i for i, r in enumerate(rows) if r and "withheld" in r)
    column = rows[head].index("withheld")
    n_at = rows[head].index("n")
    blank = [r for r in rows[head + 1 :] if r and r[column] is True]
    assert blank and all(r[n_at] is None for r in blank)
    assert zipfile.is_zipfile(io.BytesIO(table.to_xlsx_bytes()))
