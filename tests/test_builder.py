"""The table builder end to end: seeds, weighting, additivity, structural zeros, exports."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tablesafe._builder import Protection, TableBuilder, structural_zero_mask
from tablesafe._errors import ParameterError
from tablesafe._request import TableRequest
from tablesafe._seeds import cell_key_uniforms, dynamic_uniforms
from tablesafe.catalog._dataset import Dataset
from tablesafe.engines import MemoryEngine

SECRET = b"0123456789abcdef0123456789abcdef"


class Shift:
    """A small mechanism for tests: v uniform on {-2..2} by the cell's uniform; zeros kept."""

    def perturbation(self, counts, u, cell_key=None):
        v = np.floor(u * 5).astype(np.int64) - 2
        return np.where(counts == 0, 0, v)

    def describe(self):
        return {"name": "shift", "q": 2}


def builder(dataset, **kwargs):
    kwargs.setdefault("mechanism", Shift())
    return TableBuilder(dataset, Protection(**kwargs))


# -- seeds ---------------------------------------------------------------------


def test_cell_key_uniform_formula():
    keys = np.array([0, 1, 2**31, 2**32 - 1], dtype=np.uint32)
    np.testing.assert_array_equal(cell_key_uniforms(keys), (keys.astype(float) + 0.5) / 2**32)


def test_dynamic_uniforms_depend_on_secret_and_every_margin():
    keys = np.arange(12, dtype=np.uint32).reshape(3, 4) * 1000
    a = dynamic_uniforms(keys, SECRET)
    assert ((a > 0) & (a < 1)).all()
    np.testing.assert_array_equal(a, dynamic_uniforms(keys, SECRET))
    assert not np.isin(a, dynamic_uniforms(keys, SECRET[::-1])).any()
    changed = keys.copy()
    changed[-1, -1] += 1  # the universe key sum only
    assert not np.isin(a, dynamic_uniforms(changed, SECRET)).any()
    row = keys.copy()
    row[0, -1] += 1  # the margin of row 0 only: its cells change, the others do not
    b = dynamic_uniforms(row, SECRET)
    assert (a[0] != b[0]).all()
    np.testing.assert_array_equal(a[1:], b[1:])


def _dynamic_by_definition(keys: np.ndarray, secret: bytes, salt: bytes) -> np.ndarray:
    """Li & Krenzke's seed cell by cell, as the docstring defines it (slow, obvious)."""
    import hashlib
    import itertools

    totals = tuple(s - 1 for s in keys.shape)
    out = np.empty(keys.shape)
    for cell in itertools.product(*[range(s) for s in keys.shape]):
        free = [i for i in range(keys.ndim) if cell[i] != totals[i]]
        parts = [int(keys[cell]).to_bytes(4, "little")]
        for r in range(1, len(free) + 1):
            for drop in itertools.combinations(free, r):
                other = tuple(totals[i] if i in drop else cell[i] for i in range(keys.ndim))
                parts.append(int(keys[other]).to_bytes(4, "little"))
        h = hashlib.blake2b(
            b"".join(parts), key=secret, digest_size=8, person=b"tablesafe-seed", salt=salt
        )
        out[cell] = (int.from_bytes(h.digest(), "little") + 0.5) / 2.0**64
    return out


@pytest.mark.parametrize("shape", [(4,), (3, 5), (2, 3, 4), (2, 2, 3, 2), (1, 3)])
def test_vectorised_dynamic_streams_match_the_definition(shape):
    from tablesafe._seeds import dynamic_streams

    rng = np.random.default_rng(11)
    keys = rng.integers(0, 2**32, shape, dtype=np.uint64).astype(np.uint32)
    a, b = dynamic_streams(keys, SECRET, (b"", b"weight"))
    np.testing.assert_array_equal(a, _dynamic_by_definition(keys, SECRET, b""))
    np.testing.assert_array_equal(b, _dynamic_by_definition(keys, SECRET, b"weight"))
    (inner,) = dynamic_streams(keys, SECRET, (b"count",), inner_only=True)
    sl = tuple(slice(0, s - 1) for s in shape)
    np.testing.assert_array_equal(inner[sl], _dynamic_by_definition(keys, SECRET, b"count")[sl])
    assert np.isnan(inner).sum() == inner.size - inner[sl].size


def test_dynamic_seeds_need_a_long_secret(random_data):
    dataset, _ = random_data
    with pytest.raises(ParameterError, match="secret"):
        Protection(Shift(), seeds="dynamic")
    short = builder(dataset, seeds="dynamic", secret=b"short")
    with pytest.raises(ParameterError, match="at least 16 bytes"):
        short.build(TableRequest(("A",)))


def test_secret_never_appears_in_repr():
    p = Protection(Shift(), seeds="dynamic", secret=SECRET)
    assert SECRET.decode() not in repr(p)
    assert "hidden" in repr(p)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"seeds": "random"}, "allowed: cellkey, keyed, dynamic"),
        ({"weight_noise": -1}, "weight_noise must be a number from 0 to 10"),
        ({"weight_noise": float("nan")}, "weight_noise must be a number from 0 to 10"),
        ({"rounding": "0"}, "rounding base must be a positive finite number"),
        (
            {"rounding": "-5"},
            "rounding base must be a positive finite number",
        ),
        (
            {"rounding": "nan"},
            "rounding base must be a positive finite number",
        ),
        ({"rounding": "0sf"}, "significant digits must be a whole number from 1 to 15"),
        ({"rounding": "whole"}, "unknown rounding 'whole'"),
        ({"se_min_count": 0}, "se_min_count must be a whole number from 1 to 1,000,000"),
        ({"additivity": "magic"}, "allowed: aggregate, independent, ipf"),
        ({"mechanism": "dp"}, "cell-wise mechanism"),
    ],
)
def test_protection_validates(kwargs, message):
    kwargs.setdefault("mechanism", Shift())
    with pytest.raises(ParameterError, match=message):
        Protection(**kwargs)


# -- consistency -------------------------------------------------------------------


def test_same_cell_in_two_tables_gets_the_same_perturbation(random_data):
    dataset, _ = random_data
    b = builder(dataset, additivity="independent")
    one_way = b.build(TableRequest(("A",), universe={"D": [1]}, statistic="count"))
    two_way = b.build(TableRequest(("A", "D"), statistic="count"))
    # Cell A=a inside D=1 is the same set of records in both tables.
    np.testing.assert_array_equal(one_way.counts[:4], two_way.counts[:4, 0])
    assert one_way.perturbed[:3].any()


def test_same_request_same_answer(random_data):
    dataset, _ = random_data
    req = TableRequest(("A", "CG"), universe={"B": ["x", "y"]})
    for seeds in ("cellkey", "dynamic"):
        first = builder(dataset, seeds=seeds, secret=SECRET).build(req)
        again = builder(dataset, seeds=seeds, secret=SECRET, mechanism=Shift()).build(req)
        np.testing.assert_array_equal(first.counts, again.counts)
        np.testing.assert_array_equal(first.weighted, again.weighted)


def test_universe_differing_by_one_record_changes_every_dynamic_seed(random_data, make_dataset):
    dataset, frame = random_data
    other = make_dataset(frame.iloc[1:])
    req = TableRequest(("A", "B"), statistic="count")
    plan_a = req.bind(dataset.catalog)
    engine = MemoryEngine()
    ka = engine.tabulate(dataset, plan_a).cell_key
    kb = engine.tabulate(other, req.bind(other.catalog)).cell_key
    ua, ub = dynamic_uniforms(ka, SECRET), dynamic_uniforms(kb, SECRET)
    assert (ua != ub).all()
    # Cell keys change only where the dropped record was counted.
    assert 0 < (cell_key_uniforms(ka) != cell_key_uniforms(kb)).sum() <= 4


# -- weighting --------------------------------------------------------------------------


@pytest.mark.parametrize("additivity", ["independent", "aggregate", "ipf"])
def test_weighted_figures_are_protected_count_times_cell_mean(random_data, additivity):
    """Without noise, W' / n' is the cell's true mean weight (docs/weighted.md)."""
    dataset, _ = random_data
    b = builder(dataset, additivity=additivity, weight_noise=0.0, rounding="1e-9")
    req = TableRequest(("A", "B"))
    table = b.build(req)
    truth = b.tabulate(req).aggregates
    inner = table.inner if additivity != "independent" else (slice(None), slice(None))
    n, w, c, wp = (
        truth.n[inner],
        truth.weight_sum[inner],
        table.counts[inner],
        table.weighted[inner],
    )
    real = (n > 0) & (c > 0)
    assert real.sum() > 5
    np.testing.assert_allclose(wp[real] / c[real], w[real] / n[real], rtol=1e-9)
    assert (wp[c == 0] == 0).all()


def test_weighted_noise_is_bounded_and_consistent(random_data):
    dataset, _ = random_data
    b = builder(dataset, additivity="independent", weight_noise=0.5, rounding="1e-9")
    table = b.build(TableRequest(("A", "B")))
    truth = b.tabulate(TableRequest(("A", "B"))).aggregates
    real = (truth.n > 0) & (table.counts > 0)
    mean = truth.weight_sum[real] / truth.n[real]
    gap = np.abs(table.weighted[real] - table.counts[real] * mean)
    assert (gap <= 0.5 * mean + 1e-6).all()
    assert (gap > 0).mean() > 0.9  # the noise is there
    # The same records give the same figure in another table: cell (a, b) of A x B is
    # cell (a, b, total) of A x B x D.
    three = b.build(TableRequest(("A", "B", "D")))
    np.testing.assert_array_equal(three.weighted[:, :, -1], table.weighted)


# -- additivity options ---------------------------------------------------------------------


def test_option_aggregate_margins_are_sums(random_data):
    dataset, _ = random_data
    table = builder(dataset, additivity="aggregate").build(TableRequest(("A", "B", "D")))
    c = table.counts
    np.testing.assert_array_equal(c[:-1, :-1, -1], c[:-1, :-1, :-1].sum(axis=2))
    np.testing.assert_array_equal(c[-1, -1, -1], c[:-1, :-1, :-1].sum())
    np.testing.assert_allclose(table.weighted[-1, -1, -1], table.weighted[:-1, :-1, :-1].sum())


def test_option_ipf_inner_cells_are_integers_adding_to_released_margins(random_data):
    dataset, _ = random_data
    table = builder(dataset, additivity="ipf").build(TableRequest(("A", "B", "D")))
    c = table.counts
    assert c.dtype == np.int64 and (c >= 0).all()
    for axis in range(3):
        idx = [slice(None)] * 3
        idx[axis] = slice(-1, None)
        inner = [slice(None)] * 3
        inner[axis] = slice(0, -1)
        np.testing.assert_array_equal(c[tuple(idx)].squeeze(axis), c[tuple(inner)].sum(axis=axis))
    np.testing.assert_allclose(
        table.weighted[-1, -1, -1], table.weighted[:-1, :-1, :-1].sum(), rtol=1e-9
    )
    assert table.metadata["ipf_iterations"] >= 1


def test_option_independent_perturbs_margins_on_their_own(random_data):
    dataset, _ = random_data
    b = builder(dataset, additivity="independent")
    table = b.build(TableRequest(("A", "B")))
    truth = b.tabulate(TableRequest(("A", "B"))).aggregates
    assert table.perturbed[-1, :].any() or table.perturbed[:, -1].any()
    assert (table.counts != truth.n).any()


# -- structural zeros ---------------------------------------------------------------------------


def test_structural_zeros_are_flagged_and_never_perturbed(demo_dir):
    dataset = Dataset.open(demo_dir)
    req = TableRequest(("AGEGRP", "MARSTAT", "EMPSTAT"))
    for additivity in ("aggregate", "independent", "ipf"):
        table = builder(dataset, additivity=additivity).build(req)
        sz = table.structural_zero
        assert sz[0, 1:4, :].all()  # under-15s are never married, widowed or divorced
        assert sz[1:8, :, 3].all()  # nobody aged 15+ is "not applicable"
        assert not sz[1, 1, 0]
        assert (table.counts[sz] == 0).all()
        assert not table.perturbed[sz].any()


def test_structural_zero_through_the_universe(demo_dir):
    dataset = Dataset.open(demo_dir)
    plan = TableRequest(("MARSTAT",), universe={"AGE": [3, 4, 5]}).bind(dataset.catalog)
    sz = structural_zero_mask(dataset.catalog, plan)
    assert sz.tolist() == [False, True, True, True, False]


# -- statistics, margins and exports -------------------------------------------------------------


def test_requested_margins_only(random_data):
    dataset, _ = random_data
    table = builder(dataset).build(TableRequest(("A", "B"), margins="total"))
    assert table.computed[:-1, :-1].all() and table.computed[-1, -1]
    assert not table.computed[0, -1] and not table.computed[-1, 0]
    frame = table.to_frame()
    assert len(frame) == 4 * 4 + 1


def test_count_only_and_weighted_only(random_data):
    dataset, _ = random_data
    counts = builder(dataset).build(TableRequest(("A",), statistic="count"))
    assert counts.weighted is None and counts.counts is not None
    weighted = builder(dataset).build(TableRequest(("A",), statistic="weighted"))
    assert weighted.counts is None and weighted.weighted is not None


def test_exports(random_data, tmp_path):
    dataset, _ = random_data
    table = builder(dataset, additivity="ipf").build(TableRequest(("A", "CG")))
    frame = table.to_frame(labels=True)
    assert {"A", "A_label", "CG", "n", "weighted", "structural_zero"} <= set(frame.columns)
    # Which values are exact is the data owner's knowledge only.
    assert not {"perturbed", "adjusted"} & set(frame.columns)
    assert {"perturbed", "adjusted"} <= set(table.to_frame(owner=True).columns)
    doc = json.loads(table.to_json())
    assert doc["meta"]["protected"] is True and doc["meta"]["mechanism"]["name"] == "shift"
    assert len(doc["cells"]) == len(frame)
    csv = pd.read_csv(pd.io.common.StringIO(table.to_csv()))
    assert csv["n"].sum() == frame["n"].sum()
    path = table.to_xlsx(tmp_path / "t.xlsx", labels=True)
    book = pd.read_excel(path, sheet_name=None)
    # A cross-tab sheet per statistic first (issue 30), then cells and about.
    assert list(book) == ["Count", "Weighted count", "cells", "about"]
    assert book["cells"]["n"].tolist() == frame["n"].tolist()
    # Every cell of the sheet, as pandas reads it back (through openpyxl).
    pd.testing.assert_frame_equal(book["cells"], frame, check_dtype=False)
    text = table.render("text")
    # Headed by the title in words (issue 30), never called unprotected.
    assert text.splitlines()[0] == table.title and "UNPROTECTED" not in text


# -- replicate variances -------------------------------------------------------------


def test_replicate_standard_errors_equal_direct_numpy(random_data):
    dataset, _ = random_data
    # No weight noise, and a mechanism that is not a ptable: the protection adds no
    # variance of its own (tests/test_precision.py checks the one it adds).
    table = builder(
        dataset,
        additivity="independent",
        mechanism=Shift(),
        rounding="1e-9",
        se_min_count=5,
        weight_noise=0.0,
    ).build(TableRequest(("A", "B"), replicates=True))
    assert table.se is not None
    # Direct: the JK1 formula on the protected replicate counts, shown from 5 records on.
    reps = table.replicate_weighted
    coef = 3 / 4
    direct = np.sqrt(coef * ((reps - table.weighted[None]) ** 2).sum(axis=0))
    shown = table.computed & (table.counts >= 5)
    assert shown.any() and (~shown).any()
    np.testing.assert_allclose(table.se[shown], direct[shown], rtol=1e-9)
    assert np.isnan(table.se[~shown]).all()
    frame_out = table.to_frame()
    assert {"se", "ci_low", "ci_high"} <= set(frame_out.columns)
    published = frame_out.dropna(subset=["se"])
    assert (published["ci_low"] <= published["weighted"]).all()
    assert frame_out["se"].isna().sum() == (table.computed & ~shown).sum()
    assert table.metadata["replicate_method"] == "JK1"


def test_unperturbed_standard_errors_from_raw_replicates(random_data):
    dataset, frame = random_data
    table = TableBuilder(dataset, Protection(None)).build(TableRequest(("A",), replicates=True))
    # Brute force from the microdata: JK1 on the replicate-weight sums of category A=1.
    sub = frame[frame["A"] == 1]
    theta = sub["W"].sum()
    theta_r = np.array([sub[f"R{r}"].sum() for r in range(1, 5)])
    expected = np.sqrt(3 / 4 * ((theta_r - theta) ** 2).sum())
    # Published in whole units (the default rounding).
    assert table.se[0] == np.rint(expected)
