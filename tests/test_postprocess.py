"""Post-processing (Langsrud 2019): the worked Tables 2-7, brute force and invariants."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from tablesafe._errors import ParameterError
from tablesafe.postprocess import (
    all_margins,
    design_matrix,
    estimate_suppressed,
    laplace_margins,
    least_absolute_deviation,
    loglinear_refit,
    method_a,
    method_b,
    method_c,
    multinomial_round,
    multinomial_sample,
    stochastic_round,
    synthetic_microdata,
)

TABLE_1 = np.array([[3, 6, 2], [1, 4, 7], [5, 8, 27]], dtype=float)
TOTALS = [(0,), (1,), ()]  # row totals, column totals, overall total: z has 7 elements


def design():
    return design_matrix((3, 3), TOTALS)


def test_design_matrix_is_sparse_and_sums_margins():
    d = design()
    assert d.x.shape == (9, 7)
    assert d.x.nnz == 27
    assert d.margins(TABLE_1).tolist() == [11, 12, 40, 9, 18, 36, 63]
    # All two-way margins of a 4-way table, and dropping zero rows.
    d4 = design_matrix((2, 3, 2, 2), all_margins(4, order=2, total=False))
    y = np.arange(24, dtype=float).reshape(2, 3, 2, 2)
    assert np.allclose(d4.margins(y)[:6], y.sum(axis=(2, 3)).ravel())
    keep = y.ravel() > 0
    assert design_matrix((2, 3, 2, 2), [(0,)], keep=keep).x.shape == (23, 2)


def test_groupings_add_group_sums():
    d = design_matrix((4, 2), [(0,)], groupings={0: [[0, 1], [2, 3]]})
    y = np.arange(8, dtype=float).reshape(4, 2)
    z = d.margins(y)
    assert z[-2:].tolist() == [y[:2].sum(), y[2:].sum()]


def test_table_2_suppressed_cells_as_decimals():
    ext = np.zeros((4, 4))
    ext[:3, :3] = TABLE_1
    ext[:3, 3], ext[3, :3], ext[3, 3] = TABLE_1.sum(1), TABLE_1.sum(0), TABLE_1.sum()
    ext[0, 0] = ext[0, 2] = ext[1, 0] = ext[1, 2] = np.nan
    est = estimate_suppressed(ext, TOTALS)
    np.testing.assert_allclose(est[:2, [0, 2]], [[1.250, 3.750], [2.750, 5.250]], atol=5e-4)
    noisy = estimate_suppressed(ext, TOTALS, rmse=1.234, rng=np.random.default_rng(2))
    np.testing.assert_allclose(noisy.sum(0), [9, 18, 36], atol=1e-9)
    np.testing.assert_allclose(noisy.sum(1), [11, 12, 40], atol=1e-9)
    r = (noisy - est)[:2, [0, 2]]
    assert np.sqrt(np.mean(r**2)) == pytest.approx(1.234)
    np.testing.assert_array_equal(noisy[2], TABLE_1[2])


def test_table_3_method_a_and_non_negative_method_b():
    z = design().margins(TABLE_1)
    a = method_a(design(), z)
    np.testing.assert_allclose(
        a, [[-0.333, 2.667, 8.667], [0.000, 3.000, 9.000], [9.333, 12.333, 18.333]], atol=5e-4
    )
    b = method_b(design(), z)
    np.testing.assert_allclose(b, [[0.0, 2.5, 8.5], [0.0, 3.0, 9.0], [9.0, 12.5, 18.5]], atol=5e-4)


def test_method_a_equals_the_dense_pseudo_inverse():
    rng = np.random.default_rng(1)
    d = design_matrix((4, 3, 2), all_margins(3, order=2))
    z = d.margins(rng.poisson(5, (4, 3, 2))) + rng.normal(0, 1, d.x.shape[1])
    dense = np.linalg.pinv(d.x.toarray().T) @ z
    np.testing.assert_allclose(method_a(d, z).ravel(), dense, atol=1e-8)


def test_table_4_loglinear_fit():
    fit = loglinear_refit(TABLE_1, [(0,), (1,)])
    np.testing.assert_allclose(
        fit,
        [[1.571, 3.143, 6.286], [1.714, 3.429, 6.857], [5.714, 11.429, 22.857]],
        atol=5e-4,
    )


def test_table_5_perturbed_totals_then_loglinear():
    z = np.array([11, 13, 45, 11, 18, 38, 61.0])  # the perturbed totals in brackets
    b = method_b(design(), z)
    np.testing.assert_allclose(
        b, [[0.0, 1.300, 7.967], [0.0, 2.300, 8.967], [9.933, 13.333, 20.000]], atol=5e-4
    )
    assert design().margins(b)[-1] == pytest.approx(63.8, abs=5e-4)
    refit = loglinear_refit(b, [(0,), (1,)])
    np.testing.assert_allclose(
        refit,
        [[1.443, 2.459, 5.364], [1.754, 2.990, 6.522], [6.736, 11.484, 25.047]],
        atol=5e-4,
    )


def test_table_6_laplace_totals_without_overall_total():
    d = design_matrix((3, 3), [(0,), (1,)])
    z = np.array([19.757, 14.542, 40.470, -2.429, 25.266, 34.867])
    b = method_b(d, z)
    np.testing.assert_allclose(
        b, [[0.0, 6.856, 10.056], [0.0, 4.249, 7.449], [0.415, 17.005, 20.205]], atol=1.5e-3
    )
    refit = loglinear_refit(b, [(0,), (1,)])
    np.testing.assert_allclose(refit[:, 0], [0.106, 0.073, 0.236], atol=1.5e-3)


def test_table_7_method_c_exact_rows_weighted_up():
    z = np.array([11, 12, 40, 3.286, 21.633, 35.433, 63.0])
    w = np.array([1000, 1000, 1000, 1, 1, 1, 1000.0])
    c = method_c(design(), z, w)
    np.testing.assert_allclose(
        c, [[0.0, 3.200, 7.800], [0.0, 3.700, 8.300], [4.168, 15.616, 20.216]], atol=5e-4
    )
    np.testing.assert_allclose(c.sum(1), [11, 12, 40], atol=0.01)
    refit = loglinear_refit(c, [(0,), (1,)])
    # 2.6467 against the printed 2.646: within one unit of the last printed digit.
    np.testing.assert_allclose(refit[2], [2.646, 14.296, 23.058], atol=1e-3)


def test_scalable_solver_agrees_with_the_exact_one():
    z = np.array([11, 13, 45, 11, 18, 38, 61.0])
    exact = method_b(design(), z, exact=True)
    large = method_b(design(), z, exact=False, tol=1e-12)
    np.testing.assert_allclose(large, exact, atol=1e-3)


def test_least_absolute_deviation_is_exact_on_consistent_margins():
    z = design().margins(TABLE_1)
    lad = least_absolute_deviation(design(), z)
    assert (lad >= 0).all()
    np.testing.assert_allclose(design().margins(lad), z, atol=1e-7)


def test_laplace_margins_have_scale_k_over_epsilon():
    rng = np.random.default_rng(7)
    noise = laplace_margins(np.zeros(200_000), k=2, epsilon=0.5, rng=rng)
    assert stats.kstest(noise, stats.laplace(scale=4).cdf).pvalue > 1e-4
    with pytest.raises(ParameterError):
        laplace_margins([1.0], k=0, epsilon=1)
    with pytest.raises(ParameterError):
        laplace_margins([1.0], k=1, epsilon=0)


def test_rounding_and_synthetic_microdata():
    rng = np.random.default_rng(3)
    y = method_b(design(), np.array([11, 13, 45, 11, 18, 38, 61.0]))
    draws = np.stack([stochastic_round(y, rng) for _ in range(4000)])
    np.testing.assert_allclose(draws.mean(axis=0), y, atol=0.05)  # unbiased
    assert (np.abs(draws - y) < 1).all()
    m = multinomial_round(y, rng)
    assert m.sum() == round(y.sum()) and (np.abs(m - y) < 1).all()
    micro = synthetic_microdata(m, {"ROW": ["r1", "r2", "r3"], "COL": [1, 2, 3]}, rng)
    assert len(micro) == m.sum()
    assert micro.groupby(["ROW", "COL"]).size().sum() == m.sum()
    assert (micro[(micro["ROW"] == "r3") & (micro["COL"] == 3)].shape[0]) == m[2, 2]
    sample = multinomial_sample(y, 1000, rng)
    assert sample.sum() == 1000 and sample[0, 0] == 0


def test_bad_input():
    with pytest.raises(ParameterError, match="elements"):
        method_a(design(), [1, 2, 3])
    with pytest.raises(ParameterError, match="outside"):
        design_matrix((3, 3), [(2,)])
    with pytest.raises(ParameterError):
        method_c(design(), np.ones(7), np.zeros(7))
    with pytest.raises(ParameterError):
        stochastic_round([-1.0])


def test_cli_fit_from_a_long_csv(tmp_path):
    from click.testing import CliRunner

    from tablesafe._cli import get_app

    path = tmp_path / "t.csv"
    path.write_text(
        "R,C,n\n1,a,3\n1,_T,11\n2,_T,13\n3,_T,45\n_T,a,11\n_T,b,18\n_T,c,38\n_T,_T,61\n1,b,6\n2,a,1\n"
        "3,b,8\n1,c,2\n2,b,4\n2,c,7\n3,a,5\n3,c,27\n"
    )
    result = CliRunner().invoke(get_app(), ["postprocess", "fit", str(path), "--method", "B"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0] == "R,C,n"
    values = {tuple(line.split(",")[:2]): float(line.split(",")[2]) for line in lines[1:]}
    assert values[("3", "a")] == pytest.approx(9.933, abs=5e-4)
    rounded = CliRunner().invoke(
        get_app(), ["postprocess", "fit", str(path), "--round", "multinomial", "--seed", "1"]
    )
    total = sum(int(line.split(",")[2]) for line in rounded.output.strip().splitlines()[1:])
    assert total == round(63.8)
    bad = CliRunner().invoke(get_app(), ["postprocess", "fit", str(path), "--value", "x"])
    assert bad.exit_code != 0
