"""Readings of PRAM in seed 000's simulation study (issue 18): definitions, invariance, errors."""

from __future__ import annotations

import numpy as np
import pytest

from tablesafe._errors import ParameterError
from tablesafe.experiments import run_shlomo2019
from tablesafe.experiments._pram_readings import (
    PRAM_READINGS,
    _residue_matrices,
    change_probability,
    pram_perturbation,
)
from tablesafe.mechanisms import geometric_probabilities, invariant_matrix, pram_shlomo_young

# A 7 x 7 table of the study's kind: small cells, neighbouring values and a wide spread.
TABLE = np.array(
    [
        [0, 1, 3, 5, 6, 7, 8],
        [9, 12, 14, 15, 15, 16, 22],
        [23, 24, 29, 30, 30, 31, 38],
        [40, 44, 45, 46, 52, 60, 61],
        [62, 63, 75, 76, 77, 89, 90],
        [91, 104, 105, 119, 120, 121, 135],
        [2, 4, 11, 13, 150, 151, 152],
    ]
)


def _two_stage(m: np.ndarray, t: np.ndarray) -> np.ndarray:
    # Willenborg & De Waal, written out: lambda = t M, q_ij = m_ji t_j / lambda_i, M* = M Q.
    lam = t @ m
    q = np.zeros_like(m)
    for i in range(len(t)):
        for j in range(len(t)):
            q[i, j] = m[j, i] * t[j] / lam[i] if lam[i] > 0 else float(i == j)
    return m @ q


def test_values_reading_is_the_invariant_matrix_of_the_tables_values():
    pram = pram_shlomo_young()
    top = int(TABLE.max()) + 8
    m = np.zeros((top + 1, top + 1))
    for i in range(top + 1):
        for j, p in pram.distribution(i).items():
            m[i, min(j, top)] += p
    star = _two_stage(m, np.bincount(TABLE.ravel(), minlength=top + 1).astype(float))
    u = np.random.default_rng(3).random(TABLE.shape)
    v = pram_perturbation(TABLE, u)
    for (r, c), n in np.ndenumerate(TABLE):
        cum = np.cumsum(star[n])
        assert v[r, c] == int(np.searchsorted(cum, u[r, c], side="right")) - n
    np.testing.assert_allclose(change_probability(TABLE), 1 - star[TABLE, TABLE], atol=1e-12)


def test_residue_reading_keeps_small_values_and_residues_invariant():
    small, large = _residue_matrices(TABLE.ravel(), 1.0)
    n = TABLE.ravel()
    t_small = np.bincount(n[n < 7], minlength=7).astype(float)
    t_res = np.bincount(n[n >= 7] % 15, minlength=15).astype(float)
    np.testing.assert_allclose(t_small @ small, t_small, atol=1e-9)
    np.testing.assert_allclose(t_res @ large, t_res, atol=1e-9)
    # The new residue of a large cell is the drawn w: count + v = count - m + w.
    u = np.random.default_rng(5).random((2000, *TABLE.shape))
    for uu in u[:50]:
        v = pram_perturbation(TABLE, uu, reading="residues")
        large_cells = TABLE >= 7
        assert np.all(np.abs(v[large_cells]) <= 14)
        w = (TABLE + v)[large_cells] % 15
        m = TABLE[large_cells] % 15
        np.testing.assert_array_equal(v[large_cells], w - m)
        printed = pram_perturbation(TABLE, uu, reading="residues-printed-sign")
        np.testing.assert_array_equal(printed[large_cells], -v[large_cells])


@pytest.mark.parametrize("reading", list(PRAM_READINGS))
def test_change_probability_is_the_simulated_share(reading):
    # Brute force: 2,000 draws per cell; the exact probabilities within 5 standard errors.
    rng = np.random.default_rng(11)
    draws = 2000
    changed = np.zeros(TABLE.shape)
    for _ in range(draws):
        changed += pram_perturbation(TABLE, rng.random(TABLE.shape), reading=reading) != 0
    p = change_probability(TABLE, reading=reading)
    se = np.sqrt(np.maximum(p * (1 - p), 1e-4) / draws)
    assert np.all(np.abs(changed / draws - p) < 5 * se)


def test_plain_reading_changes_every_non_zero_count_with_one_minus_p0():
    p0 = geometric_probabilities(2.0, 1, 7)[7]  # tanh(1) = 0.761594
    p = change_probability(TABLE, reading="plain")
    np.testing.assert_allclose(p[TABLE > 0], 1 - p0, atol=1e-12)
    assert p[TABLE == 0].tolist() == [0.0]


@pytest.mark.parametrize("reading", ["values", "residues"])
def test_alpha_scales_the_perturbation_and_keeps_invariance(reading):
    full = change_probability(TABLE, reading=reading)
    for alpha in (0.3, 0.78, 1.2):
        np.testing.assert_allclose(
            change_probability(TABLE, reading=reading, alpha=alpha), alpha * full, atol=1e-12
        )
    m = np.array([[0.8, 0.2], [0.3, 0.7]])
    t = np.array([10.0, 30.0])
    mixed = invariant_matrix(m, t, alpha=1.5)
    np.testing.assert_allclose(t @ mixed, t, atol=1e-12)
    np.testing.assert_allclose(mixed, 1.5 * _two_stage(m, t) - 0.5 * np.eye(2), atol=1e-12)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: pram_perturbation(TABLE, np.zeros(TABLE.shape), reading="cells"), "allowed"),
        (lambda: change_probability(TABLE, alpha=0), "positive"),
        (lambda: change_probability(TABLE, reading="plain", alpha=0.5), "plain"),
        (lambda: change_probability(TABLE, alpha=50), "allowed: 0 < alpha <="),
        (lambda: change_probability(-TABLE), "whole numbers >= 0"),
        (lambda: pram_perturbation(TABLE, np.zeros(3)), "u has 3 values"),
        (lambda: invariant_matrix(np.eye(2), [1, 1], alpha=float("nan")), "positive"),
        (lambda: run_shlomo2019(2, pram="cells"), "unknown PRAM reading"),
    ],
)
def test_bad_readings_are_refused(call, match):
    with pytest.raises(ParameterError, match=match):
        call()


def test_the_study_runs_a_reading_and_says_which():
    result = run_shlomo2019(4, rng=1, pram="residues", pram_alpha=0.8)
    assert result.as_dict()["pram"] == {"reading": "residues", "alpha": 0.8}
    assert run_shlomo2019(4, rng=1).as_dict()["pram"] == {"reading": "values", "alpha": 1.0}
    assert 0 < result.table4["PRAM"]["pp_dep"] < 100


def test_cli_takes_a_reading():
    import json

    from click.testing import CliRunner

    from tablesafe._cli import get_app

    args = ["reproduce", "shlomo2019", "--reps", "3", "--format", "json"]
    result = CliRunner().invoke(get_app(), [*args, "--pram", "residues", "--pram-alpha", "0.79"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["pram"] == {"reading": "residues", "alpha": 0.79}
