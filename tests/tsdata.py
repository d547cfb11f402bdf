"""Small random datasets with a known catalog, for tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tablesafe.catalog._catalog import Catalog
from tablesafe.catalog._dataset import Dataset

RANDOM_CATALOG: dict[str, Any] = {
    "dataset": {
        "title": "random test data",
        "record_key": "RKEY",
        "weight": "W",
        "replicate_weights": ["R1", "R2", "R3", "R4"],
        "replicate_method": "JK1",
    },
    "variables": [
        # Category 4 of A never occurs in the data: its cells must appear with n = 0.
        {"name": "A", "categories": [{"code": c, "label": f"a{c}"} for c in (1, 2, 3, 4)]},
        {"name": "B", "categories": [{"code": c, "label": c.upper()} for c in "xyzw"]},
        {
            "name": "C",
            "categories": [{"code": c, "label": str(c)} for c in range(10)],
            "groupings": [
                {
                    "name": "CG",
                    "groups": [
                        {"code": "lo", "label": "0-3", "members": [0, 1, 2, 3]},
                        {"code": "mid", "label": "4-6", "members": [4, 5, 6]},
                        {"code": "hi", "label": "7-9", "members": [7, 8, 9]},
                    ],
                }
            ],
        },
        {"name": "D", "categories": [{"code": 1, "label": "one"}, {"code": 2, "label": "two"}]},
        {"name": "E", "categories": [{"code": c, "label": str(c)} for c in (10, 20, 30)]},
    ],
}


def random_frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    w = rng.uniform(5, 50, n)
    frame = pd.DataFrame(
        {
            "A": rng.choice([1, 2, 3], n, p=[0.6, 0.3, 0.1]),
            "B": rng.choice(list("xyzw"), n, p=[0.4, 0.3, 0.2, 0.1]),
            "C": rng.integers(0, 10, n),
            "D": rng.integers(1, 3, n),
            "E": rng.choice([10, 20, 30], n),
            "W": w,
            "RKEY": rng.integers(0, 2**32, n, dtype=np.uint32),
        }
    )
    group = rng.integers(0, 4, n)
    for r in range(4):
        frame[f"R{r + 1}"] = np.where(group == r, 0.0, w * 4 / 3)
    return frame


def write_dataset(
    folder: Path, frame: pd.DataFrame, catalog: dict[str, Any] | None = None, fmt: str = "parquet"
) -> Dataset:
    folder.mkdir(parents=True, exist_ok=True)
    cat = Catalog.from_dict(catalog or RANDOM_CATALOG)
    path = folder / f"microdata.{fmt}"
    if fmt == "parquet":
        frame.to_parquet(path, index=False)
    else:
        frame.to_csv(path, index=False)
    (folder / "catalog.toml").write_text(cat.to_toml())
    return Dataset.open(folder)
