"""A census-like file with structurally related variables, and a broad workload on it (issue 37).

The file: 12 regions, 350 local areas nested in them, single-year age 0-100,
sex, marital status, tenure, ethnic group (two small groups) and economic
activity, where ``ECON = 5`` ("child") holds for every person under 16 and no
one else, and every child is never married (``MARSTAT = 1``). The catalog
declares those relations as structural zeros, as an office does after
``tablesafe catalog init`` proposes the empty combinations of large
categories.

The workload: distinct 2- and 3-way tables of the file's variables (area with
region universes only, so a table stays under ``max_cells``), all records or
one region, counts; what a broad set of users asks (issue 37, item 3).
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

DATA = Path(__file__).parent / "_data"
AREAS, REGIONS = 350, 12
VARIABLES = ("AGE", "SEX", "MARSTAT", "TENURE", "ETHNIC", "ECON", "REGION")


def catalog_dict(records: int, *, relations: bool = True) -> dict:
    """The catalog; ``relations`` declares the ECON / AGE relation."""

    def cats(codes, label: str) -> list[dict]:
        return [{"code": c, "label": f"{label} {c}"} for c in codes]

    raw = {
        "dataset": {
            "title": f"census-like data with related variables, {records:,} persons",
            "file": "microdata.parquet",
            "record_key": "RKEY",
        },
        "variables": [
            {"name": "REGION", "categories": cats(range(1, REGIONS + 1), "Region")},
            {"name": "AREA", "categories": cats(range(1, AREAS + 1), "Area")},
            {"name": "AGE", "categories": cats(range(0, 101), "Age")},
            {"name": "SEX", "categories": cats([1, 2], "Sex")},
            {"name": "MARSTAT", "categories": cats(range(1, 6), "Marital status")},
            {"name": "TENURE", "categories": cats(range(1, 5), "Tenure")},
            {"name": "ETHNIC", "categories": cats(range(1, 7), "Ethnic group")},
            {"name": "ECON", "categories": cats(range(1, 6), "Economic activity")},
        ],
    }
    if relations:
        raw["structural_zeros"] = [
            {"AGE": list(range(16)), "ECON": [1, 2, 3, 4]},
            {"AGE": list(range(16, 101)), "ECON": [5]},
            {"AGE": list(range(16)), "MARSTAT": [2, 3, 4, 5]},
        ]
    return raw


def census(records: int, *, relations: bool = True) -> Path:
    """Write (once) the file of ``records`` persons; its folder."""
    from tablesafe.catalog._catalog import Catalog

    folder = DATA / f"census_econ_{records}{'' if relations else '_undeclared'}"
    if (folder / "catalog.toml").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    data = DATA / f"census_econ_{records}" / "microdata.parquet"
    if not data.exists():
        data.parent.mkdir(parents=True, exist_ok=True)
        _write(data, records)
    if data.parent != folder:
        (folder / "microdata.parquet").symlink_to(data)
    (folder / "catalog.toml").write_text(
        Catalog.from_dict(catalog_dict(records, relations=relations)).to_toml()
    )
    return folder


def _write(path: Path, records: int) -> None:
    rng = np.random.default_rng(2026)
    area_p = rng.lognormal(0.0, 0.8, AREAS)
    area_p /= area_p.sum()
    age_p = np.exp(-np.arange(101) / 60.0) * (1 - 1 / (1 + np.exp(-(np.arange(101) - 85) / 4)))
    age_p /= age_p.sum()
    tmp = path.with_suffix(".tmp")
    writer = None
    for start in range(0, records, 2_000_000):
        m = min(2_000_000, records - start)
        area = rng.choice(AREAS, m, p=area_p) + 1
        age = rng.choice(101, m, p=age_p)
        cols = {
            "REGION": ((area - 1) * REGIONS // AREAS + 1).astype(np.int16),
            "AREA": area.astype(np.int16),
            "AGE": age.astype(np.int16),
            "SEX": rng.integers(1, 3, m).astype(np.int8),
            "MARSTAT": np.where(age < 16, 1, rng.integers(1, 6, m)).astype(np.int8),
            "TENURE": rng.integers(1, 5, m).astype(np.int8),
            "ETHNIC": rng.choice(6, m, p=[0.8, 0.07, 0.05, 0.04, 0.02, 0.02]).astype(np.int8) + 1,
            "ECON": np.where(age < 16, 5, rng.choice(4, m, p=[0.55, 0.05, 0.25, 0.15]) + 1).astype(
                np.int8
            ),
            "RKEY": rng.integers(0, 2**32, m, dtype=np.uint32).astype(np.int64),
        }
        table = pa.table(cols)
        if writer is None:
            writer = pq.ParquetWriter(tmp, table.schema)
        writer.write_table(table, row_group_size=500_000)
    assert writer is not None
    writer.close()
    tmp.replace(path)


def workload(count: int = 128, seed: int = 1) -> list[dict]:
    """``count`` distinct 2- and 3-way count tables, all records or one region (request bodies)."""
    rng = random.Random(seed)
    out, seen = [], set()
    while len(out) < count:
        k = rng.choice((2, 2, 3))
        regional = rng.random() < 0.5
        pool = [v for v in VARIABLES if not (regional and v == "REGION")]
        if regional and rng.random() < 0.25:
            pool.append("AREA")
        dims = rng.sample(pool, k)
        if "AREA" in dims and "AGE" in dims and k == 3:
            continue  # past max_cells
        universe = {"REGION": [rng.randint(1, REGIONS)]} if regional else {}
        key = (tuple(dims), tuple(universe.get("REGION", ())))
        if key in seen:
            continue
        seen.add(key)
        out.append({"dimensions": dims, "universe": universe, "statistic": "count"})
    return out
