"""Uniform draws for cells, derived from record keys (DESIGN decision 2).

Three schemes, all deterministic, so the same request gives the same answer
for every user, forever:

* **Cell key** (ABS cell-key method; seed 004 Section 2, Fraser & Wooton):
  ``u = (cell_key + 0.5) / 2**32`` where ``cell_key`` is the cell's sum of
  record keys mod 2**32. A function of the cell's record set alone: the
  same records get the same draw, and so the same perturbation, in every
  table. Needs no secret.
* **Keyed** (the recommended scheme of a public table builder): a keyed hash
  (BLAKE2b with the data owner's secret) of the cell's record set, its key
  sum and its count. Record-set consistent like the cell key, and the draw
  cannot be computed without the secret.
* **Dynamic** (Li & Krenzke 2016, seed 004 Section 3): a keyed hash of the
  cell's key sum together with the key sums of every margin the cell
  belongs to, up to the universe total. The same record set gets a fresh
  draw in every table with another universe, margin or grouping, so
  averaging many tables recovers small counts exactly (docs/attacks.md,
  "Averaging"). Kept for the workbench (the reproduction of seed 004); a
  site configuration refuses it.

A cell with no record has no record set to key: where the protection has a
secret, its draw is a keyed hash of the cell's *definition*
(:func:`canonical_definitions`: the categories and universe that select it,
in a canonical form), so no two empty cells of different definitions share
a draw (:func:`definition_words`).

Neither the secret nor any key sum leaves this module in a form a user
could see.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from tablesafe._errors import ParameterError
from tablesafe._keys import KEY_MODULUS

__all__ = [
    "SeedScheme",
    "canonical_definitions",
    "cell_key_uniforms",
    "definition_words",
    "dynamic_streams",
    "dynamic_uniforms",
    "dynamic_words",
    "keyed_words",
]


class SeedScheme(StrEnum):
    """The three schemes, in the order the docs list them.

    A member equals its text (``SeedScheme.KEYED == "keyed"``), so settings and
    callers may give either.
    """

    CELLKEY = "cellkey"
    KEYED = "keyed"
    DYNAMIC = "dynamic"


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


# -- record-set keyed draws -----------------------------------------------------------------


def _salted(secret: bytes | str, person: bytes, salt: bytes, count: int) -> hashlib.blake2b:
    return hashlib.blake2b(
        key=_secret_bytes(secret),
        digest_size=8 * count,
        person=person,
        salt=hashlib.blake2b(salt, digest_size=16).digest(),
    )


def _split_words(digests: bytes, size: int, count: int) -> npt.NDArray[np.float64]:
    h = np.frombuffer(digests, dtype="<u8").reshape(size, count)
    return np.asarray((h.astype(np.float64) + 0.5) / _TWO_64, dtype=np.float64)


def keyed_words(
    cell_key: npt.NDArray[np.uint32],
    n: npt.NDArray[np.int64],
    secret: bytes | str,
    salt: bytes,
    count: int = 1,
    *,
    where: npt.NDArray[np.bool_] | None = None,
) -> list[npt.NDArray[np.float64]]:
    """``count`` uniforms per cell, a keyed hash of the cell's record set (the keyed scheme).

    The hash input of a cell is its key sum (uint32) and its record count
    (uint64), little-endian: a function of the records the cell holds and of
    nothing else, so a record set gets the same draws in every table,
    whatever its universe, margins, dimension order or groupings. One keyed
    BLAKE2b (personalisation ``tablesafe-keyed``, the whole ``salt`` hashed
    into BLAKE2b's salt) with a digest of ``8 * count`` bytes is split into
    ``count`` 64-bit words, each a uniform ``(h + 0.5) / 2**64``.

    Args:
        cell_key: Cell keys (uint32), any shape.
        n: Record counts, the same shape.
        secret: The data owner's secret (at least 16 bytes).
        salt: Names the stream (``b"count"``, ``b"weight"``, ...).
        count: How many uniforms per cell (1 to 8).
        where: Compute only these cells (others are NaN); default all.

    Returns:
        ``count`` arrays of uniforms in (0, 1), shaped like ``cell_key``.
    """
    if not 1 <= count <= 8:
        raise ParameterError(f"count must lie in 1..8 (64-byte digests), not {count}")
    base = _salted(secret, b"tablesafe-keyed", salt, count)
    mask = np.ones(cell_key.shape, dtype=bool) if where is None else where
    outs = [np.full(cell_key.shape, np.nan) for _ in range(count)]
    size = int(mask.sum())
    if size:
        message = np.zeros((size, 12), dtype=np.uint8)
        message[:, :4] = (
            np.ascontiguousarray(cell_key[mask], dtype="<u4").view(np.uint8).reshape(size, 4)
        )
        message[:, 4:] = np.ascontiguousarray(n[mask], dtype="<u8").view(np.uint8).reshape(size, 8)
        u = _split_words(b"".join(_digests(base, message.tobytes(), 12)), size, count)
        for i, out in enumerate(outs):
            out[mask] = u[:, i]
    return outs


def definition_words(
    definitions: list[bytes], secret: bytes | str, salt: bytes, count: int = 1
) -> npt.NDArray[np.float64]:
    """``count`` uniforms for each empty cell, a keyed hash of its canonical definition.

    A cell that holds no record has no key sum to hash; its draws come from
    its definition (:func:`canonical_definitions`) under a personalisation of
    their own (``tablesafe-empty``), so they are unrelated to every
    record-set draw and no two definitions share one.

    Returns:
        An array of shape ``(len(definitions), count)``.
    """
    if not 1 <= count <= 8:
        raise ParameterError(f"count must lie in 1..8 (64-byte digests), not {count}")
    base = _salted(secret, b"tablesafe-empty", salt, count)
    out = []
    for d in definitions:
        h = base.copy()
        h.update(d)
        out.append(h.digest())
    return _split_words(b"".join(out), len(definitions), count)


def _code_key(code: object) -> tuple[int, str]:
    # ints before text, each in its natural order; bools are not codes.
    return (0, f"{code:+021d}") if isinstance(code, int) else (1, str(code))


def _column_piece(column: str, codes: frozenset[object]) -> bytes:
    """One column's condition in canonical bytes: its name and its sorted codes, typed."""
    parts = [("i" if isinstance(c, int) else "s") + str(c) for c in sorted(codes, key=_code_key)]
    return json.dumps([column, parts], ensure_ascii=True, separators=(",", ":")).encode()


def canonical_definitions(
    dimensions: Sequence[tuple[str, Sequence[Sequence[object]]]],
    universe: Sequence[tuple[str, Sequence[object]]],
    all_codes: Mapping[str, Sequence[object]],
    coords: tuple[npt.NDArray[np.intp], ...],
) -> list[bytes]:
    """The canonical definition of each cell at ``coords``: the records it selects, as conditions.

    A cell selects the records whose code in each microdata column lies in an
    allowed set: the universe's codes of that column, intersected with the
    members of the cell's category of the dimension read from that column
    (all the dimension's members at its total). A column whose allowed set is
    every code of the catalog restricts nothing and is left out; the rest are
    written sorted by column, codes sorted and typed. So equivalent requests
    (another dimension order, margins, universe keys in another order, a
    universe condition that names every code, ``ZONE = N`` for its regions)
    give the same bytes, and different conditions give different bytes.

    Args:
        dimensions: Per dimension, its column and each category's member codes.
        universe: The plan's universe: (column, allowed codes) pairs.
        all_codes: Every code of each column, from the catalog.
        coords: Cell coordinates (extended arrays: a dimension's last slot is
            its total), one array per dimension.

    Returns:
        One byte string per cell.
    """
    full = {col: frozenset(codes) for col, codes in all_codes.items()}
    base = {col: frozenset(codes) for col, codes in universe}
    dim_cols = {col for col, _ in dimensions}
    fixed = [
        (col, _column_piece(col, codes))
        for col, codes in base.items()
        if col not in dim_cols and codes != full.get(col)
    ]
    # Per dimension and slot (categories, then the total), the column's piece.
    pieces: list[list[bytes]] = []
    for col, members in dimensions:
        slots = [frozenset(m) for m in members]
        slots.append(frozenset().union(*slots) if slots else frozenset())
        row = []
        for allowed in slots:
            if col in base:
                allowed = allowed & base[col]
            row.append(b"" if allowed == full.get(col) else _column_piece(col, allowed))
        pieces.append(row)
    columns = [col for col, _ in dimensions]
    out = []
    for cell in zip(*(c.tolist() for c in coords), strict=True):
        named = fixed + [(columns[i], pieces[i][j]) for i, j in enumerate(cell)]
        named.sort()
        out.append(b"".join(p for _, p in named))
    return out
