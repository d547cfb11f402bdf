"""The putative-risk ceiling: refuse a table that makes the best guess too sure of too many uniques.

A site sets ``putative_uniques_ceiling`` in ``[datasets.rules]``. Before a
new table is answered, the gate measures the stable claimed uniques
(:mod:`tablesafe.rules._ceiling._measure`: computed from published
figures and the candidate's own, never from the microdata) of the tables
already published that share a variable with it, directly or through each
other (its *connected component*), with it and without. The table is
refused with :class:`~tablesafe.RiskCeilingExceeded` when its figure with
the table is above the ceiling and above the figure without it (a table
that adds nothing to the guess's confidence is answered, whatever the
figure). A table already published is answered without a measure.

**Incremental.** Only the component's tables enter the measure; each
measure is kept per component (the set of its tables). The share with the
table is measured only until it cannot exceed the ceiling (often with no
solve: :func:`~tablesafe.rules._ceiling._measure.risk_bound`); the share
without it, exactly, only when the share with it is above the ceiling.

**What is published.** The audit log's answered tables for the dataset
(every key, every replica, jobs too), rebuilt with the site's builder
(answers are deterministic) when first seen by this process; a table
answered by another replica counts once its audit row is written.

Limitations: the measure runs outside the state store's transaction, so two
tables of one component asked at the same instant are each measured
without the other; a component whose measure needs more open cells than
``putative_max_cells``, or finds no table within the node limit, is
refused, since it cannot be measured.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tablesafe._builder import TableBuilder
from tablesafe._errors import RiskCeilingExceeded, UserError
from tablesafe._protection import Protection
from tablesafe._request import TableRequest
from tablesafe.catalog._catalog import Catalog
from tablesafe.output._table import ProtectedTable
from tablesafe.rules._ceiling._measure import (
    MAX_OPEN_CELLS,
    PutativeRisk,
    putative_risk,
    table_columns,
)
from tablesafe.state import StateStore

__all__ = ["RiskGate"]


@dataclass
class RiskGate:
    """One dataset's gate: the published tables this process knows, and measures kept."""

    tables: dict[TableRequest, tuple[frozenset[str], ProtectedTable]] = field(default_factory=dict)
    seen_bodies: set[str] = field(default_factory=set)
    measures: dict[frozenset[TableRequest], PutativeRisk] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def sync(self, store: StateStore, name: str, builder: TableBuilder) -> None:
        """Take in the tables the audit log says were answered since the last call."""
        from pydantic import ValidationError

        from tablesafe.server._bodies import TableBody

        for _, body in store.served_tables(name):
            key = json.dumps(body, sort_keys=True)
            if key in self.seen_bodies:
                continue
            self.seen_bodies.add(key)
            try:
                request = builder.check(TableBody.model_validate(body).to_request())
                table = builder.run(request, checked=True).table
            except (UserError, ValidationError):
                continue  # answered under other rules or a catalog since changed
            self._add(builder, request, table)

    def _add(self, builder: TableBuilder, request: TableRequest, table: ProtectedTable) -> None:
        self.tables[request] = (table_columns(builder.dataset.catalog, request), table)

    def component(self, columns: frozenset[str]) -> list[TableRequest]:
        """The published tables connected to ``columns`` through shared columns, in order."""
        reach, members = set(columns), set()
        grown = True
        while grown:
            grown = False
            for request, (cols, _) in self.tables.items():
                if request not in members and cols & reach:
                    members.add(request)
                    reach |= cols
                    grown = True
        return sorted(members, key=repr)  # the same order in every process

    def check(
        self,
        store: StateStore,
        name: str,
        builder: TableBuilder,
        request: TableRequest,
        table: ProtectedTable,
        *,
        ceiling: float,
        min_cell_size: int,
        max_cells: int = MAX_OPEN_CELLS,
    ) -> None:
        """Refuse ``table`` if it raises its component's stable claimed uniques past ``ceiling``.

        Raises:
            RiskCeilingExceeded: saying the share with and without the table
                and the ceiling, or that the share cannot be measured within
                ``max_cells``.
        """
        with self.lock:
            self.sync(store, name, builder)
            if request in self.tables:
                return
            catalog, prot = builder.dataset.catalog, builder.protection
            self.measure(
                catalog, prot, request, table,
                ceiling=ceiling, min_cell_size=min_cell_size, max_cells=max_cells,
            )  # fmt: skip

    def measure(
        self,
        catalog: Catalog,
        protection: Protection,
        request: TableRequest,
        table: ProtectedTable,
        *,
        ceiling: float,
        min_cell_size: int,
        max_cells: int,
    ) -> PutativeRisk:
        """The share with ``table`` (the gate's decision), against the tables this gate knows.

        The share with the table is measured only until it cannot exceed the
        ceiling; the share without it, exactly, only when the share with it
        does (the refusal then gives both). Either is a function of the
        tables alone, so the decision and its message are the same in every
        process, whatever it measured before.

        Raises:
            RiskCeilingExceeded: as :meth:`check`.
        """
        members = self.component(table_columns(catalog, request))
        tables = [self.tables[r][1] for r in members]
        with_it = frozenset([*members, request])
        kw: dict[str, Any] = {"min_cell_size": min_cell_size, "max_cells": max_cells}
        after = self._kept(with_it, ceiling, lambda: putative_risk(
            catalog, [*tables, table], protection, ceiling=ceiling, **kw
        ))  # fmt: skip
        if after.share <= ceiling:
            return after
        try:
            before: PutativeRisk | None = self._kept(frozenset(members), None, lambda: (
                putative_risk(catalog, tables, protection, **kw)
            ))  # fmt: skip
        except RiskCeilingExceeded:
            before = None  # too large to measure without it: the share with it decides
        if before is not None and after.share <= before.share:
            return after
        without = (
            f"{100 * before.share:.1f}% without it"
            if before is not None
            else "without it, more than this site measures"
        )
        raise RiskCeilingExceeded(
            f"this table is refused: with it, the best-guess reconstruction of the "
            f"{len(members)} published tables sharing a variable with it would claim "
            f"{100 * after.share:.1f}% of their records as sample uniques in every one of "
            f"its near-optimal solutions ({without}), above "
            f"this dataset's putative-risk ceiling of {100 * ceiling:g}%. Tables already "
            "published are still answered; a coarser table, or one of other variables, "
            "may fit"
        )

    def _kept(
        self,
        key: frozenset[TableRequest],
        ceiling: float | None,
        measure: Callable[[], PutativeRisk],
    ) -> PutativeRisk:
        """A component's measure, kept: a bound serves a measure under a ceiling only."""
        kept = self.measures.get(key)
        if kept is None or not (kept.exact or ceiling is not None):
            kept = measure()
            self.measures[key] = kept
        return kept
