"""The attack on published medians: recover one record's value from medians of overlapping cells.

The attacker knows that a target record is the median record of many cells
(he chose their universes so: the target plus as many other records below
its value as above) and averages their published medians. Unprotected, one
median gives the value exactly. Under the protection
(:mod:`tablesafe.mechanisms._quantiles`) the direction of the move is the
target's own draw (from its record key) and the size is drawn from the
keys of the ``2h + 1`` records around it, so averaging cells keeps the
target's error on one side: it does not shrink with the number of cells,
while draws keyed to each cell's whole record set would average away.
The numbers are in docs/quantiles.md ("The attack").
"""

from __future__ import annotations

import numpy as np

from tablesafe._seeds import SeedScheme
from tablesafe.cells._quantiles import RecordValues, SortedCells, quantile_ranks, sort_cells
from tablesafe.mechanisms._quantiles import key_uniforms, window_quantiles

SECRET = b"quantile-attack-secret-0123456789abcdef"
H, MOVE, CAP = 5, (0.1, 0.5), 0.08


def _cells(rng: np.random.Generator, cells: int, m: int) -> tuple[SortedCells, float]:
    """``cells`` cells, each the target plus ``m`` records below and ``m`` above it, from one pool."""
    target = float(rng.lognormal(10, 0.5))
    pool = 200
    below, above = rng.uniform(0.7 * target, target, pool), rng.uniform(target, 1.3 * target, pool)
    keys_below, keys_above = rng.integers(0, 2**32, pool), rng.integers(0, 2**32, pool)
    target_key = int(rng.integers(0, 2**32))
    xs: list[float] = []
    keys: list[int] = []
    cell: list[int] = []
    for c in range(cells):
        b, a = rng.choice(pool, m, replace=False), rng.choice(pool, m, replace=False)
        xs += [*below[b], target, *above[a]]
        keys += [*keys_below[b], target_key, *keys_above[a]]
        cell += [c] * (2 * m + 1)
    values = RecordValues(
        np.array(cell, dtype=np.int64), np.array(xs), None, np.array(keys, dtype=np.int64)
    )
    return sort_cells(values, (cells + 1,), ((0,),)), target


def _per_cell_draws(cells: SortedCells, k: int) -> np.ndarray:
    """The same move with both draws from each cell's whole record set: the design not chosen."""
    r = quantile_ranks(cells, 50, H).position[:k]
    x, low, high = cells.x[r], cells.x[r - H], cells.x[r + H]
    spread = np.minimum(np.minimum(high - x, x - low), CAP * np.abs(x))
    sums = [
        int(cells.key[s : s + n].sum()) % 2**32
        for s, n in zip(cells.start, cells.count, strict=True)
    ]
    key = np.array(sums[:k], dtype=np.uint32)
    u_move, u_side = key_uniforms(key, cells.count[:k], "cell", SeedScheme.KEYED, SECRET, 2)
    g = MOVE[0] + (MOVE[1] - MOVE[0]) * u_move
    return np.asarray(x + np.where(u_side >= 0.5, 1.0, -1.0) * g * spread)


def _attack(trials: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Relative errors of the averaging attacker: unprotected, protected, per-cell draws."""
    rng = np.random.default_rng(seed)
    errors = []
    for _ in range(trials):
        cells, target = _cells(rng, k, 40)
        ranks = quantile_ranks(cells, 50, H)
        exact = cells.x[ranks.position[:k]]
        published = window_quantiles(cells, ranks, MOVE, CAP, "X", SeedScheme.KEYED, SECRET)[:k]
        naive = _per_cell_draws(cells, k)
        errors.append([abs(a.mean() - target) / target for a in (exact, published, naive)])
    out = np.array(errors)
    return out[:, 0], out[:, 1], out[:, 2]


def test_averaging_medians_does_not_recover_the_median_record() -> None:
    exact1, one, naive1 = _attack(60, 1, seed=11)
    exact100, many, naive100 = _attack(60, 100, seed=12)
    # Unprotected, a single median is the record's value.
    assert np.all(exact1 == 0) and np.all(exact100 < 1e-12)  # 1e-12: the float mean
    # Protected: 100 cells leave the attacker about as far as one (measured: median
    # 0.76% with one cell, 0.83% with 100; never below 0.5% with 100).
    assert np.median(many) > 0.5 * np.median(one)
    assert np.min(many) > 0.002
    # Draws keyed to each cell would average away (measured: median 0.06% with 100 cells).
    assert np.median(naive100) < 0.2 * np.median(many)
    assert np.median(naive1) > 0.5 * np.median(one)


def test_a_small_cell_gives_no_median() -> None:
    """A cell of 3 records: unprotected its median is a record's value; protected it is blank."""
    rng = np.random.default_rng(2)
    values = RecordValues(
        np.zeros(3, dtype=np.int64),
        np.array([31_000.0, 52_500.0, 70_100.0]),
        None,
        rng.integers(0, 2**32, 3),
    )
    cells = sort_cells(values, (2,), ((0,),))
    ranks = quantile_ranks(cells, 50, H)
    assert cells.x[ranks.position[0]] == 52_500.0
    out = window_quantiles(cells, ranks, MOVE, CAP, "X", SeedScheme.KEYED, SECRET)
    assert np.isnan(out[0])


if __name__ == "__main__":  # the numbers of docs/quantiles.md
    for k, seed in ((1, 11), (10, 13), (100, 12)):
        exact, protected, per_cell = _attack(60, k, seed)
        print(
            k,
            [
                f"{100 * np.median(e):.2f}% (min {100 * e.min():.2f}%)"
                for e in (protected, per_cell)
            ],
        )
