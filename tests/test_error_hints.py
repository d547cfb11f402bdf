"""Errors a new user meets first name the command that fixes them, and that command does."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import tablesafe as ts
from tablesafe._cli import get_app
from tablesafe._errors import DataError, RequestError
from tablesafe.catalog._hints import missing_key_hint, missing_replicates_hint
from tablesafe.engines import DuckDBEngine, MemoryEngine
from tablesafe.prepare._demo import write_demo_data


@pytest.fixture
def no_replicates(tmp_path: Path) -> Path:
    return write_demo_data(tmp_path / "survey", 2_000, seed=3, replicates=0)


def drop_column(data_dir: Path, column: str) -> None:
    path = data_dir / "microdata.parquet"
    pq.write_table(pq.read_table(path).drop_columns([column]), path)


@pytest.mark.parametrize("engine", [DuckDBEngine, MemoryEngine])
def test_missing_record_keys_name_keys_add(no_replicates: Path, engine) -> None:
    drop_column(no_replicates, "RKEY")
    with pytest.raises(DataError) as err:
        engine().validate(ts.Dataset.open(no_replicates))
    message = str(err.value)
    assert "lacks column(s) RKEY" in message
    assert "tablesafe keys add IN OUT --column RKEY" in message
    assert "tablesafe catalog init" in message


def test_another_missing_column_gets_no_key_hint(no_replicates: Path) -> None:
    drop_column(no_replicates, "TENURE")
    with pytest.raises(DataError) as err:
        DuckDBEngine().validate(ts.Dataset.open(no_replicates))
    assert "TENURE" in str(err.value) and "keys add" not in str(err.value)
    assert missing_key_hint("RKEY", ["TENURE"]) == ""


def test_the_key_hint_works(no_replicates: Path) -> None:
    """Following the message's command makes the dataset usable."""
    drop_column(no_replicates, "RKEY")
    micro = str(no_replicates / "microdata.parquet")
    run = CliRunner().invoke
    failed = run(get_app(), ["table", str(no_replicates), "--rows", "SEX"])
    # (main() turns the exception into "error: ..." and exit code 2.)
    assert isinstance(failed.exception, DataError) and "keys add" in str(failed.exception)
    fixed = run(get_app(), ["keys", "add", micro, micro + ".keyed.parquet", "--column", "RKEY"])
    assert fixed.exit_code == 0, fixed.output
    Path(micro + ".keyed.parquet").replace(micro)
    again = run(get_app(), ["table", str(no_replicates), "--rows", "SEX"])
    assert again.exit_code == 0, again.output


def test_se_without_replicates_names_replicates_add(no_replicates: Path) -> None:
    dataset = ts.Dataset.open(no_replicates)
    with pytest.raises(RequestError) as err:
        ts.TableRequest(("SEX",), replicates=True).bind(dataset.catalog)
    assert "no replicate weights" in str(err.value)
    assert "tablesafe replicates add DIR --psu COL" in str(err.value)
    assert str(err.value).endswith(missing_replicates_hint()[2:])
    result = CliRunner().invoke(get_app(), ["table", str(no_replicates), "--rows", "SEX", "--se"])
    assert isinstance(result.exception, RequestError)
    assert "tablesafe replicates add" in str(result.exception)


def test_the_replicates_hint_works(no_replicates: Path) -> None:
    """JK1 replicates from a (here: made-up) PSU column make --se work."""
    run = CliRunner().invoke
    made = run(
        get_app(), ["replicates", "add", str(no_replicates), "--psu", "HHSIZE", "--method", "JK1"]
    )
    assert made.exit_code == 0, made.output
    result = run(
        get_app(), ["table", str(no_replicates), "--rows", "SEX", "--se", "--format", "csv"]
    )
    assert result.exit_code == 0, result.output
    assert "se" in result.output.splitlines()[0].split(",")
