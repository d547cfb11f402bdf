"""The sliver (table-differencing) attack harness really attacks."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from tablesafe._builder import Protection
from tablesafe._cli import get_app
from tablesafe._request import TableRequest
from tablesafe.attacks import sliver_attack
from tablesafe.attacks._sliver import _without
from tablesafe.catalog._dataset import Dataset
from tablesafe.engines import MemoryEngine
from tablesafe.mechanisms import drop_add_records

SECRET = b"attack-secret-0123456789abcdefgh"


class Shift:
    def perturbation(self, counts, u, cell_key=None):
        return np.where(counts == 0, 0, np.floor(u * 5).astype(np.int64) - 2)

    def describe(self):
        return {"name": "shift"}


def test_unprotected_tables_give_every_sliver_away(demo_dir):
    dataset = Dataset.open(demo_dir)
    result = sliver_attack(dataset, {"AGE": [33, 34]}, ("AGE", "SEX"), Protection(None))
    assert result.pairs > 100
    assert result.correct_tables == result.correct_ones == result.correct_zeros == 100.0
    assert result.weighted_correct_tables == 100.0
    assert result.strategy1 == result.strategy2 == 100.0


def test_b_aggregates_are_a_minus_the_record(random_data, make_dataset):
    dataset, frame = random_data
    req = TableRequest(("A", "B"))
    plan = req.bind(dataset.catalog)
    agg = MemoryEngine().tabulate(dataset, plan)
    row = frame.iloc[5]
    cell = ([1, 2, 3, 4].index(row["A"]), list("xyzw").index(row["B"]))
    got = _without(agg, cell, int(row["RKEY"]), float(row["W"]), None)
    other = make_dataset(frame.drop(index=frame.index[5]))
    expected = MemoryEngine().tabulate(other, req.bind(other.catalog))
    np.testing.assert_array_equal(got.n, expected.n)
    np.testing.assert_array_equal(got.cell_key, expected.cell_key)
    np.testing.assert_allclose(got.weight_sum, expected.weight_sum, atol=1e-9)


@pytest.mark.parametrize(
    "protection",
    [
        Protection(Shift(), seeds="cellkey"),
        Protection(Shift(), seeds="dynamic", secret=SECRET),
        Protection(drop_add_records(rate=0.05), seeds="dynamic", secret=SECRET),
    ],
    ids=["cellwise-cellkey", "cellwise-dynamic", "records"],
)
def test_protection_hides_slivers(demo_dir, protection):
    dataset = Dataset.open(demo_dir)
    result = sliver_attack(dataset, {"AGE": [33, 34]}, ("AGE", "SEX"), protection, limit=80, rng=1)
    assert result.pairs == 80
    assert result.correct_tables < 100.0
    assert result.correct_ones < 100.0


def test_cli_attack(demo_dir):
    result = CliRunner().invoke(
        get_app(),
        [
            "attack",
            "sliver",
            str(demo_dir),
            "--table",
            "AGEGRP*SEX",
            "--universe",
            "AGE=40,41",
            "--method",
            "none,q-records",
            "--limit",
            "30",
            "--format",
            "json",
        ],
        env={"TABLESAFE_SECRET": SECRET.decode()},
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert [r["method"] for r in doc] == ["none", "q-records"]
    assert doc[0]["correct_tables"] == 100.0 and doc[1]["correct_tables"] < 100.0
