"""The full cross-classification: its columns, their atoms, where tables fall in it.

The layout the putative-risk ceiling measures on (published figures only:
its ``truth`` is zeros) and the reconstruction attack reads the microdata
into (:func:`tablesafe.attacks._reconstruct._truth.read_truth`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tablesafe._request import TableRequest
from tablesafe.catalog._catalog import Catalog, Code
from tablesafe.cells._plan import TabulationPlan
from tablesafe.output._table import ProtectedTable


@dataclass
class Cross:
    """The full cross-classification: columns, their atoms, the truth.

    The categories of a column are its *atoms*: the classes of source codes
    that no published table or universe tells apart (the coarsest common
    refinement of every grouping and condition used on the column). A table
    by age groups alone makes the groups the atoms; one by age groups and one
    by five-year bands make their intersections the atoms.
    """

    columns: tuple[str, ...]
    atoms: tuple[tuple[tuple[Code, ...], ...], ...]  # per column, per atom, its codes
    truth: npt.NDArray[np.int64]  # flat, C order over the atoms (zeros: a layout only)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(a) for a in self.atoms)

    def atom(self, axis: int, code: Code) -> int:
        """The atom of a source code of column ``axis``."""
        lookup: dict[tuple[int, Code], int] = getattr(self, "_lookup", {})
        if not lookup:
            lookup = {
                (i, c): a
                for i, col in enumerate(self.atoms)
                for a, codes in enumerate(col)
                for c in codes
            }
            object.__setattr__(self, "_lookup", lookup)
        return lookup[(axis, code)]


def columns_of(catalog: Catalog, requests: Sequence[TableRequest]) -> tuple[str, ...]:
    """The source columns the requests' dimensions and universes read, in catalog order."""
    wanted: set[str] = set()
    for r in requests:
        for d in r.dimensions:
            wanted.add(catalog.variable(d).column)
        for u in r.universe:
            wanted.add(catalog.variable(u).column)
    return tuple(v.column for v in catalog.source_variables if v.column in wanted)


def atoms_of(
    catalog: Catalog, plans: Sequence[TabulationPlan], columns: tuple[str, ...]
) -> tuple[tuple[tuple[Code, ...], ...], ...]:
    """Per column, the classes of codes that every plan treats alike (in code order)."""
    source = {v.column: v for v in catalog.source_variables}
    out = []
    for col in columns:
        signature: dict[Code, list[object]] = {c: [] for c in source[col].codes}
        for plan in plans:
            for ucol, codes in plan.universe:
                if ucol == col:
                    allowed = set(codes)
                    for c in signature:
                        signature[c].append(c in allowed)
            for d in plan.dimensions:
                if d.column == col:
                    where = {m: j for j, members in enumerate(d.members) for m in members}
                    for c in signature:
                        signature[c].append(where.get(c, -1))
        classes: dict[tuple[object, ...], list[Code]] = {}
        for c, sig in signature.items():
            classes.setdefault(tuple(sig), []).append(c)
        out.append(tuple(tuple(codes) for codes in classes.values()))
    return tuple(out)


def table_rows(
    catalog: Catalog, cross: Cross, table: ProtectedTable
) -> list[tuple[tuple[int, ...], npt.NDArray[np.int64]]]:
    """Per computed grouping set: the table's extended flat index of every full cell (-1: none)."""
    request = table.request
    plan = request.bind(catalog)
    shape = cross.shape
    k = len(shape)
    position = {c: i for i, c in enumerate(cross.columns)}
    allowed = np.ones(shape, dtype=bool)
    for col, codes in plan.universe:
        axis = position[col]
        keep = np.isin(np.arange(shape[axis]), [cross.atom(axis, c) for c in codes])
        allowed &= keep.reshape([-1 if i == axis else 1 for i in range(k)])
    dim_idx: list[npt.NDArray[np.int64]] = []
    for d in plan.dimensions:
        axis = position[d.column]
        idx = np.full(shape[axis], -1, dtype=np.int64)
        for j, members in enumerate(d.members):
            for m in members:
                idx[cross.atom(axis, m)] = j
        allowed &= (idx >= 0).reshape([-1 if i == axis else 1 for i in range(k)])
        dim_idx.append(idx.reshape([-1 if i == axis else 1 for i in range(k)]))
    ext = table.shape
    strides = [int(np.prod(ext[i + 1 :], dtype=np.int64)) for i in range(len(ext))]
    sets = [
        gs
        for gs in itertools.chain.from_iterable(
            itertools.combinations(range(len(ext)), r) for r in range(len(ext), -1, -1)
        )
    ]
    out = []
    for gs in sets:
        cell = tuple(slice(0, ext[i] - 1) if i in gs else ext[i] - 1 for i in range(len(ext)))
        if not table.computed[cell].all():
            continue
        flat = np.zeros(shape, dtype=np.int64)
        for i, idx in enumerate(dim_idx):
            part = idx if i in gs else np.full_like(idx, ext[i] - 1)
            flat = flat + part * strides[i]
        out.append((gs, np.where(allowed, flat, -1).reshape(-1)))
    return out
