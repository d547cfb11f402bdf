"""Attacks on the sliver guard across requests (issue 25), for the data owner to run.

Each attack asks a site (any callable that answers a table request for a
key, or refuses it) for tables that a determined user would ask, chosen by
brute force on the microdata so that each is a real sliver, and counts what
got through:

* **concurrent slivers**: pairs of universes U and V = U minus 1 .. m-1
  records, the two requests of a pair sent at the same instant (one key, or
  two keys); a pair with both answered is a sliver published;
* **slivers across dataset names**: U asked under one name of the
  microdata, V under another;
* **3-D slices**: a 3-way table in U, then in U minus the records of one
  category of another variable that change no 1-category slice by 1 .. m-1
  records but some 2-category slice;
* **parent minus children**: U, U and A, U and B, where the codes A and B
  of one variable leave 1 .. m-1 records of U outside them;
* **refusal-based zero detection** (:func:`refusal_zeros`): for each cell
  published as 0, the universe of its row, and that universe without the
  cell's column category: a refusal says the two differ by 1 .. m-1 records,
  so the cell is not empty.

The attacks read the microdata (they are the owner's experiments) only to
choose requests and to score the answers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from threading import Barrier
from typing import Any

import numpy as np
import pandas as pd

from tablesafe._errors import RefusedError, RequestError
from tablesafe._random import resolve_generator
from tablesafe._request import TableRequest
from tablesafe.catalog._catalog import Catalog, Code
from tablesafe.catalog._dataset import Dataset
from tablesafe.catalog._definitions import DefinitionSpace
from tablesafe.output._table import ProtectedTable

__all__ = [
    "Ask",
    "GuardAttackResult",
    "RefusalZeroResult",
    "children_attack",
    "concurrent_attack",
    "names_attack",
    "refusal_zeros",
    "slices_attack",
    "sliver_pairs",
]

#: ``ask(dataset name, request, key id)``: the published table, or ``None`` if refused.
Ask = Callable[[str, TableRequest, str], ProtectedTable | None]


@dataclass(frozen=True)
class GuardAttackResult:
    """What one guard attack got through.

    Attributes:
        attack: Its name.
        tries: Slivers attempted (pairs, triples).
        published: Slivers published: every request of the attempt answered.
    """

    attack: str
    tries: int
    published: int

    def as_dict(self) -> dict[str, Any]:
        """The result as a plain dictionary."""
        return dict(self.__dict__)


def microdata(dataset: Dataset) -> pd.DataFrame:
    """The dataset's records (classification columns and the record key)."""
    cat = dataset.catalog
    columns = [v.column for v in cat.source_variables] + [cat.record_key]
    if dataset.format == "parquet":
        return pd.read_parquet(dataset.path, columns=columns)
    return pd.read_csv(dataset.path, usecols=columns)


def _ask(ask: Ask, name: str, request: TableRequest, key: str) -> ProtectedTable | None:
    out = _outcome(ask, name, request, key)
    return None if isinstance(out, str) else out


def _outcome(ask: Ask, name: str, request: TableRequest, key: str) -> ProtectedTable | str:
    """The table, or the refusal's message (which the user reads too)."""
    try:
        table = ask(name, request, key)
    except RefusedError as exc:
        return str(exc)
    return "refused" if table is None else table


def _box(catalog: Catalog, conditions: Mapping[str, Sequence[Code]]) -> dict[str, frozenset[Code]]:
    """Conditions on source variables as a box of columns and codes."""
    return {catalog.variable(k).column: frozenset(v) for k, v in conditions.items()}


def _guard_refusal(message: str, m: int) -> bool:
    # The guard's refusals say "fewer than m records"; the universe-size rule's do not.
    return f"fewer than {m} records" in message


def _roles(catalog: Catalog) -> tuple[str, str, list[str]]:
    """The breakdown variable (fewest codes), the widest one, and the other small ones."""
    variables = sorted(catalog.source_variables, key=lambda v: (len(v.codes), v.name))
    dim, wide = variables[0].name, variables[-1].name
    small = [v.name for v in variables[1:-1] if len(v.codes) <= 12]
    if not small:
        raise RequestError("the guard attacks need a variable of 12 categories or fewer")
    return dim, wide, small


def sliver_pairs(
    catalog: Catalog, data: pd.DataFrame, m: int, count: int
) -> list[tuple[dict[str, list[Code]], dict[str, list[Code]]]]:
    """Sliver pairs: universes U and V = U minus 1 .. m-1 records.

    U is one category of a small variable and four consecutive codes of the
    widest; V is U without a category of another variable that U holds 1 ..
    m-1 records of.
    """
    _, wide, small = _roles(catalog)
    codes = list(catalog.variable(wide).codes)
    out = []
    for stratum in small:
        for start in (0, 2):
            for a in range(start, len(codes) - 3, 4):
                window = codes[a : a + 4]
                for r in catalog.variable(stratum).codes:
                    u = data[(data[stratum] == r) & data[wide].isin(window)]
                    if len(u) < 4 * m:
                        continue
                    for var in small:
                        if var == stratum:
                            continue
                        held = u[var].value_counts()
                        few = [c for c, n in held.sort_index().items() if n < m]
                        if few:
                            keep = [c for c in catalog.variable(var).codes if c != few[0]]
                            base = {stratum: [r], wide: window}
                            out.append((base, {**base, var: keep}))
                            break
                    if len(out) == count:
                        return out
    return out


def _request(dim: str, universe: Mapping[str, Sequence[Code]]) -> TableRequest:
    return TableRequest((dim,), universe=universe, statistic="count")


def concurrent_attack(
    ask: Ask,
    dataset: Dataset,
    name: str,
    *,
    m: int,
    pairs: int = 100,
    keys: tuple[str, str] = ("attacker-1", "attacker-2"),
    threads: int = 16,
) -> list[GuardAttackResult]:
    """Sliver pairs sent at the same instant, with one key and with two keys (half each)."""
    cat = dataset.catalog
    dim = _roles(cat)[0]
    found = sliver_pairs(cat, microdata(dataset), m, pairs)

    def one(barrier: Barrier, universe: dict[str, list[Code]], key: str) -> bool:
        barrier.wait()
        return _ask(ask, name, _request(dim, universe), key) is not None

    out = []
    half = len(found) // 2
    for label, chunk, ks in (
        ("concurrent, one key", found[:half], (keys[0], keys[0])),
        ("concurrent, two keys", found[half:], keys),
    ):
        with ThreadPoolExecutor(max_workers=threads) as pool:
            futures = []
            for u, v in chunk:
                barrier = Barrier(2)
                futures.append(
                    (pool.submit(one, barrier, u, ks[0]), pool.submit(one, barrier, v, ks[1]))
                )
            both = sum(a.result() and b.result() for a, b in futures)
        out.append(GuardAttackResult(label, len(chunk), both))
    return out


def names_attack(
    ask: Ask,
    dataset: Dataset,
    names: tuple[str, str],
    *,
    m: int,
    pairs: int = 50,
    key: str = "attacker-1",
) -> GuardAttackResult:
    """U under one dataset name, then V under another name of the same microdata."""
    cat = dataset.catalog
    dim = _roles(cat)[0]
    found = sliver_pairs(cat, microdata(dataset), m, pairs)
    published = 0
    for u, v in found:
        first = _ask(ask, names[0], _request(dim, u), key)
        second = _ask(ask, names[1], _request(dim, v), key)
        published += first is not None and second is not None
    return GuardAttackResult("across dataset names", len(found), published)


def _slice_targets(
    catalog: Catalog, data: pd.DataFrame, m: int, count: int
) -> Iterator[tuple[tuple[str, ...], str, Code, str, Code]]:
    """Targets of the 3-D slices attack.

    3-way tables in one category of a stratum whose records of one category
    of another variable change no 1-category slice by 1 .. m-1 records, but
    some 2-category slice.
    """
    dim, _, small = _roles(catalog)
    found = 0
    for stratum in small:
        others = [v for v in small if v != stratum]
        if len(others) < 3:
            continue
        dims = (dim, others[0], others[1])
        for r in catalog.variable(stratum).codes:
            base = data[data[stratum] == r]
            for var in others[2:]:
                for code in catalog.variable(var).codes:
                    gone = base[base[var] == code]
                    if len(gone) < m or any(
                        ((n > 0) & (n < m)).any() for n in (gone[d].value_counts() for d in dims)
                    ):
                        continue
                    pairs = [
                        list(p)
                        for p in ((dims[0], dims[1]), (dims[0], dims[2]), (dims[1], dims[2]))
                    ]
                    if any(
                        ((n > 0) & (n < m)).any() for n in (gone.groupby(p).size() for p in pairs)
                    ):
                        yield dims, stratum, r, var, code
                        found += 1
                        if found == count:
                            return
                        break


def slices_attack(
    ask: Ask, dataset: Dataset, name: str, *, m: int, tries: int = 20, key: str = "attacker-1"
) -> GuardAttackResult:
    """A 3-way table in U, then in U without the records that are a 2-category sliver."""
    cat = dataset.catalog
    published = done = 0
    for dims, stratum, r, var, code in _slice_targets(cat, microdata(dataset), m, tries):
        keep = [c for c in cat.variable(var).codes if c != code]
        first = _ask(ask, name, TableRequest(dims, universe={stratum: [r]}, statistic="count"), key)
        narrowed = TableRequest(dims, universe={stratum: [r], var: keep}, statistic="count")
        second = _ask(ask, name, narrowed, key)
        done += 1
        published += first is not None and second is not None
    return GuardAttackResult("3-D two-category slices", done, published)


def _children_targets(
    catalog: Catalog, data: pd.DataFrame, m: int, count: int
) -> Iterator[tuple[dict[str, list[Code]], str, list[Code], list[Code]]]:
    """U and two sets of codes of a variable that leave 1 .. m-1 records of U outside."""
    _, wide, small = _roles(catalog)
    codes = list(catalog.variable(wide).codes)
    found = 0
    for stratum in small:
        for a in range(0, len(codes) - 9, 5):
            window = codes[a : a + 10]
            for r in catalog.variable(stratum).codes:
                u = data[(data[stratum] == r) & data[wide].isin(window)]
                if len(u) < 10 * m:
                    continue
                for var in small:
                    if var == stratum:
                        continue
                    held = u[var].value_counts()
                    rest = [c for c in catalog.variable(var).codes if 0 < held.get(c, 0) < m]
                    if not rest:
                        continue
                    left = [c for c in catalog.variable(var).codes if c != rest[0]]
                    part_a, part_b = left[: len(left) // 2], left[len(left) // 2 :]
                    na, nb = int(u[var].isin(part_a).sum()), int(u[var].isin(part_b).sum())
                    if min(na, nb) >= m and len(u) - na - nb < m:
                        yield {stratum: [r], wide: window}, var, part_a, part_b
                        found += 1
                        if found == count:
                            return
                        break


def children_attack(
    ask: Ask, dataset: Dataset, name: str, *, m: int, tries: int = 20, key: str = "attacker-1"
) -> GuardAttackResult:
    """U, U and A, U and B, where U minus both holds 1 .. m-1 records."""
    cat = dataset.catalog
    dim = _roles(cat)[0]
    published = done = 0
    for universe, var, part_a, part_b in _children_targets(cat, microdata(dataset), m, tries):
        answers = [
            _ask(ask, name, _request(dim, u), key)
            for u in (universe, {**universe, var: part_a}, {**universe, var: part_b})
        ]
        done += 1
        published += all(a is not None for a in answers)
    return GuardAttackResult("parent minus children", done, published)


@dataclass(frozen=True)
class RefusalZeroResult:
    """How often refusals show a cell published as 0 to be non-empty.

    Attributes:
        zeros: Inner cells published as 0 and probed (true count 1 .. m-1: ``hidden``;
            true 0: ``empty``); the catalog's structural zeros are left out.
        hidden: Cells published 0 holding 1 .. m-1 records.
        hidden_refused: Of those, how many the probe got refused (shown non-empty).
        empty: Cells published 0 and empty.
        empty_refused: Of those, how many the probe got refused (false alarms).
    """

    zeros: int
    hidden: int
    hidden_refused: int
    empty: int
    empty_refused: int

    def as_dict(self) -> dict[str, Any]:
        """The result as a plain dictionary."""
        return dict(self.__dict__)


def refusal_zeros(
    ask: Ask,
    dataset: Dataset,
    name: str,
    *,
    m: int,
    tables: int = 10,
    key: str = "attacker-1",
    rng: np.random.Generator | int | None = 0,
) -> RefusalZeroResult:
    """For each cell published as 0 in 2-way tables, probe it with two universes.

    The table is ``A x B`` in a universe ``U`` (one category of a stratum and
    a window of the widest variable, so that cells are small). For its cell
    (a, b) the probe asks ``B`` in ``U and A = a`` (the slice the table
    published), then in ``U and A = a and B != b``: the two differ by the
    cell's records, so a refusal says the cell holds 1 .. m-1 of them.
    """
    cat = dataset.catalog
    _, wide, small = _roles(cat)
    wide_codes = list(cat.variable(wide).codes)
    gen = resolve_generator(rng)
    data = microdata(dataset)
    space = DefinitionSpace.of(cat)
    counts = {"zeros": 0, "hidden": 0, "hidden_refused": 0, "empty": 0, "empty_refused": 0}
    for _ in range(tables):
        stratum, a_var, b_var = (str(v) for v in gen.choice(small, size=3, replace=False))
        r = cat.variable(stratum).codes[int(gen.integers(len(cat.variable(stratum).codes)))]
        # A window of the widest variable: small cells, some published as 0.
        start = int(gen.integers(len(wide_codes)))
        window = wide_codes[start : start + int(gen.integers(5, 21))]
        universe = {stratum: [r], wide: window}
        request = TableRequest((a_var, b_var), universe=universe, statistic="count")
        table = _ask(ask, name, request, key)
        if table is None or table.counts is None:
            continue
        a_codes, b_codes = cat.variable(a_var).codes, cat.variable(b_var).codes
        for i, a in enumerate(a_codes):
            for j, b in enumerate(b_codes):
                if int(table.counts[i, j]) != 0:
                    continue
                cell = {**universe, a_var: [a], b_var: [b]}
                if space.empty(_box(cat, cell)):
                    continue  # a structural zero: the catalog says it is empty
                inside = (data[stratum] == r) & data[wide].isin(window)
                truth = int((inside & (data[a_var] == a) & (data[b_var] == b)).sum())
                if truth >= m:
                    continue
                row = {**universe, a_var: [a]}
                if (
                    _ask(ask, name, TableRequest((b_var,), universe=row, statistic="count"), key)
                    is None
                ):
                    continue  # the row itself refused (too small): no probe
                probe = {**row, b_var: [c for c in b_codes if c != b]}
                out = _outcome(
                    ask, name, TableRequest((b_var,), universe=probe, statistic="count"), key
                )
                refused = isinstance(out, str) and _guard_refusal(out, m)
                counts["zeros"] += 1
                kind = "hidden" if truth else "empty"
                counts[kind] += 1
                counts[f"{kind}_refused"] += refused
    return RefusalZeroResult(**counts)
