"""The one admission: every rule that refuses or withholds a table, in one order, in one place.

DESIGN decisions 10, 13 and 15: every door (the HTTP API, the page, jobs, the
command line, the agent interface) builds a table through the builder, and
the builder hands each table to this admission. The order is written once,
here (:meth:`Admission.check`, :meth:`Admission.admit`):

1. **the request's limits** (custom groupings, dimensions, cells), before any
   microdata is read;
2. **a refusal the putative-risk ceiling stored** for the same table is given
   again at once, before anything is built;
3. **small cells and precision** on the protected table: small counts hidden
   (with what each statistic hides with them), unreliable estimates marked;
4. **the universe size**, on the table's own protected total;
5. **the putative-risk ceiling**, on the table's figures and those published;
6. in **one transaction of the state store** for the microdata: **the account
   of published figures** (the cells withheld, or a refusal past the site's
   share), then **the privacy ledger** (a refusal past a budget, or the new
   figures spent);
7. a table with cells withheld is protected again over the cells it
   publishes, and 3 applies to it.

A refusal at 4 or 5 spends the table's figures in the ledger (a transaction of
the ledger alone): the decision read them. Steps 2, 5 and 6 depend on what was
published: they apply where the admission has a state store (a site's
service); the builder alone (the owner's Python API, the command line)
applies 1, 3 and 4.

A **dry run** (:meth:`Admission.dry`: the pre-flight check, the nearest passing
alternatives) takes the same steps in the same order and writes nothing: the
ledger is read, not spent, and no decision, refusal or publication is stored
(:mod:`tablesafe.rules._dry_run`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

import numpy as np
import numpy.typing as npt

from tablesafe._errors import InternalError, RefusedError, RiskCeilingExceeded
from tablesafe._request import Statistic, TableRequest
from tablesafe.catalog._custom import check_grouping_limits
from tablesafe.cells._aggregates import CellAggregates
from tablesafe.cells._plan import TabulationPlan
from tablesafe.output._table import ProtectedTable
from tablesafe.rules._admission import Accounts, EngineCounts, Transaction, admit, dataset_identity
from tablesafe.rules._dry_run import ACCOUNT, RISK_CEILING, UNIVERSE_SIZE, DryRun, ledger_cost
from tablesafe.rules._ledger import Budgets, LedgerIndex, TableFigures, TableShape, table_figures
from tablesafe.rules._precision import apply_precision_rule
from tablesafe.rules._rules import (
    apply_small_cell_rule,
    check_plan_limits,
    check_universe_size,
    table_universe_size,
)
from tablesafe.state._store import LedgerMirror
from tablesafe.statistics import STATISTICS, PublishedStatistic, Source

if TYPE_CHECKING:
    from tablesafe._settings import RuleSettings

__all__ = ["OWNER", "Admission", "Admitted", "Candidate", "CeilingGate", "budgets_of"]

Mask = npt.NDArray[np.bool_]
#: The builder's protection of a prepared table, withholding the cells given (or none).
Protect = Callable[[Mask | None], ProtectedTable]
#: Who asks: the API key's id (the owner's own use has one too).
OWNER = "owner"


class Candidate(Protocol):
    """A table the builder has prepared: what the admission reads of it."""

    @property
    def request(self) -> TableRequest:
        """The checked request."""
        ...

    @property
    def work(self) -> TableRequest:
        """The request the table is built for."""
        ...

    @property
    def plan(self) -> TabulationPlan:
        """Its plan."""
        ...

    @property
    def full(self) -> TabulationPlan:
        """The plan the engine ran."""
        ...

    @property
    def aggregates(self) -> CellAggregates:
        """The exact aggregates (the owner's)."""
        ...

    @property
    def computed(self) -> Mask:
        """The table's cells."""
        ...

    @property
    def structural_zero(self) -> Mask:
        """Its structural zeros."""
        ...


class LedgerTransaction(Transaction, Protocol):
    """The state store's transaction as the ledger also reads and writes it.

    The store keeps the ledger's rows and replays them into the rules'
    :class:`~tablesafe.rules._ledger.LedgerIndex` (registered with it); it sees
    only the :class:`~tablesafe.state.LedgerMirror` side.
    """

    ledger: LedgerMirror

    def spend(self, key_id: str, figures: TableFigures, dataset: str | None = None) -> None:
        """Write a table's figures to the ledger when the transaction commits."""
        ...


class Store(Protocol):
    """What the admission needs of the state store: one transaction per microdata identity."""

    def transaction(self, identity: str) -> AbstractContextManager[LedgerTransaction]:
        """Serialise one admission and its writes for the microdata ``identity``."""
        ...


class CeilingGate(Protocol):
    """The putative-risk ceiling of one served dataset, as the admission asks it."""

    def key(self, request: TableRequest) -> str:
        """What decides a refusal of ``request``'s table, as a digest."""
        ...

    def refused(self, key: str) -> tuple[str, TableFigures] | None:
        """A stored refusal (its message and the table's figures), or None."""
        ...

    def check(
        self,
        request: TableRequest,
        table: ProtectedTable,
        *,
        key: str | None,
        figures: Callable[[], TableFigures] | None,
    ) -> None:
        """Refuse (:class:`~tablesafe.RiskCeilingExceeded`) a table past the ceiling.

        The refusal is stored under ``key`` with ``figures``; with None (a dry
        run) nothing is stored.
        """
        ...


@dataclass(frozen=True)
class Admitted:
    """A table admitted: what is published, and its figures as the ledger counts them.

    ``figures`` is ``None`` where the admission has no state store (nothing is counted).
    """

    table: ProtectedTable
    figures: TableFigures | None


def budgets_of(rules: RuleSettings) -> Budgets:
    """The privacy budgets a dataset's rules set."""
    return Budgets(
        rules.privacy_budget_epsilon,
        rules.privacy_budget_epsilon_per_key,
        rules.privacy_budget_delta,
    )


@dataclass(eq=False)
class Admission:
    """The one admission of one dataset's tables (module docstring: its order).

    Args:
        source: The dataset, its engine and protection.
        rules: The site's rules for the dataset, or ``None`` (no rule applies:
            the data owner's own tables).
        state: The state store where the site keeps what it published, or
            ``None`` (steps 2, 5 and 6 do not apply).
        dataset: The dataset's name (the ledger's rows say it).
        ceiling: The putative-risk ceiling's gate, where the site sets one.
        statistics: The statistics the small-cell rule asks what they hide.
        dry_run: Where set, a dry run: every decision taken, nothing written
            (:meth:`dry`).
    """

    source: Source
    rules: RuleSettings | None
    state: Store | None = None
    dataset: str | None = None
    ceiling: CeilingGate | None = None
    statistics: Sequence[PublishedStatistic] = STATISTICS
    accounts: Accounts = field(default_factory=Accounts)
    _identity: str | None = None
    dry_run: DryRun | None = None

    def dry(self, notes: DryRun) -> Admission:
        """This admission as a dry run noting in ``notes`` (same state, account and gate)."""
        return replace(self, dry_run=notes, _identity=self.identity)

    @property
    def identity(self) -> str:
        """The microdata's identity (the account's key): one small query, the first time."""
        if self._identity is None:
            self._identity = dataset_identity(self.source.engine, self.source.dataset)
        return self._identity

    # -- 1. the request's limits -----------------------------------------------------------

    def check_groupings(self, request: TableRequest, rules: RuleSettings | None = None) -> None:
        """Step 1: the request's custom groupings within the site's limits."""
        rules = rules or self.rules
        if rules is not None:
            check_grouping_limits(
                request.groupings,
                max_groups=rules.max_custom_groups,
                max_categories=rules.max_categories_per_group,
            )

    def check_plan(self, plan: TabulationPlan, rules: RuleSettings | None = None) -> None:
        """Step 1: the bound table within the site's limit on cells."""
        rules = rules or self.rules
        if rules is not None:
            check_plan_limits(plan, rules)

    def check(self, request: TableRequest, rules: RuleSettings | None = None) -> TableRequest:
        """Step 1: ``request`` within the limits (``rules``, default the dataset's), codes coerced.

        Raises:
            RequestError, RefusedError: for a request the catalog or the limits do not allow.
        """
        catalog = self.source.dataset.catalog
        self.check_groupings(request, rules)
        rules = rules or self.rules
        if rules is not None:
            self.check_plan(request.bind(catalog, max_dimensions=rules.max_dimensions), rules)
        return request.coerced(catalog)

    # -- 2 to 7 -------------------------------------------------------------------------------

    def refused_before(self, request: TableRequest, key_id: str) -> None:
        """Step 2: a table the ceiling refused before is refused again, nothing built.

        The stored refusal holds the table's figures, which the ledger counts
        for this key as the first refusal did.

        Raises:
            RiskCeilingExceeded: with the stored message.
        """
        gate = self._ceiling()
        if gate is None:
            return
        stored = gate.refused(gate.key(request))
        if stored is not None:
            message, figures = stored
            self.again(figures, key_id)
            raise RiskCeilingExceeded(message)

    def admit(
        self,
        candidate: Candidate,
        protected: ProtectedTable,
        protect: Protect,
        key_id: str = OWNER,
    ) -> Admitted:
        """Steps 3 to 7 for a prepared table: the table published, or a refusal.

        Args:
            candidate: The table prepared (request, plan, aggregates, cells).
            protected: It protected, every cell (no rule applied yet).
            protect: The builder's protection of it, withholding the cells given (step 7).
            key_id: Who asks (the account's scope and the ledger's key).

        Raises:
            RefusedError: from the rule that refuses the table (its subclasses
                say which: too small a universe, the ceiling, too many cells
                withheld, a budget).
        """
        table = self.ruled(protected, candidate.request)
        try:
            if self._reads_figures():
                self._universe_size(table)
                self._risk_ceiling(candidate, table)
        except RefusedError:
            if self.state is not None:
                # Decided on the table's own figures: they spend as if published
                # (the account records nothing: nothing was published).
                self.again(self.figures(candidate, None), key_id)
            raise
        if self.state is None:
            return Admitted(table, None)
        withheld, figures = self._account_and_ledger(candidate, key_id)
        if withheld.any():
            table = self.ruled(protect(withheld), candidate.request)
        return Admitted(table, figures)

    def released(
        self, table: ProtectedTable, request: TableRequest, figures: TableFigures, key_id: str
    ) -> Admitted:
        """A table read from a ``dp-marginals`` release: the ledger first, then steps 3 and 4.

        Every table is post-processing of the one release: the ledger is given
        the release's one figure (the first table spends the site's whole
        budget, every other nothing), the account of published figures has
        nothing to decide (every figure is a function of the release, however
        asked) and the putative-risk ceiling is not a setting of such a site.

        Raises:
            BudgetExhausted: for a key past a budget.
            RefusedError: for too small a universe.
        """
        self.again(figures, key_id)
        dry = self.dry_run
        if dry is not None and dry.cost is not None and dry.cost.new_figures:
            # No check reads a release the ledger has not charged this key for.
            dry.undecided += [UNIVERSE_SIZE] if self.rules and self.rules.min_universe_size else []
            return Admitted(table, None)
        table = self.ruled(table, request)
        self._universe_size(table)
        return Admitted(table, figures if self.state is not None else None)

    def replay(self, candidate: Candidate, protected: ProtectedTable) -> Admitted:
        """Steps 3 and 4 alone: a table as published where nothing was published before.

        What a measure over published tables rebuilds them as (the
        putative-risk ceiling): nothing is read of the state store, nothing
        spent or recorded.

        Raises:
            RefusedError: for too small a universe.
        """
        table = self.ruled(protected, candidate.request)
        self._universe_size(table)
        return Admitted(table, None)

    def ruled(self, table: ProtectedTable, request: TableRequest) -> ProtectedTable:
        """Step 3: the small-cell and precision rules on a protected table (``request``'s)."""
        rules = self.rules
        if rules is None:
            return table
        table = apply_small_cell_rule(table, rules, self.statistics)
        table = apply_precision_rule(table, rules, publish_se=request.replicates)
        return replace(table, request=request)

    def again(self, figures: TableFigures, key_id: str) -> None:
        """The ledger alone, for figures decided on already (a cached table, a refusal).

        Raises:
            BudgetExhausted: for figures that take a record past a budget.
        """
        if self.state is None or self.rules is None:
            return
        with self.state.transaction(self.identity) as tx:
            self._spend(tx, key_id, figures)

    def figures(self, candidate: Candidate, withheld: Mask | None) -> TableFigures:
        """A table's noisy figures (the ledger's), from its plan and the cells it publishes."""
        source = self.source
        work = candidate.work
        shape = TableShape(
            work,
            candidate.computed,
            candidate.computed & candidate.structural_zero,
            work.statistic != Statistic.COUNT and source.dataset.catalog.weight is not None,
            withheld,
        )
        return table_figures(
            candidate.plan,
            shape,
            source.protection,
            source.dataset.catalog,
            magnitudes=source.magnitudes,
        )

    def _universe_size(self, table: ProtectedTable) -> None:
        """Step 4: the universe-size rule, on the table's protected total.

        The decision is a function of the table's own noisy figures, which
        the ledger counts (a refused table spends as an answered one would;
        the same request refused again spends nothing).
        """
        if self.rules is not None and self.rules.min_universe_size > 0:
            check_universe_size(table_universe_size(table), self.rules)

    def _reads_figures(self) -> bool:
        """Whether steps 4 and 5 read the table's figures: not in a dry run that may not.

        A dry run on a site that accounts its noise reads no protected figure
        (:func:`~tablesafe.rules._dry_run.reads_protected_figures`): the rules
        that would are left to the request.
        """
        dry = self.dry_run
        if dry is None or dry.read_counts:
            return True
        rules = self.rules
        if rules is not None and rules.min_universe_size > 0:
            dry.undecided.append(UNIVERSE_SIZE)
        if self._ceiling() is not None:
            dry.undecided.append(RISK_CEILING)
        return False

    def _ceiling(self) -> CeilingGate | None:
        """The ceiling's gate, where the site sets a ceiling and keeps what it published."""
        rules = self.rules
        if rules is None or rules.putative_uniques_ceiling is None or self.state is None:
            return None
        return self.ceiling

    def _risk_ceiling(self, candidate: Candidate, table: ProtectedTable) -> None:
        """Step 5: the putative-risk ceiling, on the table's own figures (a refusal is stored)."""
        gate = self._ceiling()
        if gate is not None:
            stores = self.dry_run is None
            gate.check(
                candidate.request,
                table,
                key=gate.key(candidate.request) if stores else None,
                figures=(lambda: self.figures(candidate, None)) if stores else None,
            )

    def _account_and_ledger(self, candidate: Candidate, key_id: str) -> tuple[Mask, TableFigures]:
        """Step 6: the account of published figures, then the ledger, in one transaction.

        The account first (which cells the table withholds, or a refusal:
        :func:`tablesafe.rules._admission.admit`), then the ledger on the
        figures the table publishes (its budgets decide on published
        definitions alone). The account's refusal is kept as the table's
        decision, then raised; the ledger's writes nothing.
        """
        assert self.state is not None and self.rules is not None
        source = self.source
        dry = self.dry_run
        with self.state.transaction(self.identity) as tx:
            admitted = admit(
                tx,
                self.accounts,
                key_id=key_id,
                plan=candidate.plan,
                agg=candidate.aggregates,
                cells=candidate.computed & ~candidate.structural_zero,
                protection=source.protection,
                space=source.definition_space,
                rules=self.rules,
                counted=EngineCounts(
                    source.engine, source.dataset, candidate.full, source.definition_space
                ),
                dry_run=dry is not None,
                read_counts=dry is None or dry.read_counts,
            )
            withheld = admitted.withheld
            if dry is not None and admitted.undecided:
                dry.undecided.append(ACCOUNT)
            if admitted.refusal is None:
                figures = self.figures(candidate, withheld)
                self._spend(tx, key_id, figures)
        if admitted.refusal is not None:  # raised once the refusal is kept
            raise RefusedError(admitted.refusal)
        return withheld, figures

    def _spend(self, tx: LedgerTransaction, key_id: str, figures: TableFigures) -> None:
        """The ledger's check of ``figures`` for ``key_id``, and their spending if new."""
        assert self.rules is not None
        ledger = tx.ledger
        if not isinstance(ledger, LedgerIndex):
            raise InternalError("the state store's ledger is not the rules' LedgerIndex")
        budgets = budgets_of(self.rules)
        if self.dry_run is not None:  # what it would cost, refused by a budget or not
            self.dry_run.cost = ledger_cost(ledger, key_id, figures, budgets)
        if ledger.check(key_id, figures, budgets) and self.dry_run is None:
            tx.spend(key_id, figures, self.dataset)
