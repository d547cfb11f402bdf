"""A small file of associated variables: five latent classes, each with its own profile.

The putative reconstruction's tests and benchmark use it: 4 variables of 3, 4,
2 and 5 categories (120 cells), whose 3-way tables tell much more than the
one-way margins (as a census's do).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

SIZES = {"A": 3, "B": 4, "C": 2, "D": 5}

CATALOG: dict[str, Any] = {
    "dataset": {"title": "latent classes", "record_key": "RKEY"},
    "variables": [
        {"name": name, "categories": [{"code": c, "label": f"{name}{c}"} for c in range(1, n + 1)]}
        for name, n in SIZES.items()
    ],
}


def latent_class_frame(n: int, seed: int) -> pd.DataFrame:
    """``n`` records; a fixed Generator from ``seed``."""
    rng = np.random.default_rng(seed)
    latent = rng.choice(5, n, p=[0.35, 0.25, 0.2, 0.12, 0.08])
    data: dict[str, Any] = {}
    for name, k in SIZES.items():
        profiles = rng.dirichlet(np.full(k, 0.4), size=5)
        data[name] = np.array([rng.choice(np.arange(1, k + 1), p=profiles[c]) for c in latent])
    data["RKEY"] = rng.integers(0, 2**32, n, dtype=np.uint32)
    return pd.DataFrame(data)


def write_latent_class(folder: Path, n: int, seed: int = 28) -> Any:
    """The file as a dataset folder (parquet and catalog.toml); returns the Dataset."""
    from tablesafe.catalog._catalog import Catalog
    from tablesafe.catalog._dataset import Dataset

    folder.mkdir(parents=True, exist_ok=True)
    latent_class_frame(n, seed).to_parquet(folder / "microdata.parquet", index=False)
    (folder / "catalog.toml").write_text(Catalog.from_dict(CATALOG).to_toml())
    return Dataset.open(folder)
