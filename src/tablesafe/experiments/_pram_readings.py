"""Readings of PRAM in the simulation study of seed 000 (Sections 2.2 and 3.2; issue 18).

The paper gives the matrices (Tables 2 and 3) and says that M is made
invariant, ``t M* = t``, by the two-stage algorithm of Willenborg & De Waal
and Shlomo & Young (2008), "placed in a matrix formulation with truncations".
It does not say over which values t counts cells, nor whether M* is mixed
with the identity, ``alpha M* + (1 - alpha) I`` (Shlomo & Young's control
of the perturbation level). Each reading below is one answer; all share the
matrices of :func:`tablesafe.mechanisms.pram_matrices`.

* ``values`` (the default, unchanged): one matrix over the cell values
  ``0 .. max + 8`` of the table, row ``i`` the distribution of
  :func:`pram_shlomo_young` for count ``i`` (mass above the top folded onto
  it); t the number of cells with each value in this table.
* ``plain``: M itself, no invariance.
* ``residues``: the two printed matrices are the formulation: counts below 7
  use Table 2 over the values 0..6 with t of the table's small cells;
  larger counts use Table 3 over the residues ``m = count mod 15`` with t of
  the large cells' residues; the perturbed residue is ``w`` (``count - m +
  w``), the map on residues that invariance needs.
* ``residues-printed-sign``: as ``residues``, the perturbation being ``p =
  m - w`` as Section 3.2 prints it (then w is not the new residue).
* ``values-pooled``: the ``values`` matrix with t pooled over many tables of
  the study's design (one M* for the whole study, not per table).

``alpha`` mixes every invariant reading with the identity. Expected
percents of cells perturbed are exact (:func:`change_probability`), so a
reading's figure does not depend on a simulation's noise.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache

import numpy as np
import numpy.typing as npt

from tablesafe._errors import ParameterError
from tablesafe.experiments._population import population
from tablesafe.mechanisms import invariant_matrix, pram_matrices, pram_shlomo_young

__all__ = [
    "PRAM_READINGS",
    "change_probability",
    "expected_percent_perturbed",
    "pram_perturbation",
    "reading_method",
]

#: Reading -> one-line description (the module docstring has the details).
PRAM_READINGS: dict[str, str] = {
    "values": "M* over the table's cell values, t per table (default)",
    "plain": "M (Tables 2 and 3) without invariance",
    "residues": "M* of Table 2 over values 0-6 and of Table 3 over residues mod 15, t per table",
    "residues-printed-sign": "as residues, with the printed perturbation p = m - w",
    "values-pooled": "M* over cell values, t pooled over 500 tables of the design",
}

_SMALL = 7  # counts below 7 use Table 2
_MOD = 15  # Table 3: residues mod 15
_POOL_TOP = 400  # the pooled matrix covers the values 0..399


def _check(reading: str, alpha: float) -> None:
    if reading not in PRAM_READINGS:
        raise ParameterError(
            f"unknown PRAM reading {reading!r}; allowed: {', '.join(PRAM_READINGS)}"
        )
    if not isinstance(alpha, int | float) or not math.isfinite(alpha) or alpha <= 0:
        raise ParameterError(f"alpha must be a positive number, not {alpha!r}")
    if reading == "plain" and alpha != 1:
        raise ParameterError("alpha mixes an invariant matrix; the plain reading takes alpha 1")


@cache
def _value_matrix(top: int) -> npt.NDArray[np.float64]:
    """M over the values ``0 .. top`` (cached and read-only: it depends on ``top`` alone)."""
    pram = pram_shlomo_young()
    m = np.zeros((top + 1, top + 1))
    for i in range(top + 1):
        for j, p in pram.distribution(i).items():
            m[i, min(j, top)] += p
    m.flags.writeable = False
    return m


@cache
def _pooled_matrix(alpha: float) -> npt.NDArray[np.float64]:
    """``values`` with t pooled over 500 tables of each design (a fixed generator)."""
    gen = np.random.default_rng(2019)
    t = np.zeros(_POOL_TOP + 1)
    for const in (0.02, 0.2):
        for _ in range(500):
            pop = population(gen, const)
            n = np.round(pop / gen.uniform(20, 40, pop.shape)).astype(np.int64)
            t += np.bincount(np.minimum(n.ravel(), _POOL_TOP), minlength=_POOL_TOP + 1)
    return invariant_matrix(_value_matrix(_POOL_TOP), t, alpha=alpha)


def _draw(rows: np.ndarray, u: np.ndarray) -> np.ndarray:
    cum = np.cumsum(rows, axis=1)
    cum[:, -1] = 1.0
    return np.asarray((u[:, None] >= cum).sum(axis=1))


def _value_rows(
    n: np.ndarray, reading: str, alpha: float
) -> tuple[npt.NDArray[np.float64], np.ndarray]:
    """The matrix of a values reading and the row index of each cell."""
    if reading == "values-pooled":
        if int(n.max()) > _POOL_TOP:
            raise ParameterError(f"values-pooled covers counts up to {_POOL_TOP}")
        return _pooled_matrix(float(alpha)), n
    top = int(n.max()) + 8
    m = _value_matrix(top)
    if reading == "plain":
        return m, n
    t = np.bincount(n, minlength=top + 1).astype(np.float64)
    return invariant_matrix(m, t, alpha=alpha), n


def _residue_matrices(
    n: np.ndarray, alpha: float
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    small, large = pram_matrices()
    sm = n < _SMALL
    t_small = np.bincount(n[sm], minlength=_SMALL).astype(np.float64)
    t_large = np.bincount(n[~sm] % _MOD, minlength=_MOD).astype(np.float64)
    return (
        invariant_matrix(small, t_small, alpha=alpha),
        invariant_matrix(large, t_large, alpha=alpha),
    )


def pram_perturbation(
    counts: npt.ArrayLike, u: npt.ArrayLike, *, reading: str = "values", alpha: float = 1.0
) -> npt.NDArray[np.int64]:
    """PRAM perturbations of one table's sample counts under a reading.

    Args:
        counts: The table's non-negative integer sample counts (any shape).
        u: Uniforms in [0, 1), one per cell (same shape): the inverse-CDF draws.
        reading: One of :data:`PRAM_READINGS`.
        alpha: Weight of M* against the identity (1: M* itself).

    Returns:
        The perturbations, same shape as ``counts`` (the caller clips
        ``counts + v`` at 0, as for the other methods).

    Raises:
        ParameterError: for an unknown reading, a bad alpha, or counts that
            are negative or not whole.
    """
    _check(reading, alpha)
    n = _counts(counts)
    uf = np.asarray(u, dtype=np.float64).ravel()
    if uf.size != n.size:
        raise ParameterError(f"u has {uf.size} values for {n.size} cells")
    if reading in ("values", "plain", "values-pooled"):
        rows, index = _value_rows(n, reading, alpha)
        out = _draw(rows[index], uf) - n
    else:
        small, large = _residue_matrices(n, alpha)
        out = np.zeros(n.size, dtype=np.int64)
        sm = n < _SMALL
        out[sm] = _draw(small[n[sm]], uf[sm]) - n[sm]
        res = n[~sm] % _MOD
        w = _draw(large[res], uf[~sm])
        out[~sm] = w - res if reading == "residues" else res - w
    return np.asarray(out, dtype=np.int64).reshape(np.shape(counts))


def change_probability(
    counts: npt.ArrayLike, *, reading: str = "values", alpha: float = 1.0
) -> npt.NDArray[np.float64]:
    """The exact probability that each cell's count changes under a reading.

    The expected percent of cells perturbed (seed 000 Table 4) is 100 times
    its mean. No published count can go below 0 here: every matrix maps
    counts to values >= 0.

    Raises:
        ParameterError: as :func:`pram_perturbation`.
    """
    _check(reading, alpha)
    n = _counts(counts)
    if reading in ("values", "plain", "values-pooled"):
        rows, index = _value_rows(n, reading, alpha)
        stay = rows[index, index]
    else:
        small, large = _residue_matrices(n, alpha)
        stay = np.empty(n.size)
        sm = n < _SMALL
        stay[sm] = small[n[sm], n[sm]]
        res = n[~sm] % _MOD
        # p = 0 exactly when w = m, under either sign.
        stay[~sm] = large[res, res]
    return np.asarray(1.0 - stay, dtype=np.float64).reshape(np.shape(counts))


def expected_percent_perturbed(
    reading: str = "values", alpha: float = 1.0, *, tables: int = 500, seed: int = 2019
) -> dict[str, float]:
    """Exact expected percent of cells perturbed, averaged over the study's tables.

    The tables are drawn as in :func:`run_shlomo2019` (a fixed generator);
    for each, the percent is the mean of :func:`change_probability`, so no
    perturbation is simulated. Clipping at 0 never matters: no reading
    publishes a negative count.

    Returns:
        ``{"independent": ..., "dependent": ...}``.
    """
    _check(reading, alpha)
    gen = np.random.default_rng(seed)
    out = {}
    for kind, const in (("independent", 0.02), ("dependent", 0.2)):
        values = []
        for _ in range(tables):
            pop = population(gen, const)
            n = np.round(pop / gen.uniform(20, 40, pop.shape)).astype(np.int64)
            values.append(100.0 * float(change_probability(n, reading=reading, alpha=alpha).mean()))
        out[kind] = float(np.mean(values))
    return out


def _counts(counts: npt.ArrayLike) -> np.ndarray:
    c = np.asarray(counts)
    if c.size == 0 or c.dtype.kind not in "iuf" or np.any(c < 0) or np.any(c != np.round(c)):
        raise ParameterError("counts must be a non-empty table of whole numbers >= 0")
    return np.asarray(c, dtype=np.int64).ravel()


#: (counts, uniforms) -> perturbations, as the study's methods take them.
Perturb = Callable[[np.ndarray, np.ndarray], np.ndarray]


def reading_method(reading: str = "values", alpha: float = 1.0) -> Perturb:
    """The study's PRAM method for a reading (checked at once)."""
    _check(reading, alpha)

    def perturb(n: np.ndarray, u: np.ndarray) -> np.ndarray:
        return pram_perturbation(n, u, reading=reading, alpha=alpha)

    return perturb
