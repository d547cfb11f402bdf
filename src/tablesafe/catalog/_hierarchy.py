"""Hierarchical classifications: levels of one variable nested into a tree.

A hierarchy names, from the broadest to the finest, levels that classify the
same microdata column: the variable itself and groupings of it (local area
-> region -> country, or single years of age -> five-year bands -> age
groups). Every category of a finer level lies inside exactly one category of
the level above: its *parent*. A user picks any level as a dimension and
filters the universe by any level, as with any grouping.

Nothing new is published about the records: an upper-level cell is the set
of records of its children, so its cell key is the sum of the record keys of
those records and its protected value is the one any grouping of the same
children would get. Structural zeros declared at one level hold at every
finer level, because they are checked on source codes.

Upper levels can be declared over the level below them rather than over the
source codes: a grouping with ``of = "REGION5"`` lists codes of the grouping
``REGION5`` as its members. Such references must not form a cycle.

The TOML layout::

    [[variables]]
    name = "REGION"
    categories = [...]

    [[variables.groupings]]
    name = "ZONE"
    groups = [{ code = "N", label = "North", members = [1, 2, 3] }, ...]

    [[hierarchies]]
    name = "GEOGRAPHY"
    label = "Zones and regions"
    levels = ["ZONE", "REGION"]        # broadest first
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tablesafe._errors import CatalogError

if TYPE_CHECKING:
    from tablesafe.catalog._variables import Code, Variable

__all__ = ["Hierarchy", "parse_hierarchies", "resolve_grouping_levels"]


@dataclass(frozen=True)
class Hierarchy:
    """Levels of one classification, from the broadest to the finest.

    Attributes:
        name: The hierarchy's name (not usable as a dimension: its levels are).
        label: A human-readable label.
        levels: Names of the variables or groupings that are its levels,
            broadest first; all classify the same microdata column.
        parents: For each level but the first, the parent code (in the level
            above) of each of its categories, in category order.
    """

    name: str
    label: str
    levels: tuple[str, ...]
    parents: tuple[tuple[Code, ...], ...]

    def tree(self, variables: Mapping[str, Variable]) -> list[dict[str, Any]]:
        """The hierarchy as nested nodes ``{level, code, label, children}``, broadest first."""
        nodes: list[list[dict[str, Any]]] = []
        for level in self.levels:
            var = variables[level]
            nodes.append(
                [
                    {"level": level, "code": c.code, "label": c.label, "children": []}
                    for c in var.categories
                ]
            )
        for depth in range(len(self.levels) - 1, 0, -1):
            above = {n["code"]: n for n in nodes[depth - 1]}
            for node, parent in zip(nodes[depth], self.parents[depth - 1], strict=True):
                above[parent]["children"].append(node)
        return nodes[0]

    def to_dict(self) -> dict[str, Any]:
        """The hierarchy in its TOML structure."""
        return {"name": self.name, "label": self.label, "levels": list(self.levels)}


def resolve_grouping_levels(raw: object, source: Variable) -> list[Any]:
    """Rewrite groupings declared ``of`` another grouping onto the source codes.

    Args:
        raw: The ``groupings`` list of one variable entry, as parsed from TOML.
        source: The variable they group.

    Returns:
        The list with every ``of`` grouping's members replaced by the source
        codes they stand for (and ``of`` removed), in the original order.

    Raises:
        CatalogError: for an ``of`` naming no grouping of this variable, a
            cycle of ``of`` references, a member that is not a code of the
            level below, or a code of the level below in two groups or in none.
    """
    if not isinstance(raw, list):
        return raw  # type: ignore[return-value]
    entries = {g.get("name"): g for g in raw if isinstance(g, Mapping)}
    if not any(isinstance(g, Mapping) and "of" in g for g in raw):
        return raw
    levels = _Levels(source, entries)
    out = []
    for g in raw:
        if isinstance(g, Mapping) and isinstance(g.get("name"), str):
            out.append(levels.resolved.get(g["name"]) or levels.resolve(g["name"]))
        else:
            out.append(g)
    return out


class _Levels:
    """The groupings of one variable, each resolved once onto the source codes.

    Attributes:
        source: The variable grouped.
        entries: The grouping entries as parsed from TOML, by name.
        resolved: The entries resolved so far (``of`` removed, members
            rewritten to source codes), by name.
    """

    def __init__(self, source: Variable, entries: Mapping[Any, Mapping[str, Any]]) -> None:
        self.source = source
        self.entries = entries
        self.resolved: dict[str, dict[str, Any]] = {}

    def members_of(self, name: str, chain: tuple[str, ...]) -> dict[Any, list[Any]]:
        """Map each code of level ``name`` to its source codes."""
        source = self.source
        if name == source.name:
            return {c: [c] for c in source.codes}
        if name in chain:
            cycle = " -> ".join((*chain[chain.index(name) :], name))
            raise CatalogError(
                f"groupings of {source.name} refer to each other in a cycle ({cycle}); "
                "each level must be declared over a finer level, down to the variable"
            )
        if name not in self.entries:
            allowed = ", ".join([source.name, *(str(n) for n in self.entries)])
            raise CatalogError(
                f"grouping {chain[-1]} of {source.name} is declared of {name!r}, which is not "
                f"{source.name} or one of its groupings; allowed: {allowed}"
            )
        entry = self.resolved.get(name) or self.resolve(name, chain)
        return {
            g["code"]: list(g["members"])
            for g in entry.get("groups", [])
            if isinstance(g, Mapping) and "code" in g and isinstance(g.get("members"), list)
        }

    def resolve(self, name: str, chain: tuple[str, ...] = ()) -> dict[str, Any]:
        """Resolve grouping ``name`` (reached through ``chain``) onto the source codes."""
        entry = dict(self.entries[name])
        below_name = entry.pop("of", None)
        if below_name is None:
            self.resolved[name] = entry
            return entry
        if not isinstance(below_name, str):
            raise CatalogError(f"grouping {name} of {self.source.name}: 'of' must be a level name")
        below = self.members_of(below_name, (*chain, name))
        where = f"grouping {name} of {self.source.name} (declared of {below_name})"
        entry["groups"] = _regroup(entry.get("groups", []) or [], below, below_name, where)
        self.resolved[name] = entry
        return entry


def _regroup(
    raw_groups: list[Any], below: Mapping[Any, list[Any]], below_name: str, where: str
) -> list[Any]:
    """One level's groups with their members (codes of the level below) as source codes.

    Raises:
        CatalogError: for a member that is not a code of the level below, or
            a code of the level below in two groups or in none.
    """
    seen: dict[Any, Any] = {}
    groups = []
    for g in raw_groups:
        if not isinstance(g, Mapping) or not isinstance(g.get("members"), list):
            groups.append(g)  # the grouping parser names the problem
            continue
        codes: list[Any] = []
        for m in g["members"]:
            if isinstance(m, bool) or m not in below:
                shown = ", ".join(repr(c) if isinstance(c, str) else str(c) for c in below)
                raise CatalogError(
                    f"{where}: group {g.get('code')!r} names {m!r}, which is not a code of "
                    f"{below_name}; allowed: {shown}"
                )
            if m in seen:
                raise CatalogError(
                    f"{where}: {below_name} {m!r} is in groups {seen[m]!r} and "
                    f"{g.get('code')!r}; a category has exactly one parent"
                )
            seen[m] = g.get("code")
            codes.extend(below[m])
        groups.append({**g, "members": codes})
    orphans = [c for c in below if c not in seen]
    if orphans:
        raise CatalogError(
            f"{where}: {below_name} categories {orphans[:10]} are in no group; every "
            "category of the level below must have exactly one parent"
        )
    return groups


def parse_hierarchies(
    raw: object,
    variables: Mapping[str, Variable],
    check_name: Callable[[object, str], str],
) -> tuple[Hierarchy, ...]:
    """Validate the ``[[hierarchies]]`` entries of a catalog.

    Raises:
        CatalogError: for an unknown level, levels of different variables, a
            level named twice (a cycle), a category of a finer level that
            falls in two categories of the level above (a child in two
            parents), or a name used twice.
    """
    if not isinstance(raw, list):
        raise CatalogError("hierarchies must be a list of tables ([[hierarchies]])")
    out: list[Hierarchy] = []
    names: set[str] = set()
    for i, rh in enumerate(raw):
        if not isinstance(rh, Mapping):
            raise CatalogError(f"hierarchy {i + 1} must be a table")
        allowed = {"name", "label", "levels"}
        if set(rh) - allowed:
            raise CatalogError(
                f"unknown key(s) {sorted(set(rh) - allowed)} in hierarchy {i + 1}; allowed: "
                f"{', '.join(sorted(allowed))}"
            )
        name = check_name(rh.get("name"), "hierarchy")
        if name in names or name in variables:
            raise CatalogError(
                f"hierarchy name {name!r} is already used by a variable, grouping or hierarchy"
            )
        names.add(name)
        label = rh.get("label", name)
        if not isinstance(label, str):
            raise CatalogError(f"hierarchy {name}: label must be a string")
        levels = rh.get("levels")
        if not isinstance(levels, list) or len(levels) < 2:
            raise CatalogError(
                f"hierarchy {name} needs 'levels': at least two variable or grouping names, "
                "broadest first"
            )
        out.append(_check_levels(name, label, levels, variables))
    return tuple(out)


def _check_levels(
    name: str, label: str, levels: Sequence[object], variables: Mapping[str, Variable]
) -> Hierarchy:
    seen: list[str] = []
    for level in levels:
        if not isinstance(level, str) or level not in variables:
            raise CatalogError(
                f"hierarchy {name} names unknown level {level!r}; levels are variables or "
                f"groupings of the catalog: {', '.join(variables)}"
            )
        if level in seen:
            raise CatalogError(
                f"hierarchy {name} names level {level} twice, a cycle; levels run once each "
                "from the broadest to the finest"
            )
        seen.append(level)
    vars_ = [variables[lv] for lv in seen]
    columns = {v.column for v in vars_}
    if len(columns) > 1:
        raise CatalogError(
            f"hierarchy {name}: levels {', '.join(seen)} classify different variables; all "
            "levels must be the variable and groupings of it"
        )
    parents: list[tuple[Code, ...]] = []
    for upper, lower in itertools.pairwise(vars_):
        owner = {s: u.code for u in upper.categories for s in upper.source_codes(u.code)}
        row: list[Code] = []
        for c in lower.categories:
            ups = list(dict.fromkeys(owner[s] for s in lower.source_codes(c.code)))
            if len(ups) > 1:
                raise CatalogError(
                    f"hierarchy {name}: {lower.name} {c.code!r} falls in {upper.name} "
                    f"{ups[0]!r} and {ups[1]!r}; every category of a finer level must lie in "
                    f"exactly one category of the level above (list levels broadest first)"
                )
            row.append(ups[0])
        parents.append(tuple(row))
    return Hierarchy(name=name, label=label, levels=tuple(seen), parents=tuple(parents))
