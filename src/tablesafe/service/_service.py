"""The table service: the site configuration put to work, independent of HTTP.

One :class:`TableService` serves every dataset of a site configuration, one
builder each. Every table goes the builder's path, whose admission
(:mod:`tablesafe.rules._admit`) applies every rule that refuses or withholds,
in the order written there, with the site's state store: what was published
decides. The service adds what is shared by every door: the cache of answered
tables (a cached table's figures are counted by the ledger for each key it is
given to) and the number of builds at once. Every request, answered or
refused, is written to the audit log by the door that received it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from cachetools import LRUCache

from tablesafe._builder import TableBuilder
from tablesafe._errors import ConfigError, RefusedError, RequestError, TablesafeError, UserError
from tablesafe._protection import site_protection
from tablesafe._request import TableRequest
from tablesafe._settings import DatasetSettings, EngineKind, SiteConfig, SliverScope
from tablesafe.catalog._dataset import Dataset
from tablesafe.engines import CubeCache, DuckDBEngine, MemoryEngine
from tablesafe.engines._base import Engine
from tablesafe.output._table import ProtectedTable
from tablesafe.rules._admit import Admission, budgets_of
from tablesafe.rules._alternatives import Alternative, Search, nearest, useful_steps
from tablesafe.rules._dry_run import DryRun, Verdict, reads_protected_figures, withheld_codes
from tablesafe.rules._ledger import TableFigures, warm
from tablesafe.service._bodies import TableBody
from tablesafe.service._risk_gate import RiskGate
from tablesafe.service._tally import Tally
from tablesafe.state import StateStore, open_state

__all__ = ["NotFound", "Principal", "TableService"]


@dataclass(frozen=True)
class Principal:
    """Who is asking: a key id and its role (``anonymous`` when keys are off).

    Every door names the caller this way (the server from an API key, jobs
    from the key that queued them, the agent interface from its key).
    """

    id: str
    role: Literal["user", "admin", "anonymous"]
    rate_limit_per_minute: int


class NotFound(UserError):
    """No such dataset, job, path or static file (HTTP 404, error type ``NotFound``)."""

    status_code = 404


# A cached answer: the protected table and its noisy figures (for the privacy ledger).
_Entry = tuple[ProtectedTable, TableFigures]


@dataclass
class _Served:
    settings: DatasetSettings
    dataset: Dataset
    builder: TableBuilder
    title: str


@dataclass
class _Ceiling:
    """The putative-risk ceiling of one served dataset, as the admission asks it.

    The gate (:mod:`tablesafe.service._risk_gate`) measures against the tables
    the audit log says were answered, rebuilt by the dataset's builder.
    """

    state: StateStore
    settings: DatasetSettings
    builder: TableBuilder
    gate: RiskGate = field(default_factory=RiskGate)

    def key(self, request: TableRequest) -> str:
        """What decides the ceiling's refusal of a table, as a digest.

        The checked request, the dataset's settings and the microdata's
        identity: together they fix the table's figures (same request, same
        bytes). A refusal stands until the data or the settings change.
        """
        what = {
            "identity": self.builder.admission.identity,
            "settings": self.settings.model_dump(mode="json"),
            "request": dataclasses.asdict(request),
        }
        text = json.dumps(what, sort_keys=True, default=str, separators=(",", ":"))
        return hashlib.blake2b(text.encode(), digest_size=16, person=b"ts-ceiling").hexdigest()

    def refused(self, key: str) -> tuple[str, TableFigures] | None:
        """The stored refusal of the table whose decision digest is ``key``, or None."""
        return self.gate.refused(self.state, self.settings.name, key)

    def check(
        self,
        request: TableRequest,
        table: ProtectedTable,
        *,
        key: str | None,
        figures: Callable[[], TableFigures] | None,
    ) -> None:
        """The gate's measure of ``table`` against the published tables nearest it.

        With ``key`` None (a dry run) a refusal is not stored.
        """
        rules = self.settings.rules
        assert rules.putative_uniques_ceiling is not None
        self.gate.check(
            self.state,
            self.settings.name,
            self.builder,
            request,
            table,
            ceiling=rules.putative_uniques_ceiling,
            min_cell_size=rules.min_cell_size,
            max_cells=rules.putative_max_cells,
            key=key,
            figures=figures,
        )


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
        # The [server] cache_tables answered most recently used (none for 0).
        self._cache: LRUCache[tuple[str, TableRequest], _Entry] = LRUCache(
            maxsize=max(site.server.cache_tables, 1)
        )
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
            # The site's admission: what this site published decides the next answer.
            builder.admission = Admission(
                builder.source,
                ds.rules,
                state=self.state,
                dataset=ds.name,
                ceiling=_Ceiling(self.state, ds, builder),
            )
            # dp-marginals: the release is kept in the state store, one for every replica.
            builder.release_store = self.state
            self._served[ds.name] = _Served(
                ds, dataset, builder, ds.title or dataset.catalog.title or ds.name
            )
            # The accountant's distributions and each budget's count, before any table's
            # transaction needs them (the first use imports dp-accounting: seconds).
            warm(protection, builder.magnitude_protection, dataset.catalog, budgets_of(ds.rules))

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
            with self.state.transaction(self.identity(name)) as tx:
                total += len(s.builder.admission.accounts.caught_up(tx, "*"))
        return total

    def load(self, progress: Callable[[str], None] | None = None) -> None:
        """Hold what the first tables need, before the server says it serves (issue 42).

        Each dataset's microdata as its engine keeps it (DuckDB with
        ``materialize``: in memory, seconds for millions of records) and its
        identity (the account's key), so that the first table costs what a
        later one does. ``progress`` gets a line as each dataset starts and ends.

        Raises:
            ConfigError: naming the dataset whose microdata cannot be read.
        """
        for name, s in self._served.items():
            t0 = time.perf_counter()
            records = s.builder.engine.ensure_valid(s.dataset).records
            if progress is not None:
                progress(f"loading dataset {name} ({records:,} records)")
            try:
                s.builder.engine.load(s.dataset)
                self.identity(name)
            except TablesafeError as exc:
                raise ConfigError(f"dataset {name}: {exc}") from None
            if progress is not None:
                progress(f"dataset {name} loaded in {time.perf_counter() - t0:.1f} s")

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
        return CubeCache(engine, max_cube_cells=es.max_cube_cells, max_cache_mib=es.max_cache_mib)

    def _reader(self, ds: DatasetSettings) -> Engine:
        es = self.site.engine
        if es.kind == EngineKind.DUCKDB:
            return DuckDBEngine(
                threads=es.threads,
                memory_limit=es.memory_limit,
                materialize=es.materialize,
                timeout=ds.rules.query_timeout_seconds,
            )
        if es.kind == EngineKind.MEMORY:
            return MemoryEngine()
        # Optional dependency: Spark is there only where the spark extra is installed.
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
        return self._served[name].builder.admission.identity

    # -- tables --------------------------------------------------------------------------

    def answer(
        self, who: Principal, name: str, body: TableBody, *, alternatives: bool = False
    ) -> ProtectedTable:
        """A table request as every door receives it (HTTP, jobs, agents): the one path.

        The body was validated by the door (its wire format); from here on the
        dataset, the request and every rule are checked in the same place for
        every door.

        Args:
            who: The caller.
            name: The dataset.
            body: The request.
            alternatives: Whether a partly withheld table comes with its nearest
                passing alternatives (a door that shows them: the agent interface);
                a refusal always does.

        Raises:
            NotFound: for a dataset not served.
            RequestError, RefusedError, ComputationError: as :meth:`table`.
        """
        self.require(name)
        request = body.to_request()
        table = self.table(who, name, request)
        if alternatives and table.withheld is not None and table.withheld.any():
            table = replace(table, alternatives=self.alternatives(who, name, request))
        return table

    def table(self, who: Principal, name: str, request: TableRequest) -> ProtectedTable:
        """Build the protected table for ``request``, enforcing every rule.

        Waits its turn when ``[server] concurrent_tables`` builds are under way.

        A refusal carries its nearest passing alternatives (:meth:`alternatives`).

        Raises:
            RequestError, RefusedError, ComputationError: with a message for the user.
        """
        try:
            if self._slots is None:
                return self._table(who, name, request)
            with self._slots:
                return self._table(who, name, request)
        except (RefusedError, RequestError) as exc:
            exc.alternatives = self.alternatives(who, name, request, exc)
            raise

    def _table(self, who: Principal, name: str, request: TableRequest) -> ProtectedTable:
        builder = self._served[name].builder
        bound = builder.bind(request)
        cache_key = (name, bound.request)
        cached = self._cached(cache_key)
        if cached is not None:
            table, figures = cached
            # The cells it withholds are its stored decision; its figures are
            # published already, and the ledger counts them for this key too.
            builder.admission.again(figures, who.id)
        else:
            built = builder.run(bound, key_id=who.id)
            table = built.table
            assert built.figures is not None
            self._store(cache_key, (table, built.figures))
        self.tally.add(name, cached=cached is not None)
        return table

    # -- dry runs (issue 40): the pre-flight check and the nearest passing alternatives ----

    def check(self, who: Principal, name: str, request: TableRequest) -> Verdict:
        """What asking for ``request`` would give ``who`` now; nothing published, nothing spent.

        The builder's path with a dry run of its admission
        (:meth:`~tablesafe.rules._admit.Admission.dry`): the same steps in the
        same order on the same reads, waiting its turn as a table does
        (``concurrent_tables``), writing nothing (:mod:`tablesafe.rules._dry_run`).
        """
        if self._slots is None:
            return self._dry_run(who, name, request)
        with self._slots:
            return self._dry_run(who, name, request)

    def check_body(self, who: Principal, name: str, body: TableBody) -> dict[str, Any]:
        """The pre-flight check as every door answers it (``tables:check``, ``check_table``).

        The verdict (:meth:`check`) with, for a table refused or partly withheld,
        its nearest passing alternatives; a request the builder cannot read is
        answered as refused with the error the table request would get.

        Raises:
            NotFound: for a dataset not served.
        """
        self.require(name)
        try:
            request = body.to_request()
        except UserError as exc:
            return {"dataset": name, **Verdict(exc).to_dict(), "alternatives": []}
        verdict = self.check(who, name, request)
        found: tuple[Alternative, ...] = ()
        if not verdict.passes or verdict.withheld:
            found = self.alternatives(who, name, request, verdict.refusal)
        return {"dataset": name, **verdict.to_dict(), "alternatives": [a.to_dict() for a in found]}

    def _dry_run(self, who: Principal, name: str, request: TableRequest) -> Verdict:
        s = self._served[name]
        builder = s.builder
        try:
            bound = builder.bind(request)
        except UserError as exc:
            return Verdict(exc, _cells(s, request))
        plan = bound.plan
        # The cells it has, the margins it asks (a grouping set's cells exclude its totals).
        cells = sum(math.prod(plan.shape[i] - 1 for i in gs) for gs in set(plan.grouping_sets))
        notes = DryRun(read_counts=reads_protected_figures(builder.protection, s.settings.rules))
        try:
            built = builder.run(bound, key_id=who.id, admission=builder.admission.dry(notes))
        except RefusedError as exc:
            return Verdict(exc, cells, ledger=notes.cost, undecided=tuple(notes.undecided))
        withheld = built.table.withheld
        codes = () if withheld is None else tuple(withheld_codes(built.plan, withheld))
        return Verdict(None, cells, codes, notes.cost, tuple(notes.undecided))

    def alternatives(
        self, who: Principal, name: str, request: TableRequest, refusal: UserError | None = None
    ) -> tuple[Alternative, ...]:
        """The nearest passing alternatives of a refused or partly withheld table.

        Each candidate is checked by :meth:`check`, at most
        ``alternatives_max_dry_runs`` of them, each counted against the key's
        rate limit (the search stops where the limit is reached); a request
        refused for a reason no alternative can change (an unknown variable,
        a malformed request) gets none.
        """
        s = self._served.get(name)
        if s is None:
            return ()
        rules = s.settings.rules
        if isinstance(refusal, RequestError) and len(request.dimensions) <= rules.max_dimensions:
            return ()
        try:
            checked = request.coerced(s.dataset.catalog)
        except UserError:
            return ()  # an unknown variable or category: nothing near it is known

        def limits(candidate: TableRequest) -> UserError | None:
            try:
                s.builder.check(candidate)
            except UserError as exc:
                return exc
            return None

        def dry_run(candidate: TableRequest) -> Verdict | None:
            if not self.state.hit(who.id, who.rate_limit_per_minute):
                return None
            try:
                return self.check(who, name, candidate)
            except TablesafeError as exc:
                return Verdict(RefusedError(f"not checked: {type(exc).__name__}"))

        search = Search(limits, dry_run, rules.alternatives_max_dry_runs, useful_steps(refusal))
        return tuple(nearest(s.dataset.catalog, checked, search))

    def _cached(self, key: tuple[str, TableRequest]) -> _Entry | None:
        with self._cache_lock:
            return self._cache.get(key)

    def _store(self, key: tuple[str, TableRequest], table: _Entry) -> None:
        size = self.site.server.cache_tables
        if size <= 0:
            return
        with self._cache_lock:
            self._cache[key] = table


def _cells(s: _Served, request: TableRequest) -> int | None:
    """A request's cells with margins, where it binds to the catalog (else None)."""
    try:
        return math.prod(request.bind(s.dataset.catalog).shape)
    except UserError:
        return None
