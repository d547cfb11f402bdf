"""The pinned / not-pinned decision against brute force: every integer table, enumerated.

Tiny full cross-classifications (8 to 16 cells, a handful of records) are
published as all their 2-way tables with margins, either exactly
(unprotected) or as intervals of true counts (what a noisy mechanism leaves
the intruder). Every nonnegative integer table is enumerated, those
consistent with every published cell kept, and a cell is pinned exactly
when all of them agree on it. The attack's decision must match cell by cell.
"""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt
import pytest

from tablesafe.attacks._reconstruct import reconstruct
from tablesafe.rules._ceiling._constraints import System


def _published(
    truth: npt.NDArray[np.int64], shape: tuple[int, ...], slack: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Every cell of every 2-way table with margins, as (membership rows, lo, hi)."""
    coords = np.stack(np.unravel_index(np.arange(truth.size), shape), axis=1)
    rows, lo, hi = [], [], []
    subsets = [()] + [(i,) for i in range(len(shape))]
    subsets += list(itertools.combinations(range(len(shape)), 2))
    for sub in subsets:
        for cats in itertools.product(*(range(shape[i]) for i in sub)):
            member = np.ones(truth.size, dtype=bool)
            for i, c in zip(sub, cats, strict=True):
                member &= coords[:, i] == c
            v = int(truth[member].sum())
            rows.append(member)
            lo.append(max(v - slack, 0))
            hi.append(v + slack)
    return np.array(rows, dtype=np.int64), np.array(lo, float), np.array(hi, float)


def _system(
    a: npt.NDArray[np.int64], lo: npt.NDArray[np.float64], hi: npt.NDArray[np.float64]
) -> tuple[System, npt.NDArray[np.float64]]:
    """The attack's constraint system, built as ``constraint_system`` builds it."""
    ub0 = np.full(a.shape[1], np.inf)
    for r in range(a.shape[0]):
        on = a[r] == 1
        ub0[on] = np.minimum(ub0[on], hi[r])
    alive = np.flatnonzero(ub0 > 0)
    sub = a[:, alive]
    keep = sub.sum(axis=1) > 0
    rr, cc = np.nonzero(sub[keep])
    return System(alive, rr.astype(np.int64), cc.astype(np.int64), lo[keep], hi[keep]), ub0


def _brute_force(
    a: npt.NDArray[np.int64], lo: npt.NDArray[np.float64], hi: npt.NDArray[np.float64]
) -> npt.NDArray[np.bool_]:
    """Pinned cells by enumeration of every nonnegative integer table within the bounds."""
    n = a.shape[1]
    total = np.flatnonzero(a.sum(axis=1) == n)[0]  # the grand total's row
    tables = []
    for t in range(int(lo[total]), int(hi[total]) + 1):
        for combo in itertools.combinations_with_replacement(range(n), t):
            tables.append(np.bincount(np.array(combo, dtype=np.int64), minlength=n))
    x = np.array(tables)
    sums = x @ a.T
    feasible = x[np.all((sums >= lo) & (sums <= hi), axis=1)]
    return np.asarray(feasible.min(axis=0) == feasible.max(axis=0))


CASES = [
    # (shape, records, slack of the published intervals, seed)
    ((2, 2, 2), 6, 0, 0),
    ((2, 2, 2), 6, 0, 1),
    ((2, 2, 3), 5, 0, 2),
    ((2, 2, 3), 5, 0, 3),
    ((2, 2, 2, 2), 5, 0, 4),
    ((2, 2, 2, 2), 5, 0, 5),
    ((2, 2, 2), 4, 1, 6),
    ((2, 3, 2), 3, 1, 7),
]


@pytest.mark.parametrize(("shape", "records", "slack", "seed"), CASES)
def test_pinned_decision_matches_enumeration(
    shape: tuple[int, ...], records: int, slack: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    weights = rng.dirichlet(np.full(n, 0.4))
    truth = np.bincount(rng.choice(n, records, p=weights), minlength=n).astype(np.int64)
    a, lo, hi = _published(truth, shape, slack)
    system, ub0 = _system(a, lo, hi)
    state, _ = reconstruct(system, ub0, truth, time_limit=60, shape=shape, width=3, blocks=3)
    expected = _brute_force(a, lo, hi)
    assert (state != -1).all()  # every cell decided
    assert ((state == 1) == expected).all(), (truth, state, expected)


def test_the_parity_cube_is_found_and_a_lone_record_is_pinned() -> None:
    # 2x2x2, all 2-way margins exact: the only moves are +-1 on the parity cube,
    # possible only if every cell it lowers holds a record.
    shape = (2, 2, 2)
    full = np.array([1, 0, 0, 1, 0, 1, 1, 0], dtype=np.int64)  # the odd cells empty
    a, lo, hi = _published(full, shape, 0)
    system, ub0 = _system(a, lo, hi)
    state, _ = reconstruct(system, ub0, full, time_limit=30, shape=shape, width=3, blocks=3)
    assert (state == 0).all()  # the cube moves every cell
    lone = np.array([1, 0, 0, 0, 0, 0, 0, 0], dtype=np.int64)
    a, lo, hi = _published(lone, shape, 0)
    system, ub0 = _system(a, lo, hi)
    state, _ = reconstruct(system, ub0, lone, time_limit=30, shape=shape, width=3, blocks=3)
    assert (state == 1).all()
