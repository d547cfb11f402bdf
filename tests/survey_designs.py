"""Survey designs for the side-by-side checks of issue 38: NHANES II and a non-integer-weight sample.

Shared by ``tests/test_ratio_figures.py``, ``tests/test_r_survey.py`` and the
scripts ``benchmarks/survey_intervals.py`` and ``benchmarks/r_survey.py``.

* :func:`nhanes2_dataset`: samplics' copy of NHANES II (10,337 records, 31
  strata of 2 PSUs, integer weights), made a dataset as an office would
  (``catalog init``, ``replicates add --method JK2``), with serum zinc a
  continuous variable with item non-response (1,148 records without it).
* :func:`schools_dataset`: a stratified sample of schools with non-integer
  weights (the layout of California's API sample in R ``survey``: three
  school types sampled at different rates, weights 15-45), ten districts
  (the PSUs) in each type, delete-one-district jackknife replicates within
  types (JKn, with ``replicates add``), yes/no variables
  variable, a 1-5 scale (average parental education, with item
  non-response) and a score.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd

from tablesafe.output._table import ProtectedTable
from tablesafe.prepare._catalog_init import init_catalog
from tablesafe.prepare._replicates import add_replicates

ZINC = """
[[magnitudes]]
name = "zinc"
label = "Serum zinc"
unit = "mcg/dL"
lower = 0
upper = 1000
negative = false
missing = []
"""

SCHOOL_MAGNITUDES = """
[[magnitudes]]
name = "api00"
label = "API score 2000"
lower = 0
upper = 1000
negative = false

[[magnitudes]]
name = "avg_ed"
label = "Average parental education (1-5)"
lower = 1
upper = 5
negative = false
missing = []
"""


def nhanes2_csv() -> Path:
    """samplics' NHANES II file, found without importing samplics (a slow import)."""
    spec = importlib.util.find_spec("samplics")
    assert spec is not None and spec.submodule_search_locations, "samplics is a dev dependency"
    return Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / "nhanes2.csv"


def nhanes2_dataset(folder: Path) -> Path:
    """NHANES II as a dataset with JK2 replicates (from strata and PSUs) and zinc; its folder."""
    init_catalog(
        nhanes2_csv(), folder, weight="finalwgt",
        variables=["region", "race", "diabetes", "highlead", "highbp", "stratid", "psuid"],
        rng=np.random.default_rng(38),
    )  # fmt: skip
    with (folder / "catalog.toml").open("a") as f:
        f.write(ZINC)
    add_replicates(folder, psu="psuid", strata="stratid", method="JK2")
    return folder


def school_frame(seed: int = 38) -> pd.DataFrame:
    """A stratified sample of schools, non-integer weights: 100 elementary, 50 middle, 50 high."""
    rng = np.random.default_rng(seed)
    rows = []
    for stype, (n, population) in enumerate(((100, 4421), (50, 1018), (50, 755)), start=1):
        avg_ed = np.clip(rng.normal(2.6 + 0.15 * stype, 0.75, n), 1.0, 5.0).round(2)
        avg_ed[rng.random(n) < 0.06] = np.nan
        score = np.clip(rng.normal(600 + 40 * stype, 110, n), 300, 999).round()
        rows.append(
            pd.DataFrame(
                {
                    "stype": stype,
                    "sch_wide": np.where(rng.random(n) < 0.75 - 0.1 * stype, 1, 2),
                    "awards": np.where(rng.random(n) < 0.6 - 0.1 * stype, 1, 2),
                    "api00": score,
                    "avg_ed": avg_ed,
                    "pw": population / n,
                    # Ten districts (the PSUs) in each type: schools are sampled by district.
                    "district": rng.integers(1, 11, n),
                }
            )
        )
    return pd.concat(rows, ignore_index=True)


def schools_dataset(folder: Path, frame: pd.DataFrame | None = None) -> Path:
    """The sample of schools as a dataset with JKn replicates within school types; its folder."""
    frame = school_frame() if frame is None else frame
    folder.mkdir(parents=True, exist_ok=True)
    source = folder.parent / f"{folder.name}-source.parquet"
    frame.to_parquet(source)
    init_catalog(
        source, folder, weight="pw", variables=["stype", "sch_wide", "awards"],
        rng=np.random.default_rng(38), max_categories=50,
    )  # fmt: skip
    with (folder / "catalog.toml").open("a") as f:
        f.write(SCHOOL_MAGNITUDES)
    add_replicates(folder, psu="district", strata="stype", method="JK1")
    return folder


def outside_intervals(table: ProtectedTable) -> dict[str, tuple[int, int]]:
    """Per mean or percentage column: (cells outside their own published interval, cells with one)."""
    columns = {**(table.percentages or {}), **(table.magnitudes or {})}
    out = {}
    for name, values in columns.items():
        low, high = columns.get(f"{name}_ci_low"), columns.get(f"{name}_ci_high")
        if low is None or high is None or not name.startswith(("percent_", "mean_")):
            continue
        has = ~np.isnan(values) & ~np.isnan(low) & ~np.isnan(high)
        bad: npt.NDArray[np.bool_] = has & ((values < low) | (values > high))
        out[name] = (int(bad.sum()), int(has.sum()))
    return out
