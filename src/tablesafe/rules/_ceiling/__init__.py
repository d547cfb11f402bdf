"""The putative-risk ceiling's measure: the best guess's stable uniques, from published figures.

A rule the server applies (``putative_uniques_ceiling``), so it lives with
the rules; the reconstruction attack of the workbench
(:mod:`tablesafe.attacks._reconstruct`) builds on the same pieces. The
modules, in the order the measure uses them: ``_cross`` (the full
cross-classification of a set of tables and where each table's cells fall
in it), ``_intervals`` (what the intruder knows of the mechanism: the true
counts each published value allows), ``_constraints`` (the published cells
as constraints; bound propagation; the figures the best guess reads),
``_closest`` (the integer table closest in L1 to the figures, HiGHS),
``_likely`` (the most probable table under the ptable), ``_highs`` (a
silent HiGHS) and ``_measure`` (the stable claimed uniques, their bound
without a solve, and the work limit). Nothing here reads microdata.
"""

from __future__ import annotations

from tablesafe.rules._ceiling._measure import (
    MAX_OPEN_CELLS,
    PutativeRisk,
    putative_risk,
    risk_bound,
    table_columns,
)

__all__ = ["MAX_OPEN_CELLS", "PutativeRisk", "putative_risk", "risk_bound", "table_columns"]
