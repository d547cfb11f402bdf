"""The statistics registry (issue 39): one module per statistic, the builder a loop over them.

The seam: a new statistic, a ratio of two sums (``ratio:INCOME:HOURS``), is
written here as one module's worth of code (the :class:`RatioOfSums` class)
and added with one registry line (:func:`~tablesafe.statistics.registered`);
no other part of the builder changes. Its figures are checked against a brute
force over the microdata (exact protection) and against the protected sums it
divides (the cell-key method).
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tablesafe as ts
from tablesafe._errors import RequestError
from tablesafe._request import Item, TableRequest
from tablesafe.catalog._dataset import Dataset
from tablesafe.mechanisms._magnitudes import MagnitudeProtection
from tablesafe.statistics import STATISTICS, PublishedStatistic, registered
from tablesafe.statistics._magnitudes import protect
from tablesafe.statistics._statistic import Figures, TableWork

SRC = Path(__file__).resolve().parents[1] / "src" / "tablesafe" / "statistics"


class RatioOfSums(PublishedStatistic):
    """``ratio_A_B``: the protected sum of A over the protected sum of B, rounded once."""

    name = "ratio"
    kinds = {"ratio": 2}  # noqa: RUF012 (a registry's class constant)

    def publish(self, work: TableWork, figures: Figures) -> None:
        items = [i for i in work.request.magnitudes if i.kind == "ratio"]
        if figures.variable is not None or not items:
            return
        names = list(dict.fromkeys(v for i in items for v in i.variables))
        sums = protect(work, [Item("sum", (v,)) for v in names], figures).sums
        columns = {}
        for item in items:
            a, b = (sums[v] for v in item.variables)
            ratio = np.divide(a, b, out=np.full(a.shape, np.nan), where=b != 0)
            column = "_".join(("ratio", *item.variables))
            columns[column] = np.where(work.computed, np.round(ratio, 4), np.nan)
        work.add_columns(figures, columns)


@pytest.fixture(scope="module")
def demo(demo_dir: Path) -> tuple[Dataset, pd.DataFrame]:
    dataset = Dataset.open(demo_dir)
    return dataset, pd.read_parquet(next(demo_dir.glob("*.parquet")))


def test_every_module_of_the_registry_holds_one_statistic() -> None:
    classes = {}
    for path in SRC.glob("_*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and any(
                isinstance(b, ast.Name) and b.id == "PublishedStatistic" for b in node.bases
            ):
                classes.setdefault(path.stem, []).append(node.name)
    assert all(len(names) == 1 for names in classes.values()), classes
    registered_names = {type(s).__name__ for s in STATISTICS}
    assert registered_names == {n for names in classes.values() for n in names}
    assert len({s.name for s in STATISTICS}) == len(STATISTICS)


def test_a_new_statistic_is_one_module_and_one_registry_line(
    demo: tuple[Dataset, pd.DataFrame],
) -> None:
    dataset, frame = demo
    with registered(RatioOfSums()) as statistics:
        request = TableRequest(("REGION", "SEX"), statistic="count,ratio:INCOME:HOURS")
        assert request.magnitudes == ("ratio:INCOME:HOURS",)
        assert request.magnitudes[0].variables == ("INCOME", "HOURS")
        exact = ts.TableBuilder(dataset, ts.Protection(None), statistics=statistics)
        table = exact.build(request)
    ratio = table.magnitudes["ratio_INCOME_HOURS"]
    # Brute force: per region and sex (and their totals), sum of INCOME over sum of HOURS.
    for (region, sex), cell in frame.groupby(["REGION", "SEX"]):
        i = table.dimensions[0].codes.index(region)
        j = table.dimensions[1].codes.index(sex)
        assert ratio[i, j] == pytest.approx(cell.INCOME.sum() / cell.HOURS.sum(), abs=1e-4)
    assert ratio[-1, -1] == pytest.approx(frame.INCOME.sum() / frame.HOURS.sum(), abs=1e-4)
    # Published like any statistic of continuous variables: every format carries it.
    assert "ratio_INCOME_HOURS" in table.render("csv").splitlines()[1]
    # The item kind is known only while the statistic is registered.
    with pytest.raises(RequestError, match="unknown statistic"):
        TableRequest(("REGION",), statistic="count,ratio:INCOME:HOURS")


def test_a_new_statistic_rests_on_the_protected_figures(demo: tuple[Dataset, pd.DataFrame]) -> None:
    dataset, _ = demo
    protection = ts.Protection(ts.mechanisms.destatis(5, 2.0), seeds="cellkey")
    magnitudes = MagnitudeProtection(rounding="1")
    with registered(RatioOfSums()) as statistics:
        builder = ts.TableBuilder(dataset, protection, magnitudes=magnitudes, statistics=statistics)
        statistic = "count,sum:INCOME,sum:HOURS,ratio:INCOME:HOURS"
        table = builder.build(TableRequest(("AGEGRP", "SEX"), statistic=statistic))
        again = builder.build(TableRequest(("AGEGRP", "SEX"), statistic=statistic))
    columns = table.magnitudes
    a, b, ratio = columns["sum_INCOME"], columns["sum_HOURS"], columns["ratio_INCOME_HOURS"]
    shown = ~np.isnan(ratio)
    assert shown.any()
    # The ratio divides the protected sums before they are rounded to whole units.
    bound = ratio[shown] * (0.5 / np.abs(a[shown]) + 0.5 / np.abs(b[shown])) + 1e-4
    assert np.all(np.abs(ratio[shown] - a[shown] / b[shown]) <= bound * 1.01)
    # The same request gives the same figures (the noise is the sums' own).
    assert np.array_equal(ratio, again.magnitudes["ratio_INCOME_HOURS"], equal_nan=True)
    # A table without the new statistic publishes none of it.
    plain = ts.TableBuilder(dataset, protection, magnitudes=magnitudes)
    with pytest.raises(RequestError, match="unknown statistic"):
        plain.build(TableRequest(("AGEGRP",), statistic="count,ratio:INCOME:HOURS"))


def test_the_small_cell_rule_asks_each_statistic_what_it_hides(
    demo: tuple[Dataset, pd.DataFrame],
) -> None:
    dataset, _ = demo
    site = {"datasets": [{"name": "d", "path": ".", "rules": {"min_cell_size": 2000}}]}
    rules = ts.load_site_config(data=site).datasets[0].rules
    builder = ts.TableBuilder(dataset, ts.Protection(None), rules=rules)
    # A one-way table's column percentages: no row percentage to ask about.
    table = builder.build(TableRequest(("REGION",), statistic="count,percent:column"))
    assert table.suppressed is not None and table.percentages is not None
    small = table.suppressed
    percent = table.percentages["percent_column"]
    # Blank where the cell or its denominator (the total) is hidden, shown elsewhere.
    hidden = small | small[-1]
    assert hidden[:-1].any() and not hidden[-1]
    assert np.isnan(percent[hidden & table.computed]).all()
    assert not np.isnan(percent[~hidden & table.computed]).any()
