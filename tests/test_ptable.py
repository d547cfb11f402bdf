"""PTable: selection, lookup, privacy figures, file layouts, conversion, CLI, bad input."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from tablesafe._errors import FormatError, ParameterError
from tablesafe.mechanisms import destatis, dp_geometric, drop_add_q, pram_shlomo_young
from tablesafe.ptable._io import parse_ptable, ptable_csv, read_ptable, write_ptable
from tablesafe.ptable._ptable import PTable

DATA = Path(__file__).parent / "data" / "ptables"

#: The hand-written D = 1 ptable of the fixtures: count >= 1 -> -1, 0, +1 with 0.3, 0.4, 0.3.
D1 = {0: {0: 1.0}, 1: {0: 0.3, 1: 0.4, 2: 0.3}, 5: {4: 0.3, 5: 0.4, 6: 0.3}}


def brute_force(table: PTable, counts: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF lookup cell by cell, straight from the rows."""
    out = np.empty(counts.size, dtype=np.int64)
    for n, (c, x) in enumerate(zip(counts.tolist(), u.tolist(), strict=True)):
        v, p = (list(table.rows) + list(table.residue_rows))[int(table.row_index([c])[0])]
        cum = np.cumsum(p)
        k = int(np.sum(cum[:-1] <= x))
        out[n] = v[k]
    return out


# -- selection and lookup ------------------------------------------------------------------


def test_row_selectors():
    value = dp_geometric(2, cap=3)
    assert value.row_index([0, 2, 3, 4, 10**9]).tolist() == [0, 2, 3, 3, 3]
    pram = pram_shlomo_young()
    assert pram.row_index([0, 6, 7, 15, 16, 29, 30]).tolist() == [
        0,
        6,
        7 + 7,
        7 + 0,
        7 + 1,
        7 + 14,
        7 + 0,
    ]
    ons = read_ptable(DATA / "ons_small.csv")
    assert ons.selector == "loop"
    assert ons.row_index([750, 751, 752, 1000, 1001, 1251]).tolist() == [
        750,
        501,
        502,
        750,
        501,
        501,
    ]


@pytest.mark.parametrize(
    "table",
    [dp_geometric(2, cap=7), pram_shlomo_young(), drop_add_q(0.05, 5), destatis(4, 2.0)],
    ids=["dp", "pram", "q", "ckm"],
)
def test_vectorised_lookup_equals_brute_force(table):
    rng = np.random.default_rng(3)
    counts = rng.integers(0, 80, 3000)
    u = rng.random(3000)
    # Uniforms right at and next to interval bounds, where a lookup could slip.
    _, p = table.rows[-1]
    bounds = np.cumsum(p)[:-1]
    u[:200] = np.resize(np.concatenate([bounds, np.nextafter(bounds, 0)]), 200)
    u[200:210] = [0.0, 1 - 2**-53, 0.5, 2**-40, 1 - 1e-12, 1e-9, 0.999999, 0.25, 0.75, 0.1]
    np.testing.assert_array_equal(table.perturbation(counts, u), brute_force(table, counts, u))


def test_perturbation_keeps_shape_and_apply_never_goes_negative():
    table = dp_geometric(2, cap=7)
    counts = np.array([[0, 1], [2, 30]])
    u = np.array([[0.0, 0.0], [0.0, 0.999999999]])
    v = table.perturbation(counts, u)
    assert v.shape == (2, 2) and v.dtype == np.int64
    assert table.apply(counts, u).tolist() == [[0, 0], [0, 37]]
    assert (table.apply(counts, u) >= 0).all()


@pytest.mark.parametrize(
    ("counts", "u", "message"),
    [
        ([-1], [0.5], "non-negative"),
        ([1], [1.0], r"\[0, 1\)"),
        ([1], [-0.1], r"\[0, 1\)"),
        ([1], [math.nan], r"\[0, 1\)"),
        ([1, 2], [0.5], "same shape"),
        ([1.5], [0.5], "whole numbers"),
        (["a"], [0.5], "integers"),
    ],
)
def test_bad_lookup_input(counts, u, message):
    with pytest.raises(ParameterError, match=message):
        dp_geometric(2).perturbation(np.array(counts), np.array(u))


@pytest.mark.parametrize(
    "table",
    [dp_geometric(2, cap=7), pram_shlomo_young(), drop_add_q(0.05, 5), destatis(4, 2.0)],
    ids=["dp", "pram", "q", "ckm"],
)
@pytest.mark.parametrize("count", [1, 23])
def test_empirical_distribution_matches_the_ptable(table, count):
    """Chi-square goodness of fit over 10**6 cells, fixed Generator, level 1e-4."""
    rng = np.random.default_rng(12)
    n = 1_000_000
    v = table.perturbation(np.full(n, count), rng.random(n))
    dist = table.distribution(count)
    values = sorted(dist)
    observed = np.array([(v + count == j).sum() for j in values])
    assert observed.sum() == n  # no value outside the row
    expected = np.array([dist[j] * n for j in values])
    keep = expected >= 5  # pool the rare values: chi-square needs enough expected counts
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    if len(obs) == 1:
        return
    exp = exp * obs.sum() / exp.sum()
    assert stats.chisquare(obs, exp).pvalue > 1e-4


def test_identical_rows_share_one_lookup_row():
    q = drop_add_q(0.01, 7)
    assert len(q.rows) == 602
    assert q._values.shape[0] == 8  # rows for q = 0 .. 7


# -- privacy figures ----------------------------------------------------------------------


def test_privacy_figures_by_brute_force_on_a_small_table():
    # Count 0 stays 0; counts >= 1 move by -1, 0, +1 with 0.3, 0.4, 0.3.
    table = read_ptable(DATA / "destatis_D1.csv")
    pair0 = table.pair_privacy(0)
    # P_0 = {0: 1}, P_1 = {0: .3, 1: .4, 2: .3}: ratio log(1/.3); only P_1 reaches 1, 2.
    assert pair0.max_log_ratio == pytest.approx(math.log(1 / 0.3))
    assert pair0.unbounded_mass == pytest.approx(0.7)
    assert pair0.delta == pytest.approx(0.7)
    # P_1 vs P_2 = {1: .3, 2: .4, 3: .3}: ratios .4/.3 at 1 and .3/.4 at 2.
    pair1 = table.pair_privacy(1, epsilon=0.0)
    assert pair1.max_log_ratio == pytest.approx(math.log(4 / 3))
    assert pair1.delta == pytest.approx(0.3 + 0.1)  # total variation distance
    fig = table.privacy()
    assert fig.epsilon == pytest.approx(math.log(1 / 0.3))
    assert fig.delta == pytest.approx(0.7) and fig.worst_count == 0


def test_share_changed_and_variance_per_row():
    table = read_ptable(DATA / "destatis_D1.csv")
    assert table.share_changed() == pytest.approx([0.0, 0.6])
    assert table.variance() == pytest.approx([0.0, 0.6])
    assert table.row_labels() == ["0", ">=1"]


def test_describe_is_public_and_json_friendly():
    import json

    desc = dp_geometric(2, cap=7).describe()
    assert desc["name"] == "dp" and desc["epsilon"] == 2.0 and desc["cap"] == 7
    assert desc["delta"] == pytest.approx(6.33e-7, rel=1e-3)
    json.dumps(desc)


def test_transition_matrix():
    m = read_ptable(DATA / "destatis_D1.csv").transition_matrix(3)
    np.testing.assert_allclose(m, [[1, 0, 0], [0.3, 0.4, 0.3], [0, 0.3, 0.7]])


# -- construction errors ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rows": [([0, 1], [0.5, 0.6])]}, "sum to"),
        ({"rows": [([0, 1], [1.5, -0.5])]}, "non-negative"),
        ({"rows": [([0], [1.0]), ([-2, 0], [0.5, 0.5])]}, "negative"),
        ({"rows": [([0.5], [1.0])]}, "integers"),
        ({"rows": []}, "at least one row"),
        ({"rows": [([0], [1.0])], "selector": "loop", "loop_start": 3}, "loop"),
    ],
)
def test_bad_rows(kwargs, message):
    with pytest.raises(ParameterError, match=message):
        PTable.from_rows("x", **kwargs)


# -- files -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["destatis_D1.csv", "tauargus_D1.csv", "sas_D1.csv", "headerless_D1.txt", "rownames_D1.csv"],
)
def test_files_of_the_r_package_and_its_exports_load(name):
    table = read_ptable(DATA / name)
    for count, dist in D1.items():
        assert table.distribution(count) == pytest.approx(dist)
    # The lookup follows the file's intervals: u < 0.3 -> -1, 0.3 <= u < 0.7 -> 0, else +1.
    u = np.array([0.0, 0.2999, 0.3, 0.6999, 0.7, 0.9999])
    assert table.perturbation(np.full(6, 4), u).tolist() == [-1, -1, 0, 0, 1, 1]


def test_modified_ptable_keeps_its_interval_order():
    # modify_cnt_ptable splits and rearranges intervals: v = 0 appears twice.
    table = read_ptable(DATA / "modified_D1.csv")
    assert table.distribution(1) == pytest.approx({0: 0.3, 1: 0.4, 2: 0.3})
    u = np.array([0.1, 0.3, 0.6, 0.9])
    assert table.perturbation(np.full(4, 7), u).tolist() == [0, 1, -1, 0]
    again = parse_ptable(ptable_csv(table))
    assert again.perturbation(np.full(4, 7), u).tolist() == [0, 1, -1, 0]


def test_residue_extension_reads_and_round_trips():
    table = read_ptable(DATA / "pram_residue.csv")
    assert table.selector == "residue" and table.modulus == 2
    # Residue 0: v = 0 or -1 (written j = m - v = 1); residue 1: v = 0 or +1 (j = 0).
    assert table.distribution(4) == pytest.approx({4: 0.9, 3: 0.1})
    assert table.distribution(5) == pytest.approx({5: 0.9, 6: 0.1})
    again = parse_ptable(ptable_csv(table))
    for c in range(8):
        assert again.distribution(c) == pytest.approx(table.distribution(c))


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("bad_sum.csv", "sum to 0.9"),
        ("bad_gap.csv", "gap or overlap"),
        ("bad_columns.csv", "expected the columns"),
        ("magnitude_even.csv", "magnitude tables"),
        ("does_not_exist.csv", "cannot read"),
    ],
)
def test_malformed_files(name, message):
    with pytest.raises(FormatError, match=message):
        read_ptable(DATA / name)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("i,j,p\n0,0,1\n1,x,1\n", "not a number"),
        ("i,j,p\n0,0,1\n2,2,1\n", "missing"),
        ("i,j,v,p\n0,0,0,1\n1,2,0,1\n", "has v=0, not 1"),
        ("i,j,p,p_int_lb,p_int_ub\n0,0,0.5,0,1\n", "has width"),
        ("1 2 3\n", "without a header"),
        ("i,j,p\n0,0,1\n1,1\n", "fields"),
        ("pcv,ckey,pvalue\n1,0,0\n", "power-of-two"),
        ("pcv,ckey,pvalue\n1,0,0\n1,1,0\n2,0,0\n", "does not have cell keys"),
        ("pcv,ckey,pvalue\n751,0,0\n751,1,0\n", "outside 0 .. 750"),
        ("pcv,ckey,pvalue\n1,0,-2\n1,1,0\n", "negative"),
    ],
)
def test_malformed_text(text, message):
    with pytest.raises(FormatError, match=message):
        parse_ptable(text)


@pytest.mark.parametrize(
    "table",
    [dp_geometric(1.5, cap=5), pram_shlomo_young(), destatis(3, 1.5), drop_add_q(0.01, 7)],
    ids=["dp", "pram", "ckm", "q"],
)
def test_destatis_layout_round_trip(table, tmp_path):
    path = write_ptable(table, tmp_path / "p.csv")
    assert path.read_text().splitlines()[0] == "i,j,p,v,p_int_lb,p_int_ub,type"
    again = read_ptable(path)
    for count in (0, 1, 2, 5, 9, 40, 600, 601, 1234):
        a, b = table.distribution(count), again.distribution(count)
        assert a.keys() == b.keys()
        for j in a:
            assert a[j] == pytest.approx(b[j], abs=1e-14)
    rng = np.random.default_rng(0)
    c, u = rng.integers(0, 2000, 5000), rng.random(5000)
    np.testing.assert_array_equal(table.perturbation(c, u), again.perturbation(c, u))


def test_ons_file_loads_with_the_ons_rules():
    table = read_ptable(DATA / "ons_small.csv")
    assert table.sampled is not None and table.sampled.shape == (751, 256)
    keys = np.array([0, 63, 64, 255, 256 + 63, 2**32 - 1], dtype=np.uint32)
    # Count 1: -1 for cell keys 0..63 (mod 256), else 0.
    assert table.perturbation(np.ones(6, dtype=int), np.full(6, 0.5), keys).tolist() == [
        -1,
        -1,
        0,
        0,
        -1,
        0,
    ]
    # Count 0 (no row in the file) and counts 4..750 (no rows) are not perturbed; nor are
    # counts above 750 that loop onto the absent rows 501..750.
    for c in (0, 4, 750, 751, 1003):
        assert (
            table.perturbation(np.full(256, c), np.full(256, 0.5), np.arange(256)).tolist()
            == [0] * 256
        )
    # Without cell keys (dynamic seeds) the column is floor(u * 256).
    assert table.perturbation(np.array([3, 3]), np.array([0.5, 255.5 / 256])).tolist() == [0, -1]


@pytest.mark.parametrize("keys", [256, pytest.param(4096, marks=pytest.mark.system)])
def test_abs_layout_conversion_and_round_trip(keys, tmp_path):
    table = destatis(3, 1.0)
    path = write_ptable(table, tmp_path / "abs.csv", "abs", keys=keys)
    assert path.read_text().splitlines()[:2] == ["pcv,ckey,pvalue", "0,0,0"]
    sampled = read_ptable(path)
    assert sampled.sampled is not None and sampled.sampled.shape == (751, keys)
    # Column k of count i is the v whose interval holds (k + 0.5) / keys.
    mid = (np.arange(keys) + 0.5) / keys
    for count in (1, 2, 3, 500, 750):
        np.testing.assert_array_equal(
            sampled.sampled[count], table.perturbation(np.full(keys, count), mid)
        )
    # Shares of the cell keys approximate p within 1 / keys per value.
    for count in (1, 3):
        for j, p in table.distribution(count).items():
            assert sampled.distribution(count).get(j, 0.0) == pytest.approx(p, abs=1 / keys)
    # Cell keys select the column exactly; counts above 750 loop onto 501..750.
    ck = np.array([0, 1, keys - 1, keys, 2**32 - 1], dtype=np.uint32)
    for count in (5, 751, 10**6):
        got = sampled.perturbation(np.full(5, count), np.full(5, 0.5), ck)
        np.testing.assert_array_equal(got, sampled.sampled[3, ck.astype(np.int64) % keys])
    # A sampled table written again is the same file.
    assert parse_ptable(ptable_csv(sampled, "abs", keys=keys)).sampled.tolist() == (
        sampled.sampled.tolist()
    )


def test_layouts_a_ptable_cannot_fill_raise(tmp_path):
    with pytest.raises(ParameterError, match="residue rows"):
        ptable_csv(pram_shlomo_young(), "abs")
    # q's rows change up to count 601; the ONS loop would give 751..850 the rows of 501..600.
    with pytest.raises(ParameterError, match="above count 501"):
        write_ptable(drop_add_q(0.01, 7), tmp_path / "q.csv", "abs")
    assert not (tmp_path / "q.csv").exists()
    assert drop_add_q(0.02, 7).to_sampled().sampled is not None  # rows constant from 301
    with pytest.raises(ParameterError, match="power of two"):
        ptable_csv(dp_geometric(2), "abs", keys=100)
    with pytest.raises(ParameterError, match="unknown layout"):
        ptable_csv(dp_geometric(2), "tau")  # type: ignore[arg-type]
    # An ONS table whose loop rows differ cannot be written as a Destatis table...
    rows = [f"{c},{k},{(k % 2) * (1 if c % 2 else -1)}" for c in range(1, 751) for k in range(2)]
    varying = parse_ptable("pcv,ckey,pvalue\n" + "\n".join(rows))
    with pytest.raises(ParameterError, match="loop start"):
        ptable_csv(varying, "destatis")
    # ... but one with constant rows above 501 can (the ONS file's rows 4..750 are all 0).
    ons = read_ptable(DATA / "ons_small.csv")
    as_destatis = parse_ptable(ptable_csv(ons, "destatis"))
    for c in (0, 1, 2, 3, 4, 1000):
        assert as_destatis.distribution(c) == pytest.approx(ons.distribution(c))


def test_cell_key_tables_equal_the_ons_package(tmp_path, make_dataset):
    """Given the same record keys and ptable, tablesafe's table equals the ONS tool's."""
    import cell_key_perturbation.create_perturbed_table as ons
    import pandas as pd

    from tablesafe._builder import Protection, TableBuilder
    from tablesafe._request import TableRequest

    rng = np.random.default_rng(5)
    n = 40_000
    frame = pd.DataFrame(
        {
            "A": rng.choice([1, 2, 3], n, p=[0.5, 0.3, 0.2]),
            "B": rng.choice(list("xyzw"), n),
            "C": rng.integers(0, 10, n),
            "D": rng.integers(1, 3, n),
            "E": rng.choice([10, 20, 30], n),
            "W": np.ones(n),
            "RKEY": rng.integers(0, 256, n).astype(np.uint32),  # ONS record keys are 0..255
            **{f"R{r}": np.ones(n) for r in range(1, 5)},
        }
    )
    # Some cells above 750 records, to exercise the loop onto rows 501..750.
    dataset = make_dataset(frame)
    path = tablesafe_file = tmp_path / "ptable.csv"
    write_ptable(destatis(4, 2.0), tablesafe_file, "abs")  # tablesafe writes, ONS reads
    theirs = ons.create_perturbed_table(
        data=frame.assign(B=frame["B"].astype(str)),
        ptable=pd.read_csv(path),
        geog=[],
        tab_vars=["A", "B", "D"],
        record_key="RKEY",
        threshold=0,
    )
    ours = TableBuilder(dataset, Protection(read_ptable(path))).build(
        TableRequest(("A", "B", "D"), statistic="count", margins="none")
    )
    frame_ours = ours.to_frame().set_index(["A", "B", "D"])["n"]
    merged = theirs.set_index(["A", "B", "D"])["count"].astype(int)
    assert (theirs["pre_sdc_count"] > 750).any()
    assert (theirs["pvalue"] != 0).any()
    for key, value in merged.items():
        assert frame_ours.loc[key] == value, key


# -- command line ------------------------------------------------------------------------------


def test_cli_ptable_write_and_show(tmp_path):
    from click.testing import CliRunner

    from tablesafe._cli import get_app

    runner = CliRunner()
    out = tmp_path / "dp.csv"
    result = runner.invoke(get_app(), ["ptable", "dp", "--epsilon", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "delta 6.33e-07" in result.output
    again = read_ptable(out)
    assert again.distribution(20) == pytest.approx(dp_geometric(2).distribution(20))
    shown = runner.invoke(get_app(), ["ptable", "show", str(out)])
    assert shown.exit_code == 0, shown.output
    assert "P(v != 0)" in shown.output and ">=7" in shown.output

    pram_out = tmp_path / "pram.csv"
    assert runner.invoke(get_app(), ["ptable", "pram", "--out", str(pram_out)]).exit_code == 0
    text = pram_out.read_text()
    assert "\n6,5,0.22227" in text and ",mod15\n" in text  # row 6 by value, residue rows
    shown = runner.invoke(get_app(), ["ptable", "show", str(pram_out), "--rows", "30"])
    assert "mod 15 = 14" in shown.output

    abs_out = tmp_path / "abs.csv"
    args = ["ptable", "destatis", "--D", "3", "--V", "1", "--layout", "abs", "--keys", "256"]
    assert runner.invoke(get_app(), [*args, "--out", str(abs_out)]).exit_code == 0
    assert abs_out.read_text().splitlines()[0] == "pcv,ckey,pvalue"
    shown = runner.invoke(get_app(), ["ptable", "show", str(abs_out)])
    assert "256 cell keys" in shown.output

    q_out = tmp_path / "q.csv"
    assert runner.invoke(get_app(), ["ptable", "q", "--out", str(q_out)]).exit_code == 0
    assert read_ptable(q_out).distribution(1) == pytest.approx({0: 1 / 3, 1: 1 / 3, 2: 1 / 3})

    bad = runner.invoke(get_app(), ["ptable", "dp", "--epsilon", "-1", "--out", str(out)])
    assert bad.exit_code != 0 and isinstance(bad.exception, ParameterError)
    bad = runner.invoke(get_app(), ["ptable", "dp", "--layout", "xls", "--out", str(out)])
    assert bad.exit_code != 0 and "unknown layout" in str(bad.exception)
    assert runner.invoke(get_app(), ["ptable"]).exit_code in (0, 2)  # help
