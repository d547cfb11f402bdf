"""Constructors of cell-wise mechanisms: seed 000 Tables 1-4, invariant PRAM, the Destatis ptable."""

from __future__ import annotations

import itertools
import math
from decimal import Decimal

import numpy as np
import pytest

from tablesafe._errors import ComputationError, ParameterError
from tablesafe.mechanisms import (
    PRAM_LARGE,
    PRAM_SMALL,
    destatis,
    dp_geometric,
    drop_add_q,
    geometric_probabilities,
    invariant_matrix,
    pram_matrices,
    pram_shlomo_young,
)

#: Seed 000 Table 1, as printed (strings keep the printed digits).
TABLE_1 = {
    -7: "0.000000633",
    -6: "0.000004679",
    -5: "0.000034576",
    -4: "0.000255486",
    -3: "0.001887804",
    -2: "0.013949",
    -1: "0.10307",
    0: "0.76159",
    1: "0.10307",
    2: "0.013949",
    3: "0.001887804",
    4: "0.000255486",
    5: "0.000034576",
    6: "0.000004679",
    7: "0.000000633",
}


def half_unit(printed: float) -> float:
    """Half a unit in the last printed digit: 5 decimals, or 3 significant digits in E notation."""
    if printed == 0:
        return 0.0
    if printed < 1e-4:  # printed as 3.46E-05
        return 0.5 * 10 ** (math.floor(math.log10(printed)) - 2)
    return 0.5e-5


# -- DP (Table 1) ------------------------------------------------------------------------------


def test_table_1_dp_probabilities_to_the_printed_digits():
    v, p = dp_geometric(2, cap=7).rows[-1]
    got = dict(zip(v.tolist(), p.tolist(), strict=True))
    assert sorted(got) == list(range(-7, 8))
    for value, printed in TABLE_1.items():
        digits = -Decimal(printed).as_tuple().exponent
        assert f"{got[value]:.{digits}f}" == printed, value


def test_dp_privacy_figures_match_the_paper():
    fig = dp_geometric(2, cap=7).privacy()
    assert fig.epsilon == 2.0
    assert f"{fig.delta:.3g}" == "6.33e-07"
    # delta is the probability at the cap, exactly.
    assert fig.delta == pytest.approx(geometric_probabilities(2, 1, 7)[-1], rel=1e-9)


def test_dp_negative_results_are_set_to_zero():
    table = dp_geometric(2, cap=7)
    base = geometric_probabilities(2, 1, 7)
    for i in range(8):
        dist = table.distribution(i)
        assert min(dist) == max(0, i - 7)
        assert sum(dist.values()) == pytest.approx(1)
        if i < 7:
            assert dist[0] == pytest.approx(base[: 8 - i].sum())  # all of v <= -i
    # Folding keeps the ratio of P(0 | 0) to P(0 | 1) at e^epsilon (geometric tails).
    assert table.distribution(0)[0] / table.distribution(1)[0] == pytest.approx(math.e**2, rel=1e-5)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: dp_geometric(0), "epsilon"),
        (lambda: dp_geometric(-1), "epsilon"),
        (lambda: dp_geometric(math.inf), "epsilon"),
        (lambda: dp_geometric("2"), "epsilon"),
        (lambda: dp_geometric(1, cap=0), "cap"),
        (lambda: dp_geometric(1, cap=2.5), "cap"),
        (lambda: dp_geometric(1, sensitivity=0), "sensitivity"),
        (lambda: drop_add_q(rate=0), "rate"),
        (lambda: drop_add_q(rate=2), "rate"),
        (lambda: drop_add_q(cap=0), "cap"),
        (lambda: pram_shlomo_young(epsilon=0), "epsilon"),
        (lambda: pram_shlomo_young(cap=1), "cap"),
        (lambda: destatis(0, 1), "D"),
        (lambda: destatis(2, 0), "V"),
        (lambda: destatis(2, 1, js=-1), "js"),
        (lambda: destatis(2, 1, pstay=1.0), "pstay"),
        (lambda: destatis(2, 1, pstay=[0.5]), "one per count"),
        (lambda: invariant_matrix(np.ones((2, 3)) / 3, [1, 1]), "square"),
        (lambda: invariant_matrix(np.eye(2), [1, -1]), "non-negative"),
        (lambda: invariant_matrix([[0.5, 0.6], [0, 1]], [1, 1]), "summing to 1"),
    ],
)
def test_bad_parameters(call, message):
    with pytest.raises(ParameterError, match=message):
        call()


def test_numpy_integers_are_accepted():
    assert dp_geometric(np.float64(2), cap=np.int64(7)).describe()["cap"] == 7


# -- PRAM (Tables 2 and 3) -----------------------------------------------------------------------


def test_table_2_derived_matrix_equals_the_printed_one():
    small, _ = pram_matrices(2.0, 7)
    for i in range(7):
        for j in range(7):
            printed = PRAM_SMALL[i, j]
            tol = 1e-5 if printed == 0.76160 else half_unit(printed)
            assert small[i, j] == pytest.approx(printed, abs=tol + 1e-15), (i, j)


def test_table_3_derived_matrix_equals_the_printed_one():
    _, large = pram_matrices(2.0, 7)
    for m in range(15):
        for w in range(15):
            printed = PRAM_LARGE[m, w]
            tol = 1e-5 if printed == 0.76160 else half_unit(printed)
            assert large[m, w] == pytest.approx(printed, abs=tol + 1e-15), (m, w)


def test_printed_pram_values_are_sums_of_table_1():
    """The folds the construction relies on, straight from Table 1's printed numbers."""
    t1 = {k: float(v) for k, v in TABLE_1.items()}
    below = sum(p for d, p in t1.items() if d <= -1)
    assert round(below, 5) == PRAM_SMALL[1, 0] == 0.11920  # count 1 -> 0: all of v <= -1
    assert round(t1[1] + t1[6] + t1[7], 5) == PRAM_SMALL[1, 2] == 0.10308
    assert round(t1[-1] + below, 5) == PRAM_SMALL[6, 5] == 0.22227  # row 6's upper tail onto 5
    assert f"{t1[-6] + t1[-7]:.2e}" == "5.31e-06"  # row 6's lower tail onto 0
    assert round(t1[1] + below, 5) == PRAM_LARGE[0, 1] == 0.22227


def test_pram_ptable_rows_and_residues():
    pram = pram_shlomo_young()
    small, large = pram_matrices()
    for i in range(7):
        dist = pram.distribution(i)
        for j in range(7):
            assert dist.get(j, 0.0) == pytest.approx(small[i, j], abs=1e-15)
    # Large counts: residue m = count mod 15; w drawn from row m; perturbation p = m - w.
    for count in (7, 8, 15, 23, 44, 1000, 10**6 + 3):
        m = count % 15
        dist = pram.distribution(count)
        for w in range(15):
            assert dist.get(count + m - w, 0.0) == pytest.approx(large[m, w], abs=1e-15)
    assert pram.distribution(0) == {0: 1.0}  # zeros are never perturbed


def test_invariant_pram_matrix_keeps_frequencies():
    rng = np.random.default_rng(4)
    m = pram_shlomo_young().transition_matrix(40)
    for _ in range(25):
        t = rng.integers(0, 200, 40).astype(float)
        t[rng.random(40) < 0.2] = 0  # some values absent
        star = invariant_matrix(m, t)
        np.testing.assert_allclose(t @ star, t, atol=1e-8)
        np.testing.assert_allclose(star.sum(axis=1), 1, atol=1e-12)
        assert (star >= -1e-15).all()
    # With the printed small-cell matrix too.
    t = np.array([50.0, 30, 20, 12, 8, 5, 3])
    star = invariant_matrix(PRAM_SMALL, t)
    np.testing.assert_allclose(t @ star, t, atol=1e-9)


def test_invariant_matrix_by_the_two_stages_on_a_small_case():
    m = np.array([[0.8, 0.2], [0.3, 0.7]])
    t = np.array([10.0, 30.0])
    # lambda = t M = [17, 23]; q_ij = m_ji t_j / lambda_i.
    q = np.array([[0.8 * 10 / 17, 0.3 * 30 / 17], [0.2 * 10 / 23, 0.7 * 30 / 23]])
    np.testing.assert_allclose(invariant_matrix(m, t), m @ q)


# -- drop/add-up-to-q ---------------------------------------------------------------------------


def test_drop_add_q_rows():
    q = drop_add_q(rate=0.01, cap=7)
    assert q.distribution(0) == {0: 1.0}
    assert q.distribution(1) == pytest.approx({0: 1 / 3, 1: 1 / 3, 2: 1 / 3})
    assert sorted(q.distribution(100)) == [99, 100, 101]  # ceil(1.00) = 1
    assert sorted(q.distribution(101)) == [99, 100, 101, 102, 103]
    assert sorted(q.distribution(198)) == [196, 197, 198, 199, 200]  # seed 004's example
    assert len(q.distribution(600)) == 13 and len(q.distribution(601)) == 15
    assert len(q.distribution(10**7)) == 15
    assert len(q.rows) == 602
    # Never negative: q <= count.
    for i in range(1, 50):
        assert min(drop_add_q(rate=1.0, cap=7).distribution(i)) >= 0


# -- privacy figures next to seed 000 Table 4 ------------------------------------------------------


def test_table_4_figures():
    # DP: the paper's epsilon 2 and delta 6.3e-7.
    dp = dp_geometric(2, cap=7).privacy()
    assert (dp.epsilon, round(dp.delta, 8)) == (2.0, 6.3e-7)
    # PRAM: the paper's delta 0.1192 is P(1 -> 0); between counts 0 and 1 everything else
    # that a count of 1 publishes (1..6) a count of 0 never does: 1 - 0.1192 is unbounded.
    pram = pram_shlomo_young()
    pair = pram.pair_privacy(0)
    assert pram.distribution(1)[0] == pytest.approx(0.11920, abs=5e-6)
    assert pair.unbounded_mass == pytest.approx(1 - 0.11920, abs=5e-6)
    assert pair.delta == pair.unbounded_mass
    assert pram.privacy(epsilon=2.0).delta == pytest.approx(0.8808, abs=1e-4)
    # Q: for neighbours with the same q the ratio is 1 (epsilon 0, the paper's "very
    # small") and delta 1/(2q+1): 0.333 for q = 1, 0.067 for q = 7, as the paper says.
    q = drop_add_q(0.01, 7)
    assert q.pair_privacy(1).max_log_ratio == 0.0
    assert q.pair_privacy(1).delta == pytest.approx(1 / 3)
    assert q.pair_privacy(5000).delta == pytest.approx(1 / 15)
    # ... but a count of 0 is never perturbed, so between 0 and 1 the bound is 2/3.
    assert q.privacy().delta == pytest.approx(2 / 3)
    assert q.privacy().epsilon == pytest.approx(math.log(3))


# -- the Destatis maximum-entropy ptable ---------------------------------------------------------


@pytest.mark.parametrize(("d", "v", "js"), [(3, 1.0, 0), (2, 0.9, 0), (5, 3.0, 2), (4, 1.5, 1)])
def test_destatis_rows_meet_the_constraints(d, v, js):
    table = destatis(d, v, js)
    n = d if js == 0 else d + js + 1
    assert len(table.rows) == n + 1  # rows 0 .. n, the last symmetric
    last_v, last_p = table.rows[-1]
    assert last_v.tolist() == list(range(-d, d + 1))
    np.testing.assert_allclose(last_p, last_p[::-1], atol=2e-8)
    assert table.distribution(0) == {0: 1.0}
    for i in range(1, n + 3):
        dist = table.distribution(i)
        mean = sum((j - i) * p for j, p in dist.items())
        var = sum((j - i) ** 2 * p for j, p in dist.items())
        assert sum(dist.values()) == pytest.approx(1, abs=1e-12)
        assert mean == pytest.approx(0, abs=1e-7)
        assert var <= v + 1e-7
        assert max(abs(j - i) for j in dist) <= d
        assert not any(1 <= j <= js for j in dist)
        assert min(dist.values()) >= 1e-8 - 1e-12
        # Monotony: probabilities do not fall from v = -D up to v = 0.
        left = [dist[j] for j in sorted(dist) if j <= i]
        assert all(a <= b + 1e-8 for a, b in itertools.pairwise(left))
    # Bounds on 8 digits, as the R package writes them.
    for _, p in table.rows:
        ub = np.cumsum(p)
        np.testing.assert_allclose(ub, np.round(ub, 8), atol=1e-12)


def test_destatis_matches_the_vignette_examples():
    """The behaviour the R package's vignette documents for its examples."""
    # D = 2, V = 1: "the preset variance of V=1 does not hold for the original frequency i=1".
    rows = destatis(2, 1.0).rows
    var = [float((v * v * p).sum()) for v, p in rows]
    assert round(var[1], 3) != 1.0 and round(var[2], 3) == 1.0
    # D = 2, V = 0.9 "fulfills all conditions"; row 1 is then pinned down by its constraints:
    # p(-1) = p(0) (monotony), sum 1, mean 0, variance 0.9 give 0.3625, 0.3625, 0.1875, 0.0875.
    rows = destatis(2, 0.9).rows
    assert [round(float((v * v * p).sum()), 3) for v, p in rows[1:]] == [0.9, 0.9]
    np.testing.assert_allclose(rows[1][1], [0.3625, 0.3625, 0.1875, 0.0875], atol=1e-8)
    # D = 4, V = 1, pstay = 0.5: every count stays with probability 50%, variance 1.
    table = destatis(4, 1.0, pstay=0.5)
    for i in range(1, 6):
        assert table.distribution(i)[i] == pytest.approx(0.5, abs=1e-8)
    assert table.variance()[1:] == pytest.approx([1.0] * 4, abs=1e-6)
    # D = 5, V = 3, js = 2: targets 1 and 2 never occur.
    table = destatis(5, 3.0, js=2)
    assert all(table.transition_matrix(12)[:, 1:3].ravel() == 0)


def test_destatis_symmetric_row_is_the_exponential_family():
    """Where no bound is active the optimum is p(v) ∝ exp(a v + b v^2); brute-force it."""
    from scipy import optimize

    v, p = destatis(3, 1.0).rows[-1]
    vf = v.astype(float)

    def gap(x: np.ndarray) -> list[float]:
        q = np.exp(x[0] * vf + x[1] * vf * vf)
        q /= q.sum()
        return [float(q @ vf), float(q @ (vf * vf)) - 1.0]

    sol = optimize.fsolve(gap, [0.0, -0.5], xtol=1e-14)
    q = np.exp(sol[0] * vf + sol[1] * vf * vf)
    np.testing.assert_allclose(p, q / q.sum(), atol=1e-8)  # equal up to the 8-digit bounds


def test_destatis_impossible_rows_raise():
    # js = 2 and D = 1: count 1 can only go to 0 (1 and 2 are barred), which is biased.
    with pytest.raises(ComputationError, match="count 1"):
        destatis(1, 0.5, js=2)


def test_destatis_without_monotony_reaches_the_variance():
    # The package's own example uses mono = FALSE for count 3 of D = 2, V = 1.05, js = 1.
    with_mono = destatis(2, 1.05, js=1)
    without = destatis(2, 1.05, js=1, mono=[True, True, False, True])
    assert with_mono.variance()[3] < 1.0
    assert without.variance()[3] == pytest.approx(1.05, abs=1e-6)
    assert without.describe()["mono"] == [True, True, False, True]
