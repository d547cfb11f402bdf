"""Perturbation tables: the printed tables of seed 000, distributions, files, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from tablesafe._errors import FormatError, ParameterError
from tablesafe._ptable import PTable
from tablesafe.mechanisms import (
    PRAM_LARGE,
    PRAM_SMALL,
    destatis,
    dp_geometric,
    drop_add_q,
    invariant_matrix,
    pram_shlomo_young,
)

TABLE_1 = {
    -7: 0.000000633,
    -6: 0.000004679,
    -5: 0.000034576,
    -4: 0.000255486,
    -3: 0.001887804,
    -2: 0.013949,
    -1: 0.10307,
    0: 0.76159,
    1: 0.10307,
    2: 0.013949,
    3: 0.001887804,
    4: 0.000255486,
    5: 0.000034576,
    6: 0.000004679,
    7: 0.000000633,
}


def digits(x: float) -> int:
    text = f"{x:.9f}".rstrip("0")
    return len(text.split(".")[1])


def test_table_1_dp_probabilities_to_the_printed_digits():
    v, p = dp_geometric(2, cap=7).rows[-1]
    got = dict(zip(v.tolist(), p.tolist(), strict=True))
    for value, printed in TABLE_1.items():
        assert round(got[value], digits(printed)) == pytest.approx(printed, abs=1e-12), value


def test_dp_privacy_figures_match_the_paper():
    fig = dp_geometric(2, cap=7).privacy()
    assert fig.epsilon == 2.0
    assert f"{fig.delta:.3g}" == "6.33e-07"


def test_dp_negative_results_are_set_to_zero():
    table = dp_geometric(2, cap=7)
    dist = table.distribution(1)
    assert min(dist) == 0
    assert dist[0] == pytest.approx(sum(p for v, p in TABLE_1.items() if v <= -1), abs=1e-6)


def test_table_2_and_3_pram_matrices_as_printed():
    # The matrices hold the printed values; the ptable normalises each row
    # (printed rows sum to 1 within 1.5e-5), so its rows match within 2e-5.
    assert PRAM_SMALL[1].tolist() == [
        0.11920,
        0.76160,
        0.10308,
        0.01395,
        0.00189,
        0.00026,
        3.46e-05,
    ]
    assert PRAM_SMALL[6].tolist() == [
        5.31e-06,
        3.46e-05,
        0.00026,
        0.00189,
        0.01395,
        0.22227,
        0.76160,
    ]
    assert PRAM_LARGE[0, :8].tolist() == [
        0.76160,
        0.22227,
        0.01395,
        0.00189,
        0.00026,
        3.46e-05,
        4.68e-06,
        6.33e-07,
    ]
    assert PRAM_LARGE[14, 6:].tolist() == [
        0,
        6.33e-07,
        4.68e-06,
        3.46e-05,
        0.00026,
        0.00189,
        0.01395,
        0.22227,
        0.76160,
    ]
    assert PRAM_LARGE[9, 10] == 0.10308 and PRAM_LARGE[3, 2] == 0.10337
    pram = pram_shlomo_young()
    for i in range(7):
        dist = pram.distribution(i)
        for j in range(7):
            printed = PRAM_SMALL[i, j]
            assert dist.get(j, 0.0) == pytest.approx(printed, abs=2e-5)
    # Row 1 of Table 2 folds all negative geometric mass into 0.
    assert PRAM_SMALL[1, 0] == pytest.approx(sum(p for v, p in TABLE_1.items() if v < 0), abs=5e-6)
    # Large counts: residue m = c mod 15, perturbation p = m - w.
    for count in (7, 15, 23, 44, 1000):
        m = count % 15
        dist = pram.distribution(count)
        for w in range(15):
            assert dist.get(count + (m - w), 0.0) == pytest.approx(PRAM_LARGE[m, w], abs=2e-5)


def test_invariant_pram_matrix_keeps_frequencies():
    rng = np.random.default_rng(4)
    m = PRAM_SMALL / PRAM_SMALL.sum(axis=1, keepdims=True)
    for _ in range(20):
        t = rng.integers(0, 200, 7).astype(float)
        star = invariant_matrix(m, t)
        np.testing.assert_allclose(t @ star, t, atol=1e-8)
        np.testing.assert_allclose(star.sum(axis=1), 1, atol=1e-10)
        assert (star >= -1e-12).all()


def test_drop_add_q_rows():
    q = drop_add_q(rate=0.01, cap=7)
    assert q.distribution(0) == {0: 1.0}
    assert q.distribution(1) == pytest.approx({0: 1 / 3, 1: 1 / 3, 2: 1 / 3})
    assert sorted(q.distribution(198)) == [196, 197, 198, 199, 200]
    assert len(q.distribution(10_000)) == 15


def test_destatis_rows_are_unbiased_with_the_variance():
    table = destatis(3, 1.0)
    for i in range(1, 8):
        dist = table.distribution(i)
        mean = sum((j - i) * p for j, p in dist.items())
        var = sum((j - i) ** 2 * p for j, p in dist.items())
        assert mean == pytest.approx(0, abs=1e-6) and var == pytest.approx(1.0, abs=1e-6)
        assert max(abs(j - i) for j in dist) <= 3
    with_js = destatis(3, 1.08, js=1)
    for i in range(1, 10):
        assert 1 not in with_js.distribution(i)


@pytest.mark.parametrize(
    "table",
    [dp_geometric(2, cap=7), pram_shlomo_young(), drop_add_q(0.05, 5), destatis(4, 2.0)],
    ids=["dp", "pram", "q", "ckm"],
)
def test_empirical_distribution_matches_the_ptable(table):
    rng = np.random.default_rng(12)
    n = 1_000_000
    count = 23
    v = table.perturbation(np.full(n, count), rng.random(n))
    dist = table.distribution(count)
    values = sorted(dist)
    observed = np.array([(v + count == j).sum() for j in values])
    expected = np.array([dist[j] * n for j in values])
    keep = expected >= 5  # chi-square needs enough expected counts per cell
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    exp = exp * obs.sum() / exp.sum()
    assert stats.chisquare(obs, exp).pvalue > 1e-4


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: dp_geometric(0), "epsilon"),
        (lambda: dp_geometric(-1), "epsilon"),
        (lambda: dp_geometric(1, cap=0), "cap"),
        (lambda: drop_add_q(rate=2), "rate"),
        (lambda: destatis(0, 1), "D"),
        (lambda: destatis(2, 5), "below D"),
        (lambda: PTable.from_rows("x", [([0, 1], [0.5, 0.6])]), "sum to"),
    ],
)
def test_bad_parameters(call, message):
    with pytest.raises(ParameterError, match=message):
        call()


@pytest.mark.parametrize(
    "table",
    [dp_geometric(1.5, cap=5), pram_shlomo_young(), destatis(3, 1.5)],
    ids=["dp", "pram", "ckm"],
)
def test_destatis_layout_round_trip(table, tmp_path):
    path = table.write_csv(tmp_path / "p.csv")
    again = PTable.read_csv(path)
    for count in (0, 1, 2, 5, 9, 40, 1234):
        a, b = table.distribution(count), again.distribution(count)
        assert a.keys() == b.keys()
        for j in a:
            assert a[j] == pytest.approx(b[j], abs=1e-12)
    header = path.read_text().splitlines()[0]
    assert header == "i,j,p,v,p_int_lb,p_int_ub,type"


def test_abs_layout_round_trip_and_cell_key_lookup(tmp_path):
    table = destatis(3, 1.0)
    path = tmp_path / "abs.csv"
    path.write_text(table.to_csv("abs"))
    sampled = PTable.read_csv(path)
    assert sampled.sampled is not None and sampled.sampled.shape[1] == 256
    keys = np.array([0, 1, 255, 256, 2**32 - 1], dtype=np.uint32)
    counts = np.array([5, 5, 5, 5, 5])
    v = sampled.perturbation(counts, np.full(5, 0.5), cell_key=keys)
    # The integer cell key mod 256 picks the column, as the ABS method does.
    np.testing.assert_array_equal(
        v, sampled.sampled[np.minimum(counts, 3), keys.astype(np.int64) % 256]
    )
    assert v[0] == v[3]


def test_abs_ptable_loops_large_counts(tmp_path):
    rows = ["pcv,ckey,pvalue"]
    for c in range(751):
        for k in range(256):
            rows.append(f"{c},{k},{(c + k) % 3 - 1 if c else 0}")
    path = tmp_path / "ons.csv"
    path.write_text("\n".join(rows) + "\n")
    table = PTable.read_csv(path)
    idx = table.row_index(np.array([750, 751, 752, 1001]))
    assert idx.tolist() == [750, 501, 502, 501]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a,b\n1,2\n", "expected the columns"),
        ("i,j,p\n0,0,1\n1,0,0.5\n1,1,0.4\n", "sum to"),
        ("i,j,p\n0,0,1\n1,x,1\n", "malformed"),
        ("pcv,ckey,pvalue\n0,0,0\n", "cell keys"),
        ("i,j,p\n0,0,1\n2,2,1\n", "missing"),
    ],
)
def test_malformed_ptable_files(text, message):
    with pytest.raises(FormatError, match=message):
        PTable.from_csv_text(text)


def test_share_changed_and_variance():
    table = dp_geometric(2, cap=7)
    assert table.share_changed()[-1] == pytest.approx(1 - 0.761594, abs=1e-6)
    v, p = table.rows[-1]
    assert table.variance()[-1] == pytest.approx(float((v * v * p).sum()))


def test_cli_ptable_write_and_show(tmp_path):
    from typer.testing import CliRunner

    from tablesafe._cli import get_app

    runner = CliRunner()
    out = tmp_path / "dp.csv"
    result = runner.invoke(get_app(), ["ptable", "dp", "--epsilon", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "delta 6.33e-07" in result.output
    again = PTable.read_csv(out)
    assert again.distribution(20) == pytest.approx(dp_geometric(2).distribution(20))
    shown = runner.invoke(get_app(), ["ptable", "show", str(out)])
    assert shown.exit_code == 0 and "P(v != 0)" in shown.output
    abs_out = tmp_path / "abs.csv"
    assert (
        runner.invoke(
            get_app(),
            [
                "ptable",
                "destatis",
                "--D",
                "3",
                "--V",
                "1",
                "--layout",
                "abs",
                "--out",
                str(abs_out),
            ],
        ).exit_code
        == 0
    )
    assert abs_out.read_text().splitlines()[0] == "pcv,ckey,pvalue"
    bad = runner.invoke(get_app(), ["ptable", "dp", "--epsilon", "-1", "--out", str(out)])
    assert bad.exit_code != 0


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
    path = tmp_path / "ptable.csv"
    path.write_text(destatis(4, 2.0).to_csv("abs"))
    ptable_frame = pd.read_csv(path)
    ptable_frame = ptable_frame[ptable_frame["pcv"] >= 1]  # ONS ptables start at 1
    theirs = ons.create_perturbed_table(
        data=frame.assign(B=frame["B"].astype(str)),
        ptable=ptable_frame,
        geog=[],
        tab_vars=["A", "B", "D"],
        record_key="RKEY",
        threshold=0,
    )
    ptable_frame.to_csv(path, index=False)
    ours = TableBuilder(dataset, Protection(PTable.read_csv(path))).build(
        TableRequest(("A", "B", "D"), statistic="count", margins="none")
    )
    frame_ours = ours.to_frame().set_index(["A", "B", "D"])["n"]
    merged = theirs.set_index(["A", "B", "D"])["count"].astype(int)
    assert (theirs["pre_sdc_count"] > 750).any()
    assert (theirs["pvalue"] != 0).any()
    for key, value in merged.items():
        assert frame_ours.loc[key] == value, key


def test_headerless_tau_argus_export_loads():
    table = destatis(3, 1.0)
    lines = [" ".join(r.split(",")[:6]) for r in table.to_csv().splitlines()[1:]]
    again = PTable.from_csv_text("\n".join(lines) + "\n")
    for count in (0, 1, 2, 3, 17):
        assert again.distribution(count) == pytest.approx(table.distribution(count))


def test_a_ptable_written_by_the_ons_package_loads(tmp_path):
    from cell_key_perturbation.utils.generate_test_ptable import generate_ptable_10_5_rule

    path = tmp_path / "ons_10_5.csv"
    generate_ptable_10_5_rule().to_csv(path, index=False)
    table = PTable.read_csv(path)
    # The 10-5 rule: counts below 10 become 0, others are rounded to base 5.
    keys = np.arange(4, dtype=np.uint32)
    assert (table.perturbation(np.full(4, 7), np.full(4, 0.5), cell_key=keys) == -7).all()
    assert (table.perturbation(np.full(4, 23), np.full(4, 0.5), cell_key=keys) == 2).all()
    assert table.distribution(0) == {0: 1.0}
