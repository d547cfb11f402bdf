"""Additivity option 3: IPF to perturbed margins and controlled rounding."""

from __future__ import annotations

import numpy as np
import pytest

from tablesafe._errors import ComputationError, ParameterError
from tablesafe.mechanisms._additivity import (
    aggregate_margins,
    all_sets,
    controlled_rounding,
    fit_to_margins,
)


def noisy_table(shape, rng, noise=3):
    ext = np.zeros(tuple(s + 1 for s in shape))
    ext[tuple(slice(0, s) for s in shape)] = rng.poisson(8, size=shape)
    ext = aggregate_margins(ext, all_sets(len(shape)))
    return np.maximum(ext + rng.integers(-noise, noise + 1, size=ext.shape), 0).astype(float)


def margins_of(values, sets):
    return aggregate_margins(values, sets)


def test_aggregate_margins_sums_inner_cells():
    inner = np.arange(6).reshape(2, 3)
    ext = np.zeros((3, 4), dtype=np.int64)
    ext[:2, :3] = inner
    out = aggregate_margins(ext, all_sets(2))
    assert out[:2, 3].tolist() == [3, 12]
    assert out[2, :3].tolist() == [3, 5, 7]
    assert out[2, 3] == 15


@pytest.mark.parametrize("shape", [(6,), (5, 4), (4, 3, 3), (3, 3, 2, 2)])
def test_fit_makes_the_table_additive(shape):
    rng = np.random.default_rng(sum(shape))
    sets = all_sets(len(shape))
    values = noisy_table(shape, rng)
    fit = fit_to_margins(values, sets)
    np.testing.assert_allclose(margins_of(fit.values, sets), fit.values, atol=1e-3)
    assert (fit.values >= 0).all()
    # The grand total is the perturbed grand total: fitting works down from it.
    assert fit.values[(-1,) * len(shape)] == values[(-1,) * len(shape)]
    assert fit.iterations >= 1


@pytest.mark.parametrize("shape", [(7,), (6, 5), (4, 3, 3), (3, 3, 2, 2)])
def test_controlled_rounding_integers_that_add_up(shape):
    rng = np.random.default_rng(len(shape))
    sets = all_sets(len(shape))
    fit = fit_to_margins(noisy_table(shape, rng), sets)
    rounded = controlled_rounding(fit.values, sets)
    assert rounded.dtype == np.int64
    assert (rounded >= 0).all()
    np.testing.assert_array_equal(margins_of(rounded, sets), rounded)
    inner = tuple(slice(0, s) for s in shape)
    # Each inner cell is its fitted value rounded down or up.
    assert (np.abs(rounded[inner] - fit.values[inner]) < 1).all()
    if len(shape) <= 2:
        # Two-way tables always admit a rounding whose margins are roundings too.
        assert (np.abs(rounded - fit.values) < 1 + 1e-6).all()


def test_rounding_keeps_zeros_and_integers():
    ext = np.array([[0.0, 2.0, 3.4], [1.0, 0.0, 0.6], [0, 0, 0]])
    ext = aggregate_margins(np.pad(ext[:2, :2], ((0, 1), (0, 1))), all_sets(2))
    rounded = controlled_rounding(ext, all_sets(2))
    np.testing.assert_array_equal(rounded, ext.astype(np.int64))


def test_structural_zeros_stay_zero():
    rng = np.random.default_rng(3)
    values = noisy_table((4, 4), rng)
    sz = np.zeros(values.shape, dtype=bool)
    sz[0, 1] = sz[2, 3] = True
    fit = fit_to_margins(values, all_sets(2), structural_zero=sz)
    assert fit.values[0, 1] == 0 and fit.values[2, 3] == 0


def test_zero_cells_are_reseeded_when_a_margin_needs_them():
    ext = np.array([[0.0, 0.0, 5.0], [2.0, 3.0, 5.0], [2.0, 3.0, 10.0]])
    fit = fit_to_margins(ext, all_sets(2))
    assert fit.reseeded >= 1
    np.testing.assert_allclose(margins_of(fit.values, all_sets(2)), fit.values, atol=1e-3)


def test_margins_tied_by_structural_zeros_are_made_consistent_first():
    ext = np.array([[0.0, 0.0, 5.0], [2.0, 3.0, 5.0], [2.0, 3.0, 10.0]])
    sz = np.zeros(ext.shape, dtype=bool)
    sz[0, :2] = True  # row 1 can hold no records, but its perturbed margin says 5
    fit = fit_to_margins(ext, all_sets(2), structural_zero=sz, max_iter=50)
    assert fit.method == "least-squares margins, ipf"
    assert fit.values[0, 0] == fit.values[0, 1] == 0
    np.testing.assert_allclose(margins_of(fit.values, all_sets(2)), fit.values, atol=1e-3)


def test_no_convergence_falls_back_to_a_least_deviation_fit(monkeypatch):
    rng = np.random.default_rng(4)
    values = noisy_table((5, 4, 3), rng, noise=6)
    # One IPF sweep cannot meet the margins: the levels are fitted by linear programming.
    fit = fit_to_margins(values, all_sets(3), max_iter=1, tol=1e-9)
    assert "least-deviation" in fit.method
    np.testing.assert_allclose(margins_of(fit.values, all_sets(3)), fit.values, atol=1e-6)
    assert (fit.values >= 0).all()
    # Where no table meets the targets either, the error says so and what to do.
    import tablesafe.mechanisms._additivity as additivity

    monkeypatch.setattr(additivity, "_least_deviation_fit", lambda *a: None)
    with pytest.raises(ComputationError, match="did not converge.*choose additivity"):
        fit_to_margins(values, all_sets(3), max_iter=1, tol=1e-12)


def test_negative_values_are_refused():
    with pytest.raises(ParameterError):
        fit_to_margins(np.array([[-1.0, 1.0], [1.0, 1.0]]), all_sets(1))


def test_partial_margins():
    rng = np.random.default_rng(9)
    values = noisy_table((3, 4, 2), rng)
    sets = ((0, 1, 2), (0,), (1, 2))
    fit = fit_to_margins(values, sets)
    np.testing.assert_allclose(
        margins_of(fit.values, sets)[:3, 4, 2], fit.values[:3, 4, 2], atol=1e-3
    )
    rounded = controlled_rounding(fit.values, sets)
    np.testing.assert_array_equal(margins_of(rounded, sets), rounded)


def test_least_deviation_fit_meets_targets_and_is_closest():
    # A level IPF cannot fit quickly is fitted by linear programming: the cells
    # meet every target, keep structural zeros, and are at least as close (in
    # absolute deviation) to the start as IPF's own answer after many sweeps.
    from tablesafe.mechanisms._additivity import _discrepancy, _least_deviation_fit, classic_ipf

    start = np.array([[5.0, 0.0, 3.0], [0.0, 4.0, 0.5], [2.0, 0.0, 0.0]])
    zeros = np.zeros(start.shape, dtype=bool)
    zeros[2, 1] = True
    rows = np.array([[6.0], [5.0], [1.0]])
    cols = np.array([[7.0, 4.0, 1.0]])
    targets = [((0,), rows), ((1,), cols)]
    x = _least_deviation_fit(start, zeros, targets)
    assert x is not None
    assert _discrepancy(x, targets) < 1e-9
    assert (x >= 0).all() and x[2, 1] == 0
    reference, _, disc = classic_ipf(np.where(zeros, 0.0, start + 0.01), targets, 1e-10, 100_000)
    assert disc < 1e-6
    assert np.abs(x - start).sum() <= np.abs(reference - start).sum() + 1e-9
    # No table meets inconsistent targets.
    assert _least_deviation_fit(start, zeros, [((0,), rows), ((1,), cols * 2)]) is None


def test_an_ipf_table_and_its_fit_metadata_are_functions_of_the_independent_table(demo_dir):
    # What an ipf table publishes (its cells and its metadata: sweeps, reseeded
    # cells, and which fit was used, least-deviation included) is computed from
    # the independently perturbed table alone, which additivity "independent"
    # publishes as it is: so ipf reveals nothing more about the true counts.
    from tablesafe._builder import TableBuilder
    from tablesafe._protection import protection_from_settings
    from tablesafe._request import TableRequest
    from tablesafe._settings import ProtectionSettings
    from tablesafe.catalog._dataset import Dataset

    dataset = Dataset.open(demo_dir)
    request = TableRequest(("EMPSTAT", "OCC"), statistic="count")  # sparse: needs the LP fit
    tables = {
        a: TableBuilder(
            dataset, protection_from_settings(ProtectionSettings(method="ckm", additivity=a))
        ).build(request)
        for a in ("independent", "ipf")
    }
    sets = request.bind(dataset.catalog).grouping_sets
    sz = tables["ipf"].structural_zero
    fit = fit_to_margins(tables["independent"].counts.astype(np.float64), sets, structural_zero=sz)
    np.testing.assert_array_equal(controlled_rounding(fit.values, sets), tables["ipf"].counts)
    meta = tables["ipf"].metadata
    assert "least-deviation" in fit.method
    assert (meta["ipf_iterations"], meta["ipf_reseeded_cells"], meta["ipf_method"]) == (
        fit.iterations,
        fit.reseeded,
        fit.method,
    )
