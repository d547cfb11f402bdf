"""tablesafe side by side with R ``survey`` (issue 38): the figures of docs/precision.md.

Without protection, on NHANES II (samplics' copy, JK2 replicates from its 31
strata of 2 PSUs), a stratified sample of schools with non-integer weights
(``tests/survey_designs.py``, JKn over districts) and, from R's own copy,
California's API stratified sample (``apistrat``, JKn over schools), every
published weighted count, mean, row percentage and quantile of a table and
its standard error is set beside R's (``tests/rsurvey.py``: the same
replicate weights, ``svytotal``, ``svymean``, ``svyratio`` and
``svyquantile`` with Woodruff's interval), at the roundings 1, 1000 and 3
significant figures of the weighted counts (means and percentages at 0.01,
quantiles at 3 significant figures or whole units). It prints, per dataset,
rounding and statistic, the largest difference between tablesafe's published
figure and R's, in units of the published rounding (0.5 at most is as close
as rounding allows).

Needs ``Rscript`` with the ``survey`` package (Debian: ``r-cran-survey``).

Usage: python benchmarks/r_survey.py [--out FILE]
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import rsurvey
from survey_designs import nhanes2_dataset, schools_dataset
from tablesafe import Dataset, TableRequest

REQUESTS = {
    "nhanes2": [
        TableRequest(
            ("region", "race"), statistic="weighted,mean:zinc,median:zinc", replicates=True
        ),
        TableRequest(("race", "highbp"), statistic="weighted,percent:row", replicates=True),
    ],
    "schools": [
        TableRequest(
            ("stype", "sch_wide"),
            statistic="weighted,percent:row,mean:api00,mean:avg_ed,median:avg_ed,"
            "quantile:api00:0.25",
            replicates=True,
        )
    ],
    "apistrat": [
        TableRequest(
            ("stype", "sch_wide"),
            statistic="weighted,percent:row,mean:api00,mean:avg_ed,median:avg_ed",
            replicates=True,
        )
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if not rsurvey.r_available():
        sys.exit("needs Rscript with the survey package (apt-get install r-cran-survey)")
    lines = [rsurvey.r_version()]
    print(lines[0])
    with tempfile.TemporaryDirectory() as tmp:
        folders = {
            "nhanes2": nhanes2_dataset(Path(tmp) / "nhanes2"),
            "schools": schools_dataset(Path(tmp) / "schools"),
            "apistrat": rsurvey.api_dataset(Path(tmp) / "apistrat"),
        }
        for name, requests in REQUESTS.items():
            ds = Dataset.open(folders[name])
            for rounding in ("1", "1000", "3sf"):
                worst: dict[str, list[float]] = {}
                for request in requests:
                    for row in rsurvey.compare(ds, request, rounding):
                        w = worst.setdefault(row.column, [0.0, 0.0, 0, 0])
                        w[0] = max(w[0], row.off)
                        w[2] += 1
                        if not math.isnan(row.se_off):
                            w[1] = max(w[1], row.se_off)
                            w[3] += 1
                for column, (off, se_off, n, n_se) in worst.items():
                    line = (
                        f"{name:9} rounding {rounding:>4} {column:26} {n:3} estimates, max "
                        f"{off:.3f} units; {n_se:3} standard errors, max {se_off:.3f} units"
                    )
                    print(line, flush=True)
                    lines.append(line)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
