"""The putative-risk ceiling (issue 28): a published-only figure, and the gate that reads it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

import tablesafe as ts
from tablesafe._cli._methods import protection_from_options
from tablesafe._errors import RiskCeilingExceeded
from tablesafe.catalog._dataset import Dataset
from tablesafe.rules._ceiling._measure import putative_risk
from tablesafe.server import create_app
from test_server import ADMIN_KEY, USER_KEY, error_of, site

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from _latent_class import write_latent_class

THREE_WAY = [("A", "B", "C"), ("A", "B", "D"), ("A", "C", "D"), ("B", "C", "D")]


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    """300 records, 4 variables of 3, 4, 2 and 5 categories (120 cells)."""
    return write_latent_class(tmp_path_factory.mktemp("risk") / "d", 300, seed=28)


def _share(data: Dataset, dims: list[tuple[str, ...]]) -> float:
    prot = protection_from_options("ckm")
    builder = ts.TableBuilder(data, prot)
    tables = [builder.build(ts.TableRequest(d, statistic="count")) for d in dims]
    return putative_risk(data.catalog, tables, prot).share


def test_the_figure_grows_as_tables_pin_the_full_cells(small):
    one_way = _share(small, [("A",), ("B",), ("C",), ("D",)])
    two_way = _share(small, [("A", "B"), ("C", "D")])
    partial = [_share(small, THREE_WAY[:k]) for k in (1, 2, 3)]
    every = _share(small, THREE_WAY)
    assert one_way == 0.0  # the one-way guess's many uniques move in nearly-as-good tables
    assert every > 0 and every >= max([two_way, *partial])
    # The same tables, in another order: the same figure.
    assert _share(small, THREE_WAY[::-1]) == every


def _ask(client: Any, dims: tuple[str, ...]) -> Any:
    return client.post(
        "/api/datasets/demo/tables",
        json={"dimensions": list(dims), "statistic": "count"},
        headers={"x-api-key": USER_KEY},
    )


def test_the_ceiling_refuses_a_table_that_raises_the_figure_past_it(small, tmp_path):
    first, last = THREE_WAY[:3], THREE_WAY[3]
    before = _share(small, first)
    after = _share(small, [*first, last])
    assert after > before
    ceiling = (before + after) / 2
    # A one-way table that keeps the figure under the ceiling, measured the same way.
    fits = [d for d in (("A",), ("B",), ("C",), ("D",)) if _share(small, [*first, d]) <= ceiling]
    assert fits
    rules = {"min_universe_size": 0, "sliver_min_difference": 0}
    config = site(
        small.path.parent,
        tmp_path,
        protection={"method": "ckm"},
        rules={**rules, "putative_uniques_ceiling": ceiling},
    )
    with TestClient(create_app(config)) as client:
        answered = [_ask(client, d) for d in first]
        assert [r.status_code for r in answered] == [200, 200, 200]
        refused = _ask(client, last)
        assert refused.status_code == 403
        err = error_of(refused)
        assert err["type"] == "RiskCeilingExceeded"
        assert f"{100 * after:.1f}% of their records" in err["message"]
        assert f"({100 * before:.1f}% without it)" in err["message"]
        # The same request again: the same refusal; a table already published is answered.
        assert error_of(_ask(client, last)) == err
        with TestClient(create_app(config)) as other:  # another process: nothing measured yet
            assert error_of(_ask(other, last)) == err
        assert _ask(client, first[0]).content == answered[0].content
        assert _ask(client, fits[0]).status_code == 200
    # A site without the ceiling answers the refused table.
    config = site(small.path.parent, tmp_path / "open", protection={"method": "ckm"}, rules=rules)
    with TestClient(create_app(config)) as client:
        assert _ask(client, last).status_code == 200


# The measure's cost (issue 28): a bound without solves, an early stop, a work limit.

TABLES = [
    *[(v,) for v in "ABCD"],
    ("A", "B"), ("A", "C"), ("A", "D"), ("B", "C"), ("B", "D"), ("C", "D"),
    *THREE_WAY,
]  # fmt: skip


def _built(data: Dataset, dims: list[tuple[str, ...]]) -> tuple[Any, list[Any]]:
    prot = protection_from_options("ckm")
    builder = ts.TableBuilder(data, prot)
    return prot, [builder.build(ts.TableRequest(d, statistic="count")) for d in dims]


def _bound(data: Dataset, prot: Any, tables: list[Any]) -> Any:
    from tablesafe.rules._ceiling._measure import risk_bound

    return risk_bound(data.catalog, tables, prot)


def test_the_bound_and_the_early_stop_never_change_the_decision(small):
    """On random sets of tables: the bound is above the share; a ceiling changes no decision."""
    rng = np.random.default_rng(2028)
    for _ in range(8):
        dims = [
            TABLES[i] for i in rng.choice(len(TABLES), size=int(rng.integers(1, 5)), replace=False)
        ]
        prot, tables = _built(small, dims)
        exact = putative_risk(small.catalog, tables, prot)
        assert exact.exact
        assert _bound(small, prot, tables).share >= exact.share
        for ceiling in [*rng.uniform(0.0, 0.05, 3), exact.share]:
            got = putative_risk(small.catalog, tables, prot, ceiling=float(ceiling))
            assert (got.share > ceiling) == (exact.share > ceiling)
            if got.exact:
                assert got == exact
            else:
                assert exact.share <= got.share <= ceiling


def test_one_table_open_cells_are_those_its_intervals_let_hold_one(small):
    """A table alone (no published table shares its variables): the bound counts, by brute
    force over its inner cells, exactly those whose published interval holds 1."""
    from tablesafe.rules._ceiling._intervals import published_intervals

    for dims in [("A",), ("A", "B"), ("A", "B", "C"), ("A", "B", "C", "D")]:
        prot, (table,) = _built(small, [dims])
        lo, hi, _ = published_intervals(table, prot)
        inner = [slice(0, s - 1) for s in table.shape]
        ones = int(((lo[tuple(inner)] <= 1) & (hi[tuple(inner)] >= 1)).sum())
        bound = _bound(small, prot, [table])
        assert bound.stable == ones
        # A lower bound on any table meeting the intervals, the truth (300 records) among them.
        assert 0 < bound.records <= 300
    # The one-way tables have no cell small enough: no solve at all, whatever the ceiling.
    prot, tables = _built(small, [("C",)])
    assert _bound(small, prot, tables).stable == 0


def test_no_solve_for_a_table_the_bound_clears(small, monkeypatch):
    from tablesafe.rules._ceiling import _measure as _risk

    def no_solve(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("solved")

    monkeypatch.setattr(_risk, "Posterior", no_solve)
    prot, tables = _built(small, [("C",)])
    got = putative_risk(small.catalog, tables, prot, ceiling=1e-9, max_cells=1)
    assert not got.exact and got.share == 0.0
    # Without a ceiling the measure solves (each cell its own block: one cell a solve fits).
    with pytest.raises(AssertionError, match="solved"):
        putative_risk(small.catalog, tables, prot, max_cells=1)


def test_no_table_within_the_node_limit_is_refused_not_read_as_zero(small, monkeypatch):
    from tablesafe.rules._ceiling import _likely

    monkeypatch.setattr(_likely.Posterior, "solve", lambda *a, **k: (None, False))
    prot, tables = _built(small, THREE_WAY)
    with pytest.raises(RiskCeilingExceeded, match="no table meeting its figures was found"):
        putative_risk(small.catalog, tables, prot)


def test_the_work_limit_refuses_the_same_way_after_a_restart(small, tmp_path):
    """Unprotected, a table's margins link its cells: one block of open cells, over 30."""
    prot = protection_from_options("none")
    builder = ts.TableBuilder(small, prot)
    table = builder.build(ts.TableRequest(THREE_WAY[1], statistic="count"))
    ceiling = 0.005
    assert _bound(small, prot, [table]).share > ceiling  # a solve is needed
    # Unprotected, a cell published as 0 holds no record: the others are open, linked.
    opened = int((table.counts[tuple(slice(0, s - 1) for s in table.shape)] > 0).sum())
    assert opened > 30
    rules = {
        "min_universe_size": 0,
        "sliver_min_difference": 0,
        "putative_uniques_ceiling": ceiling,
        "putative_max_cells": 30,
    }
    config = site(small.path.parent, tmp_path, protection={"method": "none"}, rules=rules)
    with TestClient(create_app(config)) as client:
        refused = _ask(client, THREE_WAY[1])
        assert refused.status_code == 403
        err = error_of(refused)
        assert err["type"] == "RiskCeilingExceeded"
        assert "cannot be measured within this site's limit" in err["message"]
        assert (
            f"{opened} linked combinations of categories open, more than the 30" in err["message"]
        )
        assert error_of(_ask(client, THREE_WAY[1])) == err
    with TestClient(create_app(config)) as client:  # a new process reads the audit log
        assert error_of(_ask(client, THREE_WAY[1])) == err
        assert _ask(client, ("A",)).status_code == 200  # 3 cells, no small one: no solve


# Stored refusals (issue 40): a refusal is kept in the state store with what it was measured
# on; the same table asked again, by any key or process, is refused at once, the same way.


def _ceiling_between(small: Dataset) -> tuple[float, float, float]:
    first, last = THREE_WAY[:3], THREE_WAY[3]
    before, after = _share(small, first), _share(small, [*first, last])
    assert after > before
    return before, after, (before + after) / 2


def _ledger(path: Path) -> list[tuple[str, bytes]]:
    import sqlite3

    con = sqlite3.connect(path)
    try:
        return [(str(k), bytes(d)) for k, d in con.execute(
            "SELECT key_id, digests FROM ledger_tables ORDER BY id"
        )]  # fmt: skip
    finally:
        con.close()


def test_a_refusal_is_stored_and_a_repeat_reads_it(small, tmp_path):
    import sqlite3

    from tablesafe.state import SQLiteState

    before, after, ceiling = _ceiling_between(small)
    rules = {"min_universe_size": 0, "sliver_min_difference": 0}
    config = site(
        small.path.parent,
        tmp_path,
        protection={"method": "ckm"},
        rules={**rules, "putative_uniques_ceiling": ceiling},
    )
    with TestClient(create_app(config)) as client:
        assert [_ask(client, d).status_code for d in THREE_WAY[:3]] == [200, 200, 200]
        err = error_of(_ask(client, THREE_WAY[3]))
        assert err["type"] == "RiskCeilingExceeded"
    store = SQLiteState(tmp_path / "audit.sqlite")
    try:
        (row,) = store.ceiling_refusals("demo")
    finally:
        store.close()
    # The refusal as given, and what it was measured against: the three tables published.
    assert row["message"] == err["message"]
    measured = row["measured"]
    assert len(measured["tables"]) == 3 and measured["component"] == 3
    assert (measured["with"], measured["without"]) == (after, before)
    assert measured["ceiling"] == ceiling
    # A repeat reads the stored refusal (shown by changing it in the store), in this process
    # and after a restart, and measures nothing.
    con = sqlite3.connect(tmp_path / "audit.sqlite")
    con.execute("UPDATE ceiling_refusals SET message = 'this table is refused: stored'")
    con.commit()
    con.close()
    with TestClient(create_app(config)) as client:
        assert error_of(_ask(client, THREE_WAY[3]))["message"] == "this table is refused: stored"


def test_a_refusal_stands_as_more_is_published_until_the_settings_change(small, tmp_path):
    _, after, ceiling = _ceiling_between(small)
    rules = {"min_universe_size": 0, "sliver_min_difference": 0}
    config = site(
        small.path.parent,
        tmp_path,
        protection={"method": "ckm"},
        rules={**rules, "putative_uniques_ceiling": ceiling},
    )
    with TestClient(create_app(config)) as client:
        answered = [_ask(client, d) for d in THREE_WAY[:3]]
        err = error_of(_ask(client, THREE_WAY[3]))
        spent = _ledger(tmp_path / "audit.sqlite")
        assert [k for k, _ in spent] == ["user1"] * 4  # the refused table's figures too
        # More tables published: the refusal stands, with the same message (it published
        # the shares once; measuring again would publish new ones of the refused table's
        # figures). Tables answered are answered again with the same bytes.
        for dims in (("A",), ("B",), ("A", "C"), ("B", "D")):
            assert _ask(client, dims).status_code == 200
        assert error_of(_ask(client, THREE_WAY[3])) == err
        assert [_ask(client, d).content for d in THREE_WAY[:3]] == [r.content for r in answered]
        # Another key is refused the same way, and its ledger counts the figures the refusal
        # is a function of, as the first refusal did for the first key.
        other = client.post(
            "/api/datasets/demo/tables",
            json={"dimensions": list(THREE_WAY[3]), "statistic": "count"},
            headers={"x-api-key": ADMIN_KEY},
        )
        assert error_of(other) == err
        rows = _ledger(tmp_path / "audit.sqlite")
        assert rows[-1] == ("admin1", spent[-1][1])
    # The site's settings changed (a higher ceiling): the stored refusal no longer applies.
    higher = site(
        small.path.parent,
        tmp_path,
        protection={"method": "ckm"},
        rules={**rules, "putative_uniques_ceiling": min(1.0, 2 * after)},
    )
    with TestClient(create_app(higher)) as client:
        assert _ask(client, THREE_WAY[3]).status_code == 200


def test_two_stores_keep_the_refusal_stored_first(backend, small):
    """Replicas refusing one table at once: each reads back, and gives, the first refusal."""
    from tablesafe.rules._ledger import table_figures

    prot = protection_from_options("ckm")
    built = ts.TableBuilder(small, prot).run(ts.TableRequest(("A", "B"), statistic="count"))
    figures = table_figures(built.plan, built.table, prot, small.catalog)
    first, second = backend(), backend()
    assert first.ceiling_refusal("demo", "d1") is None
    stored = first.record_ceiling_refusal("demo", "d1", "refused: first", figures, {"with": 0.1})
    again = second.record_ceiling_refusal("demo", "d1", "refused: second", figures, {"with": 0.2})
    for message, got in (stored, again, second.ceiling_refusal("demo", "d1")):
        assert message == "refused: first"
        assert np.array_equal(got.digests, figures.digests) and got.spec() == figures.spec()
    assert [r["measured"] for r in second.ceiling_refusals("demo")] == [{"with": 0.1}]
    assert second.ceiling_refusals("other") == []


# The measure scales (issue 40): the published tables nearest a new one, as many as fit the
# site's limit; open cells in independent blocks.


def test_the_nearest_tables_fit_the_limit_and_the_whole_component_when_it_fits(small):
    from tablesafe.rules._ceiling._blocks import layout
    from tablesafe.rules._ceiling._nearest import Nearest

    prot, tables = _built(small, [*THREE_WAY, ("A",), ("C", "D"), ("B",)])
    candidate, published = tables[3], [*tables[:3], *tables[4:]]
    whole, component = Nearest(small.catalog, prot, 0, 600).select(candidate, published)
    assert component == len(published) and len(whole) == len(published)  # 120 cells fit
    rng = np.random.default_rng(40)
    for limit in (20, 40, 60, 100):
        nearest = Nearest(small.catalog, prot, 0, limit)
        chosen, _ = nearest.select(candidate, published)
        # Counted another way (the measure's own layout): open cells and figures read within
        # the limit, or the candidate alone when its own open cells (40) are more.
        lay = layout(small.catalog, [candidate, *chosen], prot, 0)
        read = sum(int(used.sum()) for _, _, used in lay.intervals)
        assert (lay.system.alive.size <= limit and read <= limit) or (
            lay.system.alive.size == 40 and not chosen
        )
        # Nearest first: the tables sharing more of the candidate's variables (B, C, D).
        shared = [len(set(t.request.dimensions) & {"B", "C", "D"}) for t in chosen]
        assert shared == sorted(shared, reverse=True)
        # The same tables in another order: the same selection.
        order = rng.permutation(len(published))
        again, _ = Nearest(small.catalog, prot, 0, limit).select(
            candidate, [published[i] for i in order]
        )
        assert [t.request for t in again] == [t.request for t in chosen]


def test_blocks_solved_apart_give_the_measure_of_one_solve(small):
    """Tables of disjoint universes fall in separate blocks; solved one block at a time or all
    in one model (a limit that fits them all), the measure is the same."""
    from tablesafe.rules._ceiling._blocks import layout

    prot = protection_from_options("ckm")
    builder = ts.TableBuilder(small, prot)
    tables = [
        builder.build(ts.TableRequest(dims, universe={"A": [a]}, statistic="count"))
        for a, dims in [(1, ("B", "C")), (1, ("B", "D")), (2, ("B", "D")), (3, ("C", "D"))]
    ]
    lay = layout(small.catalog, tables, prot, 0)
    sizes = np.bincount(lay.block)
    assert lay.blocks >= 3
    apart = putative_risk(small.catalog, tables, prot, max_cells=int(sizes.max()))
    together = putative_risk(small.catalog, tables, prot, max_cells=int(sizes.sum()))
    assert apart == together and apart.exact and apart.records > 0
    # No constraint holds cells of two blocks.
    system = lay.system
    assert all(len(set(lay.block[system.cols[system.rows == r]])) == 1 for r in range(10))


def test_an_ordinary_session_on_the_demo_is_measured_within_the_default_limit(demo_dir, tmp_path):
    """After a researcher's session (benchmarks/_sessions.py) on the demo survey under the
    cell-key method, ordinary 3-way tables are measured: none, nor any table of the session,
    is refused as not measurable (on main before issue 40, 30 of 100 such tables were)."""
    from _sessions import research_session

    config = site(
        demo_dir,
        tmp_path,
        protection={"method": "ckm", "additivity": "aggregate"},
        rules={"min_cell_size": 3, "putative_uniques_ceiling": 0.005, "max_cells": 10_000},
    )
    three_way = [
        {"dimensions": ["SEX", "AGEGRP", "MARSTAT"], "universe": {}},
        {"dimensions": ["REGION", "TENURE", "EDUC"], "universe": {}},
        {"dimensions": ["HHSIZE", "EDUC", "MARSTAT"], "universe": {"REGION": [3]}},
        {"dimensions": ["OCC", "EMPSTAT", "SEX"], "universe": {"ZONE": ["S"]}},
        {"dimensions": ["TENURE", "HHSIZE", "SEX"], "universe": {"REGION": [5], "AGEGRP": [4]}},
    ]
    with TestClient(create_app(config)) as client:
        session = research_session(40, seed=2)
        for body in [*session, *({**b, "statistic": "count"} for b in three_way)]:
            got = client.post(
                "/api/datasets/demo/tables", json=body, headers={"x-api-key": USER_KEY}
            )
            if got.status_code != 200:
                assert "cannot be measured" not in error_of(got)["message"], body


def test_the_measure_reads_no_microdata():
    """rules/_ceiling imports no engine, dataset or builder: it can read published tables only
    (the server's gate gives it the tables as published, rebuilt by the site's builder)."""
    import ast

    root = Path(__file__).resolve().parents[1] / "src" / "tablesafe" / "rules" / "_ceiling"
    imported = set()
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(a.name for a in node.names)
    ours = {m for m in imported if m.startswith("tablesafe")}
    assert ours  # the walk found the package's imports
    readers = ("tablesafe.engines", "tablesafe.catalog._dataset", "tablesafe._builder")
    assert not {m for m in ours if m.startswith(readers)}
    assert not {m for m in imported if m.split(".")[0] in ("pyarrow", "duckdb", "pandas")}
