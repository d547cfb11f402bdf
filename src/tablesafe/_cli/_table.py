"""Command line: `tablesafe table`, the table builder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from tablesafe._cli import app
from tablesafe._cli._methods import (
    AdditivityOption,
    CapOption,
    EpsilonOption,
    MaxDeviationOption,
    RateOption,
    SecretEnvOption,
    SeedsOption,
    VarianceOption,
)
from tablesafe._errors import ConfigError, RequestError


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
    # Each engine imported only when chosen (the memory engine loads pandas).
    if name == "duckdb":
        from tablesafe.engines import DuckDBEngine

        return DuckDBEngine()
    if name == "memory":
        from tablesafe.engines import MemoryEngine

        return MemoryEngine()
    if name == "spark":
        from tablesafe import engines

        spark = getattr(engines, "SparkEngine", None)
        if spark is None:
            raise ConfigError("the Spark engine is not available in this installation")
        return spark(master=spark_master)
    raise RequestError(f"unknown engine {name!r}; allowed: duckdb, memory, spark")


@app.command("table")
def table(
    data_dir: Annotated[Path, typer.Argument(help="Dataset folder (with catalog.toml).")],
    rows: Annotated[str, typer.Option(help="Row variable.")],
    cols: Annotated[str | None, typer.Option(help="Column variable.")] = None,
    layers: Annotated[
        list[str] | None, typer.Option(help="Layer variable(s); repeat for a 4-way table.")
    ] = None,
    where: Annotated[
        list[str] | None, typer.Option(help="Universe condition VAR=CODE,CODE (repeatable).")
    ] = None,
    group: Annotated[
        list[str] | None,
        typer.Option(
            help="Custom grouping NAME:VAR:CODE=MEMBERS;CODE=MEMBERS[;*=LABEL] (repeatable); "
            "use NAME as a dimension or in --where. Members: codes or LO..HI."
        ),
    ] = None,
    statistic: Annotated[
        str,
        typer.Option(
            help="count, weighted or both, then sums and means of continuous variables: "
            "'count,sum:INCOME,mean:HOURS' (weighted with weighted or both)."
        ),
    ] = "both",
    margins: Annotated[str, typer.Option(help="all, none or total.")] = "all",
    replicates: Annotated[
        bool, typer.Option("--se", help="Add replicate standard errors and 95% intervals.")
    ] = False,
    fmt: Annotated[str, typer.Option("--format", help="text, csv or json.")] = "text",
    footnotes: Annotated[
        bool,
        typer.Option(
            "--footnotes",
            help="Append the footnotes (protection statement, flag legend, citation) to CSV "
            "and text as lines starting with '#', as the API does; JSON always has them.",
        ),
    ] = False,
    method: Annotated[
        str,
        typer.Option(
            help="Protection: ckm, dp, pram, q, q-records, ptable:FILE, or none (unprotected)."
        ),
    ] = "ckm",
    epsilon: EpsilonOption = 1.0,
    cap: CapOption = 7,
    rate: RateOption = 0.01,
    max_deviation: MaxDeviationOption = 3,
    variance: VarianceOption = 1.0,
    seeds: SeedsOption = "cellkey",
    secret_env: SecretEnvOption = None,
    weight_noise: Annotated[
        float, typer.Option(help="Noise on weighted figures, in mean weights (0 to 10).")
    ] = 0.5,
    rounding: Annotated[
        str,
        typer.Option(help="Rounding of weighted figures: a base (1, 1000, 0.1) or '3sf'."),
    ] = "1",
    se_min_count: Annotated[
        int, typer.Option(help="Smallest protected count with a published standard error.")
    ] = 10,
    additivity: AdditivityOption = "aggregate",
    config: Annotated[
        Path | None,
        typer.Option(help="Site configuration: use the protection it fixes for this dataset."),
    ] = None,
    owner_flags: Annotated[
        bool,
        typer.Option(
            "--owner-flags", help="Add the perturbed/adjusted flags (never for publication)."
        ),
    ] = False,
    engine: Annotated[str, typer.Option(help="duckdb, memory or spark.")] = "duckdb",
    spark_master: Annotated[str, typer.Option(help="Spark master URL.")] = "local[*]",
) -> None:
    """Build a protected table: rows by columns (by layers) inside a universe."""
    from tablesafe._builder import TableBuilder
    from tablesafe._cli._methods import protection_from_options
    from tablesafe._custom import parse_groupings
    from tablesafe._dataset import Dataset
    from tablesafe._request import TableRequest

    if fmt not in ("text", "csv", "json"):
        raise RequestError(f"unknown format {fmt!r}; allowed: text, csv, json")
    dims = [rows, *([cols] if cols else []), *(layers or [])]
    request = TableRequest(
        tuple(dims),
        universe=parse_where(where or []),
        statistic=statistic,  # type: ignore[arg-type]
        margins=margins,  # type: ignore[arg-type]
        replicates=replicates,
        groupings=parse_groupings([parse_group(g) for g in group or []]),
    )
    dataset = Dataset.open(data_dir)
    # Bad requests are refused before anything else happens.
    request.bind(dataset.catalog)
    eng = _engine(engine, spark_master)
    magnitudes: Any = None  # the cell-key method for magnitudes unless a site says otherwise
    rules: Any = None
    if config is not None:
        from tablesafe._settings import load_site_config
        from tablesafe.server._service import protection_from_settings

        site = load_site_config(config)
        target = Path(data_dir).resolve()
        match = [d for d in site.datasets if site.resolve(d.path).resolve() == target]
        if not match:
            raise ConfigError(f"the site configuration {config} serves no dataset at {data_dir}")
        protection = protection_from_settings(match[0], site)
        magnitudes = match[0].magnitudes.protection() if protection.mechanism else None
        rules = match[0].rules
    elif method == "none":
        from tablesafe._tabulation import tabulate

        if footnotes:
            raise RequestError(
                "--footnotes describes the protection of a table; --method none gives an "
                "unprotected table (owner only) with none: drop --footnotes or choose a method"
            )

        typer.echo(tabulate(dataset, request, engine=eng).render(fmt), nl=False)
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
    builder = TableBuilder(dataset, protection, engine=eng, magnitudes=magnitudes)
    if rules is None:
        result = builder.build(request)
    else:
        # The site's rules as its server applies them (the sliver guard aside:
        # it depends on what the server has published).
        from tablesafe.server._service import checked_request, ruled_table

        request = checked_request(request, dataset.catalog, rules)
        result = ruled_table(builder, dataset, request, rules)[2]
    if owner_flags and fmt in ("csv", "json"):
        from tablesafe._render import to_csv, to_json

        frame = result.to_frame(owner=True)
        text = to_csv(frame) if fmt == "csv" else to_json(frame, result.public_metadata()) + "\n"
        typer.echo(text + (_footnote_text(result) if footnotes and fmt == "csv" else ""), nl=False)
        return
    if footnotes and fmt == "csv":
        typer.echo(result.to_csv(footnotes=True), nl=False)
        return
    text = result.render(fmt)
    typer.echo(text + (_footnote_text(result) if footnotes and fmt == "text" else ""), nl=False)


def _footnote_text(result: Any) -> str:
    """The table's footnotes as a blank line and ``#`` lines (the CSV's layout)."""
    from tablesafe._footnotes import footnote_lines

    lines = footnote_lines(result.footnotes())
    return "\n" + "".join(f"# {line.replace(chr(10), ' ')}\n" for line in lines)
