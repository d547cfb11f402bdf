"""The table service: the site configuration put to work, independent of HTTP.

One :class:`TableService` serves every dataset of a site configuration. For
each table request it enforces the rules in this order, before anything is
returned: request limits (dimensions, cells; before any microdata is read),
tabulation (with the query timeout), universe size, sliver guard, then
protection and the small-cell rule. Every request, answered or refused, is
written to the audit log.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tablesafe._aggregates import CellAggregates
from tablesafe._builder import TableBuilder
from tablesafe._catalog import Catalog, Code
from tablesafe._custom import check_grouping_limits, group_record_sets, plain_universe
from tablesafe._dataset import Dataset
from tablesafe._errors import ConfigError, TablesafeError
from tablesafe._protection import Protection
from tablesafe._protection import protection_from_settings as core_protection
from tablesafe._request import TableRequest, TabulationPlan
from tablesafe._rules import (
    PublishedSet,
    apply_small_cell_rule,
    cell_sliver_guard,
    check_request_limits,
    check_universe_size,
    intersect_universes,
    published_sets,
    sliver_guard,
    universe_fingerprint,
)
from tablesafe._settings import DatasetSettings, RuleSettings, SiteConfig
from tablesafe._table import ProtectedTable
from tablesafe.server._audit import AuditLog
from tablesafe.server._auth import Principal

__all__ = ["TableService", "checked_request", "protection_from_settings", "ruled_table"]


def protection_from_settings(dataset: DatasetSettings, site: SiteConfig) -> Protection:
    """The Protection a site configuration fixes for one of its datasets.

    Reads the secret where the configuration says, then defers to
    :func:`tablesafe._protection.protection_from_settings`, the one place
    that turns protection settings into a Protection.

    Raises:
        ConfigError: if the secret cannot be read.
        ParameterError: for impossible mechanism parameters.
    """
    return core_protection(dataset.protection, secret=site.secret(dataset), resolve=site.resolve)


# A cached answer: the protected table, its universe's size and fingerprint, and
# the record sets of its custom groups (universe, size, fingerprint) for the guard.
_Entry = tuple[
    ProtectedTable, int, str, list[tuple[dict[str, list[Code]], int, str]], list[PublishedSet]
]


@dataclass
class _Served:
    settings: DatasetSettings
    dataset: Dataset
    builder: TableBuilder
    title: str


def checked_request(request: TableRequest, catalog: Catalog, rules: RuleSettings) -> TableRequest:
    """``request`` checked against a dataset's request limits, codes in the catalog's types.

    Raises:
        RequestError, RefusedError: for a request the rules do not allow.
    """
    check_grouping_limits(
        request.groupings,
        max_groups=rules.max_custom_groups,
        max_categories=rules.max_categories_per_group,
    )
    check_request_limits(request, catalog, rules)
    return request.coerced(catalog)


def ruled_table(
    builder: TableBuilder, dataset: Dataset, request: TableRequest, rules: RuleSettings
) -> tuple[TabulationPlan, CellAggregates, ProtectedTable]:
    """The protected table a site's rules allow for a checked request (no history involved).

    The universe-size rule on the universe's protected count, then the protection, then the
    small-cell rule on the protected counts. What the sliver guard adds depends
    on what was published before, so the server applies it; the command line's
    ``--config`` preview applies this (the same bytes as the server's answer).

    Returns:
        The plan, the exact aggregates of every grouping set, and the table.

    Raises:
        RefusedError: for a universe under the minimum size.
    """
    plan, full = builder.plans(request, max_dimensions=rules.max_dimensions)
    agg = builder.engine.tabulate(dataset, full)
    # On the universe's protected count, one figure per record set: the refusal
    # reveals no more than publishing that count would (docs/attacks.md).
    check_universe_size(builder.protected_universe_size(plan, agg), rules)
    return plan, agg, apply_small_cell_rule(builder.protect(request, plan, agg), rules)


class TableService:
    """Everything the server does with data, rules and the audit log.

    Args:
        site: The validated site configuration.
        audit: The audit log (default: the configured SQLite file).

    Raises:
        ConfigError: if a dataset, its catalog, ptable or secret cannot be loaded.
    """

    def __init__(self, site: SiteConfig, audit: AuditLog | None = None) -> None:
        self.site = site
        self.audit = audit or AuditLog(site.resolve(site.server.audit_db))
        self._served: dict[str, _Served] = {}
        # Keyed on the whole checked request (frozen, hashable): every field that
        # changes the answer is in the key, including fields added later.
        self._cache: OrderedDict[tuple[str, TableRequest], _Entry] = OrderedDict()
        self._cache_lock = threading.Lock()
        for ds in site.datasets:
            try:
                dataset = Dataset.open(site.resolve(ds.path), name=ds.name)
                protection = protection_from_settings(ds, site)
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
                max_dimensions=ds.rules.max_dimensions,
                magnitudes=ds.magnitudes.protection() if protection.mechanism is not None else None,
            )
            self._served[ds.name] = _Served(
                ds, dataset, builder, ds.title or dataset.catalog.title or ds.name
            )

    def close(self) -> None:
        """Close the engines' connections and the audit log."""
        for s in self._served.values():
            close = getattr(s.builder.engine, "close", None)
            if close is not None:
                close()
        self.audit.close()

    def _engine(self, ds: DatasetSettings) -> Any:
        es = self.site.engine
        engine = self._reader(ds)
        if not es.cube_cache:
            return engine
        from tablesafe.engines import CubeCache

        return CubeCache(engine, max_cube_cells=es.max_cube_cells, max_cache_mib=es.max_cache_mib)

    def _reader(self, ds: DatasetSettings) -> Any:
        es = self.site.engine
        if es.kind == "duckdb":
            from tablesafe.engines import DuckDBEngine

            return DuckDBEngine(
                threads=es.threads,
                memory_limit=es.memory_limit,
                materialize=es.materialize,
                timeout=ds.rules.query_timeout_seconds,
            )
        if es.kind == "memory":
            from tablesafe.engines import MemoryEngine

            return MemoryEngine()
        from tablesafe import engines

        spark_engine = getattr(engines, "SparkEngine", None)
        if spark_engine is None:
            raise ConfigError("engine kind 'spark' is not available in this installation")
        return spark_engine(master=es.spark_master)

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
            "magnitudes": [
                {"name": m.name, "label": m.label, "unit": m.unit, "negative": m.negative}
                for m in cat.magnitudes.values()
            ],
            "rules": {
                "max_dimensions": s.settings.rules.max_dimensions,
                "min_universe_size": s.settings.rules.min_universe_size,
                "min_cell_size": s.settings.rules.min_cell_size,
                "small_cell_action": s.settings.rules.small_cell_action,
                "max_cells": s.settings.rules.max_cells,
            },
            "protection": s.builder.protection.describe(),
        }

    # -- tables --------------------------------------------------------------------------

    def table(self, who: Principal, name: str, request: TableRequest) -> ProtectedTable:
        """Build the protected table for ``request``, enforcing every rule.

        Raises:
            RequestError, RefusedError, ComputationError: with a message for the user.
        """
        s = self._served[name]
        rules = s.settings.rules
        request = checked_request(request, s.dataset.catalog, rules)
        cache_key = (name, request)
        cached = self._cached(cache_key)
        fresh = cached is None
        if cached is None:
            plan, agg, table = ruled_table(s.builder, s.dataset, request, rules)
            universe_n = agg.universe_n
            fingerprint = universe_fingerprint(name, agg)
            universe = plain_universe(request.universe, request.groupings, s.dataset.catalog)
            groups = group_record_sets(
                name,
                universe,
                request.groupings,
                s.dataset.catalog,
                plan.dimensions,
                agg.n,
                agg.cell_key,
            )
            cells = published_sets(name, s.dataset.catalog, universe, plan, agg)
        else:
            table, universe_n, fingerprint, groups, cells = cached
        universe = plain_universe(request.universe, request.groupings, s.dataset.catalog)

        def count(a: Mapping[str, Sequence[Code]], b: Mapping[str, Sequence[Code]]) -> int:
            return self._count(s, intersect_universes(s.dataset.catalog, a, b))

        # The universe, and every merged group of a custom grouping (a record set
        # of its own): one that differs from an answered universe or group by a
        # few records is a sliver.
        record_sets = [(universe, universe_n, fingerprint), *groups]
        for group, size, group_fp in record_sets:
            sliver_guard(
                store=self.audit,
                key_id=who.id,
                dataset=name,
                universe=group,
                size=size,
                fingerprint=group_fp,
                rules=rules,
                count=count,
            )
        # The record sets the table breaks down, against those already published.
        cell_sliver_guard(
            store=self.audit,
            key_id=who.id,
            dataset=name,
            sets=cells,
            rules=rules,
            count=count,
        )
        if fresh:
            self._store(cache_key, (table, universe_n, fingerprint, groups, cells))
        for group, size, group_fp in record_sets:
            self.audit.remember_universe(who.id, name, group, size, group_fp)
        self.audit.remember_sets(who.id, name, cells)
        return table

    def _count(self, s: _Served, universe: Mapping[str, Sequence[Code]]) -> int:
        cat = s.dataset.catalog
        if any(len(v) == 0 for v in universe.values()):
            return 0
        first = cat.source_variables[0].name
        plan = TableRequest((first,), universe=universe, statistic="count", margins="total").bind(
            cat
        )
        agg = s.builder.engine.tabulate(s.dataset, plan)
        return int(agg.n[-1])

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
