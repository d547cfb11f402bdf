"""Tabulation equals a brute-force count, for every engine, cell and margin."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from tablesafe._keys import KEY_MODULUS, cell_keys
from tablesafe._request import TableRequest
from tablesafe.catalog._dataset import Dataset
from tablesafe.engines import CubeCache, DuckDBEngine, MemoryEngine

ENGINES = {
    "duckdb": DuckDBEngine,
    "memory": MemoryEngine,
    # Derived from cached cubes: the same integers as a direct query.
    "cube": lambda: CubeCache(MemoryEngine()),
}


def exact_sum(values: pd.Series) -> float:
    """Fixed-point sum in Python integers, record by record: weights to 2**-20, exactly."""
    return sum(math.floor(float(w) * 2**16 + 0.5) for w in values) / 2**16


def brute_force(frame: pd.DataFrame, dataset: Dataset, request: TableRequest) -> dict:
    """Count every extended cell by filtering records one cell at a time."""
    plan = request.bind(dataset.catalog)
    mask = np.ones(len(frame), dtype=bool)
    for column, codes in plan.universe:
        mask &= frame[column].isin(codes).to_numpy()
    sub = frame[mask]
    shape = plan.shape
    out = {
        "n": np.zeros(shape, dtype=np.int64),
        "key": np.zeros(shape, dtype=np.uint32),
        "w": np.zeros(shape),
        "r": np.zeros((4, *shape)),
        "computed": np.zeros(shape, dtype=bool),
    }
    for gs in plan.grouping_sets:
        ranges = [range(d.size) if i in gs else [d.size] for i, d in enumerate(plan.dimensions)]
        for cell in itertools.product(*ranges):
            m = np.ones(len(sub), dtype=bool)
            for i, d in enumerate(plan.dimensions):
                if cell[i] < d.size:
                    m &= sub[d.column].isin(d.members[cell[i]]).to_numpy()
            rec = sub[m]
            out["n"][cell] = len(rec)
            out["key"][cell] = int(rec["RKEY"].astype(np.int64).sum()) % KEY_MODULUS
            out["w"][cell] = exact_sum(rec["W"])
            for r in range(4):
                out["r"][(r, *cell)] = exact_sum(rec[f"R{r + 1}"])
            out["computed"][cell] = True
    return out


REQUESTS = [
    TableRequest(("A",)),
    TableRequest(("B",), universe={"D": [2]}),
    TableRequest(("A", "B")),
    TableRequest(("CG", "A"), universe={"B": ["x", "y"]}),
    TableRequest(("A", "B", "D"), universe={"E": [10, 30]}),
    TableRequest(("A", "CG", "B", "D"), margins="all"),
    TableRequest(("B", "C", "A", "E"), universe={"D": [1]}, margins="total"),
    TableRequest(("A", "B", "D"), margins=(("A",), ("B", "D"))),
    TableRequest(("A", "B"), margins="none"),
    # The universe names a dimension: the dimension shows only those categories.
    TableRequest(("A", "CG"), universe={"CG": ["lo", "hi"], "A": [1, 4]}),
]


@pytest.mark.parametrize("engine_name", sorted(ENGINES))
@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: "x".join(r.dimensions))
def test_tabulation_equals_brute_force(random_data, engine_name, request_):
    dataset, frame = random_data
    req = TableRequest(
        request_.dimensions,
        universe=request_.universe,
        margins=request_.margins,
        replicates=True,
    )
    agg = ENGINES[engine_name]().tabulate(dataset, req.bind(dataset.catalog))
    expected = brute_force(frame, dataset, req)
    np.testing.assert_array_equal(agg.computed, expected["computed"])
    np.testing.assert_array_equal(agg.n, expected["n"])
    np.testing.assert_array_equal(agg.cell_key, expected["key"])
    # Weights are summed in fixed point: every engine gives these exact bits.
    np.testing.assert_array_equal(agg.weight_sum, expected["w"])
    np.testing.assert_array_equal(agg.replicate_sums, expected["r"])


def test_empty_categories_appear_with_zero(random_data):
    dataset, _ = random_data
    agg = DuckDBEngine().tabulate(dataset, TableRequest(("A", "B")).bind(dataset.catalog))
    # Category 4 of A never occurs; its row is present and all zero.
    assert agg.n.shape == (5, 5)
    assert (agg.n[3, :] == 0).all()
    assert agg.computed[3, :].all()
    assert (agg.cell_key[3, :] == 0).all()


def test_engines_agree_exactly_on_counts_and_keys(random_data):
    dataset, _ = random_data
    plan = TableRequest(("CG", "B", "D"), universe={"A": [1, 2]}).bind(dataset.catalog)
    a = DuckDBEngine().tabulate(dataset, plan)
    b = MemoryEngine().tabulate(dataset, plan)
    np.testing.assert_array_equal(a.n, b.n)
    np.testing.assert_array_equal(a.cell_key, b.cell_key)


def test_cell_keys_equal_numpy_exact_integer_sum(random_data):
    dataset, frame = random_data
    agg = DuckDBEngine().tabulate(dataset, TableRequest(("A", "B")).bind(dataset.catalog))
    a_idx = frame["A"].map({1: 0, 2: 1, 3: 2, 4: 3}).to_numpy()
    b_idx = frame["B"].map({"x": 0, "y": 1, "z": 2, "w": 3}).to_numpy()
    keys = cell_keys(frame["RKEY"].to_numpy(), a_idx * 4 + b_idx, 16).reshape(4, 4)
    np.testing.assert_array_equal(agg.cell_key[:4, :4], keys)
    # Python's unbounded integers agree with both.
    total = sum(int(k) for k in frame["RKEY"]) % 2**32
    assert int(agg.cell_key[-1, -1]) == total


def test_cell_keys_unchanged_under_row_shuffling(random_data, make_dataset):
    dataset, frame = random_data
    shuffled = frame.sample(frac=1.0, random_state=np.random.RandomState(3)).reset_index(drop=True)
    other = make_dataset(shuffled)
    req = TableRequest(("A", "CG", "D"), replicates=True)
    for engine in (DuckDBEngine(), MemoryEngine()):
        a = engine.tabulate(dataset, req.bind(dataset.catalog))
        b = engine.tabulate(other, req.bind(other.catalog))
        np.testing.assert_array_equal(a.cell_key, b.cell_key)
        np.testing.assert_array_equal(a.n, b.n)
        np.testing.assert_allclose(a.weight_sum, b.weight_sum, rtol=1e-12)


def test_cell_key_sum_exact_beyond_float_precision(make_dataset):
    # Keys near 2**32: a float64 sum of 3000 of them loses the low bits; ours must not.
    frame = pd.DataFrame(
        {
            "A": np.ones(3000, dtype=np.int64),
            "B": ["x"] * 3000,
            "C": np.zeros(3000, dtype=np.int64),
            "D": np.ones(3000, dtype=np.int64),
            "E": np.full(3000, 10),
            "W": np.ones(3000),
            "RKEY": np.full(3000, 2**32 - 1, dtype=np.uint32),
            **{f"R{r}": np.ones(3000) for r in range(1, 5)},
        }
    )
    frame.loc[0, "RKEY"] = 12345
    ds = make_dataset(frame)
    agg = DuckDBEngine().tabulate(ds, TableRequest(("A",)).bind(ds.catalog))
    expected = (2999 * (2**32 - 1) + 12345) % 2**32
    assert int(agg.cell_key[0]) == expected
    assert int(agg.cell_key[-1]) == expected


def test_csv_source_gives_the_same_table(random_data, make_dataset):
    dataset, frame = random_data
    csv_ds = make_dataset(frame, fmt="csv")
    req = TableRequest(("B", "CG"), universe={"A": [1, 3]})
    a = DuckDBEngine().tabulate(dataset, req.bind(dataset.catalog))
    b = DuckDBEngine().tabulate(csv_ds, req.bind(csv_ds.catalog))
    np.testing.assert_array_equal(a.n, b.n)
    np.testing.assert_array_equal(a.cell_key, b.cell_key)
    np.testing.assert_allclose(a.weight_sum, b.weight_sum, rtol=1e-9)


def test_materialized_duckdb_matches_file_scans(random_data):
    dataset, _ = random_data
    plan = TableRequest(("A", "B", "CG")).bind(dataset.catalog)
    with DuckDBEngine(materialize=True, threads=1) as eng:
        a = eng.tabulate(dataset, plan)
        again = eng.tabulate(dataset, plan)
    b = DuckDBEngine().tabulate(dataset, plan)
    np.testing.assert_array_equal(a.n, b.n)
    np.testing.assert_array_equal(again.cell_key, b.cell_key)


def test_query_binds_values_as_parameters(random_data):
    dataset, _ = random_data
    plan = TableRequest(("A",), universe={"B": ["x", "y"]}).bind(dataset.catalog)
    sql, params = DuckDBEngine().build_query(dataset, plan)
    assert "GROUPING SETS" in sql
    assert "'x'" not in sql and "'y'" not in sql
    assert params == ["x", "y"]


def test_universe_with_no_records_gives_zero_table(random_data):
    dataset, _ = random_data
    plan = TableRequest(("B",), universe={"A": [4]}).bind(dataset.catalog)
    agg = DuckDBEngine().tabulate(dataset, plan)
    assert (agg.n == 0).all()
    assert agg.computed.all()


@pytest.mark.system
def test_query_timeout_cancels_the_tabulation(make_dataset):
    from tablesafe._errors import ComputationError
    from tsdata import random_frame

    # Large enough that the query runs for a few hundred milliseconds.
    big = make_dataset(random_frame(2_000_000, seed=9))
    engine = DuckDBEngine(timeout=0.005, threads=1)
    engine.ensure_valid(big)
    plan = TableRequest(("A", "B", "C", "E"), replicates=True).bind(big.catalog)
    with pytest.raises(ComputationError, match="took longer than"):
        engine.tabulate(big, plan)
    # Without the limit the same query answers.
    assert DuckDBEngine().tabulate(big, plan).n[-1, -1, -1, -1] == 2_000_000
