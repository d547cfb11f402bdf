"""Command line: `tablesafe table`, the table builder."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tablesafe import engines
from tablesafe._builder import TableBuilder
from tablesafe._cli import PATH, app, number
from tablesafe._cli._methods import protection_from_options, protection_options
from tablesafe._errors import ConfigError, RefusedError, RequestError, UserError
from tablesafe._protection import site_protection
from tablesafe._protection_limits import ProtectionMethod
from tablesafe._request import TableRequest
from tablesafe.catalog._custom import parse_groupings
from tablesafe.catalog._dataset import Dataset
from tablesafe.output._formats import WriteOptions, output_format
from tablesafe.output._render import to_csv, to_json
from tablesafe.output._tabulation import tabulate
from tablesafe.rules._alternatives import Search, nearest, useful_steps
from tablesafe.rules._dry_run import Verdict

if TYPE_CHECKING:
    from tablesafe._protection import Protection
    from tablesafe._request import TableRequest
    from tablesafe.catalog._dataset import Dataset
    from tablesafe.output._formats import OutputFormat, WriteOptions
    from tablesafe.output._table import ProtectedTable


def parse_where(items: list[str]) -> dict[str, tuple[str, ...]]:
    """Parse ``VAR=CODE,CODE`` conditions into a universe mapping."""
    universe: dict[str, list[str]] = {}
    for item in items:
        name, sep, codes = item.partition("=")
        if not sep or not name.strip():
            raise RequestError(
                f"--where {item!r} is not of the form VAR=CODE[,CODE...], e.g. REGION=1,2"
            )
        values = [c.strip() for c in codes.split(",") if c.strip()]
        if not values:
            raise RequestError(f"--where {item!r} lists no category; give at least one code")
        universe.setdefault(name.strip(), []).extend(values)
    return {k: tuple(v) for k, v in universe.items()}


def parse_group(item: str) -> dict[str, Any]:
    """Parse ``NAME:VAR:CODE=MEMBERS;CODE=MEMBERS[;*=LABEL]`` into a custom grouping.

    Members are comma-separated codes; ``LO..HI`` stands for the integers
    from LO to HI. ``*=LABEL`` adds an ``other`` group for the rest.
    """
    name, _, rest = item.partition(":")
    variable, sep, spec = rest.partition(":")
    if not sep or not name.strip() or not variable.strip() or not spec.strip():
        raise RequestError(
            f"--group {item!r} is not of the form NAME:VAR:CODE=MEMBERS;CODE=MEMBERS[;*=LABEL], "
            "e.g. AGEB:AGE:young=0..29;middle=30..59;*=60 and over"
        )
    groups: list[dict[str, Any]] = []
    other = None
    for part in (p.strip() for p in spec.split(";") if p.strip()):
        code, eq, members = part.partition("=")
        if not eq:
            raise RequestError(f"--group {item!r}: {part!r} is not CODE=MEMBERS")
        if code.strip() == "*":
            other = members.strip()
            continue
        codes: list[Any] = []
        for m in (x.strip() for x in members.split(",") if x.strip()):
            lo, dots, hi = m.partition("..")
            if dots:
                try:
                    codes.extend(range(int(lo), int(hi) + 1))
                except ValueError:
                    raise RequestError(
                        f"--group {item!r}: range {m!r} needs integers, e.g. 0..29"
                    ) from None
            else:
                codes.append(m)
        groups.append({"code": code.strip(), "label": code.strip(), "members": codes})
    out: dict[str, Any] = {"name": name.strip(), "variable": variable.strip(), "groups": groups}
    if other is not None:
        out["other"] = other
    return out


def _engine(name: str, spark_master: str) -> Any:
    # Start-up: each engine loads its library (DuckDB, pandas, PySpark) only when chosen.
    if name == "duckdb":
        from tablesafe.engines import DuckDBEngine

        return DuckDBEngine()
    if name == "memory":
        from tablesafe.engines import MemoryEngine

        return MemoryEngine()
    if name == "spark":
        spark = getattr(engines, "SparkEngine", None)
        if spark is None:
            raise ConfigError("the Spark engine is not available in this installation")
        return spark(master=spark_master)
    raise RequestError(f"unknown engine {name!r}; allowed: duckdb, memory, spark")


@app.command("table")
@click.argument("data_dir", type=PATH, help="Dataset folder (with catalog.toml).")
@click.option("--rows", required=True, help="Row variable.")
@click.option("--cols", default=None, help="Column variable.")
@click.option("--layers", multiple=True, help="Layer variable(s); repeat for a 4-way table.")
@click.option("--where", multiple=True, help="Universe condition VAR=CODE,CODE (repeatable).")
@click.option(
    "--group",
    multiple=True,
    help="Custom grouping NAME:VAR:CODE=MEMBERS;CODE=MEMBERS[;*=LABEL] (repeatable); "
    "use NAME as a dimension or in --where. Members: codes or LO..HI.",
)
@click.option(
    "--statistic",
    default="both",
    help="count, weighted or both, then sums, means, medians and quantiles of continuous "
    "variables and percentages: 'count,sum:INCOME,mean:HOURS', 'weighted,median:INCOME,"
    "quantile:INCOME:0.9', 'weighted,percent:row' (percent:row, percent:column, "
    "percent:total; weighted with weighted or both).",
)
@click.option("--margins", default="all", help="all, none or total.")
@click.option(
    "--unit",
    default=None,
    help="What the table counts: person, family, household or dwelling, among the units the "
    "catalog declares (default: its records' own).",
)
@click.option(
    "--se",
    "replicates",
    is_flag=True,
    help="Add standard errors and 95% intervals of the weighted estimates (replicates' "
    "variance plus the protection's).",
)
@click.option(
    "--format",
    "fmt",
    default="text",
    help="text, csv, json, jsonstat (JSON-stat 2.0), sdmx-csv, sdmx-json or sdmx-structure "
    "(the SDMX-ML 2.1 structure the SDMX messages name).",
)
@click.option(
    "--labels",
    is_flag=True,
    help="CSV: add a label column after each dimension's codes; SDMX-CSV: 'ID: name'.",
)
@click.option(
    "--footnotes",
    is_flag=True,
    help="Append the footnotes (protection statement, flag legend, citation) to CSV "
    "and text as lines starting with '#', as the API does; JSON always has them.",
)
@click.option(
    "--method",
    default="ckm",
    help="Protection: ckm, dp, pram, q, q-records, ptable:FILE, or none (unprotected).",
)
@protection_options("epsilon", "cap", "rate", "max-deviation", "variance", "seeds", "secret-env")
@click.option(
    "--weight-noise",
    type=number("protection.weight_noise"),
    default=0.5,
    help="Noise on weighted figures, in mean weights (0 to 10).",
)
@click.option(
    "--rounding",
    default="1",
    help="Rounding of weighted figures: a base (1, 1000, 0.1) or '3sf'.",
)
@click.option(
    "--se-min-count",
    type=number("protection.se_min_count"),
    default=10,
    help="Smallest protected count with a published standard error.",
)
@protection_options("additivity")
@click.option(
    "--config",
    type=PATH,
    default=None,
    help="Site configuration: use the protection it fixes for this dataset.",
)
@click.option(
    "--owner-flags",
    is_flag=True,
    help="Add the perturbed/adjusted flags (never for publication).",
)
@click.option("--engine", default="duckdb", help="duckdb, memory or spark.")
@click.option("--spark-master", default="local[*]", help="Spark master URL.")
def table(
    data_dir: Path,
    rows: str,
    cols: str | None,
    layers: tuple[str, ...],
    where: tuple[str, ...],
    group: tuple[str, ...],
    statistic: str,
    margins: str,
    unit: str | None,
    replicates: bool,
    fmt: str,
    labels: bool,
    footnotes: bool,
    method: str,
    epsilon: float,
    cap: int,
    rate: float,
    max_deviation: int,
    variance: float,
    seeds: str,
    secret_env: str | None,
    weight_noise: float,
    rounding: str,
    se_min_count: int,
    additivity: str,
    config: Path | None,
    owner_flags: bool,
    engine: str,
    spark_master: str,
) -> None:
    """Build a protected table: rows by columns (by layers) inside a universe."""
    # The registry's formats that print on a terminal (xlsx is bytes).
    output = output_format(fmt, binary=False)
    dims = [rows, *([cols] if cols else []), *layers]
    request = replace(_request(dims, where, group, statistic, margins, replicates), unit=unit)
    dataset = Dataset.open(data_dir)
    # Bad requests are refused before anything else happens.
    request.bind(dataset.catalog)
    eng = _engine(engine, spark_master)
    magnitudes: Any = None  # the cell-key method for magnitudes unless a site says otherwise
    rules: Any = None
    if config is not None:
        protection, magnitudes, rules = _site_protection(config, data_dir)
    elif method == ProtectionMethod.NONE and not (
        request.percentages
        or request.replicates
        or request.quantiles
        or _item_nonresponse(dataset, request)
    ):
        _echo_unprotected(dataset, request, eng, fmt, footnotes)
        return
    else:
        protection = protection_from_options(
            method,
            epsilon=epsilon,
            cap=cap,
            rate=rate,
            max_deviation=max_deviation,
            variance=variance,
            seeds=seeds,
            secret_env=secret_env,
            additivity=additivity,
            weight_noise=weight_noise,
            rounding=rounding,
            se_min_count=se_min_count,
        )
    # With --config, the site's rules as its server applies them (the sliver guard
    # aside: it depends on what the server has published).
    builder = TableBuilder(dataset, protection, engine=eng, magnitudes=magnitudes, rules=rules)
    _echo_built(_built(builder, request), output, WriteOptions(footnotes, labels), owner_flags)


def _built(builder: Any, request: TableRequest) -> ProtectedTable:
    """The table, or its refusal with the nearest alternatives that pass here."""
    try:
        table: ProtectedTable = builder.build(request)
    except (RefusedError, RequestError) as exc:
        exc.alternatives = _alternatives(builder, request, exc)
        raise
    return table


def _alternatives(builder: Any, request: TableRequest, refusal: UserError) -> tuple[Any, ...]:
    """With ``--config``, a refusal's nearest alternatives that pass the site's rules here.

    The command line has no state store: it checks what the builder decides
    (the request limits, the universe-size rule), never the account of
    published figures, the ledger or the risk ceiling (docs/cli.md).
    """
    rules = builder.rules
    if rules is None or rules.alternatives_max_dry_runs <= 0:
        return ()
    if isinstance(refusal, RequestError) and len(request.dimensions) <= rules.max_dimensions:
        return ()  # a request no alternative mends (an unknown variable...)
    catalog = builder.dataset.catalog
    try:
        checked = request.coerced(catalog)
    except UserError:
        return ()

    def limits(candidate: TableRequest) -> UserError | None:
        try:
            builder.check(candidate)
        except UserError as exc:
            return exc
        return None

    def dry_run(candidate: TableRequest) -> Verdict:
        try:
            table = builder.build(candidate)
        except UserError as exc:
            return Verdict(exc)
        return Verdict(None, int(table.computed.sum()))

    search = Search(limits, dry_run, rules.alternatives_max_dry_runs, useful_steps(refusal))
    return tuple(nearest(catalog, checked, search))


def _echo_built(
    result: ProtectedTable, output: OutputFormat, options: WriteOptions, owner_flags: bool
) -> None:
    """The table built, in its format (the owner's flags where asked), and why SEs are absent."""
    if result.metadata.get("se_unavailable"):
        click.echo(f"note: {result.metadata['se_unavailable']}", err=True)
    if owner_flags and output.name in ("csv", "json"):
        _echo_owner(result, output.name, options.footnotes)
        return
    pieces = output.stream
    if output.name == "json" and pieces is not None:
        # Streamed as the server streams it: the cells in pieces as they are written,
        # not the whole document made, decoded and encoded again (the same bytes).
        sys.stdout.flush()
        out = sys.stdout.buffer
        for piece in pieces(result):
            out.write(piece)
        out.write(b"\n")
        out.flush()
        return
    click.echo(output.write(result, options), nl=False)


def _item_nonresponse(dataset: Dataset, request: TableRequest) -> bool:
    """Whether a sum or mean asked for is of a magnitude with item non-response (the builder's)."""
    mags = dataset.catalog.magnitudes
    names = [m.split(":")[1] for m in request.magnitudes]
    return any(name in mags and mags[name].missing is not None for name in names)


def _request(
    dims: list[str],
    where: tuple[str, ...],
    group: tuple[str, ...],
    statistic: str,
    margins: str,
    replicates: bool,
) -> TableRequest:
    """The table request of the command's options (not yet checked against a catalog)."""
    return TableRequest(
        tuple(dims),
        universe=parse_where(list(where)),
        statistic=statistic,  # type: ignore[arg-type]
        margins=margins,  # type: ignore[arg-type]
        replicates=replicates,
        groupings=parse_groupings([parse_group(g) for g in group]),
    )


def _site_protection(config: Path, data_dir: Path) -> tuple[Protection, Any, Any]:
    """``--config``: the protection, magnitude protection and rules the site fixes for the data."""
    # Start-up: pydantic loads only for a site configuration (test_cli_registry).
    from tablesafe._settings import load_site_config

    site = load_site_config(config)
    served = site.dataset_at(data_dir)
    protection = site_protection(served, site)
    magnitudes = served.magnitudes.protection() if protection.mechanism else None
    return protection, magnitudes, served.rules


def _echo_unprotected(
    dataset: Dataset, request: TableRequest, engine: Any, fmt: str, footnotes: bool
) -> None:
    """``--method none``: the unprotected table (the owner's), without footnotes."""
    if footnotes:
        raise RequestError(
            "--footnotes describes the protection of a table; --method none gives an "
            "unprotected table (owner only) with none: drop --footnotes or choose a method"
        )

    click.echo(tabulate(dataset, request, engine=engine).render(fmt), nl=False)


def _echo_owner(result: ProtectedTable, fmt: str, footnotes: bool) -> None:
    """``--owner-flags`` in CSV or JSON: the table with the owner's perturbed/adjusted flags."""
    frame = result.to_frame(owner=True)
    if fmt == "csv":
        text = result.unprotected_line() + to_csv(frame)
    else:
        text = to_json(frame, result.public_metadata()) + "\n"
    notes = "\n" + result.footnote_comments() if footnotes and fmt == "csv" else ""
    click.echo(text + notes, nl=False)
