"""Telling empty cells from one-record cells (issue 25, DESIGN decision 2).

A mechanism that states an (epsilon, delta) between neighbouring counts
must publish an empty cell (true count 0) and a one-record cell (true count
1) with distributions that the figures bound:
``P(S | 1) <= e^epsilon P(S | 0) + delta`` and the other way round, for
every set ``S`` of outputs, here ``S = {published != 0}`` and its
complement. :func:`zero_attack` measures both shares over many tables'
inner cells and checks them against the stated figures within sampling
error.

An empty cell has no record set; its draw is keyed to its *definition*. A
non-empty cell keeps one value under every definition of its record set, so
an intruder can ask one cell under several definitions that differ by a
condition that excludes, in turn, one category of another variable: a cell
with one record keeps its value in all but (at most) one of them, an empty
cell gets a fresh draw in each. :func:`definition_attack` measures how well
"the most frequent value appears in all but at most one definition" tells
the two apart. Each definition is a distinct published figure, so this is
composition over ``k`` figures (``k epsilon``), which the privacy ledger
accounts; docs/attacks.md gives the numbers.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tablesafe._errors import ParameterError
from tablesafe._request import TableRequest
from tablesafe.catalog._catalog import Code
from tablesafe.output._table import ProtectedTable

__all__ = ["DefinitionResult", "ZeroResult", "definition_attack", "zero_attack"]


@dataclass(frozen=True)
class ZeroResult:
    """Published shares of non-zero counts for empty and one-record cells.

    Attributes:
        method: The protection's name.
        epsilon: The stated epsilon.
        delta: The stated delta.
        zeros: Inner cells with true count 0 (structural zeros excluded).
        zeros_nonzero: Of those, published as non-zero.
        ones: Inner cells with true count 1.
        ones_nonzero: Of those, published as non-zero.
    """

    method: str
    epsilon: float
    delta: float
    zeros: int
    zeros_nonzero: int
    ones: int
    ones_nonzero: int

    @property
    def p0(self) -> float:
        """Share of empty cells published as non-zero."""
        return self.zeros_nonzero / self.zeros if self.zeros else math.nan

    @property
    def p1(self) -> float:
        """Share of one-record cells published as non-zero."""
        return self.ones_nonzero / self.ones if self.ones else math.nan

    def holds(self, z: float = 4.0) -> bool:
        """Whether both shares meet the stated figures within ``z`` standard errors.

        Checks ``P(S|a) <= e^eps P(S|b) + delta`` for ``S`` = non-zero and
        zero, both orders, each share widened by ``z`` binomial standard
        errors in the direction that favours the mechanism.
        """
        if not (self.zeros and self.ones):
            return True
        factor = math.exp(self.epsilon) if math.isfinite(self.epsilon) else math.inf
        # Agresti-Coull: the share's standard error stays positive at 0 and 1.
        se0 = _se(self.zeros_nonzero, self.zeros)
        se1 = _se(self.ones_nonzero, self.ones)
        for a, sa, b, sb in ((self.p1, se1, self.p0, se0), (self.p0, se0, self.p1, se1)):
            for x, y in ((a, b), (1 - a, 1 - b)):
                if x - z * sa > factor * (y + z * sb) + self.delta:
                    return False
        return True

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        return {
            "method": self.method,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "empty_cells": self.zeros,
            "empty_published_nonzero": self.zeros_nonzero,
            "one_record_cells": self.ones,
            "one_record_published_nonzero": self.ones_nonzero,
            "share_empty_nonzero": self.p0,
            "share_one_nonzero": self.p1,
            "stated_figures_hold": self.holds(),
        }


def _se(hits: int, n: int) -> float:
    p = (hits + 2) / (n + 4)
    return math.sqrt(p * (1 - p) / (n + 4))


def _inner(table: ProtectedTable) -> tuple[Any, ...]:
    return tuple(slice(0, len(d.codes)) for d in table.dimensions)


def zero_attack(
    build: Callable[[TableRequest], ProtectedTable],
    truth: Callable[[TableRequest], ProtectedTable],
    requests: Sequence[TableRequest],
    *,
    method: str,
    epsilon: float,
    delta: float,
) -> ZeroResult:
    """Shares of empty and one-record inner cells published as non-zero, over ``requests``.

    Args:
        build: Builds the published table.
        truth: Builds the unprotected table (the owner's view).
        requests: The tables to ask.
        method: Name for the report.
        epsilon: The stated epsilon.
        delta: The stated delta.
    """
    zeros = zeros_nz = ones = ones_nz = 0
    for request in requests:
        pub, true = build(request), truth(request)
        inner = _inner(true)
        assert pub.counts is not None and true.counts is not None
        n, y = true.counts[inner], pub.counts[inner]
        free = ~pub.structural_zero[inner]
        zeros += int(((n == 0) & free).sum())
        zeros_nz += int(((n == 0) & free & (y != 0)).sum())
        ones += int(((n == 1) & free).sum())
        ones_nz += int(((n == 1) & free & (y != 0)).sum())
    return ZeroResult(method, epsilon, delta, zeros, zeros_nz, ones, ones_nz)


@dataclass(frozen=True)
class DefinitionResult:
    """How well asking a cell under several definitions tells empty from one record.

    Attributes:
        method: The protection's name.
        definitions: Definitions asked per cell.
        zeros: Empty target cells.
        zeros_flagged: Of those, called non-empty.
        ones: One-record target cells.
        ones_flagged: Of those, called non-empty.
    """

    method: str
    definitions: int
    zeros: int
    zeros_flagged: int
    ones: int
    ones_flagged: int

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        return {
            "method": self.method,
            "definitions": self.definitions,
            "empty_cells": self.zeros,
            "empty_called_nonempty": self.zeros_flagged,
            "one_record_cells": self.ones,
            "one_record_called_nonempty": self.ones_flagged,
        }


def definition_attack(
    build: Callable[[TableRequest], ProtectedTable],
    truth: Callable[[TableRequest], ProtectedTable],
    base: TableRequest,
    *,
    variable: str,
    codes: Sequence[Code],
    method: str,
) -> DefinitionResult:
    """Ask ``base``'s cells under one definition per code of ``variable``, each excluding it.

    Definition ``j`` adds the universe condition ``variable`` in every code but
    ``codes[j]``. A cell is called non-empty when its most frequent published
    value appears in all definitions but at most one (a record is excluded by
    at most one of them).

    Args:
        build: Builds the published table.
        truth: Builds the unprotected table.
        base: The table whose inner cells are the targets (``variable`` not in it).
        variable: The variable whose categories are excluded in turn.
        codes: All its codes (at least 3).
        method: Name for the report.
    """
    if len(codes) < 3:
        raise ParameterError("the definition attack needs a variable with at least 3 categories")
    if variable in base.dimensions or variable in base.universe:
        raise ParameterError(f"{variable} must not be a dimension or condition of the base table")
    true = truth(base)
    inner = _inner(true)
    assert true.counts is not None
    n = true.counts[inner]
    published: list[np.ndarray] = []
    free = np.ones(n.shape, dtype=bool)
    for c in codes:
        table = build(base.with_universe(**{variable: [x for x in codes if x != c]}))
        assert table.counts is not None
        published.append(np.asarray(table.counts[inner]))
        # Structural zeros are never perturbed: they say nothing here.
        free &= ~table.structural_zero[inner]
    stack = np.stack(published, axis=-1)
    k = len(codes)
    flagged = np.zeros(n.shape, dtype=bool)
    for idx in np.ndindex(*n.shape):
        top = Counter(stack[idx].tolist()).most_common(1)[0][1]
        flagged[idx] = top >= k - 1
    zero, one = (n == 0) & free, (n == 1) & free
    return DefinitionResult(
        method,
        k,
        int(zero.sum()),
        int((zero & flagged).sum()),
        int(one.sum()),
        int((one & flagged).sum()),
    )
