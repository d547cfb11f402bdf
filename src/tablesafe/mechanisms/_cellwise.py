"""Constructors of cell-wise mechanisms: each returns a :class:`~tablesafe.PTable`.

Sources: Shlomo, Krenzke & Li (2019), seed 000, Sections 2-3 (DP, PRAM,
drop/add-up-to-q); Giessing & Enderle's ptable method, as implemented by
the R package ``ptable`` of Destatis (the maximum-entropy ptable).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import optimize

from tablesafe._errors import ComputationError, ParameterError
from tablesafe._ptable import PTable

__all__ = [
    "PRAM_LARGE",
    "PRAM_SMALL",
    "destatis",
    "dp_geometric",
    "drop_add_q",
    "invariant_matrix",
    "pram_shlomo_young",
]


def _positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ParameterError(f"{name} must be a finite number, not {value!r}")
    if value <= 0:
        raise ParameterError(f"{name} must be > 0, not {value}")
    return float(value)


def _cap(value: Any, name: str = "cap") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ParameterError(f"{name} must be an integer >= 1, not {value!r}")
    return int(value)


def dp_geometric(epsilon: float, sensitivity: float = 1, cap: int = 7) -> PTable:
    """The DP exponential mechanism with l1 utility (discretised Laplace), capped.

    Seed 000, Sections 2.1 and 3.1: ``p(v) ∝ exp(-epsilon |v| / sensitivity)``
    for ``v = -cap .. cap``, normalised (Table 1 for epsilon = 2, cap = 7).
    Negative results are set to 0: in the row of a count ``i < cap`` the
    mass of ``v < -i`` is moved to ``v = -i``. Zero cells are perturbed
    (only structural zeros are not). Delta is the probability at the cap
    (6.33e-7 for epsilon = 2, cap = 7).

    Args:
        epsilon: Privacy parameter (> 0).
        sensitivity: The utility's sensitivity Δu (> 0; 1 for counts).
        cap: Largest absolute perturbation (>= 1).

    Raises:
        ParameterError: for epsilon <= 0, sensitivity <= 0 or cap < 1.
    """
    eps = _positive("epsilon", epsilon)
    sens = _positive("sensitivity", sensitivity)
    c = _cap(cap)
    v = np.arange(-c, c + 1)
    base = np.exp(-eps * np.abs(v) / sens)
    base /= base.sum()
    rows = []
    for i in range(c + 1):
        keep = v >= -i
        p = base[keep].copy()
        p[0] += base[~keep].sum()
        rows.append((v[keep].tolist(), p.tolist()))
    return PTable.from_rows(
        "dp",
        rows,
        parameters={"epsilon": eps, "sensitivity": sens, "cap": c},
        paper="Shlomo, Krenzke & Li (2019), Sections 2.1 and 3.1, Table 1",
    )


def drop_add_q(rate: float = 0.01, cap: int = 7) -> PTable:
    """Cell-wise drop/add-up-to-q (seed 000, Section 2.3).

    ``q = min(ceil(rate * i), cap)`` for an original count ``i``; the
    perturbation is uniform over ``{-q, ..., q}``; zeros are not perturbed.
    Since ``q <= i``, no count becomes negative. The last row (the first
    count whose q reaches the cap) stands for all larger counts.

    Raises:
        ParameterError: for a rate outside (0, 1] or cap < 1.
    """
    r = _positive("rate", rate)
    if r > 1:
        raise ParameterError(f"rate must lie in (0, 1], not {rate}")
    c = _cap(cap)
    last = 1
    while min(math.ceil(r * last - 1e-9), c) < c:
        last += 1
    rows = [([0], [1.0])]
    for i in range(1, last + 1):
        q = min(max(math.ceil(r * i - 1e-9), 1), c)
        rows.append((list(range(-q, q + 1)), [1.0 / (2 * q + 1)] * (2 * q + 1)))
    return PTable.from_rows(
        "q",
        rows,
        parameters={"rate": r, "cap": c},
        paper="Shlomo, Krenzke & Li (2019), Section 2.3; Li & Krenzke (2016)",
    )


#: Seed 000 Table 2, as printed: rows original value 0-6, columns perturbed value 0-6.
PRAM_SMALL = np.array(
    [
        [1, 0, 0, 0, 0, 0, 0],
        [0.11920, 0.76160, 0.10308, 0.01395, 0.00189, 0.00026, 3.46e-05],
        [0.01395, 0.10525, 0.76160, 0.10311, 0.01395, 0.00189, 0.00026],
        [0.00189, 0.01395, 0.10337, 0.76160, 0.10337, 0.01395, 0.00189],
        [0.00026, 0.00189, 0.01395, 0.10311, 0.76160, 0.10525, 0.01395],
        [3.46e-05, 0.00026, 0.00189, 0.01395, 0.10308, 0.76160, 0.11920],
        [5.31e-06, 3.46e-05, 0.00026, 0.00189, 0.01395, 0.22227, 0.76160],
    ]
)

_G = [0.76160, 0.10307, 0.01395, 0.00189, 0.00026, 3.46e-05, 4.68e-06, 6.33e-07]


def _large_row(m: int) -> list[float]:
    row = [0.0] * 15
    for w in range(15):
        d = abs(w - m)
        row[w] = _G[d] if d < len(_G) else 0.0
    return row


#: Seed 000 Table 3, as printed: residue m = count mod 15 (rows) by the value w
#: subtracted from the residue (columns); the perturbation is p = m - w.
PRAM_LARGE = np.array([_large_row(m) for m in range(15)])
# The rows near the edges fold the cut-off tail into the neighbouring value,
# as printed (these entries differ from the plain geometric probabilities).
PRAM_LARGE[0, 1] = 0.22227
PRAM_LARGE[1, 0], PRAM_LARGE[2, 1], PRAM_LARGE[3, 2], PRAM_LARGE[4, 3] = (
    0.11920,
    0.10525,
    0.10337,
    0.10311,
)
PRAM_LARGE[5, 4] = 0.10308
PRAM_LARGE[9, 10], PRAM_LARGE[10, 11], PRAM_LARGE[11, 12] = 0.10308, 0.10311, 0.10337
PRAM_LARGE[12, 13], PRAM_LARGE[13, 14], PRAM_LARGE[14, 13] = 0.10525, 0.11920, 0.22227


def pram_shlomo_young() -> PTable:
    """PRAM for cell counts of Shlomo & Young (2008), as in seed 000 Section 3.2.

    Small counts 0-6 use the transition matrix of Table 2 (zeros are not
    perturbed); larger counts use Table 3: with residue ``m = count mod 15``
    a value ``w`` is drawn from row ``m`` and the perturbation is
    ``p = m - w``. Both matrices are the printed values (:data:`PRAM_SMALL`,
    :data:`PRAM_LARGE`), each row normalised to sum to 1 (the printed rows
    sum to 1 within 5e-6). Where the construction is clear they equal the
    geometric probabilities of Table 1 (epsilon = 2, cap 7) centred on the
    original value: row 1 of Table 2 folds all mass below 0 into 0 (0.11920
    = P(v <= -1)), and the inner rows of Table 3 are the plain geometric
    row. The other edge rows move the cut-off tails onto the neighbouring
    value in ways the paper does not state; those are encoded as printed.
    """
    small = []
    for i, row in enumerate(PRAM_SMALL):
        p = row / row.sum()
        j = np.nonzero(p)[0]
        small.append(((j - i).tolist(), p[j].tolist()))
    large = []
    for m, row in enumerate(PRAM_LARGE):
        p = row / row.sum()
        w = np.nonzero(p)[0]
        large.append(((m - w).tolist(), p[w].tolist()))
    return PTable.from_rows(
        "pram",
        small,
        residue_rows=large,
        modulus=15,
        parameters={"epsilon_design": 2.0, "cap": 7, "modulus": 15},
        paper="Shlomo & Young (2008); Shlomo, Krenzke & Li (2019), Tables 2 and 3",
    )


def invariant_matrix(
    transition: npt.ArrayLike, frequencies: npt.ArrayLike
) -> npt.NDArray[np.float64]:
    """The invariant PRAM matrix M* with ``t M* = t`` (Shlomo & Young 2008).

    The two-stage algorithm of Willenborg & De Waal: with ``lambda = t M``,
    the reverse matrix ``Q`` has ``q_ij = m_ji t_j / lambda_i`` (the
    probability that a perturbed value ``i`` came from ``j``), and
    ``M* = M Q``. Then ``t M* = lambda Q = t``.

    Args:
        transition: A row-stochastic L x L matrix M over cell values.
        frequencies: t, the number of cells with each value (length L).

    Raises:
        ParameterError: for a non-square or non-stochastic M, or a t of
            another length or with negative entries.
    """
    m = np.asarray(transition, dtype=np.float64)
    t = np.asarray(frequencies, dtype=np.float64)
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ParameterError("the transition matrix must be square")
    if np.any(m < 0) or not np.allclose(m.sum(axis=1), 1, atol=1e-4):
        raise ParameterError("the transition matrix must have non-negative rows summing to 1")
    if t.shape != (m.shape[0],) or np.any(t < 0):
        raise ParameterError(f"frequencies must be {m.shape[0]} non-negative numbers")
    lam = t @ m
    q = np.divide(m.T * t[None, :], lam[:, None], out=np.zeros_like(m), where=lam[:, None] > 0)
    # Values never reached keep their own row (q_ii = 1), so Q stays stochastic.
    unreached = lam <= 0
    q[unreached, :] = 0
    q[unreached, unreached] = 1
    return np.asarray(m @ q, dtype=np.float64)


def destatis(D: int, V: float, js: int = 0) -> PTable:
    """The maximum-entropy ptable of the Destatis ptable method (Giessing & Enderle).

    For each original count ``i >= 1`` the distribution of the perturbed
    count ``j`` over ``max(0, i - D) .. i + D`` (without the values
    ``1 .. js``, which are never published) has maximum entropy subject to
    ``E[j - i] = 0`` (unbiased) and ``E[(j - i)^2] = V`` (fixed variance),
    so ``p(j) ∝ exp(a (j - i) + b (j - i)^2)``; ``a`` and ``b`` solve the
    convex dual. Zeros stay zero. Rows 0 .. D + js; the last stands for all
    larger counts.

    Args:
        D: Maximum deviation (>= 1).
        V: Variance of the perturbation (0 < V, and achievable within +-D).
        js: No perturbed count in 1 .. js (>= 0).

    Raises:
        ParameterError: for impossible parameters.
        ComputationError: if a row's constraints cannot be met.
    """
    d = _cap(D, "D (maximum deviation)")
    var = _positive("V (variance)", V)
    if isinstance(js, bool) or not isinstance(js, int) or js < 0:
        raise ParameterError(f"js must be an integer >= 0, not {js!r}")
    if var >= d * d:
        raise ParameterError(f"V must be below D**2 = {d * d} to be achievable, not {V}")
    rows: list[tuple[list[int], list[float]]] = [([0], [1.0])]
    for i in range(1, d + js + 1):
        support = [j for j in range(max(0, i - d), i + d + 1) if not 1 <= j <= js]
        v = np.array(support) - i
        rows.append((v.tolist(), _maxent(v, var, i).tolist()))
    return PTable.from_rows(
        "ckm",
        rows,
        parameters={"D": d, "V": var, "js": js},
        paper="Giessing & Enderle, ptable method (R package ptable of Destatis)",
    )


def _maxent(v: np.ndarray, var: float, i: int) -> np.ndarray:
    vf = v.astype(np.float64)
    if vf.min() >= 0 or vf.max() <= 0:
        raise ComputationError(
            f"count {i}: the allowed values do not allow an unbiased perturbation"
        )

    def dual(x: np.ndarray) -> float:
        z = x[0] * vf + x[1] * (vf * vf - var)
        top = z.max()
        return float(top + np.log(np.exp(z - top).sum()))

    res = optimize.minimize(dual, np.zeros(2), method="BFGS", options={"gtol": 1e-12})
    z = res.x[0] * vf + res.x[1] * (vf * vf - var)
    p = np.exp(z - z.max())
    p = np.asarray(p / p.sum(), dtype=np.float64)
    mean = float((p * vf).sum())
    got = float((p * vf * vf).sum())
    if abs(mean) > 1e-6 or abs(got - var) > 1e-6:
        raise ComputationError(
            f"count {i}: no distribution on perturbations {vf.astype(int).tolist()} has mean 0 "
            f"and variance {var}; lower V or raise D"
        )
    return p
