"""The largest contributions of margins from the inner cells' (issue 17, speed)."""

from __future__ import annotations

import itertools

import duckdb
import numpy as np
import pytest

from tablesafe.cells._magnitude_sums import merge_top, top_from_records, top_of_margins


def _brute(values: np.ndarray, cells: np.ndarray, shape: tuple[int, ...], k: int) -> dict:
    """Every cell of every grouping set's k largest, by sorting its records."""
    inner_shape = tuple(s - 1 for s in shape)
    pos = np.unravel_index(cells, inner_shape)
    out = {}
    for cell in itertools.product(*(range(s) for s in shape)):
        mask = np.ones(values.size, dtype=bool)
        for axis, c in enumerate(cell):
            if c < inner_shape[axis]:
                mask &= pos[axis] == c
        best = np.sort(np.abs(values[mask]))[::-1][:k]
        out[cell] = np.concatenate([best, np.zeros(k - best.size)])
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_margins_from_inner_cells_equal_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    shape = (4, 3, 3)
    inner = (3, 2, 2)
    records = 40
    cells = rng.integers(0, int(np.prod(inner)), records)
    # Ties on purpose (a multiset's largest elements), zeros and negative values.
    values = rng.choice([-7.0, -2.5, 0.0, 1.0, 2.5, 7.0, 9.0, 1e6], records)
    sets = tuple(s for r in range(3, -1, -1) for s in itertools.combinations(range(3), r))
    got = top_from_records(cells, values, shape, sets, 3)
    for cell, best in _brute(values, cells, shape, 3).items():
        assert np.array_equal(got[(slice(None), *cell)], best), cell


def test_only_the_requested_grouping_sets_are_filled() -> None:
    rng = np.random.default_rng(5)
    inner_top = -np.sort(-rng.random((4, 3, 2)), axis=0)[:3]
    out = top_of_margins(inner_top, (4, 3), ((0, 1), ()))
    assert np.array_equal(out[:, :3, :2], inner_top)
    assert np.array_equal(out[:, 3, 2], np.sort(inner_top.reshape(-1))[::-1][:3])
    assert not out[:, :3, 2].any() and not out[:, 3, :2].any()


def test_a_cell_with_fewer_records_than_k_is_zero_padded() -> None:
    top = merge_top(np.array([0, 0, 2]), np.array([3.0, 5.0, 1.0]), 3, 3)
    assert top.tolist() == [[5.0, 0.0, 1.0], [3.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    out = top_of_margins(top.reshape(3, 3), (4,), ((0,), ()))
    assert out[:, 3].tolist() == [5.0, 3.0, 1.0]


def test_duckdb_query_returns_no_list_column(tmp_path: object) -> None:
    """The grouping sets carry k DOUBLE columns, not lists (the slow path before)."""
    from tablesafe.cells._magnitude_sums import magnitude_sql
    from tablesafe.cells._plan import MagnitudePlan
    from tablesafe.engines._duckdb import _DIALECT

    inner, outer = magnitude_sql(
        MagnitudePlan("X", "X"), 0, _DIALECT.ident, _DIALECT.top_inner, _DIALECT.top_item
    )
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE t AS SELECT range % 5 AS g, (range * 37) % 101 - 50.0 AS X FROM range(200)"
    )
    sql = (
        f"WITH c AS (SELECT g, {', '.join(inner)} FROM t GROUP BY g) "
        f"SELECT g, {', '.join(outer)} FROM c GROUP BY GROUPING SETS ((g))"
    )
    rel = con.sql(sql)
    assert [str(t) for t in rel.types] == ["BIGINT", "BIGINT", "DOUBLE", "DOUBLE", "DOUBLE"]
    rows = {r[0]: r[2:] for r in rel.fetchall()}
    x = con.sql("SELECT g, X FROM t").fetchnumpy()
    for g, tops in rows.items():
        expect = np.sort(np.abs(x["X"][x["g"] == g]))[::-1][:3]
        assert list(tops) == expect.tolist()
