"""The reconstruction attack: rebuild the microdata's cross-classification from published tables.

A database reconstruction attack (Dinur & Nissim 2003; the US Census
Bureau's own attack on its 2010 tables) treats every published cell as a
linear constraint on the unknown counts of the *full cross-classification*
of the variables involved: one unknown ``x_c >= 0``, an integer, per
combination of categories of every source variable that any table or
universe mentions. A published cell of table ``t`` is the sum of the
``x_c`` it covers (its universe, its categories or groups, its margins),
and what the intruder knows of the mechanism turns its published value
``j`` into an interval of true counts:

* no protection: exactly ``j``;
* a ptable (cell-key method, DP, PRAM, drop/add-up-to-q): every original
  count ``i`` with ``p(j - i | i) > 0`` (negatives set to 0 included), of
  which the attack keeps the hull ``[min, max]``;
* record-level drop/add-up-to-q: every ``i`` with ``|j - i| <= q(i)``;
* a suppressed cell (small-cell rule): the union of the intervals of
  ``1 .. k - 1``;
* structural zeros: 0.

Which published cells carry that relation depends on the additivity
option: inner cells for ``aggregate`` tables and the record-level method
(their margins are sums of the inner cells, so they add nothing);
every cell for ``independent`` tables; the grand total alone for ``ipf``
tables (the fitted, rounded inner cells and margins keep no simple relation
to the true ones that the attack uses, so its figures for ``ipf`` are a
lower bound on what a cleverer intruder gets).

A cell is **pinned** (reconstructed exactly) when the minimum and the maximum
of ``x_c`` over the integer points of the feasible set agree. The true
table is such a point, so a cell is pinned exactly when no feasible integer
point differs from the truth in that cell. The attack decides cells in
stages, cheapest first, each of them sound:

1. cells inside a published cell whose interval is ``[0, 0]`` are 0;
2. bound propagation over the constraints (``x_c >= lo - sum of the other
   upper bounds``, ``x_c <= hi - sum of the other lower bounds``), repeated
   to a fixed point: a cell whose bounds meet is pinned;
3. a few integer programs (HiGHS) whose objective pushes every undecided
   cell away from its true value: each integer solution found frees every
   cell in which it differs from the truth;
4. for each cell still undecided, two linear programs (warm-started, one
   model): if the rounded LP maximum and minimum equal the true value the
   cell is pinned (the LP relaxation contains every integer point);
5. for each cell the LPs left open, two integer programs.

Stopped by the time limit, the attack reports the cells still undecided,
and the shares as a range: pinned cells (lower bound) to pinned plus
undecided cells (upper bound).

The package's modules, in the order the attack uses them: ``_truth`` (the
full cross-classification's true counts, read from the microdata),
``_solver`` (the HiGHS model), ``_moves`` (block-parity moves), ``_search``
(stage 3: integer points that free cells), ``_pins`` (stages 4 and 5: the
LP and integer bounds that pin cells), ``_decide`` (every stage in order),
``_result`` (the report) and ``_audit`` (the entry points); beside them
``_putative`` (the best guess, scored against the truth and a one-way
baseline) and ``_ranked`` (its uniques ranked by recurrence over perturbed
re-solves). What the intruder knows of the mechanism, the full
cross-classification's layout, the published cells as constraints and the
best guess's solves (the most probable table under the ptable, or the
integer table closest in L1 to every published figure) are the
putative-risk ceiling's too, a rule the server applies: they live in
:mod:`tablesafe.rules._ceiling`.
"""

from __future__ import annotations

from tablesafe.attacks._reconstruct._audit import all_k_way_requests, reconstruction_attack
from tablesafe.attacks._reconstruct._decide import reconstruct
from tablesafe.attacks._reconstruct._result import Progress, ReconstructionResult
from tablesafe.rules._ceiling._intervals import published_intervals

__all__ = [
    "Progress",
    "ReconstructionResult",
    "all_k_way_requests",
    "published_intervals",
    "reconstruct",
    "reconstruction_attack",
]
