"""A dry run of the admission: what asking for a table would give now, publishing nothing.

DESIGN decision 13: a refused or partly withheld table comes with the nearest
passing alternatives, each checked by a dry run of the same admission, and a
user may check a table before asking for it (the pre-flight check). A dry run
takes the real request's steps in the real request's order, on the same reads
(the request, the catalog, the state store's published figures, stored
decisions and ledger, and the protected figures the real request would read),
and writes nothing: no publication, no stored decision, no ledger row.

**What a dry run may read.** The protected figures a decision reads (the
table's own protected total for the universe-size rule, its figures for the
putative-risk ceiling, the protected counts of the blocks the account checks)
carry fixed noise (DESIGN decision 2), so no number of dry runs reveals more
about them than one real request would. Where that noise is accounted, though
(a site with a privacy budget, or a differentially private mechanism: the
ledger counts every figure a real request reads, answered or refused), a dry
run that read them would reveal, at no cost, what the ledger charges for. There
a dry run reads no protected figure the key was not given: the rules that
would are reported as *undecided* (decided when the table is asked), and only
the request limits, stored decisions and the ledger decide
(:func:`reads_protected_figures`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from tablesafe._errors import UserError
from tablesafe._protection import Protection
from tablesafe.catalog._variables import Code
from tablesafe.cells._plan import TabulationPlan
from tablesafe.rules._ledger import Budgets, LedgerIndex, TableFigures, _count_kind, worst_counts

if TYPE_CHECKING:  # a table without a site's rules imports no pydantic (the command line)
    from tablesafe._settings import RuleSettings

__all__ = [
    "ACCOUNT",
    "RISK_CEILING",
    "UNIVERSE_SIZE",
    "DryRun",
    "LedgerCost",
    "Verdict",
    "ledger_cost",
    "reads_protected_figures",
    "withheld_codes",
]

#: The code of a dimension's total in a withheld cell's coordinates (SDMX's, as the API's JSON).
TOTAL_CODE = "_T"
#: The rules a dry run may leave undecided (:func:`reads_protected_figures`).
UNIVERSE_SIZE, RISK_CEILING, ACCOUNT = "universe_size", "risk_ceiling", "account"


def reads_protected_figures(protection: Protection, rules: RuleSettings) -> bool:
    """Whether a dry run may read protected figures the key was not given (module docstring).

    Not where the ledger's figures are accounted: a site with a privacy
    budget, or counts protected by a differentially private mechanism.
    """
    budgeted = rules.privacy_budget_epsilon is not None or (
        rules.privacy_budget_epsilon_per_key is not None
    )
    return not budgeted and not _count_kind(protection).dp


@dataclass(frozen=True)
class LedgerCost:
    """What a table would add to the privacy ledger.

    Attributes:
        new_figures: Figures the key was not given (what its budget would count).
        new_figures_dataset: Figures not published from the dataset to any key.
        epsilon: Where a budget is set, the epsilon at ``delta`` the most loaded
            record this table's new figures hold would reach (for the key under a
            per-key budget, else for the dataset); None otherwise.
        budget: That budget, or None.
        delta: The delta epsilon is stated at.
    """

    new_figures: int
    new_figures_dataset: int
    epsilon: float | None
    budget: float | None
    delta: float

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (an infinite epsilon is null, as the ledger's report says)."""
        eps = self.epsilon
        return {
            "new_figures": self.new_figures,
            "new_figures_dataset": self.new_figures_dataset,
            "epsilon": None if eps is None or not np.isfinite(eps) else round(eps, 6),
            "budget": self.budget,
            "delta": self.delta,
        }


def ledger_cost(
    ledger: LedgerIndex, key_id: str, figures: TableFigures, budgets: Budgets
) -> LedgerCost:
    """What ``figures`` would add to the ledger for ``key_id`` (read in the transaction)."""
    mine = ledger.key(key_id)
    fresh_key = mine.fresh(figures)
    fresh_all = ledger.dataset.fresh(figures)
    budget, account, fresh = budgets.epsilon_per_key, mine, fresh_key
    if budget is None:
        budget, account, fresh = budgets.epsilon, ledger.dataset, fresh_all
    epsilon = None
    if budget is not None and fresh.any():
        new = account.families_for(figures, fresh, new=True)
        epsilon = worst_counts(account.families + new, touched_only=True).epsilon(budgets.delta)
    return LedgerCost(int(fresh_key.sum()), int(fresh_all.sum()), epsilon, budget, budgets.delta)


def withheld_codes(plan: TabulationPlan, withheld: npt.NDArray[np.bool_]) -> list[dict[str, Code]]:
    """The withheld cells as the API's JSON names cells: each dimension's code, ``_T`` a total."""
    out = []
    for at in zip(*np.nonzero(withheld), strict=True):
        out.append(
            {
                d.name: d.codes[int(j)] if int(j) < d.size else TOTAL_CODE
                for d, j in zip(plan.dimensions, at, strict=True)
            }
        )
    return out


@dataclass(frozen=True)
class Verdict:
    """A dry run's answer: what asking for the table would give this key now.

    Attributes:
        refusal: The error the request would be refused with, or None.
        cells: The table's cells, the margins it asks included (a request the limits
            refuse: every cell with every margin, as the limits count them; None for one
            that does not bind).
        withheld: The cells the account would withhold (each as :func:`withheld_codes`).
        ledger: What it would add to the privacy ledger (None where not reached).
        undecided: Rules decided only when the table is asked (module docstring).
    """

    refusal: UserError | None = None
    cells: int | None = None
    withheld: tuple[Mapping[str, Code], ...] = ()
    ledger: LedgerCost | None = None
    undecided: tuple[str, ...] = ()

    @property
    def passes(self) -> bool:
        """Whether the table would be answered (with ``withheld`` cells withheld)."""
        return self.refusal is None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form the pre-flight check answers (docs/http-api.md)."""
        refusal = None
        if self.refusal is not None:
            exc = self.refusal
            refusal = {"status": exc.status_code, "type": type(exc).__name__, "message": str(exc)}
        return {
            "passes": self.passes,
            "refusal": refusal,
            "cells": self.cells,
            "withheld": [dict(c) for c in self.withheld],
            "ledger": None if self.ledger is None else self.ledger.to_dict(),
            "undecided": list(self.undecided),
        }


@dataclass
class DryRun:
    """What a dry run of the admission notes, where the real request would write.

    An :class:`~tablesafe.rules._admit.Admission` given one
    (:meth:`~tablesafe.rules._admit.Admission.dry`) takes every decision and
    writes nothing: no publication, stored decision, stored refusal or ledger
    row.

    Attributes:
        read_counts: Whether it may read protected figures the key was not given
            (:func:`reads_protected_figures`); else the rules that would are noted
            in ``undecided``.
        undecided: The rules left to the request (:data:`UNIVERSE_SIZE`,
            :data:`RISK_CEILING`, :data:`ACCOUNT`).
        cost: What the table would add to the ledger (its last figures checked).
    """

    read_counts: bool
    undecided: list[str] = field(default_factory=list)
    cost: LedgerCost | None = None
