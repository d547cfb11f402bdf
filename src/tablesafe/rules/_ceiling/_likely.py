"""The most probable table under the ptable: the best guess's maximum a posteriori solve (HiGHS).

The L1-closest table (:mod:`._closest`) treats every unit of deviation alike
and leaves the many tables equally close to the solver's whim. The intruder
knows more:

* **the ptable** says, for a true count ``i``, the probability ``p(j | i)``
  of each published value ``j`` (DESIGN decision 3): under the cell-key
  method a true 1 is published as 0 to 4, with 0 and 1 far likelier than 4,
  and an empty cell stays 0;
* **record-set consistency** (DESIGN decision 2): the same record set carries
  the same noise in every table, so a figure published twice is one
  observation, not two (:func:`distinct_figures`);
* **the published margins** make some tables more plausible than others: a
  log-linear fit to the published figures (:func:`prior_means`, iterative
  proportional fitting, the intruder's own) gives each full cell a Poisson
  prior mean ``mu``.

The guess maximises ``sum_k log p(j_k | (A x)_k) + w sum_c log Poisson(x_c;
mu_c)`` over non-negative integer tables that meet every published interval.
``-log p(j | i)`` is not convex in ``i``, so each figure gets one binary per
true count it allows (at most ``2 D + 1`` under the cell-key method):
``sum_t z_kt = 1``, ``(A x)_k = sum_t i_t z_kt`` and the cost ``sum_t -log
p(j_k | i_t) z_kt``. The prior's cost ``x log(1/mu) + log x!`` is convex, so
each cell gets unit steps of rising cost (filled in order) and a last step
for everything beyond them.

The prior's weight ``w`` (:data:`PRIOR_WEIGHT`) was chosen on files other
than the one the tests score (docs/attacks.md, "The best guess").
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tablesafe._protection import Protection
from tablesafe.rules._ceiling._closest import run_model
from tablesafe.rules._ceiling._constraints import System

__all__ = [
    "PRIOR_WEIGHT",
    "Likelihood",
    "Posterior",
    "exact_likelihood",
    "likeliest_table",
    "likelihood_of",
    "ptable_likelihood",
]

#: The weight of the log-linear prior against the ptable's log-likelihood.
PRIOR_WEIGHT = 0.3

#: Unit steps of each cell's prior cost; one more step takes any larger count.
_STEPS = 12


class Likelihood:
    """``log p(j | i)`` of a mechanism, per published value ``j`` when first asked.

    Args:
        mech: A ptable mechanism (rows of ``(v, p)`` and ``row_index``), or
            None: no protection, a published value is its true count.
    """

    def __init__(self, mech: Any = None) -> None:
        self.mech = mech
        self._memo: dict[int, tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]] = {}
        if mech is not None:
            self.rows = [
                (np.asarray(v)[np.asarray(p) > 0], np.asarray(p)[np.asarray(p) > 0])
                for v, p in (*mech.rows, *getattr(mech, "residue_rows", ()))
            ]
            self.vmin = min(int(v.min()) for v, _ in self.rows)
            self.vmax = max(int(v.max()) for v, _ in self.rows)

    def candidates(self, j: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """The true counts that can publish ``j``, and ``-log p(j | i)`` of each.

        Negative results are published as 0 (the mechanism's floor), so their
        probabilities add up at ``j = 0``.
        """
        if self.mech is None or j < 0:
            return np.array([j] if j >= 0 else [], dtype=np.int64), np.zeros(1 if j >= 0 else 0)
        if j not in self._memo:
            i = np.arange(max(j - self.vmax, 0), j - self.vmin + 1, dtype=np.int64)
            rid = self.mech.row_index(i)
            prob = np.zeros(i.size)
            for k, r in enumerate(rid.tolist()):
                v, p = self.rows[r]
                prob[k] = float(p[np.maximum(i[k] + v, 0) == j].sum())
            ok = prob > 0
            self._memo[j] = (i[ok], -np.log(prob[ok]))
        return self._memo[j]

    def matrix(self, top: int) -> npt.NDArray[np.float64]:
        """``log p(j | i)`` for ``i`` and ``j`` in ``0 .. top`` (-inf where impossible)."""
        out = np.full((top + 1, top + 1), -np.inf)
        for j in range(top + 1):
            i, cost = self.candidates(j)
            keep = i <= top
            out[i[keep], j] = -cost[keep]
        return out


def exact_likelihood(top: int) -> Likelihood:
    """No protection: a published value is its true count (``top`` is not needed)."""
    del top
    return Likelihood(None)


def ptable_likelihood(mech: Any, top: int) -> Likelihood:
    """The :class:`Likelihood` of a ptable mechanism (computed per value: ``top`` unused)."""
    del top
    return Likelihood(mech)


def distinct_figures(
    members: Sequence[npt.NDArray[np.int64]], values: npt.NDArray[np.float64]
) -> tuple[list[npt.NDArray[np.int64]], npt.NDArray[np.float64]]:
    """Figures of the same cells and value, once: one record set, one noise, one observation."""
    seen: set[tuple[bytes, float]] = set()
    out_m: list[npt.NDArray[np.int64]] = []
    out_v: list[float] = []
    for v, j in zip(members, values.tolist(), strict=True):
        key = (np.asarray(v, dtype=np.int64).tobytes(), float(j))
        if key not in seen:
            seen.add(key)
            out_m.append(v)
            out_v.append(float(j))
    return out_m, np.asarray(out_v, dtype=np.float64)


def prior_means(
    m: int,
    members: Sequence[npt.NDArray[np.int64]],
    values: npt.NDArray[np.float64],
    *,
    iterations: int = 50,
) -> npt.NDArray[np.float64]:
    """A log-linear fit to the published figures (iterative proportional fitting), per cell.

    Each figure in turn scales the cells it sums toward its published value,
    from a uniform start; the fixed order and count make it deterministic.
    Only published figures enter: the prior is the intruder's.
    """
    mu = np.ones(m)
    for _ in range(iterations):
        for v, j in zip(members, values.tolist(), strict=True):
            s = float(mu[v].sum())
            if v.size and s > 0:
                mu[v] *= max(j, 0.05) / s  # a published 0 still leaves its cells a little
    return np.maximum(mu, 1e-6)


def likeliest_table(
    system: System,
    ub0: npt.NDArray[np.float64],
    members: Sequence[npt.NDArray[np.int64]],
    values: npt.NDArray[np.float64],
    likelihood: Likelihood,
    *,
    time_limit: float,
    perturbation: npt.NDArray[np.float64] | None = None,
    prior_weight: float = PRIOR_WEIGHT,
    max_nodes: int | None = None,
) -> tuple[npt.NDArray[np.int64] | None, bool]:
    """The non-negative integer table of highest posterior given ``values``.

    Args:
        system: The published intervals as constraints (hard).
        ub0: Each full cell's upper bound (cells at 0 are not in the model).
        members: Per figure, the model variables it sums.
        values: Per figure, the published value.
        likelihood: The mechanism's ``log p(j | i)``.
        time_limit: Seconds for the solver.
        perturbation: Optional small costs added to the cells (another
            near-optimal table per perturbation, for the ranked reconstruction).
        max_nodes: A branch-and-bound node limit (deterministic, unlike the time limit).
        prior_weight: The log-linear prior's weight (0: maximum likelihood).

    Returns:
        ``(table, optimal)``: the full cross-classification (flat; None when
        the solver found no point in time) and whether it is proven optimal.
    """
    model = Posterior(system, ub0, members, values, likelihood, prior_weight=prior_weight)
    return model.solve(perturbation, time_limit=time_limit, max_nodes=max_nodes)


class Posterior:
    """The posterior's MIP for one set of figures, built once and solved under several costs.

    The perturbed re-solves of the ranked reconstruction and of the
    putative-risk measure (:mod:`._risk`) change only the cells' costs: the
    figures' binaries, the prior's fit (IPF) and the HiGHS model are the
    same, so they are built once (:func:`likeliest_table` is one solve).
    """

    def __init__(
        self,
        system: System,
        ub0: npt.NDArray[np.float64],
        members: Sequence[npt.NDArray[np.int64]],
        values: npt.NDArray[np.float64],
        likelihood: Likelihood,
        *,
        prior_weight: float = PRIOR_WEIGHT,
    ) -> None:
        import highspy

        self.system = system
        self.size = int(ub0.size)
        members, values = distinct_figures(members, values)
        m = int(system.alive.size)
        model = _Model(m, np.zeros(m))
        model.add_intervals(system)
        for v, j in zip(members, values.tolist(), strict=True):
            model.add_figure(v, *likelihood.candidates(int(j)), int(j))
        if prior_weight > 0:
            model.add_prior(prior_means(m, members, values), prior_weight, ub0[system.alive])
        self.lp = model.lp(ub0[system.alive], highspy)
        self.cost = np.asarray(self.lp.col_cost_, dtype=np.float64).copy()

    def solve(
        self,
        perturbation: npt.NDArray[np.float64] | None = None,
        *,
        time_limit: float,
        max_nodes: int | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[npt.NDArray[np.int64] | None, bool]:
        """The most probable table with ``perturbation`` added to the cells' costs.

        Args:
            perturbation: Costs per full cell (None: none).
            time_limit: Seconds for the solver.
            max_nodes: A branch-and-bound node limit.
            options: Further HiGHS options.

        Returns:
            ``(table, optimal)``: the full cross-classification (None when
            no point was found) and whether it is proven optimal.
        """
        import highspy

        m = int(self.system.alive.size)
        cost = self.cost.copy()
        if perturbation is not None:
            cost[:m] += perturbation[self.system.alive]
        self.lp.col_cost_ = cost
        h = run_model(self.lp, time_limit=time_limit, max_nodes=max_nodes, options=options)
        if int(h.getInfo().primal_solution_status) != 2:
            return None, False
        cols = np.asarray(h.getSolution().col_value, dtype=np.float64)
        full = np.zeros(self.size, dtype=np.int64)
        full[self.system.alive] = np.rint(cols[:m]).astype(np.int64)
        return full, h.getModelStatus() == highspy.HighsModelStatus.kOptimal


class _Model:
    """The MIP's columns and rows: the cells ``x`` first, then each figure's and prior's steps."""

    def __init__(self, m: int, cost_x: npt.NDArray[np.float64]) -> None:
        self.m = m
        self.ncol = m
        self.cost: list[npt.NDArray[np.float64]] = [cost_x]
        self.upper: list[npt.NDArray[np.float64]] = []
        self.integer: list[npt.NDArray[np.bool_]] = [np.ones(m, dtype=bool)]
        self.entries: list[tuple[npt.NDArray[np.int64], ...]] = []  # rows, cols
        self.values: list[npt.NDArray[np.float64]] = []
        self.lo: list[npt.NDArray[np.float64]] = []
        self.hi: list[npt.NDArray[np.float64]] = []
        self.nrow = 0

    def _columns(
        self, cost: npt.NDArray[np.float64], upper: npt.NDArray[np.float64], integer: bool
    ) -> npt.NDArray[np.int64]:
        cols = self.ncol + np.arange(cost.size, dtype=np.int64)
        self.ncol += cost.size
        self.cost.append(cost)
        self.upper.append(upper)
        self.integer.append(np.full(cost.size, integer))
        return cols

    def _row(
        self, cols: npt.NDArray[np.int64], vals: npt.NDArray[np.float64], lo: float, hi: float
    ) -> None:
        self.entries.append((np.full(cols.size, self.nrow, dtype=np.int64), cols))
        self.values.append(vals)
        self.lo.append(np.array([lo]))
        self.hi.append(np.array([hi]))
        self.nrow += 1

    def add_intervals(self, system: System) -> None:
        """The published intervals: ``lo <= A x <= hi``."""
        self.entries.append((system.rows + self.nrow, system.cols))
        self.values.append(np.ones(system.rows.size))
        self.lo.append(system.lo)
        self.hi.append(system.hi)
        self.nrow += int(system.lo.size)

    def add_figure(
        self,
        v: npt.NDArray[np.int64],
        i: npt.NDArray[np.int64],
        c: npt.NDArray[np.float64],
        j: int,
    ) -> None:
        """One figure: a binary per true count it allows, one chosen, the cells summing to it.

        The sum is written ``A x - sum_t (i_t - j) z_t = j``, the same set as
        ``A x = sum_t i_t z_t`` since the ``z`` add up to 1, with
        coefficients of a few units (the ptable's reach) where the true
        counts (thousands) made HiGHS's bound propagation crawl: 20 s or
        more of a 9-table component's root node, against 3 s.
        """
        z = self._columns(c, np.ones(i.size), True)
        self._row(z, np.ones(i.size), 1.0, 1.0)
        offset = (i - j).astype(np.float64)
        self._row(np.r_[v, z], np.r_[np.ones(v.size), -offset], float(j), float(j))

    def add_prior(
        self,
        mu: npt.NDArray[np.float64],
        weight: float,
        ub: npt.NDArray[np.float64] | None = None,
    ) -> None:
        """Each cell's Poisson cost ``x log(1/mu) + log x!`` as steps of rising cost.

        Per cell, in cell order: its steps' columns, then the row ``x_c =
        sum of its steps`` (built at once: a loop per cell took 0.2 s of
        each solve's model at 1,536 cells). A cell whose upper bound ``ub``
        is below :data:`_STEPS` gets only the unit steps it can fill and no
        last step: the same costs for every count it can hold, in a smaller
        model.
        """
        m = self.m
        units = np.arange(1, _STEPS + 2, dtype=np.float64)
        steps = weight * (np.log(units)[None, :] - np.log(mu)[:, None])
        upper = np.tile(np.r_[np.ones(_STEPS), np.inf], (m, 1))
        keep = np.ones((m, _STEPS + 1), dtype=bool)
        if ub is not None:
            # Unit steps up to the cell's bound; the last step only past _STEPS.
            bound = np.minimum(ub, _STEPS + 1)
            keep = np.arange(_STEPS + 1)[None, :] < bound[:, None]
        y = self._columns(steps[keep], upper[keep], False)
        counts = keep.sum(axis=1)
        cells = np.repeat(np.arange(m, dtype=np.int64), counts)
        rows = self.nrow + np.r_[np.arange(m, dtype=np.int64), cells]
        cols = np.r_[np.arange(m, dtype=np.int64), y]
        order = np.argsort(rows, kind="stable")
        self.entries.append((rows[order], cols[order]))
        self.values.append(np.r_[np.ones(m), -np.ones(y.size)][order])
        self.lo.append(np.zeros(m))
        self.hi.append(np.zeros(m))
        self.nrow += m

    def lp(self, ub: npt.NDArray[np.float64], highspy: Any) -> Any:
        """The HiGHS model."""
        from scipy import sparse

        rows = np.concatenate([r for r, _ in self.entries])
        cols = np.concatenate([c for _, c in self.entries])
        a = sparse.csc_matrix(
            (np.concatenate(self.values), (rows, cols)), shape=(self.nrow, self.ncol)
        )
        inf = highspy.kHighsInf
        upper = np.r_[ub, *self.upper]
        lo, hi = np.concatenate(self.lo), np.concatenate(self.hi)
        lp = highspy.HighsLp()
        lp.num_col_ = self.ncol
        lp.num_row_ = self.nrow
        lp.col_cost_ = np.concatenate(self.cost)
        lp.col_lower_ = np.zeros(self.ncol)
        lp.col_upper_ = np.where(np.isinf(upper), inf, upper)
        lp.row_lower_ = np.where(np.isinf(lo), -inf, lo)
        lp.row_upper_ = np.where(np.isinf(hi), inf, hi)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = a.indptr.astype(np.int32)
        lp.a_matrix_.index_ = a.indices.astype(np.int32)
        lp.a_matrix_.value_ = a.data.astype(np.float64)
        lp.a_matrix_.num_col_ = self.ncol
        lp.a_matrix_.num_row_ = self.nrow
        kinds = np.concatenate(self.integer).tolist()
        lp.integrality_ = [
            highspy.HighsVarType.kInteger if k else highspy.HighsVarType.kContinuous for k in kinds
        ]
        return lp


def likelihood_of(protection: Protection) -> Callable[[int], Likelihood] | None:
    """What the intruder knows of the mechanism as ``log p(j | i)``, for the best guess.

    None for a mechanism without a ptable (record-level drop/add-up-to-q):
    the best guess is then the L1-closest table.
    """
    mech = protection.mechanism
    if mech is None:
        return exact_likelihood
    if protection.record_level or not (hasattr(mech, "rows") and hasattr(mech, "row_index")):
        return None
    return functools.partial(ptable_likelihood, mech)
