"""A merged group minus a published inner cell (issue 37), for the data owner to run.

The intruder publishes the cells of a variable ``V`` in a universe ``U``, then
asks figures that hold a small target category ``t`` together with a large
partner ``k`` already published, one partner at a time:

* ``group``: a table of ``V`` grouped so that ``k`` and ``t`` are one group,
  in ``U``: the group minus the published cell ``k`` is ``t`` plus noise;
* ``group-2d``: the same broken down by a second variable (cell ``t`` and the
  second variable's first category);
* ``merged-universe``: a table of the second variable in ``U`` and ``V`` in
  ``{k, t}``: its total minus the published cell ``k``;
* ``hierarchy``: each catalog grouping of ``V`` (a hierarchy level) in ``U``:
  the level's category holding ``t`` minus its other published children.

Each partner is another record set, so under record-set consistent noise
every difference is a fresh measurement; their average with the published
cell is the intruder's estimate of ``t``. And a target with no records makes
the group the record set of ``k``: the same noise, a difference of exactly 0
in every partner, which tells empty from non-empty. The attack scores both
against what the published cells of ``V`` alone give (the baseline): the
estimate's exact hits, and how often "empty" is called right (all
differences 0 where there are differences; else a published 0).

The microdata are read only to choose targets and to score (the owner's
experiment).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tablesafe._errors import RefusedError
from tablesafe._request import TableRequest
from tablesafe.catalog._catalog import Code
from tablesafe.catalog._custom import CustomGroup, CustomGrouping
from tablesafe.catalog._dataset import Dataset
from tablesafe.output._table import ProtectedTable

__all__ = ["VARIANTS", "GroupAttackResult", "GroupTarget", "group_attack", "group_targets"]

#: The attack's variants (module docstring).
VARIANTS = ("group", "group-2d", "merged-universe", "hierarchy")

#: ``ask(request)``: the published table, or ``None`` if it was refused.
Ask = Callable[[TableRequest], ProtectedTable | None]


@dataclass(frozen=True)
class GroupTarget:
    """One target of the attack.

    Attributes:
        universe: The universe's conditions (variable -> codes).
        code: The target category of the attacked variable.
        true: Its true count in the universe (of the second variable's first
            category too, for ``group-2d``).
        partners: Large categories, published, each merged with the target in turn.
    """

    universe: Mapping[str, tuple[Code, ...]]
    code: Code
    true: int
    partners: tuple[Code, ...]


@dataclass
class GroupAttackResult:
    """What the attack recovered, against the published cells alone.

    Attributes:
        variant: One of :data:`VARIANTS`.
        method: A label for the protection attacked.
        small: Targets holding records (1 to 4).
        exact_published: Of those, how many the published cell alone gives exactly.
        exact_attack: How many the attack's estimate gives exactly.
        targets: Every target (small and empty).
        told_published: Targets whose emptiness the published cell alone calls right.
        told_attack: Targets whose emptiness the attack calls right.
        told_by_differences: Targets whose emptiness the differences themselves tell
            right (all exactly 0 for an empty one, not all 0 for one that holds records).
        tables: Tables asked.
        refused: Tables refused whole.
        differences: Differences the attack could take (figures published).
        per_target: The details, one entry per target.
    """

    variant: str
    method: str
    small: int = 0
    exact_published: int = 0
    exact_attack: int = 0
    targets: int = 0
    told_published: int = 0
    told_attack: int = 0
    told_by_differences: int = 0
    tables: int = 0
    refused: int = 0
    differences: int = 0
    per_target: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The result as a plain dictionary (without the per-target details)."""
        return {k: v for k, v in self.__dict__.items() if k != "per_target"}


def group_targets(
    frame: pd.DataFrame,
    variable: str,
    universes: Sequence[Mapping[str, Sequence[Code]]],
    *,
    codes: Sequence[Code],
    small: int = 2,
    empty: int = 1,
    partners: int = 19,
    second: str | None = None,
    m: int = 10,
    public_zero: Callable[[Mapping[str, Sequence[Code]]], bool] | None = None,
) -> list[GroupTarget]:
    """Targets in each universe: ``small`` categories of 1 to 4 records, ``empty`` of none.

    Args:
        frame: The microdata (source columns, named as the catalog's variables).
        variable: The attacked variable.
        universes: The universes (conditions on source variables).
        codes: Every category of ``variable``.
        small: Small targets per universe.
        empty: Empty targets per universe.
        partners: Partners per target: categories holding at least ``3 m`` records.
        second: For ``group-2d``: the count is of the second variable's first category.
        m: The site's ``sliver_min_difference`` (partners are large against it).
        public_zero: Whether the catalog's declared zeros make a universe's
            category empty (such a target is no secret: it is left out).
    """
    out = []
    for universe in universes:
        inside = np.ones(len(frame), dtype=bool)
        for name, allowed in universe.items():
            inside &= frame[name].isin(list(allowed)).to_numpy()
        rows = frame[inside]
        if second is not None:
            first = sorted(frame[second].unique())[0]
            rows = rows[rows[second] == first]
        counts = rows[variable].value_counts()
        count = {c: int(counts.get(c, 0)) for c in codes}
        large = tuple(c for c in codes if count[c] >= 3 * m)[:partners]
        few = [c for c in codes if 1 <= count[c] <= 4][:small]
        none = [
            c
            for c in codes
            if count[c] == 0 and not (public_zero and public_zero({**universe, variable: [c]}))
        ][:empty]
        frozen = {k: tuple(v) for k, v in universe.items()}
        out += [GroupTarget(frozen, c, count[c], large) for c in (*few, *none)]
    return out


def _grouped(variable: str, k: Code, t: Code) -> CustomGrouping:
    return CustomGrouping(
        name="G", variable=variable, groups=(CustomGroup("kt", "k and t", (k, t)),)
    )


def _value(table: ProtectedTable | None, **cell: Code) -> float | None:
    """The published count of one cell (None: refused, withheld or hidden)."""
    if table is None or table.counts is None:
        return None
    at = []
    for d in table.dimensions:
        if d.name in cell:
            at.append(list(d.codes).index(cell[d.name]))
        else:
            at.append(d.size)
    index = tuple(at)
    if table.withheld is not None and table.withheld[index]:
        return None
    if table.suppressed is not None and table.suppressed[index]:
        return None
    return float(table.counts[index])


def _ask(ask: Ask, request: TableRequest, result: GroupAttackResult) -> ProtectedTable | None:
    result.tables += 1
    try:
        table = ask(request)
    except RefusedError:
        table = None
    if table is None:
        result.refused += 1
    return table


def group_attack(
    ask: Ask,
    dataset: Dataset,
    targets: Sequence[GroupTarget],
    *,
    variable: str,
    variant: str = "group",
    second: str = "SEX",
    method: str = "",
) -> GroupAttackResult:
    """Run one variant of the attack against ``ask`` (module docstring).

    Args:
        ask: Answers a request as the site would (``None`` or RefusedError: refused).
        dataset: The dataset (its catalog's groupings, for ``hierarchy``).
        targets: From :func:`group_targets`.
        variable: The attacked variable.
        variant: One of :data:`VARIANTS`.
        second: The second variable of ``group-2d`` and ``merged-universe``.
        method: A label for the result.
    """
    result = GroupAttackResult(variant, method)
    first = dataset.catalog.variable(second).codes[0]
    two_d = variant == "group-2d"
    for target in targets:
        universe = dict(target.universe)
        dims = (variable, second) if two_d else (variable,)
        base = _ask(ask, TableRequest(dims, universe=universe), result)
        cell = {variable: target.code, **({second: first} if two_d else {})}
        published = _value(base, **cell)
        differences = []
        for k in _partners(target, variant):
            difference = _difference(ask, dataset, base, target, k, variant, second, result)
            if difference is not None:
                differences.append(difference)
        result.differences += len(differences)
        _score(result, target, published, differences)
    return result


def _partners(target: GroupTarget, variant: str) -> Sequence[Code | None]:
    return (None,) if variant == "hierarchy" else target.partners


def _difference(
    ask: Ask,
    dataset: Dataset,
    base: ProtectedTable | None,
    target: GroupTarget,
    k: Code | None,
    variant: str,
    second: str,
    result: GroupAttackResult,
) -> float | None:
    """One fresh measurement of the target, or None where the site gave nothing to take."""
    variable = dataset.catalog.variable(second).name
    universe = dict(target.universe)
    first = dataset.catalog.variable(second).codes[0]
    name = next(iter(d.name for d in base.dimensions)) if base is not None else None
    if variant == "hierarchy":
        return _hierarchy(ask, dataset, base, target, name or "", result)
    assert k is not None and name is not None
    if variant == "merged-universe":
        table = _ask(
            ask, TableRequest((variable,), universe={**universe, name: [k, target.code]}), result
        )
        whole, part = _value(table), _value(base, **{name: k})
    elif variant == "group-2d":
        request = TableRequest(
            ("G", variable), universe=universe, groupings=(_grouped(name, k, target.code),)
        )
        table = _ask(ask, request, result)
        whole, part = (
            _value(table, G="kt", **{variable: first}),
            _value(base, **{name: k, variable: first}),
        )
    else:
        request = TableRequest(
            ("G",), universe=universe, groupings=(_grouped(name, k, target.code),)
        )
        table = _ask(ask, request, result)
        whole, part = _value(table, G="kt"), _value(base, **{name: k})
    if whole is None or part is None:
        return None
    return whole - part


def _hierarchy(
    ask: Ask,
    dataset: Dataset,
    base: ProtectedTable | None,
    target: GroupTarget,
    name: str,
    result: GroupAttackResult,
) -> float | None:
    """The level's category holding the target minus its other children, for the first level."""
    cat = dataset.catalog
    for grouping in cat.variables.values():
        if grouping.source != name:
            continue
        level = next(
            (
                c
                for c, members in zip(grouping.codes, grouping.members or (), strict=False)
                if target.code in members
            ),
            None,
        )
        if level is None:
            continue
        table = _ask(ask, TableRequest((grouping.name,), universe=dict(target.universe)), result)
        whole = _value(table, **{grouping.name: level})
        members = grouping.members[grouping.codes.index(level)] if grouping.members else ()
        parts = [_value(base, **{name: c}) for c in members if c != target.code]
        if whole is None or any(p is None for p in parts):
            return None
        return whole - sum(p for p in parts if p is not None)
    return None


def _score(
    result: GroupAttackResult,
    target: GroupTarget,
    published: float | None,
    differences: list[float],
) -> None:
    result.targets += 1
    seen = [*([] if published is None else [published]), *differences]
    estimate = round(float(np.mean(seen))) if seen else None
    if target.true > 0:
        result.small += 1
        result.exact_published += int(published is not None and round(published) == target.true)
        result.exact_attack += int(estimate == target.true)
    empty = target.true == 0
    called_published = published is not None and published == 0
    called_attack = all(d == 0 for d in differences) if differences else called_published
    result.told_published += int(called_published == empty)
    result.told_attack += int(called_attack == empty)
    result.told_by_differences += int(bool(differences) and called_attack == empty)
    result.per_target.append(
        {
            "code": target.code,
            "true": target.true,
            "published": published,
            "differences": differences,
            "estimate": estimate,
        }
    )
