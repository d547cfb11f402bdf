"""A small census-like file for the reconstruction benchmark and docs: skewed and sparse."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tablesafe.catalog._catalog import Catalog
from tablesafe.catalog._dataset import Dataset

#: Age bands, sex, region, household size, tenure: a census block-like classification.
CATALOG: dict[str, Any] = {
    "dataset": {"title": "census-like test file", "record_key": "RKEY"},
    "variables": [
        {
            "name": "AGE",
            "categories": [{"code": a, "label": f"{5 * a}-{5 * a + 4}"} for a in range(18)],
        },
        {
            "name": "SEX",
            "categories": [{"code": 1, "label": "male"}, {"code": 2, "label": "female"}],
        },
        {"name": "AREA", "categories": [{"code": a, "label": f"area {a}"} for a in range(1, 7)]},
        {"name": "HHSIZE", "categories": [{"code": h, "label": str(h)} for h in range(1, 6)]},
        {
            "name": "TENURE",
            "categories": [{"code": t, "label": f"tenure {t}"} for t in range(1, 5)],
        },
    ],
}


def census_like(records: int, seed: int) -> pd.DataFrame:
    """``records`` people: age bands falling with age, areas of unequal size, correlated tenure."""
    rng = np.random.default_rng(seed)
    age_p = np.linspace(1.4, 0.3, 18)
    age = rng.choice(18, records, p=age_p / age_p.sum())
    area_p = np.array([0.35, 0.25, 0.15, 0.12, 0.08, 0.05])
    area = rng.choice(np.arange(1, 7), records, p=area_p)
    hh = np.clip(rng.poisson(1.6 + (age < 4) * 1.5, records) + 1, 1, 5)
    tenure = np.where(
        age > 6,
        rng.choice([1, 2, 3, 4], records, p=[0.6, 0.2, 0.15, 0.05]),
        rng.choice([1, 2, 3, 4], records, p=[0.3, 0.2, 0.4, 0.1]),
    )
    return pd.DataFrame(
        {
            "AGE": age,
            "SEX": rng.integers(1, 3, records),
            "AREA": area,
            "HHSIZE": hh,
            "TENURE": tenure,
            "RKEY": rng.integers(0, 2**32, records, dtype=np.uint32),
        }
    )


def write_census_like(folder: Path, records: int, seed: int = 0) -> Dataset:
    """Write the file and its catalog to ``folder`` and open it."""
    folder.mkdir(parents=True, exist_ok=True)
    census_like(records, seed).to_parquet(folder / "microdata.parquet", index=False)
    (folder / "catalog.toml").write_text(Catalog.from_dict(CATALOG).to_toml())
    return Dataset.open(folder)
