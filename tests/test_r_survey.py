"""tablesafe against R ``survey`` (issue 38's done-when), where R and its survey package are present.

Every published estimate of an unprotected table (weighted totals, means
over the records holding a value, row percentages, medians and quantiles)
and its standard error agrees with R's within half of its published unit, at
the roundings 1, 1000 and 3 significant figures of the weighted counts, on
NHANES II (JK2) and a stratified sample of schools with non-integer weights
(JKn): ``tests/rsurvey.py``. The figures are in docs/precision.md
(``benchmarks/r_survey.py``). Skipped without ``Rscript`` and R's survey
package (Debian: ``apt-get install r-cran-survey``).
"""

from __future__ import annotations

import math

import pytest

import rsurvey
from survey_designs import nhanes2_dataset, schools_dataset
from tablesafe import Dataset, TableRequest

pytestmark = [
    pytest.mark.system,
    pytest.mark.skipif(not rsurvey.r_available(), reason="needs Rscript with R's survey package"),
]

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
            statistic="weighted,percent:row,mean:api00,mean:avg_ed,median:avg_ed,quantile:api00:0.25",
            replicates=True,
        )
    ],
}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Dataset]:
    folder = tmp_path_factory.mktemp("rsurvey")
    return {
        "nhanes2": Dataset.open(nhanes2_dataset(folder / "nhanes2")),
        "schools": Dataset.open(schools_dataset(folder / "schools")),
    }


@pytest.mark.parametrize("rounding", ["1", "1000", "3sf"])
@pytest.mark.parametrize("name", list(REQUESTS))
def test_every_estimate_and_standard_error_agrees_with_r(datasets, name, rounding):
    kinds: dict[str, int] = {}
    for request in REQUESTS[name]:
        for row in rsurvey.compare(datasets[name], request, rounding):
            assert row.off <= 0.5 + 1e-9, row
            if math.isnan(row.se) or math.isnan(row.r_se):
                # Blank in both: too few records, or Woodruff's share outside [0, 1].
                assert math.isnan(row.se) and (math.isnan(row.r_se) or row.r_se >= 0), row
                continue
            assert row.se_off <= 0.5 + 1e-9, row
            kinds[row.column.split("_")[0]] = kinds.get(row.column.split("_")[0], 0) + 1
    # Every kind of estimate was compared with its standard error.
    assert {"weighted", "mean", "percent"} <= set(kinds)
    assert kinds.get("median", 0) > 5


def test_the_bootstrap_coefficient_is_rs():
    # R's Rao-Wu bootstrap (subbootweights) states its scale; replicates add writes the same.
    import subprocess

    import numpy as np

    from tablesafe.prepare._replicates import replicate_weights

    code = (
        "suppressPackageStartupMessages(library(survey)); "
        "cat(subbootweights(rep(1:4, each = 6), rep(1:12, each = 2), 50)$scale)"
    )
    scale = float(subprocess.run(["Rscript", "-e", code], capture_output=True, text=True,
                                 check=True).stdout)  # fmt: skip
    design = replicate_weights(
        np.repeat(np.arange(4), 6), np.repeat(np.arange(12), 2) % 3, "bootstrap",
        replicates=50, rng=np.random.default_rng(1),
    )  # fmt: skip
    assert design.coefficient == pytest.approx(scale) == pytest.approx(1 / 49)
