"""The site configuration: one TOML file, validated at start.

This is the single registry of the server's settings. Every setting is a
field of a pydantic model below with a description; ``docs/site-config.md``
documents each one (a test checks that). The data owner fixes here what
users can never choose: the protection of each dataset, its parameters and
secret, and the disclosure rules (DESIGN decision 8). Secrets are never read
from the TOML itself: only the name of an environment variable or of a file
holding the secret.

Example::

    [server]
    title = "Demo table builder"

    [engine]
    kind = "duckdb"

    [[datasets]]
    name = "demo"
    path = "data/demo"

    [datasets.protection]
    method = "ckm"
    seeds = "cellkey"

    [datasets.rules]
    min_cell_size = 3
"""

from __future__ import annotations

import os
import tomllib
from datetime import UTC, date, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tablesafe._errors import ConfigError
from tablesafe._protection_limits import (
    RANGES,
    Additivity,
    ProtectionMethod,
    Range,
    SliverScope,
    SmallCellAction,
    UnreliableAction,
    field_bounds,
)
from tablesafe._rounding import Rounding
from tablesafe._seeds import SeedScheme
from tablesafe.mechanisms._magnitudes import MagnitudeMethod, MagnitudeProtection, SensitiveAction
from tablesafe.mechanisms._marginals import DPMarginals

__all__ = [
    "ApiKeySettings",
    "AuditFailure",
    "DatasetSettings",
    "EmbeddedWorker",
    "EngineKind",
    "EngineSettings",
    "ProtectionSettings",
    "RuleSettings",
    "ServerSettings",
    "SiteConfig",
    "SliverScope",
    "SmallCellAction",
    "StateSettings",
    "load_site_config",
]


class EngineKind(StrEnum):
    """The engine a site reads its microdata with (a member equals its text)."""

    DUCKDB = "duckdb"
    MEMORY = "memory"
    SPARK = "spark"


class AuditFailure(StrEnum):
    """What the server does when it cannot write a request's audit row.

    ``refuse``: the answer is withheld and the request answered 503
    ``Unavailable`` (every answer given is in the audit log); ``answer``: the
    failure is logged and the answer given (the audit log may miss it).
    """

    REFUSE = "refuse"
    ANSWER = "answer"


class EmbeddedWorker(StrEnum):
    """Whether ``tablesafe serve`` builds jobs itself, in a thread of the server (issue 40).

    ``auto``: with the SQLite state store (one machine), not with PostgreSQL
    (replicas, whose workers run apart: docs/decisions.md); ``on``, ``off``.
    """

    AUTO = "auto"
    ON = "on"
    OFF = "off"


# Schemas are built on first validation: a command that validates one model
# (the protection of `tablesafe table`) does not build them all.
_STRICT = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class ServerSettings(BaseModel):
    """Settings of the HTTP server as a whole."""

    model_config = _STRICT

    title: str = Field("tablesafe", description="Title shown on the web page and in the API.")
    audit_db: str = Field(
        "tablesafe-audit.sqlite",
        description="Path of the SQLite audit log (relative to the configuration file).",
    )
    max_body_bytes: int = Field(
        65_536,
        **field_bounds("server.max_body_bytes"),
        description="Largest request body accepted, in bytes.",
    )
    rate_limit_per_minute: int = Field(
        600,
        **field_bounds("server.rate_limit_per_minute"),
        description="Default number of requests per minute and API key (or per client "
        "address when no keys are configured).",
    )
    cache_tables: int = Field(
        256,
        **field_bounds("server.cache_tables"),
        description="Protected tables kept in memory for repeated requests (0 disables); "
        "answers are deterministic, so caching changes nothing but speed.",
    )
    concurrent_tables: int = Field(
        0,
        **field_bounds("server.concurrent_tables"),
        description="Most table requests one process builds at once (0: no limit); the "
        "others wait their turn. A process runs one Python thread at a time, so more builds "
        "at once lengthen each, the sliver guard's lock held among them.",
    )
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="Addresses or networks (CIDR) of the reverse proxies in front of the "
        "server: only a connection from one of them may name its client in X-Forwarded-For; "
        "from any other address the header is ignored.",
    )
    header_timeout_seconds: float = Field(
        10.0,
        **field_bounds("server.header_timeout_seconds"),
        description="Longest a connection may take to send a request's line and headers "
        "(from its first byte, or from the connection's opening); 408 beyond.",
    )
    body_timeout_seconds: float = Field(
        10.0,
        **field_bounds("server.body_timeout_seconds"),
        description="Longest a request may take to send its body once its headers are in; "
        "408 beyond.",
    )
    keep_alive_seconds: int = Field(
        5,
        **field_bounds("server.keep_alive_seconds"),
        description="Idle time after which a kept-alive connection is closed.",
    )
    max_header_bytes: int = Field(
        16_384,
        **field_bounds("server.max_header_bytes"),
        description="Largest request line and headers accepted, in bytes (414 or 431 beyond).",
    )
    max_connections: int = Field(
        4096,
        **field_bounds("server.max_connections"),
        description="Most connections open at once; one more is answered 503 and closed.",
    )
    auth_failures_per_minute: int = Field(
        30,
        **field_bounds("server.auth_failures_per_minute"),
        description="Requests per minute and client address that may fail authentication "
        "(no key, an unknown, expired or revoked key); 429 beyond.",
    )
    api_docs: bool = Field(
        False,
        description="Serve the interactive API pages /docs and /redoc, which load Swagger UI "
        "and ReDoc from cdn.jsdelivr.net (off: only /openapi.json).",
    )
    audit_failure: AuditFailure = Field(
        AuditFailure.REFUSE,
        description="refuse (a request whose audit row cannot be written is answered 503 "
        "Unavailable instead, so every answer given is in the audit log) or answer (the "
        "failure is logged and the answer given).",
    )
    access_log: bool = Field(
        True,
        description="Write one JSON line per request to standard error (logger "
        "tablesafe.access): time, method, path, route, status, duration, bytes, client, key "
        "id and error type; never a query string, a body, a key or a secret.",
    )
    shutdown_timeout_seconds: float = Field(
        30.0,
        **field_bounds("server.shutdown_timeout_seconds"),
        description="On SIGTERM or SIGINT the server stops accepting connections and waits "
        "this long for the requests in flight to be answered before it closes them.",
    )
    job_result_days: float = Field(
        7.0,
        **field_bounds("server.job_result_days"),
        description="Days a finished job (its result or error) is kept after it ends; then "
        "workers delete it.",
    )
    job_stale_seconds: float = Field(
        300.0,
        **field_bounds("server.job_stale_seconds"),
        description="A running job whose worker has not reported for this long (it was "
        "stopped) is taken by another worker; after 3 tries it fails.",
    )
    embedded_worker: EmbeddedWorker = Field(
        EmbeddedWorker.AUTO,
        description="auto, on or off: the server builds jobs in a thread of its own, one at a "
        "time (auto: with the SQLite state store, not with PostgreSQL, whose sites run "
        "tablesafe worker processes).",
    )
    max_queued_jobs_per_key: int = Field(
        20,
        **field_bounds("server.max_queued_jobs_per_key"),
        description="Most jobs one key (or client address) may have queued or running at "
        "once; one more is answered 429 TooManyJobs (0: no limit). Asking again for a job "
        "the key has queued, running or done gives that job and counts nothing.",
    )

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, v: list[str]) -> list[str]:
        import ipaddress

        for item in v:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(
                    f"{item!r} is not an IP address or network; give addresses such as "
                    "'10.0.0.5' or networks such as '10.0.0.0/24'"
                ) from None
        return v


class StateSettings(BaseModel):
    """Where the server keeps what it shares across requests and replicas (DESIGN decision 10)."""

    model_config = _STRICT

    url: str | None = Field(
        None,
        description="PostgreSQL database of the shared state (audit log, revoked keys, "
        "rate-limit counters, the sliver guard's record sets), as a libpq URL "
        "'postgresql://user@host:port/dbname', for several replicas of one site; without it, "
        "the SQLite file [server] audit_db. The URL may not hold a password.",
    )
    pool_size: int = Field(
        10,
        **field_bounds("state.pool_size"),
        description="PostgreSQL: most connections each server process opens.",
    )
    connect_timeout_seconds: float = Field(
        10.0,
        **field_bounds("state.connect_timeout_seconds"),
        description="PostgreSQL: longest wait for the database at start, and for a free "
        "connection of the pool.",
    )

    @field_validator("url")
    @classmethod
    def _postgres(cls, v: str | None) -> str | None:
        from urllib.parse import urlsplit

        if v is None:
            return v
        try:
            parts = urlsplit(v)
            password = parts.password
        except ValueError:
            raise ValueError("not a URL; give 'postgresql://user@host:port/dbname'") from None
        if parts.scheme not in ("postgresql", "postgres"):
            raise ValueError(
                f"a {parts.scheme or 'schemeless'} URL; the state store's url is a PostgreSQL "
                "one, 'postgresql://user@host:port/dbname' (leave it out for the SQLite file "
                "[server] audit_db)"
            )
        if password is not None or "password=" in parts.query:
            raise ValueError(
                "the URL holds a password, and the site configuration holds no secret; leave "
                "it out (libpq reads PGPASSWORD or a password file)"
            )
        return v


class EngineSettings(BaseModel):
    """Which engine reads the microdata."""

    model_config = _STRICT

    kind: EngineKind = Field(
        EngineKind.DUCKDB, description="Engine: duckdb (embedded, default), memory, or spark."
    )
    threads: int | None = Field(
        None, **field_bounds("engine.threads"), description="DuckDB worker threads (default: all)."
    )
    memory_limit: str | None = Field(None, description="DuckDB memory limit, e.g. '4GB'.")
    materialize: bool = Field(
        True,
        description="DuckDB: load each dataset into memory on first use instead of scanning "
        "its file for every query.",
    )
    spark_master: str = Field("local[*]", description="Spark master URL when kind = 'spark'.")
    cube_cache: bool = Field(
        True,
        description="Answer tables from cached cubes: one scan per set of variables, then "
        "any universe over them from memory, with the same bytes.",
    )
    max_cube_cells: int = Field(
        2_000_000,
        **field_bounds("engine.max_cube_cells"),
        description="Largest cube built (product of its variables' category counts, totals "
        "included); a table needing a larger one is computed directly.",
    )
    max_cache_mib: float = Field(
        512,
        **field_bounds("engine.max_cache_mib"),
        description="Memory the cached cubes may take in all (MiB); least recently used cubes "
        "go first.",
    )


class MarginalSettings(BaseModel):
    """What a ``dp-marginals`` site measures (``[datasets.protection.marginals]``).

    The measured marginals are chosen from these and the catalog before any
    data is read (:func:`tablesafe.mechanisms._marginals.measurement_plan`).
    """

    model_config = _STRICT

    workload: list[list[str]] = Field(
        [],
        description="Marginals to measure besides every 1-way one, each a list of catalog "
        "variables (groupings measure their source variable's group), binned magnitudes or "
        "WEIGHT; measured first, whatever their size.",
    )
    max_model_mib: float = Field(
        16.0,
        **field_bounds("marginals.max_model_mib"),
        description="The model's largest size (its junction tree, 8 bytes a cell): 2-way "
        "marginals are measured, fewest cells first, while it fits.",
    )
    max_marginal_cells: int = Field(
        5000,
        **field_bounds("marginals.max_marginal_cells"),
        description="2-way marginals with more cells than this are not measured.",
    )
    weight_range: tuple[float, float] | None = Field(
        None,
        description="Public bounds [low, high] of the weights (a weight outside counts at "
        "the nearest bound): weighted figures are published only with it.",
    )
    weight_bins: int = Field(
        16,
        **field_bounds("marginals.weight_bins"),
        description="Bins of the weight, equal on a log scale over weight_range.",
    )
    bins: dict[str, list[float]] = Field(
        {},
        description="Per magnitude, the edges of its bins; sums and means count each record at "
        "its bin's midpoint (values outside the edges in the nearest bin). Sums and means of "
        "other magnitudes are refused.",
    )
    iterations: int = Field(
        1000,
        **field_bounds("marginals.iterations"),
        description="Iterations of the model's fit (Private-PGM's mirror descent).",
    )

    def mechanism(self, epsilon: float, delta: float) -> DPMarginals:
        """The :class:`~tablesafe.mechanisms._marginals.DPMarginals` of these settings."""
        return DPMarginals(
            epsilon,
            delta=delta,
            workload=tuple(tuple(m) for m in self.workload),
            max_model_mib=self.max_model_mib,
            max_marginal_cells=self.max_marginal_cells,
            weight_range=self.weight_range,
            weight_bins=self.weight_bins,
            bins=tuple(sorted((k, tuple(v)) for k, v in self.bins.items())),
            iterations=self.iterations,
        )


class ProtectionSettings(BaseModel):
    """The protection of one dataset, fixed by the data owner."""

    model_config = _STRICT

    method: ProtectionMethod = Field(
        ProtectionMethod.CKM,
        description="Cell-wise mechanism: ckm (Destatis maximum-entropy ptable with "
        "max_deviation and variance), dp (discretised Laplace with epsilon and cap), "
        "pram (Shlomo & Young matrices), q (drop/add-up-to-q with rate and cap), "
        "q-records (record-level drop/add-up-to-q with rate; needs keyed seeds), "
        "ptable (a ptable file), dp-marginals (the whole budget epsilon spent once on noisy "
        "marginals; every table read from one model of them: docs/dp-marginals.md), none (no "
        "protection: never for public use).",
    )
    epsilon: float = Field(
        1.0,
        **field_bounds("protection.epsilon"),
        description="dp: privacy parameter epsilon per figure; dp-marginals: the site's "
        "whole budget.",
    )
    delta: float = Field(
        1e-9,
        **field_bounds("protection.delta"),
        description="dp-marginals: the delta of the whole budget.",
    )
    marginals: MarginalSettings = Field(
        default_factory=MarginalSettings,
        description="dp-marginals: what is measured ([datasets.protection.marginals]).",
    )
    cap: int = Field(
        7, **field_bounds("protection.cap"), description="dp and q: largest absolute perturbation."
    )
    rate: float = Field(
        0.01, **field_bounds("protection.rate"), description="q: q = ceil(rate * count)."
    )
    max_deviation: int = Field(
        3,
        **field_bounds("protection.max_deviation"),
        description="ckm: maximum deviation D of the ptable.",
    )
    variance: float = Field(
        1.0,
        **field_bounds("protection.variance"),
        description="ckm: variance V of the perturbation.",
    )
    js: int = Field(
        0, **field_bounds("protection.js"), description="ckm: no perturbed values in 1..js."
    )
    ptable_file: str | None = Field(
        None, description="ptable: path of a ptable CSV (Destatis or ABS layout)."
    )
    seeds: SeedScheme = Field(
        SeedScheme.CELLKEY,
        description="cellkey (ABS uniforms from cell keys), keyed (keyed hashes of each "
        "cell's record set; needs a secret; recommended) or dynamic (Li & Krenzke keyed hashes "
        "of cell, margin and universe key sums; the command line's workbench only: a site "
        "configuration refuses it, since averaging tables recovers small counts).",
    )
    secret_env: str | None = Field(
        None, description="Name of the environment variable holding the secret."
    )
    secret_file: str | None = Field(
        None, description="Path of a file holding the secret (relative to the configuration)."
    )
    weight_noise: float = Field(
        0.5,
        **field_bounds("protection.weight_noise"),
        description="Half-width s of the uniform noise added to every weighted figure, in "
        "the cell's mean weights (docs/weighted.md); 0 turns it off, which lets integer "
        "weights reveal true counts.",
    )
    rounding: str = Field(
        "1",
        description="Rounding of weighted figures, standard errors and intervals: a base "
        "('1' whole units, '1000' thousands, '0.1' one decimal) or significant figures "
        "('3sf'). Requests may ask for a coarser rounding, applied on top of this one.",
    )
    se_min_count: int = Field(
        10,
        **field_bounds("protection.se_min_count"),
        description="Standard errors and intervals are published only for cells whose "
        "protected count is at least this (and above the largest count the mechanism can "
        "make of an empty cell).",
    )
    additivity: Additivity = Field(
        Additivity.AGGREGATE,
        description="aggregate (margins are sums of perturbed inner cells), independent "
        "(every cell perturbed on its own), ipf (independent, then IPF and controlled "
        "rounding).",
    )

    @field_validator("rounding")
    @classmethod
    def _rounding(cls, v: str) -> str:
        return str(Rounding.parse(v).check_owner())

    @model_validator(mode="after")
    def _check(self) -> ProtectionSettings:
        if self.method == ProtectionMethod.PTABLE and not self.ptable_file:
            raise ValueError("method 'ptable' needs ptable_file")
        if self.method == ProtectionMethod.Q_RECORDS and self.seeds == SeedScheme.CELLKEY:
            raise ValueError("method 'q-records' needs seeds = 'keyed' (and a secret)")
        if self.method == ProtectionMethod.DP_MARGINALS and not (
            self.secret_env or self.secret_file
        ):
            raise ValueError(
                "method 'dp-marginals' needs secret_env or secret_file: its noise is drawn from "
                "bits keyed by the secret"
            )
        if self.seeds != SeedScheme.CELLKEY and not (self.secret_env or self.secret_file):
            raise ValueError(f"{self.seeds} seeds need secret_env or secret_file")
        if self.secret_env and self.secret_file:
            raise ValueError("give secret_env or secret_file, not both")
        return self


class RuleSettings(BaseModel):
    """Disclosure rules of one dataset, enforced before anything is returned."""

    model_config = _STRICT

    max_dimensions: int = Field(
        3, **field_bounds("rules.max_dimensions"), description="Most dimensions in one table."
    )
    min_universe_size: int = Field(
        50,
        **field_bounds("rules.min_universe_size"),
        description="Fewest sample records a universe must hold.",
    )
    min_cell_size: int = Field(
        0,
        **field_bounds("rules.min_cell_size"),
        description="Protected counts below this are treated by small_cell_action "
        "(0 turns the rule off).",
    )
    small_cell_action: SmallCellAction = Field(
        SmallCellAction.SUPPRESS,
        description="suppress (the cell is blank and flagged) or show_less_than (the cell "
        "shows '<k').",
    )
    max_cells: int = Field(
        10_000,
        **field_bounds("rules.max_cells"),
        description="Most cells (with margins) in one table.",
    )
    max_job_cells: int = Field(
        1_000_000,
        **field_bounds("rules.max_job_cells"),
        description="Most cells (with margins) in one table built as a job "
        "(POST /api/datasets/{name}/jobs).",
    )
    job_timeout_seconds: float = Field(
        600.0,
        **field_bounds("rules.job_timeout_seconds"),
        description="Longest a job's tabulation may run before it is cancelled.",
    )
    max_rse: float | None = Field(
        None,
        **field_bounds("rules.max_rse"),
        description="The precision rule: an estimate (weighted count, percentage, mean, sum) "
        "whose relative standard error, its published standard error over its published "
        "value, is above this many percent, or that has no standard error (too few protected "
        "records), is unreliable and treated by unreliable_action; estimates of 0 are not. "
        "Needs replicate weights; none turns the rule off.",
    )
    min_effective_count: int = Field(
        0,
        **field_bounds("rules.min_effective_count"),
        description="With max_rse: an estimate resting on fewer protected records than this "
        "(a percentage: its numerator's or denominator's) is unreliable too (0: no such "
        "bound).",
    )
    unreliable_action: UnreliableAction = Field(
        UnreliableAction.NP,
        description="np (an unreliable estimate, its standard error and interval show 'np': "
        "not published, too unreliable) or flag (published, with an unreliable_STATISTIC "
        "flag).",
    )
    query_timeout_seconds: float = Field(
        10.0,
        **field_bounds("rules.query_timeout_seconds"),
        description="Longest a tabulation may run before it is cancelled.",
    )
    sliver_min_difference: int = Field(
        10,
        **field_bounds("rules.sliver_min_difference"),
        description="m: a table's figure that, with the figures already published, would "
        "make a block of records with a protected count below m derivable by difference, or "
        "measure one again, is withheld (0 turns the account's check off; docs/attacks.md).",
    )
    sliver_scope: SliverScope = Field(
        SliverScope.DATASET,
        description="Which published figures a table is checked against: every figure "
        "published from the dataset, whoever asked (dataset), or the same API key's only (key).",
    )
    max_withheld_share: float = Field(
        0.1,
        **field_bounds("rules.max_withheld_share"),
        description="A table whose withheld cells are more than this share of its cells is "
        "refused whole (403), with what would pass; below it the table is published with "
        "those cells withheld.",
    )
    alternatives_max_dry_runs: int = Field(
        12,
        **field_bounds("rules.alternatives_max_dry_runs"),
        description="The nearest passing alternatives of a refused or partly withheld table: "
        "the most dry runs one search may run (each counted against the key's rate limit; a "
        "candidate the request limits refuse costs none); 0 offers none.",
    )
    sliver_cells: bool = Field(
        True,
        description="No longer used: every figure a table publishes is checked. Accepted so "
        "that older site configurations load.",
    )
    sliver_max_candidates: int = Field(
        2000,
        **field_bounds("rules.sliver_max_candidates"),
        description="No longer used. Accepted so that older site configurations load.",
    )
    privacy_budget_epsilon: float | None = Field(
        None,
        **field_bounds("rules.privacy_budget_epsilon"),
        description="The privacy ledger's budget for the dataset, all keys together: a table "
        "whose new figures would raise the privacy loss of any possible record (the sum of "
        "the epsilons of the distinct figures holding it) above this is refused with "
        "BudgetExhausted; a table already published is still answered (none: no budget).",
    )
    privacy_budget_epsilon_per_key: float | None = Field(
        None,
        **field_bounds("rules.privacy_budget_epsilon_per_key"),
        description="The same budget per API key, over the figures that key was given "
        "(none: no budget).",
    )
    privacy_budget_delta: float = Field(
        1e-6,
        **field_bounds("rules.privacy_budget_delta"),
        description="The delta at which the privacy ledger states epsilon and the budgets cap "
        "it: a record's figures are composed by privacy loss distributions (dp-accounting) "
        "into the epsilon that holds at this delta.",
    )
    putative_uniques_ceiling: float | None = Field(
        None,
        **field_bounds("rules.putative_uniques_ceiling"),
        description="The putative-risk ceiling: a table whose addition would raise the share "
        "of records the best-guess reconstruction claims, stably, as sample uniques (computed "
        "from published figures and the table's own, over the tables sharing a variable with "
        "it) above this is refused with RiskCeilingExceeded (none: no ceiling).",
    )
    putative_max_cells: int = Field(
        600,
        **field_bounds("rules.putative_max_cells"),
        description="The putative-risk ceiling's work limit: the most combinations of "
        "categories that the published figures of a table's component (with the table) may "
        "leave open for the measure to solve for; a table whose measure needs more is refused "
        "with RiskCeilingExceeded saying its risk cannot be measured within this limit. A "
        "count, not a time, so a request gets the same decision on every machine.",
    )
    max_custom_groups: int = Field(
        30,
        **field_bounds("rules.max_custom_groups"),
        description="Most groups a request's custom groupings may define, over all its "
        "groupings (0 turns custom groupings off).",
    )
    max_categories_per_group: int = Field(
        100,
        **field_bounds("rules.max_categories_per_group"),
        description="Most categories one group of a custom grouping may merge.",
    )


class MagnitudeSettings(BaseModel):
    """The protection of sums and means of continuous variables (docs/magnitudes.md)."""

    model_config = _STRICT

    method: MagnitudeMethod = Field(
        MagnitudeMethod.CKM,
        description="ckm (cell-key method for magnitudes: noise proportional to the "
        "largest contributions, from a numeric ptable), dp (discrete Laplace noise of scale "
        "max(|lower|, |upper|) / epsilon on unweighted sums, sampled exactly on their grid "
        "of 1/16) or none (exact sums, never for public use).",
    )
    max_deviation: int = Field(
        3, **field_bounds("magnitudes.max_deviation"), description="ckm: D of the numeric ptable."
    )
    variance: float = Field(
        1.0, **field_bounds("magnitudes.variance"), description="ckm: V of the numeric ptable."
    )
    step: int = Field(
        4,
        **field_bounds("magnitudes.step"),
        description="ckm: steps per unit of the numeric ptable.",
    )
    share: float = Field(
        0.1,
        **field_bounds("magnitudes.share"),
        description="ckm: share of a contribution that one unit of v moves.",
    )
    top_k: int = Field(
        2,
        **field_bounds("magnitudes.top_k"),
        description="ckm: how many largest contributions move.",
    )
    mu: float = Field(
        0.5,
        **field_bounds("magnitudes.mu"),
        description="ckm: floor added to |v|: before rounding, every sum moves by at least "
        "share * mu of its largest contribution.",
    )
    epsilon: float = Field(
        1.0, **field_bounds("magnitudes.epsilon"), description="dp: epsilon per cell and variable."
    )
    rounding: str = Field("1", description="Rounding of published sums (a base or '3sf').")
    mean_rounding: str = Field("0.01", description="Rounding of published means.")
    quantile_rounding: str = Field(
        "3sf",
        description="Rounding of published medians and quantiles, their standard errors and "
        "intervals (a base or significant figures: '3sf').",
    )
    dominance_n: int = Field(
        1,
        **field_bounds("magnitudes.dominance_n"),
        description="Dominance rule n (0 turns it off).",
    )
    dominance_k: float = Field(
        85.0, **field_bounds("magnitudes.dominance_k"), description="Dominance rule k, in percent."
    )
    p_percent: float = Field(
        10.0, **field_bounds("magnitudes.p_percent"), description="p% rule p (0 turns it off)."
    )
    sensitive_action: SensitiveAction = Field(
        SensitiveAction.FLAG,
        description="What a cell the rules find sensitive gets: flag (a public "
        "sensitive_VAR column, values still published) or suppress (sum and mean blank).",
    )
    quantile_window: int = Field(
        5,
        **field_bounds("magnitudes.quantile_window"),
        description="ckm: h, the records below and above a quantile's own that its window "
        "holds (docs/quantiles.md).",
    )
    quantile_move: list[float] = Field(
        [0.1, 0.5],
        min_length=2,
        max_length=2,
        description="ckm: the lowest and highest share of its spread a quantile moves.",
    )
    quantile_cap: float = Field(
        0.08,
        **field_bounds("magnitudes.quantile_cap"),
        description="ckm: a quantile's largest spread, as a share of its value.",
    )
    quantile_min_count: int = Field(
        20,
        **field_bounds("magnitudes.quantile_min_count"),
        description="The smallest protected count of a cell whose medians and quantiles are "
        "published (at least 2 x quantile_window + 1).",
    )

    @model_validator(mode="after")
    def _quantile_parameters(self) -> MagnitudeSettings:
        low, high = self.quantile_move
        if not 0 < low <= high <= 1:
            raise ValueError(
                f"quantile_move must be two shares 0 < low <= high <= 1, not {self.quantile_move}"
            )
        if self.quantile_min_count < 2 * self.quantile_window + 1:
            raise ValueError(
                f"quantile_min_count must be at least 2 x quantile_window + 1 = "
                f"{2 * self.quantile_window + 1}, not {self.quantile_min_count}"
            )
        return self

    def protection(self) -> MagnitudeProtection:
        """The magnitudes' protection these settings describe."""
        return MagnitudeProtection(
            method=self.method,
            D=self.max_deviation,
            V=self.variance,
            step=self.step,
            share=self.share,
            top_k=self.top_k,
            mu=self.mu,
            epsilon=self.epsilon,
            rounding=self.rounding,
            mean_rounding=self.mean_rounding,
            quantile_rounding=self.quantile_rounding,
            dominance=(self.dominance_n, self.dominance_k) if self.dominance_n else None,
            p_percent=self.p_percent or None,
            action=self.sensitive_action,
            quantile_window=self.quantile_window,
            quantile_move=(self.quantile_move[0], self.quantile_move[1]),
            quantile_cap=self.quantile_cap,
            quantile_min_count=self.quantile_min_count,
        )


class DatasetSettings(BaseModel):
    """One dataset served."""

    model_config = _STRICT

    name: str = Field(..., pattern=r"^[a-z][a-z0-9_-]{0,39}$", description="Name used in URLs.")
    path: str = Field(
        ..., description="Dataset folder with catalog.toml (relative to the configuration)."
    )
    title: str | None = Field(None, description="Title shown to users (default: the catalog's).")
    protection: ProtectionSettings = Field(
        default_factory=ProtectionSettings, description="The protection profile."
    )
    rules: RuleSettings = Field(default_factory=RuleSettings, description="Disclosure rules.")
    magnitudes: MagnitudeSettings = Field(
        default_factory=MagnitudeSettings,
        description="Protection of sums and means of continuous variables.",
    )

    @model_validator(mode="after")
    def _record_set_seeds(self) -> DatasetSettings:
        # DESIGN decision 2: a served figure's noise depends on its record set
        # only. Li & Krenzke's dynamic seeds give the same records a fresh draw in
        # every table with another universe or margin, and averaging those tables
        # recovers small counts exactly (docs/attacks.md, "Averaging tables").
        if self.protection.seeds == SeedScheme.DYNAMIC:
            raise ValueError(
                "seeds = 'dynamic' cannot be served: it gives the same records a fresh draw in "
                "every other table, and averaging tables recovers small counts; use seeds = "
                "'keyed' (with the secret), or 'cellkey'"
            )
        return self

    @model_validator(mode="after")
    def _budget_needs_epsilon(self) -> DatasetSettings:
        # The ledger composes each figure's epsilon: a mechanism without one has nothing to add.
        rules, method = self.rules, self.protection.method
        budget = rules.privacy_budget_epsilon or rules.privacy_budget_epsilon_per_key
        if budget is not None and method in (ProtectionMethod.NONE, ProtectionMethod.Q_RECORDS):
            raise ValueError(
                f"a privacy budget needs a mechanism with an epsilon per figure (dp, ckm, pram, "
                f"q or ptable); method {method} has none"
            )
        return self

    @model_validator(mode="after")
    def _one_release(self) -> DatasetSettings:
        # dp-marginals spends its whole epsilon once: a smaller budget refuses every table,
        # and the precision rule needs replicate standard errors, which it does not publish.
        if self.protection.method != ProtectionMethod.DP_MARGINALS:
            return self
        rules, eps = self.rules, self.protection.epsilon
        for name in ("privacy_budget_epsilon", "privacy_budget_epsilon_per_key"):
            budget = getattr(rules, name)
            if budget is not None and budget < eps:
                raise ValueError(
                    f"{name} = {budget:g} is below the release's epsilon {eps:g}: method "
                    "'dp-marginals' spends its whole epsilon once, and would answer no table"
                )
        if rules.max_rse is not None:
            raise ValueError(
                "method 'dp-marginals' publishes no standard errors: the precision rule "
                "(max_rse) cannot apply; remove max_rse"
            )
        if rules.putative_uniques_ceiling is not None:
            raise ValueError(
                "method 'dp-marginals' answers every table from one release whose loss its "
                "epsilon bounds; the putative-risk ceiling does not apply: remove "
                "putative_uniques_ceiling"
            )
        return self


class ApiKeySettings(BaseModel):
    """An API key, stored hashed."""

    model_config = _STRICT

    id: str = Field(
        ..., pattern=r"^[A-Za-z0-9_.-]{1,40}$", description="Key id (in the audit log)."
    )
    hash: str = Field(
        ...,
        pattern=r"^sha256:[0-9a-f]{64}$",
        description="'sha256:' and the hex SHA-256 of the key (`tablesafe api-key new`).",
    )
    role: Literal["user", "admin"] = Field("user", description="user or admin.")
    rate_limit_per_minute: int | None = Field(
        None,
        **field_bounds("keys.rate_limit_per_minute"),
        description="Requests per minute for this key (default: the server's).",
    )
    expires: datetime | None = Field(
        None,
        description="When the key stops working: a TOML date (from 00:00 UTC of that day) "
        "or date-time (UTC unless it names its offset); none: never.",
    )

    @field_validator("expires", mode="before")
    @classmethod
    def _utc(cls, v: object) -> object:
        if isinstance(v, date) and not isinstance(v, datetime):
            return datetime(v.year, v.month, v.day, tzinfo=UTC)
        if v is not None and not isinstance(v, datetime | str):
            # pydantic would read a number as seconds since 1970: not what a site means.
            raise ValueError("give a TOML date (2027-01-01) or date-time (2027-01-01T12:00:00Z)")
        return v

    @field_validator("expires")
    @classmethod
    def _aware(cls, v: datetime | None) -> datetime | None:
        return v.replace(tzinfo=UTC) if v is not None and v.tzinfo is None else v


class SiteConfig(BaseModel):
    """The whole site configuration."""

    model_config = _STRICT

    server: ServerSettings = Field(default_factory=ServerSettings, description="Server.")
    engine: EngineSettings = Field(default_factory=EngineSettings, description="Engine.")
    state: StateSettings = Field(
        default_factory=StateSettings, description="The shared state store."
    )
    datasets: list[DatasetSettings] = Field(
        ..., min_length=1, description="Datasets served ([[datasets]])."
    )
    keys: list[ApiKeySettings] = Field(
        default_factory=list,
        description="API keys ([[keys]]); with none, the API is open to anonymous users "
        "(and the admin endpoints are closed).",
    )
    base: str = Field(".", description="Folder that relative paths start from (set on load).")

    @field_validator("datasets")
    @classmethod
    def _unique_names(cls, v: list[DatasetSettings]) -> list[DatasetSettings]:
        names = [d.name for d in v]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"dataset names must be unique; repeated: {sorted(dup)}")
        return v

    @field_validator("keys")
    @classmethod
    def _unique_keys(cls, v: list[ApiKeySettings]) -> list[ApiKeySettings]:
        ids = [k.id for k in v]
        if len(set(ids)) != len(ids):
            raise ValueError("API key ids must be unique")
        hashes = [k.hash for k in v]
        if len(set(hashes)) != len(hashes):
            raise ValueError("two API keys have the same hash")
        return v

    def resolve(self, path: str) -> Path:
        """A path from the configuration, relative to its folder."""
        p = Path(path)
        return p if p.is_absolute() else Path(self.base) / p

    def dataset_at(self, folder: str | Path) -> DatasetSettings:
        """The settings of the dataset this site serves from ``folder``.

        Raises:
            ConfigError: if the site serves no dataset there.
        """
        target = Path(folder).resolve()
        for d in self.datasets:
            if self.resolve(d.path).resolve() == target:
                return d
        raise ConfigError(
            f"the site configuration (in {self.base}) serves no dataset at {folder}; it serves "
            + ", ".join(f"{d.name} at {d.path}" for d in self.datasets)
        )

    def dataset(self, name: str) -> DatasetSettings:
        """The settings of dataset ``name``."""
        for d in self.datasets:
            if d.name == name:
                return d
        raise KeyError(name)

    def secret(self, dataset: DatasetSettings) -> bytes | None:
        """Read the secret of a dataset's protection from its environment variable or file.

        Raises:
            ConfigError: if the variable is unset or the file unreadable or empty.
        """
        prot = dataset.protection
        if prot.secret_env:
            value = os.environ.get(prot.secret_env)
            if not value:
                raise ConfigError(
                    f"dataset {dataset.name}: environment variable {prot.secret_env} (the "
                    "secret for dynamic seeds) is not set"
                )
            return value.encode()
        if prot.secret_file:
            path = self.resolve(prot.secret_file)
            try:
                value = path.read_text().strip()
            except OSError:
                raise ConfigError(
                    f"dataset {dataset.name}: cannot read the secret file {path}"
                ) from None
            if not value:
                raise ConfigError(f"dataset {dataset.name}: the secret file {path} is empty")
            return value.encode()
        return None


def _range_of(loc: tuple[int | str, ...]) -> Range | None:
    """The documented range of the setting at ``loc`` (``datasets.0.rules.max_cells``), if any."""
    names = [p for p in loc if isinstance(p, str)]
    key = ".".join(names[-2:])
    return RANGES.get(key) if len(names) >= 2 else None


def _explain(exc: ValidationError, source: str) -> str:
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown setting (see docs/site-config.md for the allowed ones)"
        limits = _range_of(err["loc"])
        if limits is not None:
            # A number outside its documented range says the whole range, as the CLI does.
            msg = f"must be {limits.words()}, not {err['input']!r}"
        lines.append(f"{where}: {msg}")
    return f"invalid site configuration {source}: " + "; ".join(lines)


def load_site_config(
    path: str | Path | None = None, *, data: dict[str, Any] | None = None
) -> SiteConfig:
    """Load and validate the site configuration.

    Args:
        path: The TOML file.
        data: Or the parsed structure (relative paths then start at the
            current folder unless ``base`` is given).

    Raises:
        ConfigError: naming every invalid setting.
    """
    if data is None:
        if path is None:
            raise ConfigError("give the site configuration file (--config site.toml)")
        path = Path(path)
        try:
            with path.open("rb") as fh:
                data = tomllib.load(fh)
        except FileNotFoundError:
            raise ConfigError(f"site configuration {path} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"site configuration {path} is not valid TOML: {exc}") from None
        if "base" in data:
            raise ConfigError(
                f"site configuration {path}: 'base' is set by tablesafe; remove it from the file"
            )
        data = {**data, "base": str(path.parent.resolve())}
        source = str(path)
    else:
        source = "(given as data)"
    try:
        return SiteConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, source)) from None
