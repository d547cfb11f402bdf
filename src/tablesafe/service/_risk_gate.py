"""The putative-risk ceiling: refuse a table that makes the best guess too sure of too many uniques.

A site sets ``putative_uniques_ceiling`` in ``[datasets.rules]``. Before a
new table with counts is answered, the gate measures the stable claimed
uniques (:mod:`tablesafe.rules._ceiling`: computed from published figures and
the candidate's own, never from the microdata) of the published tables
nearest it (:mod:`tablesafe.rules._ceiling._nearest`: of those sharing a
variable with it, directly or through each other, as many as the site's
``putative_max_cells`` lets measure together), with it and without. The
table is refused with :class:`~tablesafe.RiskCeilingExceeded` when its
figure with the table is above the ceiling and above the figure without it
(a table that adds nothing to the guess's confidence is answered, whatever
the figure). A table already published, and a table without counts (the
measure reads counts alone: it would add nothing), are answered without a
measure.

**Incremental.** Each measure is kept per set of tables measured. The share
with the table is measured only until it cannot exceed the ceiling (often
with no solve); the share without it, exactly, only when the share with it
is above the ceiling.

**What is published.** The audit log's answered tables for the dataset
(every key, every replica, jobs too): their requests read when first seen
by this process, the tables with counts rebuilt with the site's builder
(answers are deterministic) when a measure first needs them; a table
answered by another replica counts once its audit row is written.

**Refusals are kept.** A refusal is stored in the state store with what it
was measured on, under the service's digest of the checked request, the
settings and the microdata's identity; the service gives it again at once,
before building anything (:meth:`tablesafe.rules._admit.Admission.refused_before`).

Limitations: the measure runs outside the state store's transaction, so two
tables of one component asked at the same instant are each measured
without the other; a table whose own open cells, linked by its figures,
are more than ``putative_max_cells`` and may hold uniques, or for which no
table is found within the node limit, is refused, since it cannot be
measured.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tablesafe._builder import TableBuilder
from tablesafe._errors import RiskCeilingExceeded, UserError
from tablesafe._request import Statistic, TableRequest
from tablesafe.output._table import ProtectedTable
from tablesafe.rules._ceiling._measure import MAX_OPEN_CELLS, PutativeRisk, putative_risk
from tablesafe.rules._ceiling._nearest import Nearest
from tablesafe.rules._ledger import TableFigures
from tablesafe.service._bodies import TableBody
from tablesafe.state import StateStore

__all__ = ["RiskGate"]


@dataclass
class RiskGate:
    """One dataset's gate: the tables published, those with counts built, measures kept."""

    published: set[TableRequest] = field(default_factory=set)
    tables: dict[TableRequest, ProtectedTable] = field(default_factory=dict)
    pending: list[TableRequest] = field(default_factory=list)
    seen_bodies: set[str] = field(default_factory=set)
    measures: dict[frozenset[TableRequest], PutativeRisk] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    nearest: Nearest | None = None

    def sync(self, store: StateStore, name: str, builder: TableBuilder) -> None:
        """Take in the requests the audit log says were answered since the last call.

        Only their requests are read here (a published table is answered
        without a measure); the tables with counts are built when a measure
        first needs them (:meth:`_built`).
        """
        from pydantic import ValidationError

        for _, body in store.served_tables(name):
            key = json.dumps(body, sort_keys=True)
            if key in self.seen_bodies:
                continue
            self.seen_bodies.add(key)
            try:
                request = builder.check(TableBody.model_validate(body).to_request())
            except (UserError, ValidationError):
                continue  # answered under other rules or a catalog since changed
            if request not in self.published:
                self.published.add(request)
                if request.statistic != Statistic.WEIGHTED:  # the measure reads counts alone
                    self.pending.append(request)

    def _built(self, builder: TableBuilder) -> list[ProtectedTable]:
        """The published tables with counts, built (answers are deterministic)."""
        for request in self.pending:
            try:
                self.tables[request] = builder.replay(request).table
            except UserError:
                continue  # answered under other rules
        self.pending.clear()
        return list(self.tables.values())

    @staticmethod
    def refused(store: StateStore, name: str, key: str) -> tuple[str, TableFigures] | None:
        """The stored refusal of the table whose decision digest is ``key``, or None."""
        return store.ceiling_refusal(name, key)

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
        key: str | None = None,
        figures: Callable[[], TableFigures] | None = None,
    ) -> None:
        """Refuse ``table`` if it raises the putative risk of the tables nearest it past ceiling.

        A refusal is stored under ``key`` with the table's figures (computed
        by ``figures`` when it refuses) when both are given: the same table
        asked again is refused with the same message (:meth:`refused`), by
        this process or any other.

        Raises:
            RiskCeilingExceeded: saying the share with and without the table
                and the ceiling, or that the share cannot be measured within
                ``max_cells``.
        """
        if table.counts is None:
            return  # nothing the measure reads: with it and without it are one figure
        with self.lock:
            self.sync(store, name, builder)
            if request in self.published:
                return
            if self.nearest is None:
                self.nearest = Nearest(
                    builder.dataset.catalog, builder.protection, min_cell_size, max_cells
                )
            measured: dict[str, Any] = {"ceiling": ceiling, "max_cells": max_cells}
            try:
                self.measure(self.nearest, table, self._built(builder), ceiling, measured)
            except RiskCeilingExceeded as exc:
                if key is None or figures is None:
                    raise
                message, _ = store.record_ceiling_refusal(name, key, str(exc), figures(), measured)
                raise RiskCeilingExceeded(message) from exc
            finally:
                self.nearest.forget(table)

    def measure(
        self,
        nearest: Nearest,
        table: ProtectedTable,
        published: list[ProtectedTable],
        ceiling: float,
        measured: dict[str, Any],
    ) -> PutativeRisk:
        """The share with ``table`` (the gate's decision), against the ``published`` tables.

        The share with the table is measured only until it cannot exceed the
        ceiling; the share without it, exactly, only when the share with it
        does (the refusal then gives both). Either is a function of the
        tables alone, so the decision and its message are the same in every
        process, whatever it measured before. What was measured is written
        into ``measured``.

        Raises:
            RiskCeilingExceeded: as :meth:`check`.
        """
        chosen, component = nearest.select(table, published)
        members = [t.request for t in chosen]
        measured.update(tables=sorted(repr(r) for r in members), component=component)
        catalog, prot = nearest.catalog, nearest.protection
        kw = {"min_cell_size": nearest.min_cell_size, "max_cells": nearest.max_cells}
        after = self._kept(frozenset([*members, table.request]), ceiling, lambda: putative_risk(
            catalog, [*chosen, table], prot, ceiling=ceiling, **kw
        ))  # fmt: skip
        measured["with"] = after.share
        if after.share <= ceiling:
            return after
        try:
            before: PutativeRisk | None = self._kept(frozenset(members), None, lambda: (
                putative_risk(catalog, chosen, prot, **kw)
            ))  # fmt: skip
        except RiskCeilingExceeded:
            before = None  # too large to measure without it: the share with it decides
        measured["without"] = None if before is None else before.share
        if before is not None and after.share <= before.share:
            return after
        raise RiskCeilingExceeded(_refusal(after, before, len(chosen), component, ceiling))

    def _kept(
        self,
        key: frozenset[TableRequest],
        ceiling: float | None,
        measure: Callable[[], PutativeRisk],
    ) -> PutativeRisk:
        """A measure, kept: a bound serves a measure under a ceiling only."""
        kept = self.measures.get(key)
        if kept is None or not (kept.exact or ceiling is not None):
            kept = measure()
            self.measures[key] = kept
        return kept


def _refusal(
    after: PutativeRisk, before: PutativeRisk | None, chosen: int, component: int, ceiling: float
) -> str:
    """The ceiling's refusal: what was measured, the shares with and without the table."""
    without = (
        f"{100 * before.share:.1f}% without it"
        if before is not None
        else "without it, more than this site measures"
    )
    tables = "the published table" if chosen == 1 else f"the {chosen} published tables"
    if chosen == 0:
        which, whose = "this table alone", "its"
        if component:
            which += (
                f" (none of the {component} published tables sharing a variable with it fits "
                "with it within this site's limit)"
            )
    elif chosen == component:
        which, whose = f"it and {tables} sharing a variable with it", "their"
    else:
        which = f"it and {tables} nearest it (of {component} sharing a variable with it)"
        whose = "their"
    return (
        f"this table is refused: the best-guess reconstruction of {which} would claim "
        f"{100 * after.share:.1f}% of {whose} records as sample uniques in every one of its "
        f"near-optimal solutions ({without}), above this dataset's putative-risk ceiling of "
        f"{100 * ceiling:g}%. Tables already published are still answered; a coarser table, "
        "or one of other variables, may fit"
    )
