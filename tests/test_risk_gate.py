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
from test_server import USER_KEY, error_of, site

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
    """risk_bound on the layout putative_risk builds (the same steps)."""
    from tablesafe.rules._ceiling._constraints import constraint_system
    from tablesafe.rules._ceiling._cross import Cross, atoms_of, columns_of
    from tablesafe.rules._ceiling._intervals import published_intervals
    from tablesafe.rules._ceiling._measure import risk_bound

    cat = data.catalog
    requests = [t.request.coerced(cat) for t in tables]
    cols = columns_of(cat, requests)
    atoms = atoms_of(cat, [r.bind(cat) for r in requests], cols)
    cross = Cross(cols, atoms, np.zeros(int(np.prod([len(a) for a in atoms])), dtype=np.int64))
    intervals = [published_intervals(t, prot) for t in tables]
    system, ub0 = constraint_system(cat, cross, tables, intervals)
    return risk_bound(cat, cross, tables, intervals, system, ub0)


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
    # Without a ceiling the measure solves (and here the work limit refuses first).
    with pytest.raises(RiskCeilingExceeded, match="cannot be measured within this site's limit"):
        putative_risk(small.catalog, tables, prot, max_cells=1)


def test_no_table_within_the_node_limit_is_refused_not_read_as_zero(small, monkeypatch):
    from tablesafe.rules._ceiling import _likely

    monkeypatch.setattr(_likely.Posterior, "solve", lambda *a, **k: (None, False))
    prot, tables = _built(small, THREE_WAY)
    with pytest.raises(RiskCeilingExceeded, match="no table meeting its figures was found"):
        putative_risk(small.catalog, tables, prot)


def test_the_work_limit_refuses_the_same_way_after_a_restart(small, tmp_path):
    prot, tables = _built(small, THREE_WAY[:2])
    ceiling = 0.005
    assert _bound(small, prot, tables).share > ceiling  # a solve is needed
    rules = {
        "min_universe_size": 0,
        "sliver_min_difference": 0,
        "putative_uniques_ceiling": ceiling,
        "putative_max_cells": 30,
    }
    config = site(small.path.parent, tmp_path, protection={"method": "ckm"}, rules=rules)
    with TestClient(create_app(config)) as client:
        assert _ask(client, THREE_WAY[0]).status_code == 200  # 24 cells: measured
        refused = _ask(client, THREE_WAY[1])  # 120 cells, more than 30 open
        assert refused.status_code == 403
        err = error_of(refused)
        assert err["type"] == "RiskCeilingExceeded"
        assert "cannot be measured within this site's limit" in err["message"]
        assert "more than the 30 this site measures" in err["message"]
        assert error_of(_ask(client, THREE_WAY[1])) == err
    with TestClient(create_app(config)) as client:  # a new process reads the audit log
        assert error_of(_ask(client, THREE_WAY[1])) == err
        assert _ask(client, THREE_WAY[0]).status_code == 200
