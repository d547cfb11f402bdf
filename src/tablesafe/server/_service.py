"""The table service: the site configuration put to work, independent of HTTP.

One :class:`TableService` serves every dataset of a site configuration. For
each table request it enforces the rules in this order, before anything is
returned: request limits (dimensions, cells; before any microdata is read),
tabulation (with the query timeout), protection with the small-cell and
precision rules, the universe-size rule and the putative-risk ceiling (a
refusal by either spends the table's figures in the ledger), then, in one
transaction of the state store, the account of published figures (which
cells are withheld, or a refusal) and the privacy ledger; a table with cells
withheld is protected again over the cells it publishes. Every
request, answered or refused, is written to the audit log.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from tablesafe._builder import Prepared, TableBuilder
from tablesafe._errors import (
    ConfigError,
    RefusedError,
    RiskCeilingExceeded,
    TablesafeError,
    UserError,
)
from tablesafe._protection import Protection
from tablesafe._protection import protection_from_settings as core_protection
from tablesafe._request import Statistic, TableRequest
from tablesafe._settings import (
    DatasetSettings,
    EngineKind,
    RuleSettings,
    SiteConfig,
    SliverScope,
)
from tablesafe.catalog._dataset import Dataset
from tablesafe.engines._base import Engine
from tablesafe.output._table import ProtectedTable
from tablesafe.rules._admission import Accounts, EngineCounts, admit, dataset_identity
from tablesafe.rules._ledger import (
    Budgets,
    TableFigures,
    TableShape,
    release_figures,
    table_figures,
    warm,
)
from tablesafe.rules._rules import check_universe_size, table_universe_size
from tablesafe.server._auth import Principal
from tablesafe.server._bodies import TableBody
from tablesafe.server._risk_gate import RiskGate
from tablesafe.server._tally import Tally
from tablesafe.state import StateStore, open_state

__all__ = ["NotFound", "TableService", "site_protection"]


class NotFound(UserError):
    """No such dataset, job, path or static file (HTTP 404, error type ``NotFound``)."""

    status_code = 404


def _budgets(rules: RuleSettings) -> Budgets:
    """The privacy budgets a dataset's rules set."""
    return Budgets(
        rules.privacy_budget_epsilon,
        rules.privacy_budget_epsilon_per_key,
        rules.privacy_budget_delta,
    )


def site_protection(dataset: DatasetSettings, site: SiteConfig) -> Protection:
    """The Protection a site configuration fixes for one of its datasets.

    Reads the secret where the configuration says, then defers to
    :func:`tablesafe._protection.protection_from_settings`, the one place
    that turns protection settings into a Protection.

    Raises:
        ConfigError: if the secret cannot be read.
        ParameterError: for impossible mechanism parameters.
    """
    return core_protection(dataset.protection, secret=site.secret(dataset), resolve=site.resolve)


# A cached answer: the protected table and its noisy figures (for the privacy ledger).
_Entry = tuple[ProtectedTable, TableFigures]


@dataclass
class _Served:
    settings: DatasetSettings
    dataset: Dataset
    builder: TableBuilder
    title: str
    # The microdata's identity (the account's key), computed when first needed.
    identity: str | None = None
    # This process's mirror of the account of published figures.
    accounts: Accounts = field(default_factory=Accounts)

    @functools.cached_property
    def risk_gate(self) -> RiskGate:
        """The putative-risk ceiling's memory of this dataset's published tables."""
        return RiskGate()


class TableService:
    """Everything the server does with data, rules and the audit log.

    Args:
        site: The validated site configuration.
        state: The state store: audit log, keys, rate limits, the guard's sets
            (default: the one the site configuration names, :func:`open_state`).

    Raises:
        ConfigError: if a dataset, its catalog, ptable or secret cannot be loaded.
    """

    def __init__(self, site: SiteConfig, state: StateStore | None = None) -> None:
        self.site = site
        self.state = state or open_state(site)
        # The audit log and the account are the state store's (one place, one transaction).
        self.audit = self.guard = self.state
        self._served: dict[str, _Served] = {}
        # Keyed on the whole checked request (frozen, hashable): every field that
        # changes the answer is in the key, including fields added later.
        self._cache: OrderedDict[tuple[str, TableRequest], _Entry] = OrderedDict()
        self._cache_lock = threading.Lock()
        # At most [server] concurrent_tables builds at once: the rest wait here, off the GIL,
        # so the builds under way (and the guard's lock they hold) are not slowed by them.
        limit = site.server.concurrent_tables
        self._slots = threading.BoundedSemaphore(limit) if limit else None
        # Tables answered, built or cached, per dataset (the metrics read it).
        self.tally = Tally()
        for ds in site.datasets:
            try:
                dataset = Dataset.open(site.resolve(ds.path), name=ds.name)
                protection = site_protection(ds, site)
            except ConfigError:
                raise
            except TablesafeError as exc:
                raise ConfigError(f"dataset {ds.name}: {exc}") from None
            engine = self._engine(ds)
            try:
                engine.ensure_valid(dataset)
            except TablesafeError as exc:
                raise ConfigError(f"dataset {ds.name}: {exc}") from None
            builder = TableBuilder(
                dataset,
                protection,
                engine=engine,
                magnitudes=ds.magnitudes.protection() if protection.mechanism is not None else None,
                rules=ds.rules,
            )
            # dp-marginals: the release is kept in the state store, one for every replica.
            builder.release_store = self.state
            self._served[ds.name] = _Served(
                ds, dataset, builder, ds.title or dataset.catalog.title or ds.name
            )
            # The accountant's distributions and each budget's count, before any table's
            # transaction needs them (the first use imports dp-accounting: seconds).
            warm(protection, builder.magnitude_protection, dataset.catalog, _budgets(ds.rules))

    def warm_accounts(self) -> int:
        """Read each dataset's account of published figures into memory; how many figures.

        A restarted server reads them before its first table does (a million
        figures take seconds: docs/benchmarks.md). Accounts kept per API key
        (``sliver_scope = "key"``) are read when the key first asks.
        """
        total = 0
        for name, s in self._served.items():
            rules = s.settings.rules
            if rules.sliver_min_difference <= 0 or rules.sliver_scope != SliverScope.DATASET:
                continue
            with self.guard.transaction(self.identity(name)) as tx:
                total += len(s.accounts.caught_up(tx, "*"))
        return total

    def close(self) -> None:
        """Close the engines' connections and the state store."""
        self.close_engines()
        self.state.close()

    def close_engines(self) -> None:
        """Close the engines' connections (a state store shared with another service stays)."""
        for s in self._served.values():
            close = getattr(s.builder.engine, "close", None)
            if close is not None:
                close()

    def _engine(self, ds: DatasetSettings) -> Engine:
        es = self.site.engine
        engine = self._reader(ds)
        if not es.cube_cache:
            return engine
        from tablesafe.engines import CubeCache

        return CubeCache(engine, max_cube_cells=es.max_cube_cells, max_cache_mib=es.max_cache_mib)

    def _reader(self, ds: DatasetSettings) -> Engine:
        es = self.site.engine
        if es.kind == EngineKind.DUCKDB:
            from tablesafe.engines import DuckDBEngine

            return DuckDBEngine(
                threads=es.threads,
                memory_limit=es.memory_limit,
                materialize=es.materialize,
                timeout=ds.rules.query_timeout_seconds,
            )
        if es.kind == EngineKind.MEMORY:
            from tablesafe.engines import MemoryEngine

            return MemoryEngine()
        from tablesafe import engines

        spark_engine = getattr(engines, "SparkEngine", None)
        if spark_engine is None:
            raise ConfigError("engine kind 'spark' is not available in this installation")
        spark: Engine = spark_engine(master=es.spark_master)
        return spark

    # -- catalog views --------------------------------------------------------------

    def dataset_names(self) -> list[str]:
        """Names of the datasets served."""
        return list(self._served)

    def served(self, name: str) -> _Served:
        """The served dataset ``name``.

        Raises:
            KeyError: if there is none.
        """
        return self._served[name]

    def require(self, name: str) -> _Served:
        """The served dataset ``name``, for a caller who named it.

        Raises:
            NotFound: for a dataset the site does not serve, naming those it does.
        """
        served = self._served.get(name)
        if served is None:
            raise NotFound(f"unknown dataset {name!r}; available: {', '.join(self._served)}")
        return served

    def describe(self, name: str) -> dict[str, Any]:
        """A dataset's public description: variables, categories, labels, rules, protection."""
        s = self._served[name]
        cat = s.dataset.catalog
        return {
            "name": name,
            "title": s.title,
            "weighted": cat.weight is not None,
            "variables": [
                {
                    "name": v.name,
                    "label": v.label,
                    "grouping_of": v.source,
                    "categories": [{"code": c.code, "label": c.label} for c in v.categories],
                }
                for v in cat.variables.values()
            ],
            "hierarchies": [
                {**h.to_dict(), "tree": h.tree(cat.variables)} for h in cat.hierarchies
            ],
            # Continuous variables for sum:/mean: (not the owner's bounds: a bound
            # may be set at the largest value).
            # What a table may count (the records' own unit first): the request's unit.
            "units": [str(cat.unit), *(str(u) for u in cat.units)],
            "magnitudes": [
                {
                    "name": m.name,
                    "label": m.label,
                    "unit": m.unit,
                    "negative": m.negative,
                    # Whether some records have no value (their figures have a base).
                    "item_nonresponse": m.missing is not None,
                }
                for m in cat.magnitudes.values()
            ],
            "rules": {
                "max_dimensions": s.settings.rules.max_dimensions,
                "min_universe_size": s.settings.rules.min_universe_size,
                "min_cell_size": s.settings.rules.min_cell_size,
                "small_cell_action": str(s.settings.rules.small_cell_action),
                "max_cells": s.settings.rules.max_cells,
                # The precision rule: which estimates are marked, and how.
                "max_rse": s.settings.rules.max_rse,
                "min_effective_count": s.settings.rules.min_effective_count,
                "unreliable_action": str(s.settings.rules.unreliable_action),
                # Medians and quantiles: published from this protected count.
                "quantile_min_count": s.settings.magnitudes.quantile_min_count,
            },
            "protection": s.builder.protection.describe(),
        }

    def identity(self, name: str) -> str:
        """The microdata identity of dataset ``name`` (one small query, the first time)."""
        s = self._served[name]
        if s.identity is None:
            s.identity = dataset_identity(s.builder.engine, s.dataset)
        return s.identity

    # -- tables --------------------------------------------------------------------------

    def answer(self, who: Principal, name: str, body: TableBody) -> ProtectedTable:
        """A table request as every door receives it (HTTP, jobs, agents): the one path.

        The body was validated by the door (its wire format); from here on the
        dataset, the request and every rule are checked in the same place for
        every door.

        Raises:
            NotFound: for a dataset not served.
            RequestError, RefusedError, ComputationError: as :meth:`table`.
        """
        self.require(name)
        return self.table(who, name, body.to_request())

    def table(self, who: Principal, name: str, request: TableRequest) -> ProtectedTable:
        """Build the protected table for ``request``, enforcing every rule.

        Waits its turn when ``[server] concurrent_tables`` builds are under way.

        Raises:
            RequestError, RefusedError, ComputationError: with a message for the user.
        """
        if self._slots is None:
            return self._table(who, name, request)
        with self._slots:
            return self._table(who, name, request)

    def _table(self, who: Principal, name: str, request: TableRequest) -> ProtectedTable:
        s = self._served[name]
        request = s.builder.check(request)
        if s.builder.protection.fixed_budget:
            return self._released(s, who, name, request)
        cache_key = (name, request)
        cached = self._cached(cache_key)
        if cached is not None:
            table, figures = cached
            # The cells it withholds are its stored decision; its figures are
            # published already, and the ledger counts them for this key too.
            self._admit(s, who, None, figures)
        else:
            self._ceiling_refused(s, who, request)
            prepared = s.builder.prepare(request, checked=True)
            # Protected first (DESIGN's path: mechanism, then rules); a table with
            # cells withheld is protected again with its margins over the rest.
            table = s.builder.finish(prepared, universe_rule=False).table
            try:
                self._universe_rule(s, table)
                self._risk_ceiling(s, request, table, prepared)
            except RefusedError:
                # Decided on the table's own figures: they spend as if published
                # (the account records nothing: nothing was published).
                self._admit(s, who, None, self._figures(s, prepared, None))
                raise
            withheld = self._admit(s, who, prepared, None)
            if withheld is not None and withheld.any():
                table = s.builder.finish(prepared, withheld, universe_rule=False).table
            self._store(cache_key, (table, self._figures(s, prepared, withheld)))
        self.tally.add(name, cached=cached is not None)
        return table

    def _figures(self, s: _Served, prepared: Prepared, withheld: Any) -> TableFigures:
        """A table's noisy figures (the ledger's), from its plan and the cells it publishes."""
        plan, work = prepared.plan, prepared.work
        computed, structural_zero = s.builder.cells(prepared)
        shape = TableShape(
            work,
            computed,
            structural_zero,
            work.statistic != Statistic.COUNT and s.dataset.catalog.weight is not None,
            withheld,
        )
        return table_figures(
            plan,
            shape,
            s.builder.protection,
            s.dataset.catalog,
            magnitudes=s.builder.magnitude_protection,
        )

    def _released(
        self, s: _Served, who: Principal, name: str, request: TableRequest
    ) -> ProtectedTable:
        """A ``dp-marginals`` table: post-processing of the site's one release.

        The ledger is given the release's one figure (:func:`release_figures`):
        the first table spends the site's whole (epsilon, delta), every other
        table nothing. The account of published figures has nothing to decide:
        every figure is a function of the release, however it is asked. The
        universe-size rule reads the table's own total (post-processing too);
        the putative-risk ceiling is not a setting of such a site.
        """
        release = s.builder.release()
        assert release is not None
        figures = release_figures(s.builder.protection, release)
        self._admit(s, who, None, figures)
        cache_key = (name, request)
        cached = self._cached(cache_key)
        if cached is None:
            table = s.builder.run(request, checked=True).table
            self._store(cache_key, (table, figures))
        else:
            table = cached[0]
        self.tally.add(name, cached=cached is not None)
        return table

    def _admit(
        self,
        s: _Served,
        who: Principal,
        prepared: Prepared | None,
        figures: TableFigures | None,
    ) -> Any:
        """The account of published figures and the privacy ledger, in one transaction.

        The account first (which cells the table withholds, or a refusal:
        :func:`tablesafe.rules._admission.admit`), then the ledger on the
        figures the table publishes (its budgets decide on published
        definitions alone); a refusal by either writes nothing.

        Returns:
            The cells withheld (extended shape), or None for a cached table.

        Raises:
            BudgetExhausted: for a table whose new figures take a record past a budget.
            RefusedError: for a table that would withhold too many cells.
        """
        identity = self.identity(s.settings.name)
        rules = s.settings.rules
        budgets = _budgets(rules)
        withheld = None
        with self.guard.transaction(identity) as tx:
            if prepared is not None:
                computed, structural_zero = s.builder.cells(prepared)
                withheld = admit(
                    tx,
                    s.accounts,
                    key_id=who.id,
                    plan=prepared.plan,
                    agg=prepared.aggregates,
                    cells=computed & ~structural_zero,
                    protection=s.builder.protection,
                    space=s.builder.definition_space,
                    rules=rules,
                    counted=EngineCounts(
                        s.builder.engine, s.dataset, prepared.full, s.builder.definition_space
                    ),
                ).withheld
                figures = self._figures(s, prepared, withheld)
            assert figures is not None
            if tx.ledger.check(who.id, figures, budgets):
                tx.spend(who.id, figures, s.settings.name)
        return withheld

    def _universe_rule(self, s: _Served, table: ProtectedTable) -> None:
        """The universe-size rule, on the table's protected total.

        The decision is a function of the table's own noisy figures, which
        the ledger has already counted (a refused table spends as an answered
        one would; the same request refused again spends nothing).
        """
        if s.settings.rules.min_universe_size <= 0:
            return
        check_universe_size(table_universe_size(table), s.settings.rules)

    def _risk_ceiling(
        self, s: _Served, request: TableRequest, table: ProtectedTable, prepared: Prepared
    ) -> None:
        """The putative-risk ceiling (:mod:`._risk_gate`) on the table's own figures.

        A refusal is stored with the table's figures (:meth:`_ceiling_refused`).
        """
        ceiling = s.settings.rules.putative_uniques_ceiling
        if ceiling is None:
            return
        s.risk_gate.check(
            self.state,
            s.settings.name,
            s.builder,
            request,
            table,
            ceiling=ceiling,
            min_cell_size=s.settings.rules.min_cell_size,
            max_cells=s.settings.rules.putative_max_cells,
            key=self._ceiling_key(s, request),
            figures=lambda: self._figures(s, prepared, None),
        )

    def _ceiling_key(self, s: _Served, request: TableRequest) -> str:
        """What decides the ceiling's refusal of a table, as a digest.

        The checked request, the dataset's settings and the microdata's
        identity: together they fix the table's figures (same request, same
        bytes). A refusal stands until the data or the settings change.
        """
        what = {
            "identity": self.identity(s.settings.name),
            "settings": s.settings.model_dump(mode="json"),
            "request": dataclasses.asdict(request),
        }
        text = json.dumps(what, sort_keys=True, default=str, separators=(",", ":"))
        return hashlib.blake2b(text.encode(), digest_size=16, person=b"ts-ceiling").hexdigest()

    def _ceiling_refused(self, s: _Served, who: Principal, request: TableRequest) -> None:
        """A table the ceiling refused before is refused again at once, with the same message.

        Nothing is built: the stored refusal holds the table's figures, which
        the ledger counts for this key as the first refusal did.
        """
        if s.settings.rules.putative_uniques_ceiling is None:
            return
        stored = s.risk_gate.refused(self.state, s.settings.name, self._ceiling_key(s, request))
        if stored is not None:
            message, figures = stored
            self._admit(s, who, None, figures)
            raise RiskCeilingExceeded(message)

    def _cached(self, key: tuple[str, TableRequest]) -> _Entry | None:
        with self._cache_lock:
            table = self._cache.get(key)
            if table is not None:
                self._cache.move_to_end(key)
            return table

    def _store(self, key: tuple[str, TableRequest], table: _Entry) -> None:
        size = self.site.server.cache_tables
        if size <= 0:
            return
        with self._cache_lock:
            self._cache[key] = table
            while len(self._cache) > size:
                self._cache.popitem(last=False)
