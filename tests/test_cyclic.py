"""Cyclic perturbation (Duncan & Roehrig 2006, seed 002): cycles, mechanism, posterior."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest

from tablesafe._errors import ComputationError, ParameterError
from tablesafe.mechanisms import (
    cycle_chances,
    cycle_set,
    cyclic_perturb,
    cyclic_posterior,
)

# The slides' 4 x 4 example ("Results for the Example").
ORIGINAL = np.array([[15, 1, 3, 1], [20, 10, 10, 15], [3, 10, 10, 2], [12, 14, 7, 2]])
PUBLISHED = np.array([[16, 0, 2, 2], [21, 11, 9, 14], [2, 11, 11, 1], [11, 13, 8, 3]])
# The slides' printed rows: cell -> Pr(t = q) for q = 0..5.
SLIDES_ROWS = {
    (0, 1): [0.71, 0.25, 0.04, 0.00, 0.00, 0.00],
    (0, 3): [0.06, 0.25, 0.38, 0.25, 0.06, 0.00],
    (2, 3): [0.00, 0.71, 0.25, 0.04, 0.00, 0.00],
    (3, 3): [0.00, 0.05, 0.29, 0.44, 0.21, 0.01],
}


def _wide_to_3d(rows):
    # The slides print a 4 x 4 x 3 table as 4 rows of 12: k = 1, 2, 3 side by side.
    a = np.array(rows)
    return np.stack([a[:, 4 * k : 4 * k + 4] for k in range(3)], axis=2)


# The slides' 3-way example ("Original & Perturbed Tables").
ORIGINAL_3D = _wide_to_3d(
    [
        [1, 4, 66, 3, 2, 3, 2, 68, 4, 80, 2, 1],
        [1, 2, 3, 1, 228, 4, 78, 3, 4, 2, 2, 1],
        [4, 4, 3, 1, 1, 5, 6, 61, 3, 4, 4, 45],
        [2, 7, 1, 3, 10, 3, 1, 2, 61, 3, 55, 4],
    ]
)
PUBLISHED_3D = _wide_to_3d(
    [
        [1, 5, 65, 3, 2, 3, 3, 67, 4, 79, 2, 2],
        [1, 2, 4, 0, 227, 4, 78, 4, 5, 2, 1, 1],
        [3, 4, 3, 2, 2, 4, 6, 61, 3, 5, 4, 44],
        [3, 6, 1, 3, 10, 4, 0, 2, 60, 3, 56, 4],
    ]
)


def _signs(rows):
    return np.array([[{"+": 1, "-": -1, "0": 0, ".": 0}[c] for c in r.split()] for r in rows])


def _slides_m(layers):
    return np.stack([_signs(layer) for layer in layers], axis=2)


# The slides' M1..M4 ("A Set of Margin-Preserving Perturbations"), layers k = 1, 2, 3.
SLIDES_M = [
    _slides_m(
        [
            ["+ - 0 .", ". + - 0", "0 . + -", "- 0 . +"],
            ["0 + - .", ". 0 + -", "- . 0 +", "+ - . 0"],
            ["- 0 + .", ". - 0 +", "+ . - 0", "0 + . -"],
        ]
    ),
    _slides_m(
        [
            ["- 0 . +", "+ - 0 .", ". + - 0", "0 . + -"],
            ["+ - . 0", "0 + - .", ". 0 + -", "- . 0 +"],
            ["0 + . -", "- 0 + .", ". - 0 +", "+ . - 0"],
        ]
    ),
    _slides_m(
        [
            ["0 . + -", "- 0 . +", "+ - 0 .", ". + - 0"],
            ["- . 0 +", "+ - . 0", "0 + - .", ". 0 + -"],
            ["+ . - 0", "0 + . -", "- 0 + .", ". - 0 +"],
        ]
    ),
    _slides_m(
        [
            [". + - 0", "0 . + -", "- 0 . +", "+ - 0 ."],
            [". 0 + -", "- . 0 +", "+ - . 0", "0 + - ."],
            [". - 0 +", "+ . - 0", "0 + . -", "- 0 + ."],
        ]
    ),
]


# --- brute force, independent of the library's factorised computation -------------------


def _forward(original, target, cycles, alpha, beta, skip):
    """Pr(T^P | T) by running every coin sequence through the mechanism's rules."""
    probs = {1: alpha, -1: beta, 0: 1 - alpha - beta}
    total = 0.0
    for coins in itertools.product((1, -1, 0), repeat=len(cycles)):
        t = original.copy()
        p = 1.0
        for sign, c in zip(coins, cycles, strict=True):
            p *= probs[sign]
            if sign == 0:
                continue
            touched = c != 0
            if skip == "zero" and (t[touched] == 0).any():
                continue
            if ((t + sign * c) < 0).any():
                continue
            t = t + sign * c
        if np.array_equal(t, target):
            total += p
    return total


def _brute_posterior(published, cycles, alpha, beta, skip):
    candidates = {}
    for s in itertools.product((-1, 0, 1), repeat=len(cycles)):
        t = published - sum(si * c for si, c in zip(s, cycles, strict=True))
        if (t >= 0).all():
            candidates[t.tobytes()] = t
    weights = {k: _forward(t, published, cycles, alpha, beta, skip) for k, t in candidates.items()}
    z = sum(weights.values())
    return {k: (candidates[k], w / z) for k, w in weights.items() if w > 0}


def _cell_from_brute(post, index):
    out = {}
    for t, p in post.values():
        out[int(t[index])] = out.get(int(t[index]), 0.0) + p
    return out


# --- cycle sets ---------------------------------------------------------------------------


def test_the_slides_4x4_cycles_with_the_repaired_second_cycle():
    cycles = cycle_set((4, 4))
    expected = [
        ["+ - 0 0", "0 + - 0", "0 0 + -", "- 0 0 +"],
        # OCR prints the last row as "+ - 0 +"; "+ - 0 0" makes every row and column sum to 0.
        ["0 + - 0", "0 0 + -", "- 0 0 +", "+ - 0 0"],
        ["0 0 + -", "- 0 0 +", "+ - 0 0", "0 + - 0"],
        ["- 0 0 +", "+ - 0 0", "0 + - 0", "0 0 + -"],
    ]
    assert [c.tolist() for c in cycles] == [_signs(e).tolist() for e in expected]
    # "Each cell has exactly two chances to move."
    assert (cycle_chances(cycles) == 2).all()


def test_the_slides_4x4x3_set_is_m1_m4_m3_m2():
    cycles = cycle_set((4, 4, 3))
    m1, m2, m3, m4 = SLIDES_M
    assert [c.tolist() for c in cycles] == [m.tolist() for m in (m1, m4, m3, m2)]
    # The slides' perturbation moved the original to the published table with these cycles.
    diff = PUBLISHED_3D - ORIGINAL_3D
    assert any(
        np.array_equal(sum(s * c for s, c in zip(signs, cycles, strict=True)), diff)
        for signs in itertools.product((-1, 0, 1), repeat=4)
    )


@pytest.mark.parametrize(
    "shape",
    [
        (2, 2),
        (2, 5),
        (3, 3),
        (3, 4),
        (5, 3),
        (6, 4),
        (20, 20),
        (2, 2, 2),
        (4, 4, 3),
        (3, 5, 3),
        (2, 3, 4),
        (3, 4, 5),
    ],
)
def test_default_cycles_keep_margins_and_cover_cells_equally(shape):
    cycles = cycle_set(shape)
    for c in cycles:
        assert set(np.unique(c)) <= {-1, 0, 1}
        for axis in range(len(shape)):
            assert not c.sum(axis=axis).any()
    chances = cycle_chances(cycles)
    assert chances.min() == chances.max() >= 2


# --- the mechanism --------------------------------------------------------------------------


@pytest.mark.parametrize("skip", ["zero", "negative"])
@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (2, 2), (6, 6), (4, 4, 3), (2, 3, 4)])
def test_every_perturbation_keeps_the_margins(shape, skip):
    rng = np.random.default_rng(sum(shape))
    for _ in range(40):
        table = rng.poisson(2, shape)
        res = cyclic_perturb(table, 0.3, 0.3, skip=skip, rng=rng)
        assert (res.table >= 0).all()
        for axis in range(len(shape)):
            np.testing.assert_array_equal(res.table.sum(axis=axis), table.sum(axis=axis))
        # No cell moves by more than its number of chances.
        assert (np.abs(res.table - table) <= cycle_chances(res.cycles)).all()


def test_zero_rule_freezes_cycles_that_touch_a_zero():
    # Zeros at (1,1) and (1,3): each of the four cycles touches one of them.
    table = np.array([[0, 5, 0, 5], [5, 5, 5, 5], [5, 5, 5, 5], [5, 5, 5, 5]])
    for seed in range(20):
        assert np.array_equal(cyclic_perturb(table, 0.5, 0.5, rng=seed).table, table)
    moved = [cyclic_perturb(table, 0.5, 0.5, skip="negative", rng=s).table for s in range(20)]
    assert any(not np.array_equal(m, table) for m in moved)


def test_mechanism_matches_its_brute_force_likelihood():
    # The frequencies of the perturbed tables agree with the exact forward probabilities.
    table = np.array([[1, 0, 2], [2, 1, 1]])
    cycles = cycle_set(table.shape)
    rng = np.random.default_rng(7)
    n = 6000
    counts: dict[bytes, int] = {}
    for _ in range(n):
        out = cyclic_perturb(table, 0.3, 0.2, skip="negative", rng=rng).table
        counts[out.tobytes()] = counts.get(out.tobytes(), 0) + 1
    for key, c in counts.items():
        target = np.frombuffer(key, dtype=np.int64).reshape(table.shape)
        p = _forward(table, target, cycles, 0.3, 0.2, "negative")
        assert abs(c / n - p) < 5 * np.sqrt(p * (1 - p) / n) + 1e-3


def test_alpha_equal_beta_is_unbiased_away_from_zeros():
    table = np.full((4, 4), 20)
    rng = np.random.default_rng(11)
    mean = np.mean([cyclic_perturb(table, 0.25, 0.25, rng=rng).table for _ in range(3000)], axis=0)
    # Each cell moves by a sum of two steps of variance 1/2: s.e. of the mean ~ 0.018.
    np.testing.assert_allclose(mean, table, atol=0.1)


def test_published_parameters_do_not_include_coin_outcomes():
    res = cyclic_perturb(ORIGINAL, 0.25, 0.25, rng=1)
    pub = res.published()
    assert set(pub) == {"method", "table", "cycles", "alpha", "beta", "gamma", "skip", "skip_rule"}
    assert pub["gamma"] == pytest.approx(0.5)
    assert len(pub["cycles"]) == 4


# --- the posterior --------------------------------------------------------------------------


def test_the_slides_4x4_posterior_rows():
    # Reproduced, to the printed two decimals, with alpha = beta = 1/4 (gamma = 1/2) and
    # the slides' likelihood convention (docs/cyclic.md explains both choices).
    post = cyclic_posterior(PUBLISHED, 0.25, 0.25, likelihood="slides")
    for cell, row in SLIDES_ROWS.items():
        dist = post.cell(cell)
        assert [round(dist.get(q, 0.0), 2) for q in range(6)] == row
    assert post.probabilities.sum(axis=-1) == pytest.approx(np.ones((4, 4)))


def test_alpha_beta_one_third_does_not_give_the_slides_rows():
    for likelihood, skip in (("slides", "zero"), ("exact", "zero"), ("exact", "negative")):
        post = cyclic_posterior(PUBLISHED, 1 / 3, 1 / 3, likelihood=likelihood, skip=skip)
        assert round(post.cell((0, 1)).get(0, 0.0), 2) != 0.71


def test_the_slides_4x4x3_cell():
    # "There are 28 tables that could have been the original ... cell (1,1,1)":
    # 0.34 0.39 0.22 0.05. Reproduced with alpha = beta = 1/4 and the slides' convention;
    # the 28 are coin histories (20 distinct tables).
    post = cyclic_posterior(PUBLISHED_3D, 0.25, 0.25, likelihood="slides", enumerate_tables=True)
    assert post.hypotheses == 28
    assert post.tables is not None and len(post.tables) == 20
    assert any(np.array_equal(t, ORIGINAL_3D) for t in post.tables)
    dist = post.cell((0, 0, 0))
    assert [round(dist.get(q, 0.0), 2) for q in range(4)] == [0.34, 0.39, 0.22, 0.05]


@pytest.mark.parametrize("skip", ["zero", "negative"])
@pytest.mark.parametrize(("alpha", "beta"), [(0.25, 0.25), (1 / 3, 1 / 3), (0.4, 0.2)])
def test_exact_posterior_equals_brute_force(skip, alpha, beta):
    cycles = cycle_set((4, 4))
    brute = _brute_posterior(PUBLISHED, cycles, alpha, beta, skip)
    post = cyclic_posterior(PUBLISHED, alpha, beta, skip=skip)
    listed = cyclic_posterior(PUBLISHED, alpha, beta, skip=skip, enumerate_tables=True)
    assert listed.tables is not None and len(listed.tables) == len(brute)
    for idx in np.ndindex(4, 4):
        expected = _cell_from_brute(brute, idx)
        for q, p in expected.items():
            assert post.cell(idx).get(q, 0.0) == pytest.approx(p, abs=1e-12)
            assert listed.cell(idx).get(q, 0.0) == pytest.approx(p, abs=1e-12)


@pytest.mark.parametrize("shape", [(2, 3), (3, 4), (2, 2, 3)])
def test_exact_posterior_equals_brute_force_on_random_tables(shape):
    rng = np.random.default_rng(3)
    table = rng.poisson(1.5, shape)
    cycles = cycle_set(shape)
    for skip in ("zero", "negative"):
        pub = cyclic_perturb(table, 0.3, 0.3, skip=skip, rng=rng).table
        brute = _brute_posterior(pub, cycles, 0.3, 0.3, skip)
        post = cyclic_posterior(pub, 0.3, 0.3, skip=skip)
        for idx in np.ndindex(*shape):
            for q, p in _cell_from_brute(brute, idx).items():
                assert post.cell(idx).get(q, 0.0) == pytest.approx(p, abs=1e-12)


def test_mode_theorem_on_the_slides_example():
    # Slides: "For a uniform prior, the mode of each posterior cell distribution is its
    # published value."
    for likelihood, skip, a in [
        ("slides", "zero", 0.25),
        ("exact", "zero", 0.25),
        ("exact", "negative", 0.25),
        ("exact", "negative", 1 / 3),
    ]:
        post = cyclic_posterior(PUBLISHED, a, a, likelihood=likelihood, skip=skip)
        np.testing.assert_array_equal(post.mode(), PUBLISHED)


def test_mode_theorem_fails_under_the_zero_rule_with_a_third():
    # A counterexample (checked by brute force): with the zero rule and
    # alpha = beta = gamma = 1/3, cell (1,1) is more probably 15 than the published 16.
    brute = _brute_posterior(PUBLISHED, cycle_set((4, 4)), 1 / 3, 1 / 3, "zero")
    dist = _cell_from_brute(brute, (0, 0))
    assert dist[15] > dist[16]
    post = cyclic_posterior(PUBLISHED, 1 / 3, 1 / 3, skip="zero")
    assert post.mode()[0, 0] == 15


def test_the_original_is_a_possible_original():
    rng = np.random.default_rng(5)
    for _ in range(5):
        table = rng.poisson(3, (3, 4))
        res = cyclic_perturb(table, 0.3, 0.3, rng=rng)
        post = cyclic_posterior(res.table, 0.3, 0.3, enumerate_tables=True)
        assert post.tables is not None
        assert any(np.array_equal(t, table) for t in post.tables)
        for idx in np.ndindex(*table.shape):
            assert post.cell(idx).get(int(table[idx]), 0.0) > 0


def test_priors():
    # "If I'm in the survey, I know my cell is at least 1."
    def at_least_one(idx, values):
        return np.where((idx == (0, 1)) & (values == 0), 0.0, 1.0)

    by_cell = cyclic_posterior(PUBLISHED, 0.25, 0.25, cell_prior=at_least_one)
    by_table = cyclic_posterior(PUBLISHED, 0.25, 0.25, prior=lambda t: float(t[0, 1] >= 1))
    assert by_cell.cell((0, 1)).get(0, 0.0) == 0.0
    np.testing.assert_allclose(by_cell.probabilities, by_table.probabilities, atol=1e-12)
    # Same as conditioning the uniform posterior on t(1,2) >= 1.
    uniform = cyclic_posterior(PUBLISHED, 0.25, 0.25, enumerate_tables=True)
    assert uniform.tables is not None and uniform.table_probabilities is not None
    kept = [
        (t, p)
        for t, p in zip(uniform.tables, uniform.table_probabilities, strict=True)
        if t[0, 1] >= 1
    ]
    z = sum(p for _, p in kept)
    p44 = {}
    for t, p in kept:
        p44[int(t[3, 3])] = p44.get(int(t[3, 3]), 0.0) + p / z
    for q, p in p44.items():
        assert by_cell.cell((3, 3))[q] == pytest.approx(p)


def test_20x20_posterior_is_fast():
    rng = np.random.default_rng(20)
    table = rng.poisson(8, (20, 20))
    res = cyclic_perturb(table, 0.25, 0.25, skip="negative", rng=rng)
    start = time.perf_counter()
    post = cyclic_posterior(res.table, 0.25, 0.25, skip="negative")
    assert time.perf_counter() - start < 10
    assert post.hypotheses > 3**10
    assert post.probabilities.sum(axis=-1) == pytest.approx(np.ones((20, 20)))
    for idx in np.ndindex(20, 20):
        assert post.cell(idx).get(int(table[idx]), 0.0) > 0


def test_progress_is_reported():
    calls = []
    cyclic_posterior(PUBLISHED, 0.25, 0.25, progress=lambda d, t: calls.append((d, t)))
    assert calls and calls[-1][0] == calls[-1][1]


def test_too_large_enumeration_is_refused():
    table = np.full((20, 20), 5)
    with pytest.raises(ComputationError, match="3\\^20"):
        cyclic_posterior(table, 0.25, 0.25, prior=lambda t: 1.0)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: cyclic_perturb([[1, 2]], 0.3, 0.3), "at least 2 x 2"),
        (lambda: cyclic_perturb([[1], [2]], 0.3, 0.3), "at least 2 x 2"),
        (lambda: cyclic_perturb([1, 2, 3], 0.3, 0.3), "2-way or 3-way"),
        (lambda: cyclic_perturb([[1, -2], [3, 4]], 0.3, 0.3), "non-negative"),
        (lambda: cyclic_perturb([[1.5, 2], [3, 4]], 0.3, 0.3), "whole numbers"),
        (lambda: cyclic_perturb([[np.nan, 2], [3, 4]], 0.3, 0.3), "missing"),
        (lambda: cyclic_perturb(ORIGINAL, 0.7, 0.5), "alpha \\+ beta"),
        (lambda: cyclic_perturb(ORIGINAL, -0.1, 0.5), "alpha must lie"),
        (lambda: cyclic_perturb(ORIGINAL, 0.3, 0.3, skip="never"), "skip rule"),
        (lambda: cyclic_perturb(ORIGINAL, 0.3, 0.3, cycles=[np.ones((4, 4))]), "margins"),
        (lambda: cyclic_perturb(ORIGINAL, 0.3, 0.3, cycles=[np.zeros((3, 3))]), "shape"),
        (lambda: cyclic_posterior(PUBLISHED, 0.3, 0.3, likelihood="x"), "likelihood"),
        (lambda: cyclic_posterior([[1, -1], [0, 0]], 0.3, 0.3), "non-negative"),
        (lambda: cycle_set((1, 4)), "at least 2"),
    ],
)
def test_bad_input(call, message):
    with pytest.raises(ParameterError, match=message):
        call()
