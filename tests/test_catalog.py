"""Catalog names: what a variable may be called."""

from __future__ import annotations

import pytest

from tablesafe._errors import CatalogError
from tablesafe.catalog._catalog import Catalog


@pytest.mark.parametrize("name", ["se", "SUPPRESSED", "sum_x", "mean_income", "AGE_label", "n"])
def test_a_variable_cannot_take_a_table_column_name(name):
    # A variable named like a column of published tables would clash with it.
    raw = {
        "dataset": {"title": "t", "file": "m.parquet", "record_key": "K"},
        "variables": [{"name": name, "categories": [{"code": 1, "label": "a"}]}],
    }
    with pytest.raises(CatalogError, match="reserved"):
        Catalog.from_dict(raw)
