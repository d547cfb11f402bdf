"""Custom groupings: categories merged into new groups in the request itself.

A user of a table builder often wants categories the catalog does not
offer: ages 0 to 29, 30 to 59 and 60 and over; three regions together;
"other" for the rest. A :class:`CustomGrouping` names a catalog variable
(or one of its groupings), the new groups, each a code, a label and the
categories it merges, and optionally the label of an ``other`` group that
collects every category not named. Categories not named stay as they are
(unless there is an ``other`` group). The grouping gets a name of its own
and is used in the request like any catalog variable: as a dimension, or in
the universe.

Protection needs nothing new: a grouped cell is the set of its records, so
its cell key is the sum of their record keys (seeds as for any cell), and
the same group asked twice, by anyone, gets the same protected value; a
custom grouping identical to a catalog grouping gives the catalog
grouping's values. Structural zeros follow from the merged source codes.
The server additionally treats every group as a universe for the sliver
guard (a group that differs from one already answered by a few records is
refused), and limits groups per request and categories per group.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tablesafe._errors import RequestError
from tablesafe.catalog._catalog import Catalog, Category, Code, Variable, reserved_name

__all__ = [
    "CustomGroup",
    "CustomGrouping",
    "check_grouping_limits",
    "extend_catalog",
    "parse_groupings",
]

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,62}$")
# Names of the table's own columns: a grouping called so would overwrite them
# (or be overwritten) in the JSON, CSV and XLSX cells.
_CODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.+\-]{0,39}$")


@dataclass(frozen=True)
class CustomGroup:
    """One group of a custom grouping.

    Attributes:
        code: The group's code in the table (text: letters, digits, space, ``_.+-``).
        label: Its label.
        members: The categories it merges (codes of the grouped variable).
    """

    code: str
    label: str
    members: tuple[Code, ...]


@dataclass(frozen=True)
class CustomGrouping:
    """Categories of a variable merged into named groups, at request time.

    Args:
        name: The name the request uses for the grouping (a new name, not
            one of the catalog's).
        variable: The catalog variable (or grouping) whose categories are merged.
        groups: The groups, in table order.
        label: A label for the grouping (default: the name).
        other: If given, the label of a last group, code ``"other"``, that
            collects every category no group names; if ``None``, those
            categories stay as they are.

    Raises:
        RequestError: for a malformed name, code or label, no group, an empty
            group, or a code used twice.
    """

    name: str
    variable: str
    groups: tuple[CustomGroup, ...]
    label: str = ""
    other: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise RequestError(
                f"custom grouping name {self.name!r} is not allowed: use a letter followed by "
                "up to 62 letters, digits or underscores"
            )
        why = reserved_name(self.name)
        if why is not None:
            raise RequestError(f"custom grouping name {self.name!r} is {why}")
        where = f"custom grouping {self.name}"
        if not isinstance(self.variable, str) or not self.variable:
            raise RequestError(f"{where} needs the variable whose categories it merges")
        groups = tuple(self.groups)
        if not groups:
            raise RequestError(f"{where} has no groups; give at least one group")
        codes: set[str] = set()
        for g in groups:
            if not isinstance(g, CustomGroup):
                raise RequestError(f"{where}: groups must be CustomGroup values")
            if not isinstance(g.code, str) or not _CODE.match(g.code):
                raise RequestError(
                    f"{where}: group code {g.code!r} is not allowed: up to 40 letters, digits, "
                    "spaces or _.+- characters, starting with a letter or digit"
                )
            if g.code in codes or (self.other is not None and g.code == "other"):
                raise RequestError(f"{where}: group code {g.code!r} is used twice")
            codes.add(g.code)
            _check_label(g.label, f"{where}, group {g.code!r}")
            if not g.members:
                raise RequestError(
                    f"{where}: group {g.code!r} is empty; a group merges at least one category"
                )
        _check_label(self.label or self.name, where)
        if self.other is not None:
            _check_label(self.other, f"{where}, other group")
        object.__setattr__(self, "groups", groups)

    @property
    def n_groups(self) -> int:
        """Number of groups the user named (the ``other`` group not counted)."""
        return len(self.groups)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (as the API takes it)."""
        out: dict[str, Any] = {
            "name": self.name,
            "variable": self.variable,
            "label": self.label or self.name,
            "groups": [
                {"code": g.code, "label": g.label, "members": list(g.members)} for g in self.groups
            ],
        }
        if self.other is not None:
            out["other"] = self.other
        return out

    def to_variable(self, catalog: Catalog) -> Variable:
        """The grouping as a catalog :class:`Variable` (a grouping of the source column).

        Raises:
            RequestError: for an unknown variable or category, a category in
                two groups, or a name the catalog already uses.
        """
        where = f"custom grouping {self.name}"
        if self.name in catalog.variables:
            raise RequestError(
                f"{where}: the name is already a variable of the catalog; choose another name"
            )
        var = catalog.variable(self.variable)
        seen: dict[Code, str] = {}
        cats: list[Category] = []
        members: list[tuple[Code, ...]] = []
        for g in self.groups:
            source: list[Code] = []
            for raw in g.members:
                code = var.coerce(raw)
                if code in seen:
                    raise RequestError(
                        f"{where}: category {code!r} of {var.name} is in groups "
                        f"{seen[code]!r} and {g.code!r}; each category may be in one group only"
                    )
                seen[code] = g.code
                source.extend(var.source_codes(code))
            cats.append(Category(g.code, g.label))
            members.append(tuple(source))
        rest = [c for c in var.categories if c.code not in seen]
        if self.other is not None and rest:
            cats.append(Category("other", self.other))
            members.append(tuple(s for c in rest for s in var.source_codes(c.code)))
        elif self.other is None:
            for c in rest:
                cats.append(Category(str(c.code), c.label))
                members.append(var.source_codes(c.code))
        texts = [c.code for c in cats]
        clash = sorted({t for t in texts if texts.count(t) > 1})
        if clash:
            raise RequestError(
                f"{where}: group code {clash[0]!r} is also the code of a category of {var.name} "
                "that stays ungrouped; choose another code"
            )
        return Variable(
            name=self.name,
            label=self.label or self.name,
            categories=tuple(cats),
            column=var.column,
            members=tuple(members),
            source=var.source or var.name,
        )


def _check_label(label: object, where: str) -> None:
    if not isinstance(label, str) or not label.strip() or len(label) > 200:
        raise RequestError(f"{where}: the label must be text of 1 to 200 characters")
    if any(ord(ch) < 32 for ch in label):
        raise RequestError(f"{where}: the label must not contain control characters")


def parse_groupings(raw: object) -> tuple[CustomGrouping, ...]:
    """Custom groupings from their JSON form (a list of objects).

    Each object has ``name``, ``variable``, ``groups`` (a list of objects with
    ``code``, ``label`` and ``members``) and optionally ``label`` and ``other``.

    Raises:
        RequestError: naming the first problem found.
    """
    if isinstance(raw, CustomGrouping):
        return (raw,)
    if raw is None:
        return ()
    if not isinstance(raw, Iterable) or isinstance(raw, str | bytes | Mapping):
        raise RequestError("groupings must be a list of custom groupings")
    out: list[CustomGrouping] = []
    for i, item in enumerate(raw):
        if isinstance(item, CustomGrouping):
            out.append(item)
            continue
        if not isinstance(item, Mapping):
            raise RequestError(f"custom grouping {i + 1} must be an object")
        extra = set(item) - {"name", "variable", "label", "groups", "other"}
        if extra:
            raise RequestError(
                f"custom grouping {i + 1} has unknown field(s) {sorted(extra)}; allowed: name, "
                "variable, label, groups, other"
            )
        groups = item.get("groups")
        if not isinstance(groups, Sequence) or isinstance(groups, str):
            raise RequestError(f"custom grouping {i + 1} needs a list 'groups'")
        parsed = []
        for j, g in enumerate(groups):
            if not isinstance(g, Mapping) or set(g) - {"code", "label", "members"}:
                raise RequestError(
                    f"group {j + 1} of custom grouping {i + 1} must be an object with code, "
                    "label and members"
                )
            members = g.get("members", [])
            if isinstance(members, str | int) and not isinstance(members, bool):
                members = [members]
            if not isinstance(members, Sequence):
                raise RequestError(f"group {j + 1} of custom grouping {i + 1}: members is a list")
            for m in members:
                if isinstance(m, bool) or not isinstance(m, int | str):
                    raise RequestError(
                        f"group {j + 1} of custom grouping {i + 1}: members are category codes, "
                        f"not {m!r}"
                    )
            code = g.get("code")
            parsed.append(CustomGroup(code, g.get("label", code), tuple(members)))  # type: ignore[arg-type]
        out.append(
            CustomGrouping(
                name=item.get("name"),  # type: ignore[arg-type]
                variable=item.get("variable"),  # type: ignore[arg-type]
                groups=tuple(parsed),
                label=item.get("label", "") or "",
                other=item.get("other"),
            )
        )
    names = [g.name for g in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise RequestError(f"custom grouping name {dup[0]!r} is used twice")
    return tuple(out)


def extend_catalog(catalog: Catalog, groupings: Sequence[CustomGrouping]) -> Catalog:
    """The catalog with the custom groupings added as groupings.

    Raises:
        RequestError: as :meth:`CustomGrouping.to_variable`.
    """
    if not groupings:
        return catalog
    variables = dict(catalog.variables)
    for g in groupings:
        variables[g.name] = g.to_variable(catalog)
    return replace(catalog, variables=variables)


def check_grouping_limits(
    groupings: Sequence[CustomGrouping], *, max_groups: int, max_categories: int
) -> None:
    """Refuse custom groupings beyond the site's rules (before any microdata is read).

    Raises:
        RequestError: too many groups in all, or too many categories in one group.
    """
    if not groupings:
        return
    if max_groups <= 0:
        raise RequestError("this dataset does not allow custom groupings")
    total = sum(g.n_groups for g in groupings)
    if total > max_groups:
        raise RequestError(
            f"the request's custom groupings define {total} groups; this dataset allows at "
            f"most {max_groups} per request"
        )
    for g in groupings:
        for group in g.groups:
            if len(group.members) > max_categories:
                raise RequestError(
                    f"group {group.code!r} of custom grouping {g.name} merges "
                    f"{len(group.members)} categories; this dataset allows at most "
                    f"{max_categories} per group"
                )
