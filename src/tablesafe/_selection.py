"""Record selection inside a cell, by a keyed integer mix (for drop/add-up-to-q).

Li & Krenzke's second seed decides *which* records of a cell are dropped or
duplicated. Records are ordered by a mix of their record key with the
cell's seed, and the first ``k`` are chosen. The mix uses only 64-bit
integer operations whose intermediate values stay below 2**63 (xor, shifts,
a multiplication by a constant below 2**27, reduction mod 2**32), so numpy,
DuckDB and Spark compute it identically and choose the same records. It is
the 32-bit integer hash of Thomas Mueller's "hash prospector" family:
``x ^= x >> 16; x *= 0x45d9f3b; x ^= x >> 16; x *= 0x45d9f3b; x ^= x >> 16``.
Ties (equal mixes) are broken by the record key.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["MIX_MULTIPLIER", "SelectedSums", "mix32", "mix32_sql"]

#: The multiplier of the mix; below 2**27 so that products fit in a signed int64.
MIX_MULTIPLIER = 0x45D9F3B
_M32 = 2**32


def mix32(record_key: npt.ArrayLike, seed: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """The keyed mix of record keys with (per-record) seeds, in 0 .. 2**32 - 1."""
    x = np.bitwise_xor(np.asarray(record_key, dtype=np.int64), np.asarray(seed, dtype=np.int64))
    x = (np.bitwise_xor(x >> 16, x) * MIX_MULTIPLIER) % _M32
    x = (np.bitwise_xor(x >> 16, x) * MIX_MULTIPLIER) % _M32
    return np.asarray(np.bitwise_xor(x >> 16, x), dtype=np.int64)


def mix32_sql(key: str, seed: str) -> str:
    """The same mix as a DuckDB SQL expression over two BIGINT expressions."""
    x0 = f"xor(CAST({key} AS BIGINT), CAST({seed} AS BIGINT))"
    x1 = f"((xor(({x0}) >> 16, {x0}) * {MIX_MULTIPLIER}) % {_M32})"
    x2 = f"((xor({x1} >> 16, {x1}) * {MIX_MULTIPLIER}) % {_M32})"
    return f"xor({x2} >> 16, {x2})"


@dataclass(frozen=True, eq=False)
class SelectedSums:
    """Sums over the records chosen in each inner cell.

    Attributes:
        n: Number of records chosen per inner cell (``min(k, n)``).
        weight_sum: Sum of their weights, or ``None``.
        replicate_sums: Sums of their replicate weights ``(R, ...)``, or ``None``.
    """

    n: npt.NDArray[np.int64]
    weight_sum: npt.NDArray[np.float64] | None
    replicate_sums: npt.NDArray[np.float64] | None
