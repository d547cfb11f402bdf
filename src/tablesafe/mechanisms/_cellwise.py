"""Constructors of cell-wise mechanisms: each returns a :class:`~tablesafe.PTable`.

Sources: Shlomo, Krenzke & Li (2019), seed 000, Sections 2-3 (DP, PRAM,
drop/add-up-to-q, Tables 1-4); Li & Krenzke (2016), seed 004, Section 2
(drop/add-up-to-q); Giessing (2016) and Enderle & Giessing's R package
``ptable`` of Destatis (the maximum-entropy ptable of the cell-key method);
Shlomo & Young (2008) and Willenborg & De Waal (2001) (invariant PRAM).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tablesafe._errors import ComputationError, ParameterError
from tablesafe._protection_limits import MAX_Q_ENTRIES, check_number
from tablesafe.ptable._ptable import PTable

__all__ = [
    "PRAM_LARGE",
    "PRAM_SMALL",
    "destatis",
    "dp_geometric",
    "drop_add_q",
    "geometric_probabilities",
    "invariant_matrix",
    "pram_matrices",
    "pram_shlomo_young",
]


def geometric_probabilities(
    epsilon: float, sensitivity: float = 1, cap: int = 7
) -> npt.NDArray[np.float64]:
    """The capped discretised Laplace: ``P(v) ∝ exp(-epsilon |v| / sensitivity)``, ``|v| <= cap``.

    Seed 000, eq. (2) with the l1 utility ``u = -|a - b|`` and ``Δu =
    sensitivity``, normalised over ``v = -cap .. cap`` (Section 3.1).

    Returns:
        The probabilities of ``v = -cap .. cap`` (length ``2 cap + 1``).

    Raises:
        ParameterError: for epsilon <= 0, sensitivity <= 0 or cap < 1.
    """
    # The documented ranges (docs/cli.md): outside them the table is absurd, or
    # too large to hold (memory grows with cap squared), and never built.
    eps = check_number("protection.epsilon", epsilon)
    sens = check_number("ptable.sensitivity", sensitivity)
    c = check_number("protection.cap", cap)
    v = np.arange(-c, c + 1)
    base = np.exp(-eps * np.abs(v) / sens)
    return np.asarray(base / base.sum(), dtype=np.float64)


def dp_geometric(epsilon: float, sensitivity: float = 1, cap: int = 7) -> PTable:
    """The DP exponential mechanism with l1 utility (discretised Laplace), capped at ±cap.

    Seed 000, Sections 2.1 and 3.1, eq. (2): a count ``a`` is published as
    ``b`` with probability ∝ ``exp(-(ω/2) |a - b| / Δu)``, ``epsilon = ω/2``,
    ``Δu = sensitivity``; perturbations ``v = b - a`` are capped at ``±cap``.
    For epsilon = 2, cap = 7 this is Table 1 (0.76159 at 0, 0.10307 at ±1,
    ..., 0.000000633 at ±7). Negative results are set to 0 (post-processing
    keeps DP): in the row of a count ``i < cap`` the mass of ``v < -i`` moves
    to ``v = -i``; rows ``0 .. cap``, the last for all larger counts. Zero
    cells are perturbed (only structural zeros are not, which the
    TableBuilder handles). The cap's slippage is ``delta`` = the probability
    at the cap (6.33e-7 for epsilon = 2, cap = 7).

    Args:
        epsilon: Privacy parameter (> 0).
        sensitivity: The utility's sensitivity Δu (> 0; 1 for counts of
            inner cells, more when one record enters several published cells).
        cap: Largest absolute perturbation (integer >= 1).

    Raises:
        ParameterError: for epsilon <= 0, sensitivity <= 0 or cap < 1.
    """
    base = geometric_probabilities(epsilon, sensitivity, cap)
    c = int(cap)
    v = np.arange(-c, c + 1)
    rows = []
    for i in range(c + 1):
        keep = v >= -i
        p = base[keep].copy()
        p[0] += base[~keep].sum()
        rows.append((v[keep], p))
    return PTable.from_rows(
        "dp",
        rows,
        parameters={"epsilon": float(epsilon), "sensitivity": float(sensitivity), "cap": c},
        paper="Shlomo, Krenzke & Li (2019), Sections 2.1 and 3.1, eq. (2), Table 1",
    )


def drop_add_q(rate: float = 0.01, cap: int = 7) -> PTable:
    """Cell-wise drop/add-up-to-q (seed 000, Section 2.3; seed 004, Section 2).

    ``q = min(ceil(rate * i), cap)`` for an original count ``i >= 1`` (seed
    000: "1% of the cell value rounded up to the nearest integer and
    capped"); the perturbation is uniform over ``{-q, ..., q}``, so each of
    the ``2q + 1`` values has probability ``1 / (2q + 1)``. Zeros are not
    perturbed. Negative results cannot occur: ``rate <= 1`` gives
    ``q <= ceil(i) = i``, so ``i - q >= 0`` (a count of 1 can become 0).
    Rows ``0 .. L`` with ``L`` the first count whose ``q`` reaches the cap
    (601 for 1%, cap 7), the last for all larger counts. (Seed 004 words q as
    "the smallest integer greater than" ``rate * i``, which differs only when
    ``rate * i`` is a whole number; tablesafe follows seed 000.)

    Args:
        rate: The share of the count that sets q (0 < rate <= 1).
        cap: Largest q (integer >= 1).

    Raises:
        ParameterError: for a rate outside (0, 1], a cap outside 1..1000, or
            ``cap**2 / rate`` above :data:`~tablesafe._protection_limits.MAX_Q_ENTRIES`.
    """
    r: float = check_number("protection.rate", rate)
    c: int = check_number("protection.cap", cap)
    # Rows run to about cap / rate, each 2q + 1 wide: about cap**2 / rate entries (a
    # rate of 1e-300 once never finished). Checked before a row is built.
    if c * c / r > MAX_Q_ENTRIES:
        raise ParameterError(
            f"cap**2 / rate must be at most {MAX_Q_ENTRIES:,} (the ptable's size): cap {c} "
            f"needs a rate of at least {c * c / MAX_Q_ENTRIES:g}, not {rate!r}"
        )

    def q_of(i: int) -> int:
        # The tolerance keeps ceil(0.01 * 300) at 3 despite 0.01 * 300 = 3.0000000000000004.
        return min(max(math.ceil(r * i - 1e-9), 1), c)

    last = 1
    while q_of(last) < c:
        last += 1
    rows: list[tuple[list[int], list[float]]] = [([0], [1.0])]
    for i in range(1, last + 1):
        q = q_of(i)
        rows.append((list(range(-q, q + 1)), [1.0 / (2 * q + 1)] * (2 * q + 1)))
    return PTable.from_rows(
        "q",
        rows,
        parameters={"rate": r, "cap": c},
        paper="Shlomo, Krenzke & Li (2019), Section 2.3; Li & Krenzke (2016), Section 2",
    )


#: Seed 000 Table 2, as printed: original value 0-6 (rows) by perturbed value 0-6 (columns).
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


def _printed_large() -> np.ndarray:
    # Seed 000 Table 3 as printed: rows are geometric rows centred on the residue
    # with the printed edge entries; built row by row from the printed numbers.
    g = [0.76160, 0.10307, 0.01395, 0.00189, 0.00026, 3.46e-05, 4.68e-06, 6.33e-07]
    out = np.zeros((15, 15))
    for m in range(15):
        for w in range(15):
            d = abs(w - m)
            out[m, w] = g[d] if d < len(g) else 0.0
    edges = {
        (0, 1): 0.22227,
        (1, 0): 0.11920,
        (2, 1): 0.10525,
        (3, 2): 0.10337,
        (4, 3): 0.10311,
        (5, 4): 0.10308,
        (9, 10): 0.10308,
        (10, 11): 0.10311,
        (11, 12): 0.10337,
        (12, 13): 0.10525,
        (13, 14): 0.11920,
        (14, 13): 0.22227,
    }
    for (m, w), x in edges.items():
        out[m, w] = x
    return out


#: Seed 000 Table 3, as printed: residue m = count mod 15 (rows) by the value w
#: subtracted from the residue (columns); the perturbation is p = m - w.
PRAM_LARGE = _printed_large()


def _folded(center: int, size: int, base: np.ndarray, cap: int, low_to: int | None = None) -> Any:
    """A geometric row centred on ``center`` over values ``0 .. size-1``, tails folded.

    The mass that falls below 0 (above ``size - 1``) is added to the value
    next to the centre on that side (``center ∓ 1``); when that value is
    outside the range, to the value next to the centre on the other side.
    ``low_to`` overrides the target of the lower tail.
    """
    row = np.zeros(size)
    below = above = 0.0
    for d in range(-cap, cap + 1):
        x = center + d
        if x < 0:
            below += base[d + cap]
        elif x >= size:
            above += base[d + cap]
        else:
            row[x] += base[d + cap]
    lo = low_to if low_to is not None else (center - 1 if center >= 1 else center + 1)
    hi = center + 1 if center + 1 < size else center - 1
    row[lo] += below
    row[hi] += above
    return row


def pram_matrices(epsilon: float = 2.0, cap: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """PRAM's small-cell and large-cell matrices (seed 000 Tables 2 and 3), derived.

    Both are built from the capped geometric probabilities ``P(d)`` of
    :func:`geometric_probabilities` (Table 1 for epsilon 2, cap 7) centred
    on the original value, with the tails that leave the matrix folded back
    in (:func:`_folded`'s rule). The fold targets are read off the printed
    tables: every printed edge entry is a sum of Table 1 probabilities, e.g.
    Table 2 row 1: 0.11920 = P(d <= -1) on value 0 and 0.10308 = P(1) + P(6)
    + P(7) on value 2; Table 3 row 0: 0.22227 = P(1) + P(d <= -1). One entry
    breaks the rule and follows the printed table: Table 2's last row folds
    its lower tail onto value 0 (5.31e-6 = P(-6) + P(-7)), not onto value 5.

    Args:
        epsilon: Epsilon of the geometric probabilities (the paper: 2).
        cap: Their cap (the paper: 7). The small matrix covers values
            ``0 .. cap - 1`` and the large one the residues mod ``2 cap + 1``.

    Returns:
        ``(small, large)``: ``small[i, j]`` = P(perturbed j | original i) for
        ``i, j < cap`` (row 0 keeps zeros at 0); ``large[m, w]`` = P(w | residue m).

    Raises:
        ParameterError: for epsilon <= 0 or cap < 2.
    """
    c = check_number("ptable.pram_cap", cap, "cap")
    base = geometric_probabilities(epsilon, 1, c)
    small = np.zeros((c, c))
    small[0, 0] = 1.0
    for i in range(1, c):
        small[i] = _folded(i, c, base, c, low_to=0 if i == c - 1 else None)
    m = 2 * c + 1
    large = np.array([_folded(r, m, base, c) for r in range(m)])
    return small, large


def pram_shlomo_young(epsilon: float = 2.0, cap: int = 7) -> PTable:
    """PRAM for cell counts of Shlomo & Young (2008), as in seed 000 Sections 2.2 and 3.2.

    Counts ``0 .. cap-1`` use the small-cell matrix (Table 2: original value
    by perturbed value; zeros are never perturbed); larger counts use the
    large-cell matrix (Table 3): with residue ``m = count mod (2 cap + 1)``
    (mod 15) a value ``w`` is drawn from row ``m`` and the perturbation is
    ``p = m - w`` (seed 000, Section 3.2). Both matrices are *derived* from
    the geometric probabilities of Table 1 by :func:`pram_matrices` and
    equal the printed tables (:data:`PRAM_SMALL`, :data:`PRAM_LARGE`) to the
    printed precision, except that the paper prints ``P(0) = tanh(1) =
    0.761594`` as 0.76160 in Tables 2-3 (0.76159 in Table 1). No entry is
    taken from the printed tables except the fold target of Table 2's last
    row, as :func:`pram_matrices` explains. The data-dependent invariant
    version ``M*`` is :func:`invariant_matrix`.

    Args:
        epsilon: Epsilon of the underlying geometric probabilities (the paper: 2).
        cap: Their cap (the paper: 7).

    Raises:
        ParameterError: for epsilon <= 0 or cap < 2.
    """
    small, large = pram_matrices(epsilon, cap)
    c = int(cap)
    rows = []
    for i, row in enumerate(small):
        j = np.nonzero(row)[0]
        rows.append((j - i, row[j]))
    residues = []
    for m, row in enumerate(large):
        w = np.nonzero(row)[0][::-1]  # ascending perturbation m - w
        residues.append((m - w, row[w]))
    return PTable.from_rows(
        "pram",
        rows,
        residue_rows=residues,
        modulus=2 * c + 1,
        parameters={"epsilon_design": float(epsilon), "cap": c, "modulus": 2 * c + 1},
        paper="Shlomo & Young (2008); Shlomo, Krenzke & Li (2019), Section 3.2, Tables 2 and 3",
    )


def invariant_matrix(
    transition: npt.ArrayLike, frequencies: npt.ArrayLike, *, alpha: float = 1.0
) -> npt.NDArray[np.float64]:
    """The invariant PRAM matrix M* with ``t M* = t`` (Shlomo & Young 2008).

    The two-stage algorithm of Willenborg & De Waal (2001), as in Shlomo &
    Young (2008) and seed 000 Section 2.2: with ``λ = t M`` (the expected
    perturbed frequencies), the reverse matrix ``Q`` has ``q_ij = m_ji t_j /
    λ_i`` (the probability that a perturbed value ``i`` came from ``j``),
    and ``M* = M Q``. Then ``t M* = λ Q = t``: the expected frequencies of
    the cell values are preserved. ``M*`` depends on the data (``t``), so
    it is not differentially private.

    The perturbation level is controlled, as in Shlomo & Young (2008), by
    mixing with the identity: ``alpha M* + (1 - alpha) I`` is invariant for
    every ``alpha`` and changes a value with ``alpha`` times M*'s
    probability. ``alpha`` above 1 perturbs more; it may go up to the point
    where the diagonal entry of a value present in t reaches 0 (the rows of
    absent values, which t M* = t does not involve, are mixed with the
    largest weight up to ``alpha`` that keeps them non-negative).

    Args:
        transition: A row-stochastic L x L matrix M over cell values 0 .. L-1
            (e.g. :meth:`PTable.transition_matrix`).
        frequencies: t, the number of cells with each value (length L).
        alpha: The weight of M* against the identity (1: M* itself).

    Returns:
        The row-stochastic L x L matrix ``alpha M* + (1 - alpha) I``.

    Raises:
        ParameterError: for a non-square or non-stochastic M, a t of
            another length or with negative entries, or an ``alpha`` that is
            not positive or would make a diagonal entry negative.
    """
    if not isinstance(alpha, int | float) or not math.isfinite(alpha) or alpha <= 0:
        raise ParameterError(f"alpha must be a positive number, not {alpha!r}")
    m = np.asarray(transition, dtype=np.float64)
    t = np.asarray(frequencies, dtype=np.float64)
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ParameterError("the transition matrix must be square")
    if np.any(m < 0) or not np.allclose(m.sum(axis=1), 1, atol=1e-4):
        raise ParameterError("the transition matrix must have non-negative rows summing to 1")
    if t.shape != (m.shape[0],) or np.any(t < 0) or not np.all(np.isfinite(t)):
        raise ParameterError(f"frequencies must be {m.shape[0]} non-negative numbers")
    m = m / m.sum(axis=1, keepdims=True)
    lam = t @ m
    q = np.divide(m.T * t[None, :], lam[:, None], out=np.zeros_like(m), where=lam[:, None] > 0)
    # Values never reached keep their own row (q_ii = 1), so Q stays stochastic.
    unreached = lam <= 0
    q[unreached, :] = 0
    q[unreached, unreached] = 1
    star = m @ q
    if alpha == 1:
        return np.asarray(star, dtype=np.float64)
    moved = 1.0 - np.diag(star)
    used = t > 0
    top = float(moved[used].max()) if used.any() else 0.0
    limit = 1.0 / top if top > 0 else math.inf
    if alpha > limit * (1 + 1e-12):
        raise ParameterError(
            f"alpha {alpha:g} would make a diagonal entry negative; allowed: 0 < alpha <= "
            f"{limit:.6g} for this matrix and these frequencies"
        )
    # Rows of values absent from t play no part in t M* = t; where alpha > 1 would
    # take them below zero they are mixed with the largest weight they allow.
    weight = np.where(used, alpha, np.minimum(alpha, 1.0 / np.maximum(moved, 1e-300)))
    mixed = weight[:, None] * star
    mixed[np.diag_indices_from(mixed)] = 1.0 - weight * moved
    return np.asarray(np.maximum(mixed, 0.0), dtype=np.float64)


#: The R package's smallest probability (its ``epsilon``, 1e-8) and digits of the intervals.
_PT_EPS = 1e-8
_PT_DIGITS = 8


def destatis(
    D: int,
    V: float,
    js: int = 0,
    *,
    pstay: float | Sequence[float] | None = None,
    mono: bool | Sequence[bool] = True,
) -> PTable:
    """The maximum-entropy ptable of the cell-key method (R package ``ptable``, Destatis).

    ``create_cnt_ptable(D, V, js, pstay, mono)`` of Enderle & Giessing's R
    package, after Giessing (2016): for each original count ``i = 1 .. n``
    the perturbed counts ``j`` run over ``max(0, i - D) .. i + D`` without
    ``1 .. js`` (no published count in 1..js), and the probabilities
    maximise the entropy ``-Σ p log p`` subject to

    * ``Σ p = 1`` and ``Σ p v = 0`` (unbiased, ``v = j - i``),
    * ``Σ p v² <= V`` (the variance; below V only where V is out of reach),
    * ``p >= 1e-8`` (``>= pstay`` for ``v = 0`` when given),
    * with ``mono``: ``p`` does not decrease from ``v = -D`` up to ``v = 0``.

    Zeros stay zero (row 0). ``n = D`` for ``js = 0``, else ``D + js + 1``:
    the first count whose row is symmetric, which stands for all larger
    counts. As in the R package, a ``pstay`` that leaves the variance short
    of V (rounded to 3 decimals) is lowered by 0.05 and the row solved
    again, at most 20 times; the cumulative bounds are rounded to 8 digits
    and ``p`` is their difference, so the file matches the package's
    ``pTable``. The convex problem has one optimum, which SLSQP finds.

    Args:
        D: Maximum deviation (integer >= 1).
        V: Variance of the perturbation (> 0).
        js: No perturbed count in 1 .. js (integer >= 0).
        pstay: Probability that a count stays unchanged (0 < pstay < 1):
            one value, or one per count 1 .. n; default none (maximum entropy).
        mono: The monotony condition, for all counts or one per count 1 .. n.

    Raises:
        ParameterError: for impossible parameters.
        ComputationError: if a row's constraints cannot be met (as the R
            package stops: change V, mono or pstay).
    """
    d = check_number("protection.max_deviation", D, "D (maximum deviation)")
    var = check_number("protection.variance", V, "V (variance)")
    j_s = check_number("protection.js", js, "js")
    n = d if j_s == 0 else d + j_s + 1
    stays = _per_count(pstay, n, "pstay")
    monos = _per_count(mono, n, "mono")
    for s in stays:
        if s is not None:
            check_number("ptable.pstay", s)
    for mo in monos:
        if not isinstance(mo, bool | np.bool_):
            raise ParameterError(f"mono must be True or False, not {mo!r}")
    rows: list[tuple[np.ndarray, np.ndarray]] = [(np.array([0]), np.array([1.0]))]
    for i in range(1, n + 1):
        js_ = np.array([j for j in range(max(0, i - d), i + d + 1) if not 1 <= j <= j_s])
        v = js_ - i
        p = destatis_row(v, var, i, stays[i - 1], bool(monos[i - 1]), blocked=i <= j_s)
        # As the R package: bounds rounded to 8 digits, p their difference.
        ub_raw = np.cumsum(p)
        ub = np.round(ub_raw, _PT_DIGITS)
        lb = np.round(ub_raw - p, _PT_DIGITS)
        rows.append((v, ub - lb))
    params: dict[str, Any] = {"D": d, "V": var, "js": j_s}
    if pstay is not None:
        params["pstay"] = [float(x) for x in stays] if len(set(stays)) > 1 else float(stays[0])
    if not (isinstance(mono, bool) and mono):
        params["mono"] = mono if isinstance(mono, bool) else [bool(x) for x in mono]
    return PTable.from_rows(
        "ckm",
        rows,
        parameters=params,
        paper="Giessing (2016); R package ptable (Enderle & Giessing), create_cnt_ptable",
    )


def _per_count(value: Any, n: int, name: str) -> list[Any]:
    if value is None or isinstance(value, bool | numbers.Real):
        return [value] * n
    values = list(value)
    if len(values) != n:
        raise ParameterError(
            f"{name} must be one value or {n} values (one per count 1 .. {n}), not {len(values)}"
        )
    return values


def destatis_row(
    v: np.ndarray, var: float, i: int, pstay: float | None, mono: bool, *, blocked: bool
) -> np.ndarray:
    lb = np.full(v.size, _PT_EPS)
    zero = np.flatnonzero(v == 0)
    if pstay is not None and zero.size:
        lb[zero] = max(float(pstay), _PT_EPS)
    for _ in range(20):
        p = _maxent(v.astype(np.float64), var, lb, mono, i)
        got = float((p * v * v).sum())
        # The R package's loop: a preset pstay is lowered until the variance is met.
        if blocked or round(got, 3) == round(var, 3) or not zero.size or lb[zero[0]] <= _PT_EPS:
            return p
        lb[zero] = max(lb[zero[0]] - 0.05, _PT_EPS)
    return p


def _maxent(v: np.ndarray, var: float, lb: np.ndarray, mono: bool, i: int) -> np.ndarray:
    n = v.size
    cons: list[dict[str, Any]] = [
        {"type": "eq", "fun": lambda p: p.sum() - 1.0, "jac": lambda p: np.ones(n)},
        {"type": "eq", "fun": lambda p: p @ v, "jac": lambda p: v},
        {"type": "ineq", "fun": lambda p: var - p @ (v * v), "jac": lambda p: -(v * v)},
    ]
    zero = np.flatnonzero(v == 0)
    if mono and zero.size and zero[0] > 0:
        # p[k] <= p[k+1] for every k left of v = 0.
        a = np.zeros((zero[0], n))
        for k in range(zero[0]):
            a[k, k], a[k, k + 1] = -1.0, 1.0
        cons.append({"type": "ineq", "fun": lambda p: a @ p, "jac": lambda p: a})

    def entropy(p: np.ndarray) -> float:
        return float(np.sum(p * np.log(p)))

    def grad(p: np.ndarray) -> np.ndarray:
        return np.asarray(np.log(p) + 1.0)

    from scipy import optimize  # imported when needed: a slow import

    x0 = np.clip(np.full(n, 1.0 / n), lb, 1.0)
    res = optimize.minimize(
        entropy,
        x0,
        jac=grad,
        bounds=list(zip(lb, np.ones(n), strict=True)),
        constraints=cons,
        method="SLSQP",
        options={"ftol": 1e-15, "maxiter": 1000},
    )
    p = np.asarray(res.x, dtype=np.float64)
    ok = (
        abs(p.sum() - 1.0) < 1e-9
        and abs(float(p @ v)) < 1e-8
        and float(p @ (v * v)) <= var + 1e-8
        and bool(np.all(p >= lb - 1e-12))
    )
    if not ok:
        raise ComputationError(
            f"count {i}: no distribution on the perturbations {v.astype(int).tolist()} is "
            f"unbiased with variance at most {var} and the lower bounds; the combination of "
            "D, V, js and pstay does not work (try another V, mono or pstay)"
        )
    polished = _polish(p, v, var, lb, zero[0] if mono and zero.size else 0)
    return np.asarray(polished if polished is not None else p / p.sum(), dtype=np.float64)


def _polish(p: np.ndarray, v: np.ndarray, var: float, lb: np.ndarray, z: int) -> Any:
    """Solve the optimality conditions on SLSQP's active set to full precision.

    SLSQP stops within about 1e-8. On its active set (probabilities at their
    lower bound, ties forced by the monotony condition left of ``v = 0``,
    the variance bound) the maximum-entropy solution has the closed form
    ``p_g = exp(-1 - (C' λ)_g / n_g)`` for each group ``g`` of ``n_g`` tied
    probabilities, and Newton's method on ``λ`` gives it to ~1e-15. Returns
    None (keep SLSQP's answer) if the result breaks a constraint.
    """
    fixed = p <= lb + 1e-9
    group = np.arange(v.size)
    for k in range(z):  # merge ties of the monotony chain
        if not fixed[k] and not fixed[k + 1] and abs(p[k] - p[k + 1]) < 1e-7:
            group[k + 1] = group[k]
    free = [g for g in np.unique(group[~fixed])]
    if not free:
        return None
    members = [np.flatnonzero((group == g) & ~fixed) for g in free]
    size = np.array([m.size for m in members], dtype=np.float64)
    rows = [np.ones(v.size), v, v * v]
    rhs = [1.0, 0.0, var]
    use = [0, 1] + ([2] if abs(float(p @ (v * v)) - var) < 1e-7 else [])
    c = np.array([[rows[r][m].sum() for m in members] for r in use])
    r = np.array([rhs[k] - float(rows[k][fixed] @ lb[fixed]) for k in use])
    pg = np.array([p[m].mean() for m in members])
    lam, *_ = np.linalg.lstsq(c.T, -size * (np.log(pg) + 1.0), rcond=None)
    for _ in range(50):
        pg = np.exp(-1.0 - (c.T @ lam) / size)
        f = c @ pg - r
        if np.max(np.abs(f)) < 1e-15:
            break
        jac = -(c * (pg / size)) @ c.T
        try:
            lam = lam - np.linalg.solve(jac, f)
        except np.linalg.LinAlgError:
            return None
    out = lb.copy()
    for m, x in zip(members, pg, strict=True):
        out[m] = x
    ok = (
        abs(out.sum() - 1.0) < 1e-13
        and abs(float(out @ v)) < 1e-13
        and float(out @ (v * v)) <= var + 1e-12
        and bool(np.all(out >= lb - 1e-15))
        and all(out[k] <= out[k + 1] + 1e-15 for k in range(z))
        and float(np.max(np.abs(out - p))) < 1e-6
    )
    return out if ok else None
