"""Record-level drop/add-up-to-q with dynamic seeds (Li & Krenzke 2016)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tablesafe._builder import Protection, TableBuilder
from tablesafe._errors import ParameterError
from tablesafe._request import TableRequest
from tablesafe.cells._selection import mix32
from tablesafe.engines import DuckDBEngine, MemoryEngine
from tablesafe.mechanisms import drop_add_records
from test_cube import Counting

SECRET = b"record-level-secret-0123456789ab"


def builder(dataset, engine=None, **kwargs):
    return TableBuilder(
        dataset,
        Protection(drop_add_records(**kwargs), seeds="dynamic", secret=SECRET),
        engine=engine or DuckDBEngine(),
    )


def test_parameters_are_validated():
    with pytest.raises(ParameterError, match="rate"):
        drop_add_records(rate=0)
    with pytest.raises(ParameterError, match="cap"):
        drop_add_records(cap=0)
    with pytest.raises(ParameterError, match="seeds='keyed'"):
        Protection(drop_add_records(), seeds="cellkey")


def test_q_is_ceil_of_rate_times_n():
    mech = drop_add_records(rate=0.01)
    assert mech.q(np.array([0, 1, 99, 100, 101, 198, 300])).tolist() == [0, 1, 1, 1, 2, 2, 3]
    assert drop_add_records(rate=0.5, cap=3).q(np.array([2, 10])).tolist() == [1, 3]


def test_mix_in_sql_equals_numpy():
    import duckdb

    from tablesafe.cells._selection import mix32_sql

    rng = np.random.default_rng(1)
    keys = rng.integers(0, 2**32, 200)
    seeds = rng.integers(0, 2**32, 200)
    con = duckdb.connect()
    sql = "SELECT " + mix32_sql("k", "s") + " FROM (SELECT UNNEST(?) AS k, UNNEST(?) AS s)"
    got = [r[0] for r in con.execute(sql, [keys.tolist(), seeds.tolist()]).fetchall()]
    assert got == mix32(keys, seeds).tolist()
    assert ((mix32(keys, seeds) >= 0) & (mix32(keys, seeds) < 2**32)).all()


def test_staged_mix_in_sql_equals_numpy():
    import duckdb

    from tablesafe.cells._selection import mix32_staged_sql

    rng = np.random.default_rng(5)
    keys = rng.integers(0, 2**32, 500)
    seeds = rng.integers(0, 2**32, 500)
    source = "(SELECT UNNEST(?) AS k, UNNEST(?) AS s, generate_subscripts(?, 1) AS i)"
    sql = f"SELECT ts_mix FROM ({mix32_staged_sql(source, 'k', 's')}) ORDER BY i"
    got = duckdb.connect().execute(sql, [keys.tolist(), seeds.tolist(), keys.tolist()]).fetchall()
    assert [r[0] for r in got] == mix32(keys, seeds).tolist()


def test_engines_choose_the_same_records(random_data):
    dataset, frame = random_data
    plan = TableRequest(("A", "CG"), universe={"D": [1]}, replicates=True).bind(dataset.catalog)
    shape = tuple(d.size for d in plan.dimensions)
    rng = np.random.default_rng(2)
    seed = rng.integers(0, 2**32, shape)
    k = rng.integers(0, 6, shape)
    a = DuckDBEngine().select(dataset, plan, seed, k)
    b = MemoryEngine().select(dataset, plan, seed, k)
    np.testing.assert_array_equal(a.n, b.n)
    # Fixed-point sums: the same bits in both engines.
    np.testing.assert_array_equal(a.weight_sum, b.weight_sum)
    np.testing.assert_array_equal(a.replicate_sums, b.replicate_sums)
    # Brute force for one cell: the k records of the cell with the smallest mix.
    sub = frame[(frame["D"] == 1) & (frame["A"] == 1) & frame["C"].isin([4, 5, 6])]
    keys = sub["RKEY"].to_numpy().astype(np.int64)
    order = np.lexsort((keys, mix32(keys, np.full(len(keys), seed[0, 1]))))
    chosen = sub.iloc[order[: k[0, 1]]]
    exact = sum(math.floor(w * 2**16 + 0.5) for w in chosen["W"]) / 2**16
    assert a.weight_sum[0, 1] == exact
    assert a.n[0, 1] == min(k[0, 1], len(sub))


@pytest.mark.parametrize("inflate", [1, 1000])
def test_mix_thresholds_choose_the_same_records_as_full_ranking(random_data, inflate):
    """Ranking only the records under each cell's threshold changes nothing.

    With ``inflate`` 1000 the thresholds keep almost no record, so nearly every
    cell comes up short and is ranked again in full: the fallback is exercised.
    """
    dataset, _ = random_data
    plan = TableRequest(("A", "B", "CG"), replicates=True).bind(dataset.catalog)
    n = DuckDBEngine().tabulate(dataset, plan).n[:-1, :-1, :-1]
    rng = np.random.default_rng(3)
    seed = rng.integers(0, 2**32, n.shape)
    k = rng.integers(0, 5, n.shape)
    full = DuckDBEngine().select(dataset, plan, seed, k)
    bounded = DuckDBEngine().select(dataset, plan, seed, k, counts=n * inflate)
    for a in (bounded, MemoryEngine().select(dataset, plan, seed, k, counts=n)):
        np.testing.assert_array_equal(a.n, full.n)
        np.testing.assert_array_equal(a.weight_sum, full.weight_sum)
        np.testing.assert_array_equal(a.replicate_sums, full.replicate_sums)
    np.testing.assert_array_equal(full.n, np.minimum(k, n))


def test_records_sharing_a_key_are_chosen_alike_by_every_engine(make_dataset):
    """Ties of mix and key are broken by the weights: the same sums everywhere."""
    from tsdata import random_frame

    frame = random_frame(400, seed=9)
    frame["RKEY"] = frame["RKEY"] % 7  # many records of a cell share a key
    dataset = make_dataset(frame)
    plan = TableRequest(("A",), replicates=True).bind(dataset.catalog)
    rng = np.random.default_rng(4)
    for _ in range(5):
        seed = rng.integers(0, 2**32, (4,))
        k = rng.integers(1, 40, (4,))
        a = DuckDBEngine().select(dataset, plan, seed, k)
        b = MemoryEngine().select(dataset, plan, seed, k.copy(), counts=None)
        np.testing.assert_array_equal(a.weight_sum, b.weight_sum)
        np.testing.assert_array_equal(a.replicate_sums, b.replicate_sums)


def test_counts_change_by_at_most_q_and_margins_add_up(random_data):
    dataset, _ = random_data
    b = builder(dataset, rate=0.05)
    req = TableRequest(("A", "B"))
    table = b.build(req)
    truth = b.tabulate(req).aggregates
    d = table.counts[:-1, :-1] - truth.n[:-1, :-1]
    q = drop_add_records(rate=0.05).q(truth.n[:-1, :-1])
    assert (np.abs(d) <= q).all() and (d != 0).any()
    np.testing.assert_array_equal(table.counts[-1, :-1], table.counts[:-1, :-1].sum(axis=0))
    # Weighted figures describe the records each cell holds after drop/add: additive,
    # zero where no record is left, and near the true total (noise and d are symmetric).
    np.testing.assert_array_equal(table.weighted[-1, :-1], table.weighted[:-1, :-1].sum(axis=0))
    assert (table.weighted[:-1, :-1][table.counts[:-1, :-1] == 0] == 0).all()
    assert table.weighted[-1, -1] == pytest.approx(truth.weight_sum[-1, -1], rel=0.02)


def test_deterministic_and_independent_of_row_order(random_data, make_dataset):
    dataset, frame = random_data
    shuffled = make_dataset(frame.sample(frac=1.0, random_state=np.random.RandomState(7)))
    req = TableRequest(("A", "CG"), universe={"B": ["x", "y", "z"]}, replicates=True)
    a = builder(dataset, rate=0.05).build(req)
    again = builder(dataset, rate=0.05).build(req)
    b = builder(shuffled, rate=0.05, engine=MemoryEngine()).build(req)
    for other in (again, b):
        np.testing.assert_array_equal(a.counts, other.counts)
        np.testing.assert_array_equal(a.weighted, other.weighted)
        np.testing.assert_array_equal(a.se, other.se)
        assert a.to_csv() == other.to_csv()
        assert json.loads(a.to_json())["cells"] == json.loads(other.to_json())["cells"]


def test_one_record_less_changes_every_seed(random_data, make_dataset):
    dataset, frame = random_data
    smaller = make_dataset(frame.iloc[1:])
    req = TableRequest(("A", "B"), statistic="count")
    a = builder(dataset, rate=0.1).build(req)
    b = builder(smaller, rate=0.1).build(req)
    ta = builder(dataset).tabulate(req).aggregates.n
    tb = builder(smaller).tabulate(req).aggregates.n
    # The perturbations differ in most cells although only one record moved.
    changed = (a.counts - ta)[:-1, :-1] != (b.counts - tb)[:-1, :-1]
    assert changed.mean() > 0.5


def test_weighted_estimates_are_unbiased_over_many_universes(random_data):
    dataset, frame = random_data
    b = builder(dataset, rate=0.2)
    rel = []
    codes = sorted(frame["C"].unique())
    rng = np.random.default_rng(3)
    for _ in range(60):
        chosen = sorted(rng.choice(codes, size=6, replace=False).tolist())
        req = TableRequest(("A", "B"), universe={"C": chosen}, statistic="weighted")
        table = b.build(req)
        truth = b.tabulate(req).aggregates
        inner = truth.n[:-1, :-1] > 20
        rel.append((table.weighted[:-1, :-1][inner] / truth.weight_sum[:-1, :-1][inner]) - 1)
    rel = np.concatenate(rel)
    # Mean relative difference near 0: |mean| within 3 standard errors, and small.
    assert abs(rel.mean()) < 3 * rel.std() / np.sqrt(len(rel)) + 1e-3
    assert abs(rel.mean()) < 0.01


def test_replicate_standard_errors(random_data):
    dataset, _ = random_data
    protection = Protection(
        drop_add_records(rate=0.05), seeds="dynamic", secret=SECRET, rounding="1e-9"
    )
    table = TableBuilder(dataset, protection, engine=DuckDBEngine()).build(
        TableRequest(("A",), replicates=True)
    )
    reps = table.replicate_weighted
    # JK1 on the replicate figures plus the protection's variance (docs/precision.md):
    # m^2 (q (q + 1) / 3 + s^2 / 3) per category, m = W' / n', q = ceil(0.05 n'), s = 0.5;
    # the total adds up its categories'. Shown only for cells of at least se_min_count (10)
    # protected records.
    n, w = table.counts[:-1], table.weighted[:-1]
    q = np.ceil(0.05 * n - 1e-9)
    noise = np.where(n > 0, (w / np.maximum(n, 1)) ** 2 * (q * (q + 1) / 3 + 0.25 / 3), 0.0)
    noise = np.append(noise, noise.sum())
    direct = np.sqrt(0.75 * ((reps - table.weighted[None]) ** 2).sum(axis=0) + noise)
    shown = table.counts >= 10
    assert shown.any() and (~shown).any()
    np.testing.assert_allclose(table.se[shown], direct[shown], rtol=1e-6)
    assert np.isnan(table.se[~shown]).all()
    assert np.all(reps[:, -1] > 0)


def test_ci_overlap_formula():
    from tablesafe.mechanisms._variance import ci_overlap

    # Identical intervals overlap fully; disjoint ones not at all.
    assert ci_overlap([0], [10], [0], [10]).tolist() == [1.0]
    assert ci_overlap([0], [10], [20], [30]).tolist() == [0.0]
    # [0, 10] and [5, 25]: overlap 5 -> (5/10 + 5/20) / 2 = 0.375
    assert ci_overlap([0], [10], [5], [25]).tolist() == [0.375]


def test_ci_overlap_of_record_level_protection_is_high(random_data):
    from tablesafe.mechanisms._variance import ci_overlap

    dataset, _ = random_data
    b = builder(dataset, rate=0.01)
    req = TableRequest(("A", "B"), replicates=True)
    prot = b.build(req)
    plain = TableBuilder(dataset, Protection(None)).build(req)
    inner = (slice(0, 3), slice(0, 4))
    f_p, f_o = prot.statistics(), plain.statistics()
    j = ci_overlap(
        f_o["ci_low"][inner], f_o["ci_high"][inner], f_p["ci_low"][inner], f_p["ci_high"][inner]
    )
    assert np.median(j) > 0.8


def test_the_join_packs_small_integer_codes_one_to_one(random_data):
    """The record choice joins on one packed integer when every code is a small integer."""
    import itertools

    from tablesafe.engines._sql import _packing

    dataset, _ = random_data
    cat = dataset.catalog
    packed = _packing(TableRequest(("A", "CG")).bind(cat))
    assert packed is not None
    plan = TableRequest(("A", "CG")).bind(cat)
    codes = [sorted({c for m in d.members for c in m}) for d in plan.dimensions]
    values = {
        sum((c - lo) * stride for c, (lo, _, stride) in zip(combo, packed, strict=True))
        for combo in itertools.product(*codes)
    }
    assert len(values) == len(list(itertools.product(*codes)))  # one to one
    # Text codes keep the join on every code.
    assert _packing(TableRequest(("A", "B")).bind(cat)) is None


def test_counts_need_no_record_choice(random_data):
    # A count is n + d whichever records are dropped or duplicated, so a table of
    # counts asks the engine for no record choice, and its counts are those of the
    # weighted table of the same cells (which does choose records).
    dataset, _ = random_data
    engine = Counting(DuckDBEngine())
    b = builder(dataset, engine=engine, rate=0.1)
    counts = b.build(TableRequest(("A", "B"), statistic="count"))
    assert engine.selects == 0
    both = b.build(TableRequest(("A", "B"), statistic="both"))
    assert engine.selects == 1
    np.testing.assert_array_equal(counts.counts, both.counts)
    assert (counts.counts != b.tabulate(TableRequest(("A", "B"))).aggregates.n).any()
