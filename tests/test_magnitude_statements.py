"""What docs/magnitudes.md and every table's metadata say of the cell-key method, checked.

Before rounding, every sum moves by at least ``share * mu * x_(1)`` (so a sum with a
non-zero contribution is never published exactly when ``mu > 0``), and the perturbed
sum never has the opposite sign of the true one, nor becomes 0: on variables with
negative values too, where contributions cancel. Brute force against the
contributions, cell by cell.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tablesafe import TableBuilder, TableRequest
from tablesafe._cli._methods import protection_from_options
from tablesafe.mechanisms._magnitudes import MagnitudeProtection, ckm_noise
from tsdata import RANDOM_CATALOG, random_frame, write_dataset

K = 3


def _cells(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    """True sums and largest absolute contributions of random cells, cancelling ones among them."""
    totals, tops = [], []
    for i in range(count):
        kind = i % 4
        size = int(rng.integers(1, 7))
        if kind == 0:  # signed values, mean 0: sums much smaller than their contributions
            x = rng.normal(0, 1000, size).round()
        elif kind == 1:  # exact cancellation: two savings of 998 and -998, and small change
            x = np.r_[998.0, -998.0, rng.integers(-3, 4, size - 1)]
        elif kind == 2:  # positive values
            x = rng.lognormal(8, 1, size).round()
        else:  # negative values only
            x = -rng.lognormal(6, 1.5, size).round()
        a = np.sort(np.abs(x))[::-1]
        totals.append(x.sum())
        tops.append(np.r_[a, np.zeros(K)][:K])
    return np.array(totals), np.array(tops).T


def _uniforms(rng: np.random.Generator, shape: tuple[int, ...]):
    draws = {(j, what): rng.random(shape) for j in range(K) for what in ("v", "sign")}
    return lambda j, what: draws[(j, what)]


PARAMS = [
    MagnitudeProtection(),
    MagnitudeProtection(share=0.3),
    MagnitudeProtection(share=0.3, top_k=3, mu=1.0, D=5, step=2),
    MagnitudeProtection(top_k=1),
    MagnitudeProtection(mu=0.0),
]


@pytest.mark.parametrize("prot", PARAMS, ids=lambda p: f"share{p.share}-k{p.top_k}-mu{p.mu}")
def test_every_sum_moves_by_the_floor_and_keeps_its_sign(prot: MagnitudeProtection):
    rng = np.random.default_rng(26)
    total, top = _cells(rng, 4000)
    noise = ckm_noise(total, top, prot, _uniforms(rng, total.shape))
    after = total + noise
    floor = prot.share * prot.mu * top[0]
    assert np.all(np.abs(noise) >= floor * (1 - 1e-12))
    if prot.mu > 0:
        assert np.all(after[top[0] > 0] != total[top[0] > 0])  # never exact
    nonzero = total != 0
    assert np.all(np.sign(after[nonzero]) == np.sign(total[nonzero]))  # no flip, never 0
    # The data cancel: many sums are smaller than the moves their contributions make.
    assert np.sum(np.abs(total) < prot.share * top[0]) > 500


def test_the_move_is_the_documented_formula_cell_by_cell():
    """``X' - X = +-(sum_j m eps_j x_(j) (mu + |v_j|))``, direction relative to the sign of X."""
    prot = MagnitudeProtection(share=0.3, top_k=3, eps=(1.0, 0.5, 0.25))
    rng = np.random.default_rng(5)
    total, top = _cells(rng, 600)
    uniforms = _uniforms(rng, total.shape)
    noise = ckm_noise(total, top, prot, uniforms)
    pt = prot.ptable()
    for c in range(total.size):
        x, size, first = float(total[c]), 0.0, 0.0
        for j in range(prot.top_k):
            delta = prot.share * prot.eps[j] * top[j, c]
            if delta <= 0:
                continue
            row = pt.row_for(np.array([min(abs(x) / delta, pt.D)]))
            v = float(pt.lookup(row, np.array([uniforms(j, "v")[c]]))[0])
            size += delta * (prot.mu + abs(v))
            if j == 0:
                first = v if v != 0 else (1.0 if uniforms(0, "sign")[c] >= 0.5 else -1.0)
        away = first > 0 or size >= abs(x)
        side = np.sign(x) if x != 0 else np.sign(first)
        expected = side * size if away else -side * size
        assert noise[c] == pytest.approx(expected, rel=1e-12, abs=1e-12), c


def test_no_cell_without_contributions_moves():
    prot = MagnitudeProtection()
    total, top = np.zeros(5), np.zeros((K, 5))
    noise = ckm_noise(total, top, prot, _uniforms(np.random.default_rng(1), (5,)))
    assert np.all(noise == 0)


# -- the same on published tables ------------------------------------------------------------


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory):
    frame = random_frame(3000, seed=31)
    rng = np.random.default_rng(31)
    profit = rng.normal(0, 1200, len(frame)).round().clip(-5000, 5000)
    # Records that cancel in a few cells: savings of 998 and -998.
    pair = np.flatnonzero((frame["C"] == 9).to_numpy())[:40]
    profit[pair] = np.where(np.arange(pair.size) % 2 == 0, 998.0, -998.0)
    frame["PROFIT"] = profit
    catalog = {
        **RANDOM_CATALOG,
        "magnitudes": [{"name": "PROFIT", "lower": -5000, "upper": 5000, "negative": True}],
    }
    return write_dataset(tmp_path_factory.mktemp("signed"), frame, catalog), frame


def _truth(frame: pd.DataFrame, dims: tuple[str, ...]) -> pd.DataFrame:
    """True sum and largest |x| per cell, margins included (codes "_T"), by brute force."""
    rows = []
    for keep in range(1 << len(dims)):
        by = [d for i, d in enumerate(dims) if keep >> i & 1]
        groups = frame.groupby(by) if by else [((), frame)]
        for key, g in groups:
            key = key if isinstance(key, tuple) else (key,)
            cell = {d: "_T" for d in dims} | dict(zip(by, key, strict=True))
            rows.append(cell | {"X": g["PROFIT"].sum(), "x1": g["PROFIT"].abs().max()})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("share", [0.1, 0.3])
def test_published_sums_keep_the_statements(signed, share):
    ds, frame = signed
    mags = MagnitudeProtection(share=share, rounding="0.01")
    builder = TableBuilder(ds, protection_from_options("ckm"), magnitudes=mags)
    dims = ("A", "C", "D")
    table = builder.build(TableRequest(dims, statistic="count", magnitudes=("sum:PROFIT",)))
    got = table.to_frame()
    for d in dims:
        got[d] = got[d].astype(str)
    truth = _truth(frame, dims)
    for d in dims:
        truth[d] = truth[d].astype(str)
    both = got.merge(truth, on=list(dims))
    both = both[both["n"] > 0]
    assert len(both) > 100
    moved = (both["sum_PROFIT"] - both["X"]).abs()
    floor = share * mags.mu * both["x1"]
    assert (moved >= floor - 0.005).all()  # half the rounding base
    signs = np.sign(both["sum_PROFIT"]) * np.sign(both["X"])
    assert (signs[both["X"] != 0] == 1).all()
    # Cells whose contributions cancel enough that a move could reach 0 are among them.
    reach = share * (mags.mu + mags.D) * both["x1"]
    assert ((both["X"].abs() < reach) & (both["x1"] > 0)).sum() >= 5
    statement = table.public_metadata()["magnitudes"]["statement"]
    assert f"at least {share * mags.mu:g} of its largest contribution" in statement
    assert "never changes its sign" in statement
