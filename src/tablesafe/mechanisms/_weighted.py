"""Published weighted figures: protected count times mean weight, plus noise, rounded.

The weighted count of a cell is the magnitude table of the weight, and it
must reveal no more about the cell's true count than the protected count
does (docs/weighted.md). Seed 000's eqs. 4 and 5 move the true weighted
count with the count perturbation (``W + v * w_mean`` or ``W * n' / n``);
published at full precision they give the perturbation ``v`` (and so the
true count) away whenever weights are integers, and eq. 4 also through the
gap between the cell's and the overall mean weight. tablesafe publishes
instead, for a cell with protected count ``n'``::

    W' = round_B( n' * m  +  s * m * z )        (0 when n' = 0)

* ``m`` is the cell's mean weight ``W / n`` (exact fixed-point sums); for a
  cell without records (which a mechanism may still publish as non-zero)
  the mean weight of the nearest enclosing margin that has records, so
  that a published value does not tell a true zero from a real cell;
* ``z`` is uniform on [-1, 1], drawn from the cell's own keys on a stream
  separate from the count's (the cell key mixed with a constant, or the
  dynamic seed with salt ``b"weight"``), so the same cell gets the same
  noise in every table and for every user, and no user can remove it;
* ``s`` is the site's ``weight_noise`` (default 0.5 mean weights) and
  ``round_B`` its rounding.

``W'`` is thus a function of the protected count, the cell's mean weight,
and noise the attacker cannot remove. Replicate estimates are built the
same way around ``W'``: replicate ``r`` is ``W' + sqrt(n * n') * (m_r - m)``
with ``m_r = W_r / n``, so the published standard error is the one a cell
of ``n'`` records with these weights would have (the coefficient of
variation moves with the protected count, not the true one).
"""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt

from tablesafe._seeds import SeedScheme, dynamic_uniforms
from tablesafe.cells._selection import mix32

__all__ = ["enclosing_means", "protected_weighted", "replicate_figures", "weight_uniforms"]

#: Mixed with the cell key to give the weight noise its own stream ("weight").
_WEIGHT_STREAM = 0x77656967


def weight_uniforms(
    cell_key: npt.NDArray[np.uint32], seeds: SeedScheme, secret: bytes | None
) -> npt.NDArray[np.float64]:
    """Uniforms in (0, 1) for the weight noise of every cell, from its keys.

    With cell-key seeds the count's uniform is the cell key itself; the
    weight's is an integer mix of the cell key with a constant, which is a
    bijection that scatters any interval of cell keys (all a published
    count can tell about the key) over the whole range.
    """
    if seeds == SeedScheme.DYNAMIC:
        assert secret is not None
        return dynamic_uniforms(cell_key, secret, salt=b"weight")
    mixed = mix32(cell_key.astype(np.int64), _WEIGHT_STREAM)
    return (mixed.astype(np.float64) + 0.5) / 2.0**32


def enclosing_means(
    totals: npt.NDArray[np.float64],
    n: npt.NDArray[np.int64],
    fallback: float,
) -> npt.NDArray[np.float64]:
    """Mean weight per cell: ``totals / n``, or that of the nearest enclosing margin with records.

    ``totals`` and ``n`` are extended arrays holding every grouping set.
    Margins are tried by dropping one dimension (last first), then two,
    and so on; ``fallback`` (the dataset's public mean weight) is used
    where even the universe has no record.
    """
    shape = n.shape
    k = len(shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(n > 0, totals / np.maximum(n, 1), np.nan)
    for r in range(1, k + 1):
        for drop in itertools.combinations(range(k - 1, -1, -1), r):
            missing = np.isnan(out)
            if not missing.any():
                return out
            idx = tuple(slice(s - 1, s) if i in drop else slice(None) for i, s in enumerate(shape))
            mn, mt = n[idx], totals[idx]
            mean = np.where(mn > 0, mt / np.maximum(mn, 1), np.nan)
            out = np.where(missing, np.broadcast_to(mean, shape), out)
    return np.where(np.isnan(out), fallback, out)


def protected_weighted(
    counts: npt.NDArray[np.int64],
    mean: npt.NDArray[np.float64],
    u: npt.NDArray[np.float64],
    noise: float,
) -> npt.NDArray[np.float64]:
    """``n' * m + s * m * z`` with ``z = 2u - 1``, and 0 where the protected count is 0."""
    z = 2.0 * u - 1.0
    out = counts * mean + noise * mean * z
    return np.asarray(np.where(counts > 0, np.maximum(out, 0.0), 0.0), dtype=np.float64)


def replicate_figures(
    published: npt.NDArray[np.float64],
    counts: npt.NDArray[np.int64],
    n: npt.NDArray[np.int64],
    mean: npt.NDArray[np.float64],
    replicate_totals: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """Replicate estimates around ``published``: ``W' + sqrt(n * n') * (m_r - m)``.

    Where the true count is 0 the deviation is 0 (such cells never get a
    published standard error: see ``se_min_count``).
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        rep_mean = np.where(n > 0, replicate_totals / np.maximum(n, 1), mean)
    scale = np.sqrt(n.astype(np.float64) * counts.astype(np.float64))
    return np.asarray(published + scale * (rep_mean - mean), dtype=np.float64)
