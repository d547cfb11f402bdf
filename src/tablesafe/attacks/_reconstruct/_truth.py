"""The data owner's truth: counts of the full cross-classification, read from the microdata."""

from __future__ import annotations

from typing import Any

import numpy as np

from tablesafe._errors import RequestError
from tablesafe.catalog._catalog import Code
from tablesafe.catalog._dataset import Dataset
from tablesafe.rules._ceiling._cross import Cross

#: The largest full cross-classification the attack builds.
MAX_CELLS = 20_000_000


def read_truth(
    dataset: Dataset,
    columns: tuple[str, ...],
    atoms: tuple[tuple[tuple[Code, ...], ...], ...],
) -> Cross:
    """Counts of the full cross-classification of ``columns`` (the data owner's truth)."""
    import pyarrow.compute as pc

    catalog = dataset.catalog
    source = {v.column: v for v in catalog.source_variables}
    size = int(np.prod([len(a) for a in atoms], dtype=np.float64))
    if size > MAX_CELLS:
        raise RequestError(
            f"the full cross-classification of {', '.join(columns)} has {size:,} cells; the "
            f"reconstruction attack builds at most {MAX_CELLS:,}: attack fewer or coarser variables"
        )
    if dataset.format == "parquet":
        import pyarrow.parquet as pq

        data = pq.read_table(dataset.path, columns=list(columns))
    else:
        import pyarrow.csv as pacsv

        data = pacsv.read_csv(
            dataset.path, convert_options=pacsv.ConvertOptions(include_columns=list(columns))
        )
    flat = np.zeros(data.num_rows, dtype=np.int64)
    ok = np.ones(data.num_rows, dtype=bool)
    for col, col_atoms in zip(columns, atoms, strict=True):
        codes = [c for a in col_atoms for c in a]
        atom_of = np.array([a for a, members in enumerate(col_atoms) for _ in members])
        values = data.column(col)
        kind = source[col].code_type
        domain = [str(c) for c in codes] if kind is str else codes
        if kind is str:
            values = pc.cast(values, "string")
        idx = pc.index_in(values, value_set=_array(domain)).to_numpy(zero_copy_only=False)
        idx = np.where(np.isnan(idx.astype(float)), -1, idx).astype(np.int64)
        ok &= idx >= 0
        flat = flat * len(col_atoms) + atom_of[np.maximum(idx, 0)]
    truth = np.bincount(flat[ok], minlength=size).astype(np.int64)
    return Cross(columns, atoms, truth)


def _array(values: list[Any]) -> Any:
    import pyarrow as pa

    return pa.array(values)
