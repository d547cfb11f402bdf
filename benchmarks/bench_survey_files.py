"""Benchmark: `catalog init` and `replicates add` on a survey-sized file.

Makes an NHANES-like survey (60 strata with 2 PSUs each, integer weights,
six labelled classification variables, an income and an identifier
column) of ``--records`` records as Parquet and as a labelled SPSS file,
then times, in the same process:

- baseline: reading the Parquet file with pyarrow and writing it back (the
  I/O floor of any tool that rewrites the microdata);
- ``init_catalog`` from the Parquet file, and from the SPSS file against
  reading that file with pyreadstat alone;
- ``add_replicates`` with JK2 (60 replicates) and BRR (64 replicates),
  against a baseline that appends the same number of float columns with
  pyarrow and writes the file.

Prints seconds and ratios to the baselines. Usage:
python benchmarks/bench_survey_files.py [--records 1000000]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pyreadstat

from tablesafe.prepare._catalog_init import init_catalog
from tablesafe.prepare._replicates import add_replicates


def make(records: int, folder: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(19)
    stratum = rng.integers(1, 61, records)
    frame = pd.DataFrame(
        {
            "SEQN": np.arange(records, dtype=float),
            "STRATUM": stratum.astype(float),
            "PSU": rng.integers(1, 3, records).astype(float),
            "SEX": rng.integers(1, 3, records).astype(float),
            "AGEGRP": rng.integers(1, 9, records).astype(float),
            "RACE": rng.integers(1, 6, records).astype(float),
            "EDUC": rng.choice([1.0, 2.0, 3.0, 4.0, 5.0, 7.0, 9.0], records),
            "INCOME": rng.gamma(2.0, 1500.0, records).round(2),
            "WT": rng.integers(2_000, 40_000, records).astype(float),
        }
    )
    labels = {
        "SEX": {1: "Male", 2: "Female"},
        "AGEGRP": {i: f"age group {i}" for i in range(1, 9)},
        "RACE": {i: f"group {i}" for i in range(1, 6)},
        "EDUC": {1: "<9th", 2: "9-12th", 3: "High school", 4: "Some college", 5: "College",
                 7: "Refused", 9: "Don't know"},
    }  # fmt: skip
    sav = folder / "survey.sav"
    pyreadstat.write_sav(frame, sav, variable_value_labels=labels, missing_ranges={"EDUC": [7, 9]})
    parquet = folder / "survey.parquet"
    frame.to_parquet(parquet)
    return parquet, sav


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench_survey_"))
    try:
        parquet, sav = make(args.records, folder)
        base = timed(lambda: pq.write_table(pq.read_table(parquet), folder / "copy.parquet"))
        t_pq = timed(lambda: init_catalog(parquet, folder / "a", weight="WT"))
        t_sav = timed(lambda: init_catalog(sav, folder / "b", weight="WT"))
        base_sav = timed(lambda: pyreadstat.read_sav(sav, user_missing=True))
        print(f"records: {args.records:,}")
        print(f"baseline read+write Parquet      {base:7.2f} s")
        print(f"catalog init from Parquet        {t_pq:7.2f} s  ({t_pq / base:5.1f}x baseline)")
        print(f"baseline pyreadstat read .sav    {base_sav:7.2f} s")
        print(f"catalog init from SPSS .sav      {t_sav:7.2f} s  ({t_sav / base_sav:5.1f}x read)")
        for method, reps in (("JK2", 60), ("BRR", 64)):
            data = pq.read_table(folder / "a" / "microdata.parquet")

            def append(data: pa.Table = data, reps: int = reps) -> None:
                w = data.column("WT").to_numpy()
                table = data
                for r in range(reps):
                    table = table.append_column(f"X{r}", pa.array(w * (1 + r % 2)))
                pq.write_table(table, folder / "append.parquet")

            b = timed(append)
            t = timed(
                lambda m=method: add_replicates(
                    folder / "a", strata="STRATUM", psu="PSU", method=m, replace=True
                )
            )
            print(f"baseline append {reps} columns      {b:7.2f} s")
            print(f"replicates add {method} ({reps} weights) {t:7.2f} s  ({t / b:5.1f}x baseline)")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
