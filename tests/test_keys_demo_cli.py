"""Record keys, the demo survey and the command line, end to end."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from tablesafe._cli import get_app
from tablesafe._errors import DataError, FormatError
from tablesafe._keys import add_record_keys, cell_key_uniform, draw_record_keys
from tablesafe._request import TableRequest
from tablesafe.catalog._catalog import Catalog
from tablesafe.catalog._dataset import Dataset
from tablesafe.engines import DuckDBEngine
from tablesafe.output._tabulation import tabulate
from tablesafe.prepare._demo import write_demo_data

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(get_app(), [str(a) for a in args])


# -- record keys -------------------------------------------------------------


def test_keys_add_writes_uint32_keys(tmp_path):
    src = tmp_path / "in.csv"
    pd.DataFrame({"A": [1, 2, 3] * 100}).to_csv(src, index=False)
    assert add_record_keys(src, tmp_path / "out.parquet") == 300
    keys = pq.read_table(tmp_path / "out.parquet").column("RKEY")
    assert str(keys.type) == "uint32"
    # 300 draws from 2**32 values: a collision would be a one-in-100,000 event.
    assert len(set(keys.to_pylist())) == 300


def test_keys_add_refuses_to_overwrite_and_writes_nothing(tmp_path):
    src = tmp_path / "in.parquet"
    pd.DataFrame({"A": [1, 2], "RKEY": np.array([5, 6], dtype=np.uint32)}).to_parquet(src)
    out = tmp_path / "out.parquet"
    with pytest.raises(DataError, match="already has a record-key column"):
        add_record_keys(src, out)
    assert not out.exists()
    assert add_record_keys(src, out, overwrite_keys=True) == 2
    assert pq.read_table(out).column_names == ["A", "RKEY"]


def test_keys_add_bad_input(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        add_record_keys(tmp_path / "none.csv", tmp_path / "out.csv")
    (tmp_path / "x.txt").write_text("a")
    with pytest.raises(FormatError, match=r"\.parquet or \.csv"):
        add_record_keys(tmp_path / "x.txt", tmp_path / "out.csv")
    assert list(tmp_path.iterdir()) == [tmp_path / "x.txt"]


def test_secure_keys_are_uniform():
    keys = draw_record_keys(200_000)
    # Each of 16 equal bins holds 1/16 of the keys: chi-square with 15 df.
    from scipy import stats

    counts = np.bincount(keys >> 28, minlength=16)
    assert stats.chisquare(counts).pvalue > 1e-4


def test_cell_key_uniform_is_strictly_inside_unit_interval():
    u = cell_key_uniform(np.array([0, 2**32 - 1], dtype=np.uint32))
    assert 0 < u[0] < 1e-9 and 1 - 1e-9 < u[1] < 1


def test_cli_keys_add(tmp_path):
    src = tmp_path / "in.csv"
    pd.DataFrame({"A": [1, 2]}).to_csv(src, index=False)
    result = invoke("keys", "add", src, tmp_path / "out.csv")
    assert result.exit_code == 0, result.output
    again = invoke("keys", "add", tmp_path / "out.csv", tmp_path / "out2.csv")
    assert again.exit_code != 0
    assert not (tmp_path / "out2.csv").exists()


# -- demo data ---------------------------------------------------------------


def test_demo_data_is_deterministic(tmp_path):
    a = write_demo_data(tmp_path / "a", 3000, seed=3, replicates=4)
    b = write_demo_data(tmp_path / "b", 3000, seed=3, replicates=4)
    c = write_demo_data(tmp_path / "c", 3000, seed=4, replicates=4)
    ta, tb, tc = (pq.read_table(p / "microdata.parquet") for p in (a, b, c))
    assert ta.equals(tb)
    assert not ta.equals(tc)
    assert (a / "catalog.toml").read_text() == (b / "catalog.toml").read_text()


def test_demo_data_matches_its_catalog(demo_dir):
    dataset = Dataset.open(demo_dir)
    summary = DuckDBEngine().validate(dataset)  # includes the structural zeros
    assert summary.records == 20_000
    cat = dataset.catalog
    assert len(cat.source_variables) >= 8
    assert cat.replicates is not None and cat.replicates.method == "JK1"
    frame = pq.read_table(dataset.path).to_pandas()
    w = frame["WEIGHT"]
    assert (w > 0).all() and 1.5 < w.max() / w.min() < 20  # moderate variation
    # JK1 replicates: each drops one group and inflates the rest; totals stay close.
    reps = frame[list(cat.replicates.columns)].sum() / w.sum()
    assert np.allclose(reps, 1, atol=0.05)


def test_demo_data_has_dependencies(demo_dir):
    frame = pq.read_table(Dataset.open(demo_dir).path).to_pandas()
    adults = frame[frame["AGE"] >= 15]
    employed_by_educ = adults.groupby("EDUC")["EMPSTAT"].apply(lambda s: (s == 1).mean())
    assert employed_by_educ.loc[6] > employed_by_educ.loc[2]
    assert (frame.loc[frame["AGE"] < 15, "MARSTAT"] == 1).all()
    assert frame["REGION"].value_counts(normalize=True).max() > 0.15


def test_cli_demo_data_and_table(tmp_path):
    out = tmp_path / "demo"
    result = invoke("demo-data", out, "--records", "2000", "--replicates", "0", "--seed", "1")
    assert result.exit_code == 0, result.output
    Catalog.from_toml(out / "catalog.toml")
    text = invoke(
        "table",
        out,
        "--rows",
        "AGEGRP",
        "--cols",
        "SEX",
        "--where",
        "REGION=1,2",
        "--method",
        "none",
    )
    assert text.exit_code == 0, text.output
    assert "UNPROTECTED" in text.output and "Female" in text.output and "Total" in text.output

    csv = invoke(
        "table",
        out,
        "--rows",
        "SEX",
        "--statistic",
        "count",
        "--format",
        "csv",
        "--method",
        "none",
    )
    assert csv.exit_code == 0
    lines = csv.output.strip().splitlines()
    assert lines[0].startswith("#") and lines[1] == "SEX,n"
    counts = dict(line.split(",") for line in lines[2:])
    assert int(counts["1"]) + int(counts["2"]) == int(counts["_T"]) == 2000

    js = invoke(
        "table",
        out,
        "--rows",
        "REGION",
        "--cols",
        "TENURE",
        "--layers",
        "SEX",
        "--format",
        "json",
        "--statistic",
        "both",
        "--method",
        "none",
    )
    assert js.exit_code == 0
    doc = json.loads(js.output)
    assert doc["meta"]["protected"] is False
    total = [c for c in doc["cells"] if c["REGION"] == c["TENURE"] == c["SEX"] == "_T"]
    assert total[0]["n"] == 2000


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rows", "NOPE"], "unknown variable 'NOPE'"),
        (["--rows", "SEX", "--where", "REGION=99"], "unknown category 99 of variable REGION"),
        (["--rows", "SEX", "--where", "REGION"], "VAR=CODE"),
        (["--rows", "SEX", "--cols", "SEX"], "given twice"),
        (["--rows", "SEX", "--format", "xml"], "allowed: text, csv, json"),
        (
            [
                "--rows",
                "SEX",
                "--cols",
                "AGEGRP",
                "--layers",
                "REGION",
                "--layers",
                "EDUC",
                "--layers",
                "OCC",
            ],
            "at most 4 dimensions",
        ),
    ],
)
def test_cli_bad_requests_exit_2_with_message(demo_dir, args, message, capsys):
    import sys

    from tablesafe._cli import main

    old = sys.argv
    sys.argv = ["tablesafe", "table", str(demo_dir), *args]
    try:
        with pytest.raises(SystemExit) as info:
            main()
    finally:
        sys.argv = old
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_cli_protected_table(demo_dir, monkeypatch):
    monkeypatch.setenv("TABLESAFE_SECRET", "a-long-enough-secret-for-tests")
    result = invoke(
        "table",
        demo_dir,
        "--rows",
        "SEX",
        "--cols",
        "TENURE",
        "--method",
        "q-records",
        "--se",
        "--format",
        "json",
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["meta"]["protected"] is True
    assert doc["meta"]["mechanism"]["name"].startswith("drop/add")
    assert {"se", "ci_low", "ci_high"} <= set(doc["cells"][0])
    assert "perturbed" not in doc["cells"][0]
    owner = invoke(
        "table",
        demo_dir,
        "--rows",
        "SEX",
        "--method",
        "q-records",
        "--format",
        "csv",
        "--owner-flags",
    )
    assert "perturbed" in owner.output.splitlines()[0]


def test_cli_dynamic_seeds_need_a_secret(demo_dir, monkeypatch):
    monkeypatch.delenv("TABLESAFE_SECRET", raising=False)
    result = invoke("table", demo_dir, "--rows", "SEX", "--method", "q-records")
    assert result.exit_code != 0
    assert "TABLESAFE_SECRET" in str(result.exception) + result.output


def test_python_api_tabulate(demo_dir):
    dataset = Dataset.open(demo_dir)
    table = tabulate(dataset, TableRequest(("AGEGRP", "MARSTAT"), universe={"SEX": [2]}))
    frame = table.to_frame(labels=True)
    assert set(frame.columns) >= {"AGEGRP", "MARSTAT", "n", "weighted", "AGEGRP_label"}
    assert frame.loc[(frame["AGEGRP"] == 1) & (frame["MARSTAT"] == 2), "n"].item() == 0


def test_cli_table_uses_the_site_protection(demo_dir, tmp_path):
    site = tmp_path / "site.toml"
    site.write_text(
        f'[[datasets]]\nname = "demo"\npath = "{demo_dir}"\n'
        '[datasets.protection]\nmethod = "dp"\nepsilon = 0.5\ncap = 3\n'
    )
    result = invoke("table", demo_dir, "--rows", "SEX", "--config", site, "--format", "json")
    assert result.exit_code == 0, result.output
    mech = json.loads(result.output)["meta"]["mechanism"]
    assert mech["name"] == "dp" and mech["epsilon"] == 0.5 and mech["cap"] == 3
    other = invoke("table", tmp_path, "--rows", "SEX", "--config", site)
    assert other.exit_code != 0
