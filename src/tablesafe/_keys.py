"""Record keys, cell keys and the uniforms drawn from them.

Every record carries a permanent random key, a uint32 drawn once from a
secure source when the data is prepared (:func:`add_record_keys`). A cell
key is ``(sum of the record keys in the cell) mod 2**32``; integer sums are
exact and order-independent, so every engine gives the same key bit for bit
(DESIGN decision 1). A cell's uniform draw is ``u = (cell_key + 0.5) / 2**32``
(the ABS cell-key method), which lies strictly inside (0, 1).
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from tablesafe._errors import DataError, FormatError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "KEY_MODULUS",
    "add_record_keys",
    "cell_key_uniform",
    "cell_keys",
    "draw_record_keys",
]

#: Record keys are uint32; cell keys are sums modulo this number.
KEY_MODULUS = 2**32


def draw_record_keys(n: int, rng: np.random.Generator | None = None) -> npt.NDArray[np.uint32]:
    """Draw ``n`` record keys, uniform on 0 .. 2**32 - 1.

    Args:
        n: Number of records.
        rng: A Generator for reproducible synthetic data; ``None`` (the
            default, and the only choice for real microdata) draws from the
            operating system's secure source.
    """
    if n < 0:
        raise DataError(f"number of records must be >= 0, not {n}")
    if rng is None:
        return np.frombuffer(secrets.token_bytes(4 * n), dtype="<u4").astype(np.uint32)
    return rng.integers(0, KEY_MODULUS, size=n, dtype=np.uint32)


def cell_keys(
    record_keys: npt.ArrayLike, cells: npt.ArrayLike, n_cells: int
) -> npt.NDArray[np.uint32]:
    """Cell keys by exact integer summation (the reference computation).

    Args:
        record_keys: uint32 record keys.
        cells: For each record, the index of its cell (0 .. n_cells - 1).
        n_cells: Number of cells.
    """
    keys = np.asarray(record_keys).astype(np.uint64)
    sums = np.zeros(n_cells, dtype=np.uint64)
    # uint64 addition wraps modulo 2**64, a multiple of 2**32, so the residue is exact.
    np.add.at(sums, np.asarray(cells), keys)
    return (sums % np.uint64(KEY_MODULUS)).astype(np.uint32)


def cell_key_uniform(cell_key: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """The ABS uniform of a cell: ``(cell_key + 0.5) / 2**32``, in (0, 1)."""
    return (np.asarray(cell_key, dtype=np.float64) + 0.5) / KEY_MODULUS


def _read_table(path: Path) -> pa.Table:
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            return pq.read_table(path)
        if suffix == ".csv":
            return pacsv.read_csv(path)
    except FileNotFoundError:
        raise DataError(f"microdata file {path} does not exist") from None
    except (pa.ArrowInvalid, OSError) as exc:
        raise FormatError(f"cannot read microdata file {path}: {exc}") from None
    raise FormatError(f"microdata file {path} must end in .parquet or .csv, not {suffix!r}")


def add_record_keys(
    source: str | Path,
    target: str | Path,
    *,
    column: str = "RKEY",
    overwrite_keys: bool = False,
    rng: np.random.Generator | None = None,
) -> int:
    """Give every record of a microdata file a permanent uint32 record key.

    The keys are drawn once, from the secure source by default, and written
    with the data; they must never change afterwards, or every published
    table would change. A file that already has the key column is refused
    unless ``overwrite_keys`` is set. The output is written to a temporary
    file first and moved into place, so a failure leaves nothing behind.

    Args:
        source: Microdata in Parquet or CSV.
        target: Where to write the keyed microdata (Parquet or CSV by suffix).
        column: Name of the record-key column.
        overwrite_keys: Replace an existing key column (this changes every
            protected table ever published from the data).
        rng: A Generator for reproducible test data only; ``None`` is secure.

    Returns:
        The number of records keyed.

    Raises:
        DataError: if the key column exists and ``overwrite_keys`` is false,
            or the source cannot be read.
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    source, target = Path(source), Path(target)
    if target.suffix.lower() not in (".parquet", ".csv"):
        raise FormatError(f"output file {target} must end in .parquet or .csv")
    if target.resolve() == source.resolve():
        raise DataError("the output file must differ from the input file")
    table = _read_table(source)
    if column in table.column_names:
        if not overwrite_keys:
            raise DataError(
                f"{source} already has a record-key column {column!r}; record keys are "
                "permanent. Pass overwrite_keys (--overwrite-keys) only if no table from this "
                "data was ever published"
            )
        table = table.drop_columns([column])
    keys = pa.array(draw_record_keys(table.num_rows, rng), type=pa.uint32())
    table = table.append_column(column, keys)
    tmp = target.with_name(f".{target.name}.tmp")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        if target.suffix.lower() == ".parquet":
            pq.write_table(table, tmp)
        else:
            pacsv.write_csv(table, tmp)
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)
    return int(table.num_rows)


def check_record_keys(table: pa.Table, column: str) -> None:
    """Check that a column holds valid record keys: integers in 0 .. 2**32 - 1, no nulls."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if column not in table.column_names:
        raise DataError(f"record-key column {column!r} is missing")
    col = table.column(column)
    if not pa.types.is_integer(col.type):
        raise DataError(f"record-key column {column!r} must hold integers, not {col.type}")
    if col.null_count:
        raise DataError(f"record-key column {column!r} has {col.null_count} missing values")
    lo, hi = pc.min(col).as_py(), pc.max(col).as_py()
    if lo is not None and (lo < 0 or hi >= KEY_MODULUS):
        raise DataError(f"record keys in {column!r} must lie in 0 .. 2**32 - 1")
