"""Cyclic perturbation (Duncan & Roehrig 2006): margins, posterior, the slides' example."""

from __future__ import annotations

import numpy as np
import pytest

from tablesafe._errors import ParameterError
from tablesafe.mechanisms import cycle_set, cyclic_perturb, cyclic_posterior

ORIGINAL = np.array([[15, 1, 3, 1], [20, 10, 10, 15], [3, 10, 10, 2], [12, 14, 7, 2]])
PUBLISHED = np.array([[16, 0, 2, 2], [21, 11, 9, 14], [2, 11, 11, 1], [11, 13, 8, 3]])


def test_the_slides_cycles_with_the_repaired_second_cycle():
    cycles = cycle_set((4, 4))
    assert cycles[0].tolist() == [[1, -1, 0, 0], [0, 1, -1, 0], [0, 0, 1, -1], [-1, 0, 0, 1]]
    assert cycles[1].tolist() == [[0, 1, -1, 0], [0, 0, 1, -1], [-1, 0, 0, 1], [1, -1, 0, 0]]
    # Each cell has exactly two chances to move.
    assert (sum(np.abs(c) for c in cycles) == 2).all()


@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (2, 2), (6, 6), (3, 4, 2)])
def test_every_perturbation_keeps_the_margins(shape):
    rng = np.random.default_rng(sum(shape))
    for _ in range(30):
        table = rng.poisson(3, shape)
        res = cyclic_perturb(table, 0.3, 0.3, rng=rng)
        assert (res.table >= 0).all()
        for axis in range(len(shape)):
            np.testing.assert_array_equal(res.table.sum(axis=axis), table.sum(axis=axis))


def test_posterior_of_the_slides_example():
    post = cyclic_posterior(PUBLISHED, 1 / 3, 1 / 3)
    assert post.probabilities.sum() == pytest.approx(1.0)
    # The original is among the possible originals.
    assert any((t == ORIGINAL).all() for t in post.tables)
    # Theorem (slides): under a uniform prior every cell's mode is its published value.
    np.testing.assert_array_equal(post.mode(), PUBLISHED)


def test_the_slides_row_for_cell_1_4():
    # The slides' Pr(t(1,4) = q) = .06 .25 .38 .25 .06 is the posterior with alpha = beta = 1/4
    # (gamma = 1/2); see docs/cyclic.md for the other rows.
    post = cyclic_posterior(PUBLISHED, 0.25, 0.25)
    dist = post.cell((0, 3))
    assert [round(dist.get(q, 0), 2) for q in range(5)] == [0.06, 0.25, 0.38, 0.25, 0.06]


def test_a_prior_changes_the_posterior():
    at_least_one = cyclic_posterior(PUBLISHED, 1 / 3, 1 / 3, prior=lambda t: float(t[0, 1] >= 1))
    assert at_least_one.cell((0, 1)).get(0, 0.0) == 0.0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: cyclic_perturb([[1, 2]], 0.3, 0.3), "at least 2 x 2"),
        (lambda: cyclic_perturb([[1, -2], [3, 4]], 0.3, 0.3), "non-negative"),
        (lambda: cyclic_perturb([[1.5, 2], [3, 4]], 0.3, 0.3), "whole numbers"),
        (lambda: cyclic_perturb(ORIGINAL, 0.7, 0.5), "alpha \\+ beta"),
        (lambda: cyclic_perturb(ORIGINAL, 0.3, 0.3, cycles=[np.ones((4, 4))]), "margins"),
    ],
)
def test_bad_input(call, message):
    with pytest.raises(ParameterError, match=message):
        call()
