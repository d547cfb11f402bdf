"""`tablesafe catalog init`: labelled SPSS/Stata/SAS, CSV and Parquet files to a dataset."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pyreadstat
import pytest
from click.testing import CliRunner

from tablesafe import Dataset, Protection, TableBuilder, TableRequest
from tablesafe._cli import get_app
from tablesafe._errors import DataError, FormatError, ParameterError
from tablesafe.prepare._catalog_init import init_catalog

N = 400


def survey_frame(seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    sex = rng.choice([1.0, 2.0], N)
    sex[:7] = np.nan  # system missing
    # Employment: 1..3, with user-missing codes -1 (not asked) and 9 (refused).
    emp = rng.choice([1.0, 2.0, 3.0, 9.0, -1.0], N, p=[0.4, 0.3, 0.2, 0.05, 0.05])
    region = rng.choice(["N", "S", "E"], N)
    return pd.DataFrame(
        {
            "id": np.arange(1, N + 1, dtype=float),
            "sex": sex,
            "emp": emp,
            "region": region,
            "income": rng.gamma(2.0, 1500.0, N).round(2),
            "age": rng.integers(15, 90, N).astype(float),
            "wt": rng.choice([50.0, 120.0, 310.0], N),
        }
    )


SEX_LABELS = {1: "Male", 2: "Female"}
EMP_LABELS = {1: "Employed", 2: "Unemployed", 3: "Not in labour force", 9: "Refused"}


@pytest.fixture(scope="module")
def sav_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    frame = survey_frame()
    path = tmp_path_factory.mktemp("sav") / "lfs.sav"
    pyreadstat.write_sav(
        frame,
        path,
        file_label="Labour force survey",
        column_labels={"sex": "Sex of respondent", "emp": "Employment status", "wt": "Weight"},
        variable_value_labels={
            "sex": SEX_LABELS,
            "emp": EMP_LABELS,
            "region": {"N": "North", "S": "South", "E": "East"},
        },
        missing_ranges={"emp": [9, {"lo": -5, "hi": -1}]},
        variable_measure={"income": "scale", "age": "scale"},
    )
    return path, frame


@pytest.fixture(scope="module")
def sav_dataset(
    sav_file: tuple[Path, pd.DataFrame], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    out = tmp_path_factory.mktemp("ds") / "lfs"
    init_catalog(sav_file[0], out, weight="wt", rng=np.random.default_rng(5))
    return out


def unprotected(folder: Path, *dims: str, statistic: str = "both") -> pd.DataFrame:
    builder = TableBuilder(Dataset.open(folder), Protection(None))
    return builder.build(TableRequest(dims, statistic=statistic)).to_frame(labels=True)


def test_sav_labels_become_categories(sav_dataset: Path) -> None:
    text = (sav_dataset / "catalog.toml").read_text()
    raw = tomllib.loads(text)
    assert raw["dataset"] == {
        "title": "Labour force survey",
        "file": "microdata.parquet",
        "record_key": "RKEY",
        "weight": "wt",
    }
    cats = {v["name"]: v["categories"] for v in raw["variables"]}
    assert [v["name"] for v in raw["variables"]] == ["sex", "emp", "region"]
    assert cats["sex"] == [
        {"code": 1, "label": "Male"},
        {"code": 2, "label": "Female"},
        {"code": -1, "label": "Missing"},
    ]
    # Valid codes first, then the user-missing codes (with their labels or a made one).
    assert cats["emp"] == [
        {"code": 1, "label": "Employed"},
        {"code": 2, "label": "Unemployed"},
        {"code": 3, "label": "Not in labour force"},
        {"code": -1, "label": "Missing (-1)"},
        {"code": 9, "label": "Refused"},
    ]
    assert cats["region"] == [
        {"code": "E", "label": "East"},
        {"code": "N", "label": "North"},
        {"code": "S", "label": "South"},
    ]
    # Undecided columns are listed with their reason, not silently dropped.
    assert "#   id      an identifier (every value distinct)" in text
    assert "#   income  continuous (values that are not integers)" in text
    assert "#   age     continuous (measure 'scale' in the file, no value labels)" in text
    assert '{ code = 9, label = "Refused" },  # missing-value code' in text
    assert 'record_key = "RKEY"  # drawn by catalog init' in text


def test_sav_table_shows_labels_and_true_counts(
    sav_file: tuple[Path, pd.DataFrame], sav_dataset: Path
) -> None:
    _, frame = sav_file
    table = unprotected(sav_dataset, "sex", "emp")
    inner = table[(table.sex != "_T") & (table.emp != "_T")]
    assert set(inner.sex_label) == {"Male", "Female", "Missing"}
    assert set(inner.emp_label) == {
        "Employed", "Unemployed", "Not in labour force", "Missing (-1)", "Refused",
    }  # fmt: skip
    sex = frame.sex.fillna(-1).astype(int)
    for _, row in inner.iterrows():
        mask = (sex == row.sex) & (frame.emp == row.emp)
        assert row.n == mask.sum()
        assert row.weighted == pytest.approx(frame.wt[mask].sum())
    # Record keys: uint32, every record, all columns kept.
    data = pq.read_table(sav_dataset / "microdata.parquet")
    assert data.schema.field("RKEY").type == pa.uint32()
    assert set(data.column_names) == {*frame.columns, "RKEY"}
    assert data.schema.field("sex").type == pa.int64()


def test_dta_labels_and_extended_missing(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {
            "marst": pd.Series([1, 2, "a", 2, 1, "b", 3, 1] * 5, dtype=object),
            "educ": [1.0, 2.0, np.nan, 3.0, 1.0, 2.0, 2.0, 3.0] * 5,
            "w": np.linspace(1, 4, 40),
        }
    )
    path = tmp_path / "census.dta"
    pyreadstat.write_dta(
        frame,
        path,
        column_labels={"marst": "Marital status", "educ": "Education"},
        variable_value_labels={
            "marst": {1: "Single", 2: "Married", 3: "Widowed", "a": "Refused"},
            "educ": {1: "Primary", 2: "Secondary", 3: "Tertiary"},
        },
        missing_user_values={"marst": ["a", "b"]},
    )
    out = tmp_path / "ds"
    report = init_catalog(path, out, weight="w", rng=np.random.default_rng(1))
    assert report.variables == ("marst", "educ")
    raw = tomllib.loads((out / "catalog.toml").read_text())
    cats = {v["name"]: v["categories"] for v in raw["variables"]}
    assert cats["marst"] == [
        {"code": 1, "label": "Single"},
        {"code": 2, "label": "Married"},
        {"code": 3, "label": "Widowed"},
        {"code": -2, "label": "Refused"},
        {"code": -3, "label": "Missing (.b)"},
    ]
    assert cats["educ"][-1] == {"code": -1, "label": "Missing"}
    table = unprotected(out, "marst")
    counts = dict(zip(table.marst_label, table.n, strict=True))
    assert counts == {
        "Single": 15, "Married": 10, "Widowed": 5, "Refused": 5, "Missing (.b)": 5, "Total": 40,
    }  # fmt: skip


def test_csv_without_labels_renames_and_says_so(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    frame = pd.DataFrame(
        {
            "Region code": rng.integers(1, 5, 300),
            "total": rng.choice(["A", "B"], 300),
            "serial": np.arange(300),
            "many": rng.integers(0, 200, 300),
        }
    )
    path = tmp_path / "raw.csv"
    frame.to_csv(path, index=False)
    report = init_catalog(path, tmp_path / "ds", rng=np.random.default_rng(1))
    assert report.variables == ("Region_code", "total_")
    assert report.renamed == (("Region code", "Region_code"), ("total", "total_"))
    text = (tmp_path / "ds" / "catalog.toml").read_text()
    assert "#   Region code -> Region_code" in text
    assert "# the file has no value labels: the labels are the codes" in text
    assert "# no weight given (--weight): only counts can be tabulated" in text
    assert "many    " in text and "more than --max-categories 50" in text
    table = unprotected(tmp_path / "ds", "Region_code", statistic="count")
    assert list(table.n[:-1]) == [int((frame["Region code"] == c).sum()) for c in (1, 2, 3, 4)]


def test_parquet_keeps_existing_keys_and_variables_option(tmp_path: Path) -> None:
    keys = np.arange(1000, 1100, dtype=np.uint32)
    pq.write_table(
        pa.table({"a": [1, 2] * 50, "b": ["x", "y", "z", "x"] * 25, "RKEY": keys}),
        tmp_path / "in.parquet",
    )
    report = init_catalog(tmp_path / "in.parquet", tmp_path / "ds", variables=["b"])
    assert not report.keys_added
    assert report.variables == ("b",)
    assert report.undecided == (("a", "not named in --variables"),)
    assert pq.read_table(tmp_path / "ds" / "microdata.parquet").column("RKEY").to_pylist() == list(
        range(1000, 1100)
    )


def test_xpt(tmp_path: Path) -> None:
    frame = pd.DataFrame({"SEX": [1.0, 2.0, 2.0, 1.0], "WT": [1.0, 2.0, 3.0, 4.0]})
    pyreadstat.write_xport(frame, tmp_path / "f.xpt")
    report = init_catalog(tmp_path / "f.xpt", tmp_path / "ds", weight="WT")
    assert report.variables == ("SEX",)
    assert list(unprotected(tmp_path / "ds", "SEX").weighted) == [5.0, 5.0, 10.0]


@pytest.mark.parametrize(
    ("setup", "kwargs", "error", "message"),
    [
        ("garbage.sav", {}, FormatError, "cannot read garbage.sav as a .sav file"),
        ("data.txt", {}, FormatError, "must end in one of"),
        ("absent.dta", {}, DataError, "does not exist"),
        ("ok.csv", {"weight": "neg"}, DataError, "weight column neg has 1 negative values"),
        ("ok.csv", {"weight": "gap"}, DataError, "weight column gap has 1 missing values"),
        ("ok.csv", {"weight": "nope"}, DataError, "weight column 'nope' is not in ok.csv"),
        ("ok.csv", {"variables": ["cont"]}, DataError, "cont, which cannot be a variable"),
        ("ok.csv", {"variables": ["zz"]}, DataError, "--variables names zz"),
        ("ok.csv", {"max_categories": 1}, ParameterError, "at least 2"),
        ("badkey.csv", {}, DataError, "record keys in 'RKEY' must lie in 0 .. 2**32 - 1"),
    ],
)
def test_bad_input_writes_nothing(
    tmp_path: Path, setup: str, kwargs: dict, error: type, message: str
) -> None:
    src = tmp_path / setup
    if setup == "garbage.sav":
        src.write_bytes(b"not an spss file at all" * 10)
    elif setup in ("data.txt",):
        src.write_text("a,b\n1,2\n")
    elif setup == "ok.csv":
        src.write_text("a,neg,gap,cont\n1,1.0,1.0,0.5\n2,-1.0,,0.25\n1,2.0,3.0,0.125\n")
    elif setup == "badkey.csv":
        src.write_text("a,RKEY\n1,5\n2,-3\n1,7\n")
    out = tmp_path / "out" / "ds"
    with pytest.raises(error, match=re.escape(message)):
        init_catalog(src, out, **kwargs)
    assert not out.exists()
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_refuses_to_overwrite(sav_file: tuple[Path, pd.DataFrame], sav_dataset: Path) -> None:
    before = (sav_dataset / "catalog.toml").read_bytes()
    with pytest.raises(DataError, match="already holds a dataset"):
        init_catalog(sav_file[0], sav_dataset, weight="wt")
    assert (sav_dataset / "catalog.toml").read_bytes() == before


def test_cli(sav_file: tuple[Path, pd.DataFrame], tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "ds"
    result = runner.invoke(
        get_app(), ["catalog", "init", str(sav_file[0]), str(out), "--weight", "wt"]
    )
    assert result.exit_code == 0, result.output
    assert "3 variables: sex, emp, region" in result.output
    assert "income: continuous" in result.output
    result = runner.invoke(get_app(), ["table", str(out), "--rows", "emp", "--method", "none"])
    assert result.exit_code == 0, result.output
    assert "Not in labour force" in result.output


def test_drafted_names_avoid_every_table_column():
    from tablesafe.catalog._catalog import reserved_name
    from tablesafe.prepare._catalog_init import _clean_name

    taken: set[str] = set()
    for raw in ("se", "sum_income", "Mean_x", "age_label", "suppressed", "sensitive_y", "n"):
        name = _clean_name(raw, taken)
        assert reserved_name(name) is None, (raw, name)
