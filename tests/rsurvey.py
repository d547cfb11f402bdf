"""tablesafe side by side with R ``survey`` (issue 38): the same estimates from the same design.

Used by ``tests/test_r_survey.py`` (skipped where ``Rscript`` or R's ``survey``
is absent) and ``benchmarks/r_survey.py`` (the figures of docs/precision.md).

For a dataset and a request, tablesafe builds the table without protection,
and R (``tests/data/svy_compare.R``) computes every published estimate of
it, cell by cell (margins too), with the *same replicate weights* and the
same variance, ``coefficient * sum_r (theta_r - theta)**2`` (R:
``svrepdesign(type = "other", scale, rscales = 1, mse = TRUE)``): weighted
totals (``svytotal``), means over the records holding a value (``svymean``
on the domain), row percentages (``svyratio``) and quantiles (``svyquantile``,
``qrule = "math"``, Woodruff's interval with ``df = Inf``), each with its
standard error. :func:`compare` gives, for every estimate, tablesafe's
published figure, R's unrounded one and the published unit.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tablesafe import Dataset, Protection, TableBuilder, TableRequest
from tablesafe._rounding import Rounding
from tablesafe.catalog._magnitudes import read_magnitude_column, read_quantile_column
from tablesafe.mechanisms._magnitudes import MagnitudeMethod, MagnitudeProtection

SCRIPT = Path(__file__).parent / "data" / "svy_compare.R"


def r_available() -> bool:
    """Whether ``Rscript`` runs and has the ``survey`` package."""
    if shutil.which("Rscript") is None:
        return False
    done = subprocess.run(
        ["Rscript", "-e", "library(survey)"], capture_output=True, text=True, check=False
    )
    return done.returncode == 0


def r_version() -> str:
    """R's and survey's versions, as the comparison prints them."""
    done = subprocess.run(
        ["Rscript", "-e", 'cat(R.version.string, "; survey", '
         'as.character(packageVersion("survey")), "\\n")'],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip()


@dataclass(frozen=True)
class Row:
    """One estimate side by side.

    Attributes:
        column: tablesafe's column (``weighted``, ``mean_zinc_weighted``...).
        cell: The cell's codes (``None`` for a total).
        published: tablesafe's published estimate.
        unit: Its published unit (the rounding's base, or the last significant figure's).
        r: R's estimate, unrounded.
        se: tablesafe's published standard error (NaN where blank).
        se_unit: Its published unit.
        r_se: R's standard error (NaN where R gives none).
        se_floor: How far apart the two standard errors of a weighted count
            may be for the sums' resolution alone: weights are added to the nearest ``2**-16``
            (docs/weighted.md), so a replicate's deviation may be off by ``n``
            such steps and the standard error by ``sqrt(c R) n 2**-16`` (an
            error of 0 is published as up to 0.008 for the 6,194 schools of
            ``apistrat``, 200 replicates).
    """

    column: str
    cell: tuple[object, ...]
    published: float
    unit: float
    r: float
    se: float
    se_unit: float
    r_se: float
    se_floor: float = 0.0

    @property
    def off(self) -> float:
        """|published - R| in published units (the estimate)."""
        return abs(self.published - self.r) / self.unit

    @property
    def se_off(self) -> float:
        """|published se - R's se| in its published units (NaN where either is absent).

        A difference within the sums' resolution (``se_floor``) counts as none.
        """
        gap = abs(self.se - self.r_se)
        return 0.0 if gap <= self.se_floor else gap / self.se_unit


def unit(rounding: Rounding, value: float) -> float:
    """The unit of ``value`` published at ``rounding`` (significant figures: of its magnitude)."""
    if rounding.base is not None:
        return float(rounding.base)
    assert rounding.digits is not None
    if value == 0 or not math.isfinite(value):
        return 1.0
    return float(10.0 ** (math.floor(math.log10(abs(value))) - rounding.digits + 1))


def builder(dataset: Dataset, rounding: str) -> TableBuilder:
    """Unprotected, at ``rounding`` for weighted counts and sums (and whole-unit or 3sf quantiles).

    Means and percentages keep their own rounding (0.01): what they divide is
    not rounded. Quantiles are rounded as ``rounding`` says where it is whole
    units or significant figures, else to 3 significant figures (their default).
    """
    quantiles = rounding if rounding in ("1", "3sf") else "3sf"
    mags = MagnitudeProtection(
        method=MagnitudeMethod.NONE, rounding=rounding, quantile_rounding=quantiles
    )
    return TableBuilder(dataset, Protection(None, rounding=rounding), magnitudes=mags)


def _cells(table, columns: list[str]) -> tuple[pd.DataFrame, list[tuple]]:
    """The R input rows for every computed cell and estimate column, and what each row is."""
    dims = [d.name for d in table.dimensions]
    rows, index = [], []
    for at in zip(*np.nonzero(table.computed), strict=True):
        codes = [
            None if i == d.size else d.codes[i] for i, d in zip(at, table.dimensions, strict=True)
        ]
        for column in columns:
            row = {"id": str(len(rows)), "var": "", "p": "", "over": ""}
            for k in range(3):
                row[f"d{k + 1}"] = dims[k] if k < len(dims) else ""
                code = codes[k] if k < len(codes) else None
                row[f"c{k + 1}"] = "" if code is None else str(code)
            if column == "weighted":
                row["kind"] = "total"
            elif column.startswith("percent_row"):
                row["kind"], row["over"] = "percent", dims[1]
            elif (q := read_quantile_column(column)) is not None:
                row["kind"], row["var"], row["p"] = "quantile", q[1], str(q[0] / 100)
            else:
                parts = read_magnitude_column(column)
                assert parts is not None and parts[0] == "mean"
                row["kind"], row["var"] = "mean", parts[1]
            rows.append(row)
            index.append((column, tuple(at), tuple(codes)))
    return pd.DataFrame(rows), index


def run_r(dataset: Dataset, cells: pd.DataFrame, folder: Path) -> pd.DataFrame:
    """R's estimates and standard errors of ``cells`` (the R script's output)."""
    cat = dataset.catalog
    assert cat.replicates is not None and cat.weight is not None
    micro = pd.read_parquet(dataset.path)
    data, spec, out = folder / "data.csv", folder / "cells.csv", folder / "out.csv"
    micro.to_csv(data, index=False)
    cells.to_csv(spec, index=False)
    done = subprocess.run(
        ["Rscript", str(SCRIPT), str(data), str(spec), str(out), cat.weight,
         repr(cat.replicates.coefficient)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"R failed:\n{done.stderr}")
    return pd.read_csv(out)


def compare(dataset: Dataset, request: TableRequest, rounding: str) -> list[Row]:
    """Every published estimate of ``request`` beside R's, at ``rounding`` (see :func:`builder`)."""
    b = builder(dataset, rounding)
    table = b.build(request)
    mags = b.magnitude_protection
    columns = {"weighted": table.weighted, **(table.percentages or {}), **(table.magnitudes or {})}
    estimates = [
        c
        for c in columns
        if c == "weighted"
        or c == "percent_row"
        or (
            (c.startswith("mean_") or read_quantile_column(c) is not None)
            and not c.endswith(("_se", "_ci_low", "_ci_high"))
        )
    ]
    cells, index = _cells(table, estimates)
    design = dataset.catalog.replicates
    assert design is not None
    coefficient, replicates = design.coefficient, len(design.columns)
    with tempfile.TemporaryDirectory() as tmp:
        r = run_r(dataset, cells, Path(tmp))
    out = []
    for (column, at, codes), (_, rr) in zip(index, r.iterrows(), strict=True):
        if column == "weighted":
            rnd, se = Rounding.parse(rounding), table.se
        elif column.startswith("percent_"):
            rnd, se = Rounding.parse("0.01"), columns[f"{column}_se"]
        elif column.startswith("mean_"):
            rnd, se = Rounding.parse(mags.mean_rounding), columns[f"{column}_se"]
        else:
            rnd, se = Rounding.parse(mags.quantile_rounding), columns[f"{column}_se"]
        assert se is not None
        value, r_value = float(columns[column][at]), float(rr["estimate"])
        se_value, r_se = float(se[at]), float(rr["se"])
        n = int(table.base_counts[at]) if table.base_counts is not None else 0
        # Ratios divide sums that are both off by such steps: no floor of their own.
        floor = math.sqrt(coefficient * replicates) * n * 2.0**-16 if column == "weighted" else 0
        se_unit = max(unit(rnd, se_value), unit(rnd, r_se))
        estimate_unit = max(unit(rnd, value), unit(rnd, r_value))
        out.append(
            Row(column, codes, value, estimate_unit, r_value, se_value, se_unit, r_se, floor)
        )
    return out


def api_frame() -> pd.DataFrame:
    """California's Academic Performance Index, stratified sample (R ``survey``'s ``apistrat``).

    200 schools in three strata (E, M, H), weights 15.10 to 44.21; read from
    R's own copy (the data ship with the package).
    """
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "apistrat.csv"
        code = (
            "suppressPackageStartupMessages(library(survey)); data(api); "
            "a <- apistrat[, c('stype','sch.wide','awards','avg.ed','api00','pw','snum')]; "
            "names(a) <- c('stype','sch_wide','awards','avg_ed','api00','pw','snum'); "
            f"write.csv(a, '{path}', row.names = FALSE)"
        )
        subprocess.run(["Rscript", "-e", code], capture_output=True, text=True, check=True)
        return pd.read_csv(path)


def api_dataset(folder: Path) -> Path:
    """``apistrat`` as a dataset: delete-one-school jackknife replicates within strata (JKn)."""
    from survey_designs import SCHOOL_MAGNITUDES
    from tablesafe.prepare._catalog_init import init_catalog
    from tablesafe.prepare._replicates import add_replicates

    folder.mkdir(parents=True, exist_ok=True)
    source = folder.parent / f"{folder.name}-source.parquet"
    api_frame().to_parquet(source)
    init_catalog(
        source, folder, weight="pw", variables=["stype", "sch_wide", "awards"],
        rng=np.random.default_rng(38),
    )  # fmt: skip
    with (folder / "catalog.toml").open("a") as f:
        f.write(SCHOOL_MAGNITUDES)
    add_replicates(folder, psu="snum", strata="stype", method="JK1")
    return folder
