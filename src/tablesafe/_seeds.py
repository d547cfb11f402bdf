"""Uniform draws for cells, derived from record keys (DESIGN decision 2).

Two schemes, both deterministic functions of the records in play, so the
same records and the same query give the same answer for every user,
forever:

* **Cell key** (ABS cell-key method; seed 004 Section 2, Fraser & Wooton):
  ``u = (cell_key + 0.5) / 2**32`` where ``cell_key`` is the cell's sum of
  record keys mod 2**32. A cell that appears in two different tables with
  the same records gets the same draw, and so the same perturbation.
* **Dynamic** (Li & Krenzke 2016, seed 004 Section 3): a keyed hash
  (BLAKE2b with the data owner's secret) of the cell's key sum together
  with the key sums of every margin the cell belongs to, up to the universe
  total. A universe that differs by a single record changes the universe
  key sum and so every draw of the table: differencing two such tables
  compares independently perturbed values and isolates no sliver.

Neither the secret nor any key sum leaves this module in a form a user
could see.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from tablesafe._errors import ParameterError
from tablesafe._keys import KEY_MODULUS

__all__ = [
    "SeedScheme",
    "cell_key_uniforms",
    "dynamic_streams",
    "dynamic_uniforms",
    "dynamic_words",
]

#: The two schemes.
SeedScheme = Literal["cellkey", "dynamic"]

_TWO_64 = float(2**64)


def cell_key_uniforms(cell_key: npt.NDArray[np.uint32]) -> npt.NDArray[np.float64]:
    """ABS uniforms ``(cell_key + 0.5) / 2**32`` for every cell."""
    return (cell_key.astype(np.float64) + 0.5) / KEY_MODULUS


@dataclass(frozen=True)
class _Secret:
    value: bytes

    def __repr__(self) -> str:
        return "_Secret(<hidden>)"


def _secret_bytes(secret: bytes | str) -> bytes:
    raw = secret.encode() if isinstance(secret, str) else bytes(secret)
    if len(raw) < 16:
        raise ParameterError(
            "the secret for dynamic seeds must be at least 16 bytes long; generate one with "
            "`python -c 'import secrets; print(secrets.token_hex(32))'`"
        )
    # BLAKE2b takes keys of at most 64 bytes; longer secrets are hashed down.
    return raw if len(raw) <= 64 else hashlib.blake2b(raw, digest_size=64).digest()


def dynamic_uniforms(
    cell_key: npt.NDArray[np.uint32],
    secret: bytes | str,
    *,
    salt: bytes = b"",
) -> npt.NDArray[np.float64]:
    """Li & Krenzke's dynamic seeds, as uniforms in (0, 1), for every cell.

    ``cell_key`` is the extended array of a table's cell keys (the last slot
    of each axis is that dimension's total). For each cell, the hash input
    is the cell's key sum followed by the key sums of every margin the cell
    belongs to, i.e. of every cell obtained by replacing a subset of its
    non-total coordinates by the total, ending with the universe total.

    Args:
        cell_key: Extended array of cell keys (uint32).
        secret: The data owner's secret (at least 16 bytes).
        salt: Distinguishes independent streams (e.g. ``b"count"`` and
            ``b"order"`` for the two seeds of drop/add-up-to-q).

    Returns:
        Uniforms ``(h + 0.5) / 2**64`` of the 64-bit hashes ``h``, same shape.
    """
    return dynamic_streams(cell_key, secret, (salt,))[0]


def dynamic_streams(
    cell_key: npt.NDArray[np.uint32],
    secret: bytes | str,
    salts: tuple[bytes, ...],
    *,
    inner_only: bool = False,
) -> list[npt.NDArray[np.float64]]:
    """:func:`dynamic_uniforms` for several salts at once, vectorised.

    The hash inputs (a cell's key sum and those of its margins) are
    gathered with numpy for all cells of one pattern of total coordinates
    at a time; only the keyed BLAKE2b of each input remains a per-cell call
    (about a microsecond). The values are those of the per-cell definition.

    Args:
        cell_key: Extended array of cell keys (uint32).
        secret: The data owner's secret (at least 16 bytes).
        salts: One stream per salt.
        inner_only: Compute inner cells only; margins are left as NaN
            (record-level methods need no draws for margins).

    Returns:
        One array of uniforms per salt, shaped like ``cell_key``.
    """
    key = _secret_bytes(secret)
    outs = [np.full(cell_key.shape, np.nan) for _ in salts]
    bases = [
        hashlib.blake2b(key=key, digest_size=8, person=b"tablesafe-seed", salt=salt[:16])
        for salt in salts
    ]
    for coords, flat, width, _ in _cell_messages(cell_key, inner_only=inner_only):
        for base, out in zip(bases, outs, strict=True):
            digests = b"".join(_digests(base, flat, width))
            h = np.frombuffer(digests, dtype="<u8")
            out[coords] = (h.astype(np.float64) + 0.5) / _TWO_64
    return outs


def _cell_messages(
    cell_key: npt.NDArray[np.uint32], *, inner_only: bool = False
) -> Iterator[tuple[tuple[np.ndarray, ...], bytes, int, int]]:
    """The dynamic-seed hash inputs of every cell, one pattern of total coordinates at a time.

    A cell's input is its key sum and those of every margin it belongs to
    (little-endian uint32s). Yields the cells' coordinates, their inputs
    concatenated, the width of one input in bytes, and the number of cells.
    """
    shape = cell_key.shape
    k = len(shape)
    totals = tuple(s - 1 for s in shape)
    keys = np.ascontiguousarray(cell_key, dtype="<u4")
    patterns = [tuple(range(k))] if inner_only else _free_patterns(k)
    for free in patterns:
        if any(totals[i] == 0 for i in free):
            continue  # a dimension with no categories has no inner slots
        # Every cell whose non-total coordinates are exactly `free`.
        grids = np.meshgrid(*[np.arange(totals[i]) for i in free], indexing="ij")
        size = int(np.prod([totals[i] for i in free]))
        coords = [
            grids[free.index(i)].ravel() if i in free else np.full(size, totals[i])
            for i in range(k)
        ]
        parts = [keys[tuple(coords)]]
        for r in range(1, len(free) + 1):
            for drop in itertools.combinations(free, r):
                other = [
                    np.full_like(c, totals[i]) if i in drop else c for i, c in enumerate(coords)
                ]
                parts.append(keys[tuple(other)])
        message = np.ascontiguousarray(np.stack(parts, axis=1)).view(np.uint8)
        yield tuple(coords), message.tobytes(), message.shape[1], size


def _free_patterns(k: int) -> list[tuple[int, ...]]:
    """Every subset of the axes, as the coordinates that are not totals."""
    return [c for r in range(k, -1, -1) for c in itertools.combinations(range(k), r)]


def _digests(base: hashlib.blake2b, data: bytes, width: int) -> list[bytes]:
    """The keyed hash of each ``width``-byte message of ``data``, in order."""
    out = []
    copy = base.copy
    for j in range(0, len(data), width):
        h = copy()
        h.update(data[j : j + width])
        out.append(h.digest())
    return out


def dynamic_words(
    cell_key: npt.NDArray[np.uint32],
    secret: bytes | str,
    salt: bytes,
    count: int,
) -> list[npt.NDArray[np.float64]]:
    """``count`` independent dynamic-seed uniforms per cell from one keyed hash.

    The hash input of a cell is that of :func:`dynamic_uniforms` (its key sum
    and those of every margin it belongs to); one keyed BLAKE2b with a digest
    of ``8 * count`` bytes is split into ``count`` 64-bit words ``h_i``, each
    giving a uniform ``(h_i + 0.5) / 2**64``. BLAKE2b keyed with the secret is
    a pseudorandom function, so disjoint words of one digest are as
    independent and as unpredictable as digests under different salts, at
    the cost of one hash per cell instead of one per stream. The whole salt
    is hashed into BLAKE2b's 16-byte salt (no truncation: different salts
    give different streams), under a personalisation of its own, so these
    words are unrelated to the draws of :func:`dynamic_streams`.

    Args:
        cell_key: Extended array of cell keys (uint32).
        secret: The data owner's secret (at least 16 bytes).
        salt: Names the family of streams (any length).
        count: How many uniforms per cell (1 to 8).

    Returns:
        ``count`` arrays of uniforms in (0, 1), shaped like ``cell_key``.
    """
    if not 1 <= count <= 8:
        raise ParameterError(f"count must lie in 1..8 (64-byte digests), not {count}")
    key = _secret_bytes(secret)
    outs = [np.full(cell_key.shape, np.nan) for _ in range(count)]
    base = hashlib.blake2b(
        key=key,
        digest_size=8 * count,
        person=b"tablesafe-words",
        salt=hashlib.blake2b(salt, digest_size=16).digest(),
    )
    for coords, flat, width, size in _cell_messages(cell_key):
        digests = b"".join(_digests(base, flat, width))
        h = np.frombuffer(digests, dtype="<u8").reshape(size, count)
        u = (h.astype(np.float64) + 0.5) / _TWO_64
        for i, out in enumerate(outs):
            out[coords] = u[:, i]
    return outs
