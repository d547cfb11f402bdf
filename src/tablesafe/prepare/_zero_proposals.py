"""Structural relations ``tablesafe catalog init`` proposes (issue 37).

A catalog declares the combinations of categories that cannot occur
(``[[structural_zeros]]``): every table then shows their cells as structural
zeros, and the account of published figures treats record sets equal under
them as one figure. Declaring one publishes it, so only the data owner may;
``catalog init`` proposes them, commented out, for the owner to approve.

A proposal is a *box*: a set of categories of one variable and a set of
another's that no record holds together, although each side is large:

- each side holds at least ``min_records`` records (the option
  ``--zeros-min-records``), and
- if the two variables were unrelated, the box would be expected to hold at
  least :data:`MIN_EXPECTED` records (``records(A) * records(B) / N``): an
  empty box is then no accident of sampling (the chance is at most
  ``exp(-10)``, about 4.5e-5), though it may still be a fact of this file
  rather than a rule of the world, which is the owner's to judge.

Boxes are found pair by pair among the drafted variables, from each large
category: the categories of the other variable it never meets, in runs of
neighbours in category order, each run widened to every category of the
first variable that meets none of the run (kept to the neighbours of the
first), so that a proposal reads ``AGE 0..15 and ECON 1..4`` rather than
sixteen entries. A box inside another is dropped. No proposal ever holds a
record: every cell of a box is empty in the data, which is checked again on
the records before anything is written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tablesafe.catalog._catalog import Code

__all__ = ["MIN_EXPECTED", "ZeroProposal", "code_runs", "propose_zeros"]

#: The fewest records a proposed box would hold if its two variables were unrelated.
MIN_EXPECTED = 10.0


@dataclass(frozen=True)
class ZeroProposal:
    """An empty combination of two variables' categories, large on both sides.

    Attributes:
        codes: The two variables, each with its codes in category order.
        records: The records in each side (the box's margins).
        expected: The records the box would hold if the variables were unrelated.
    """

    codes: tuple[tuple[str, tuple[Code, ...]], tuple[str, tuple[Code, ...]]]
    records: tuple[int, int]
    expected: float


def propose_zeros(
    columns: Mapping[str, npt.NDArray[np.int64]],
    categories: Mapping[str, Sequence[Code]],
    min_records: int,
) -> list[ZeroProposal]:
    """Every proposed structural zero of the variables, pair by pair (module docstring).

    Args:
        columns: Each variable's records as positions in its ``categories``.
        categories: Each variable's codes, in category order.
        min_records: The fewest records each side of a box holds; 0 proposes none.

    Returns:
        The proposals, by pair of variables (in the order given), then by
        where their boxes start.
    """
    if min_records <= 0:
        return []
    names = [n for n in columns if len(categories[n]) > 1]
    out: list[ZeroProposal] = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            size = (len(categories[a]), len(categories[b]))
            flat = columns[a] * size[1] + columns[b]
            counts = np.bincount(flat, minlength=size[0] * size[1]).reshape(size)
            for rows, cols in _boxes(counts, min_records):
                r, c = int(counts[rows].sum()), int(counts[:, cols].sum())
                out.append(
                    ZeroProposal(
                        (
                            (a, tuple(categories[a][k] for k in rows)),
                            (b, tuple(categories[b][k] for k in cols)),
                        ),
                        (r, c),
                        r * c / int(counts.sum()),
                    )
                )
    return out


def _boxes(counts: npt.NDArray[np.int64], min_records: int) -> list[tuple[list[int], list[int]]]:
    """The maximal empty boxes of one cross-tabulation, large on both sides, in order."""
    total = int(counts.sum())
    rows, cols = counts.sum(axis=1), counts.sum(axis=0)
    found: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    sides = ((False, counts, rows, cols), (True, counts.T, cols, rows))
    for transposed, table, seeds, across in sides:
        empty = table == 0
        for seed in np.flatnonzero(seeds >= min_records):
            for run in _runs(np.flatnonzero(empty[seed])):
                if across[run].sum() < min_records:
                    continue
                # Every category of the seed's variable that meets none of the run, near the seed.
                side = _run_of(np.flatnonzero(empty[:, run].all(axis=1)), int(seed))
                box = (tuple(side), tuple(run))
                found.add((box[1], box[0]) if transposed else box)
    out = []
    for r, c in found:
        big_r, big_c = int(rows[list(r)].sum()), int(cols[list(c)].sum())
        expected = big_r * big_c / total if total else 0.0
        if min(big_r, big_c) < min_records or expected < MIN_EXPECTED:
            continue
        inside = any(
            (r, c) != (r2, c2) and set(r) <= set(r2) and set(c) <= set(c2) for r2, c2 in found
        )
        if not inside:
            out.append((list(r), list(c)))
    return sorted(out)


def _runs(positions: npt.NDArray[np.intp]) -> list[list[int]]:
    """``positions`` (ascending) cut into runs of neighbours: [0, 1, 2, 5, 6] -> [0..2], [5, 6]."""
    if positions.size == 0:
        return []
    cuts = np.flatnonzero(np.diff(positions) != 1) + 1
    return [p.tolist() for p in np.split(positions, cuts)]


def _run_of(positions: npt.NDArray[np.intp], at: int) -> list[int]:
    """The run of neighbours in ``positions`` that holds ``at``."""
    return next(run for run in _runs(positions) if at in run)


def code_runs(codes: Sequence[Code], order: Sequence[Code]) -> str:
    """Codes as runs of neighbours in category order: ``0..15``, ``1..4, 9``, ``A, C``."""
    where = {c: i for i, c in enumerate(order)}
    runs = _runs(np.array(sorted(where[c] for c in codes), dtype=np.intp))
    return ", ".join(
        str(order[r[0]]) if len(r) == 1 else f"{order[r[0]]}..{order[r[-1]]}" for r in runs
    )


def holds_records(
    proposal: ZeroProposal,
    columns: Mapping[str, npt.NDArray[np.int64]],
    categories: Mapping[str, Sequence[Code]],
) -> bool:
    """Whether any record lies in the proposal's box (a check on the records themselves)."""
    inside = np.ones(len(next(iter(columns.values()))), dtype=bool)
    for name, codes in proposal.codes:
        wanted = [categories[name].index(c) for c in codes]
        inside &= np.isin(columns[name], wanted)
    return bool(inside.any())


def expected_words(value: float) -> str:
    """The expected count in words: ``1,600`` (whole records), never a false precision."""
    return f"{math.floor(value):,}"
