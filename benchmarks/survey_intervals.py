"""Means and percentages against their own intervals, at several roundings (issue 38, item 1).

For NHANES II (samplics' copy, JK2 replicates), a stratified sample of
schools with non-integer weights (``tests/survey_designs.py``), the demo
survey and, where R is installed, California's API sample (R ``survey``'s
``apistrat``), builds tables with weighted counts, row percentages and means with
standard errors, unprotected (``none``) and under the cell-key method
(``ckm``), at several roundings of the weighted figures, and prints per
table:

* ``outside``: published means and percentages outside their own published
  95% interval, of those with one;
* ``se=0``: published standard errors of 0 (of weighted counts, means and
  percentages) where the estimate is not 0;
* ``moved``: unprotected only, the largest change of a published mean (in %
  of it) and of a percentage (in points) from the exact ratio of the
  unrounded sums (the figure at rounding ``1e-9``).

Not a timing: it runs against any checkout (put its ``src`` first on
``PYTHONPATH``) so that the figures before and after a change can be compared.

Usage: python benchmarks/survey_intervals.py [--demo-records 200000]
       [--datasets nhanes2,schools,demo,apistrat] [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import rsurvey
from survey_designs import nhanes2_dataset, outside_intervals, schools_dataset
from tablesafe import Dataset, Protection, TableBuilder, TableRequest
from tablesafe.mechanisms import destatis
from tablesafe.output._table import ProtectedTable
from tablesafe.prepare import write_demo_data

CASES = {
    "nhanes2": [
        (("region", "race"), "weighted,mean:zinc"),
        (("race", "highbp"), "weighted,percent:row"),
        (("race", "diabetes", "highlead"), "weighted,mean:zinc,percent:row"),
    ],
    "schools": [
        (("stype", "sch_wide"), "weighted,percent:row,mean:api00,mean:avg_ed"),
        (("stype", "awards"), "weighted,percent:row,percent:column,mean:api00"),
    ],
    "demo": [(("REGION", "SEX", "EDUC"), "weighted,percent:row,mean:INCOME")],
    # California's API sample, from R survey's copy (only where R is installed).
    "apistrat": [
        (("stype", "sch_wide"), "weighted,percent:row,mean:api00,mean:avg_ed"),
        (("stype", "awards"), "weighted,percent:row,mean:api00,mean:avg_ed"),
    ],
}
ROUNDINGS = {
    "nhanes2": ("1", "1000", "1000000"),
    "schools": ("1", "1000"),
    "demo": ("1", "10000", "100000"),
    "apistrat": ("1", "1000"),
}


def _zero_se(table: ProtectedTable) -> tuple[int, int]:
    """Published standard errors of 0 beside a non-zero estimate, of those published."""
    zero = shown = 0
    pairs = []
    if table.weighted is not None and table.se is not None:
        pairs.append((table.weighted, table.se))
    for columns in (table.percentages or {}, table.magnitudes or {}):
        for name, values in columns.items():
            if f"{name}_se" in columns:
                pairs.append((values, columns[f"{name}_se"]))
    for values, se in pairs:
        has = ~np.isnan(se) & ~np.isnan(values) & (values != 0)
        zero += int((has & (se == 0)).sum())
        shown += int(has.sum())
    return zero, shown


def _ratios(table: ProtectedTable) -> dict[str, np.ndarray]:
    """The table's means and percentages (not their standard errors or intervals)."""
    columns = {**(table.percentages or {}), **(table.magnitudes or {})}
    return {
        k: v
        for k, v in columns.items()
        if k.startswith(("mean_", "percent_")) and not k.endswith(("_se", "_ci_low", "_ci_high"))
    }


def _moved(table: ProtectedTable, exact: ProtectedTable) -> tuple[float, float]:
    """Largest change of a mean (% of it) and of a percentage (points) from the exact ratio."""
    mean = pct = 0.0
    reference = _ratios(exact)
    for name, values in _ratios(table).items():
        ref = reference[name]
        both = ~np.isnan(values) & ~np.isnan(ref) & (ref != 0)
        if not both.any():
            continue
        diff = np.abs(values[both] - ref[both])
        if name.startswith("mean_"):
            mean = max(mean, float((100 * diff / np.abs(ref[both])).max()))
        else:
            pct = max(pct, float(diff.max()))
    return mean, pct


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo-records", type=int, default=200_000)
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--datasets", default=",".join(CASES), help="Which of them, comma-separated."
    )
    args = parser.parse_args()
    chosen = set(args.datasets.split(","))
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        folders = {
            "nhanes2": nhanes2_dataset(Path(tmp) / "nhanes2"),
            "schools": schools_dataset(Path(tmp) / "schools"),
            "demo": Path(tmp) / "demo",
        }
        write_demo_data(folders["demo"], args.demo_records, seed=7)
        if rsurvey.r_available():
            folders["apistrat"] = rsurvey.api_dataset(Path(tmp) / "apistrat")
        for name, cases in CASES.items():
            if name not in folders or name not in chosen:
                continue
            ds = Dataset.open(folders[name])
            for dims, statistic in cases:
                request = TableRequest(dims, statistic=statistic, replicates=True)
                exact = TableBuilder(ds, Protection(None, rounding="1e-9")).build(request)
                for method in ("none", "ckm"):
                    for rounding in ROUNDINGS[name]:
                        mech = None if method == "none" else destatis(3, 1.0)
                        table = TableBuilder(ds, Protection(mech, rounding=rounding)).build(request)
                        out = outside_intervals(table)
                        bad = sum(b for b, _ in out.values())
                        total = sum(t for _, t in out.values())
                        zero, shown = _zero_se(table)
                        line = (
                            f"{name:8} {'x'.join(dims):24} {statistic:40} {method:5} "
                            f"rounding {rounding:>8}: outside {bad:4} of {total:4}; "
                            f"se=0 {zero:4} of {shown:4}"
                        )
                        if method == "none":
                            mean, pct = _moved(table, exact)
                            line += f"; moved: means {mean:.3f}%, percentages {pct:.3f} points"
                        print(line, flush=True)
                        lines.append(line)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
