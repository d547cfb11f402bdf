"""Counting units: tables of persons, or of the households (families, dwellings) they live in.

ABS TableBuilder's *summation options* count the units of a table: persons,
families or dwellings. A person file that carries its household's
identifier, record key and weight on every record can count either: a
table of persons counts records; a table of households counts each
household once, by the household's own variables, with the household's
record key driving its noise (the same household, the same draw, in every
table) and the household weight in weighted figures. The catalog declares
the records' own unit and every other unit the file holds::

    [dataset]
    unit = "person"               # what one record is (default: person)

    [[units]]
    unit = "household"
    id = "HHID"                   # the household's identifier on each record
    record_key = "HHKEY"          # the household's permanent record key
    weight = "HHWEIGHT"           # optional: the household weight
    variables = ["REGION", "TENURE", "HHSIZE"]   # the household's variables

Validation checks, in every engine, that a household's record key, weight
and variables are the same on each of its records.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tablesafe._errors import CatalogError, DataError, choice

__all__ = [
    "CountingUnit",
    "Unit",
    "parse_units",
    "raise_unit_problem",
    "unit_check_sql",
]


class Unit(StrEnum):
    """What a table counts (ABS's summation options; a member equals its text)."""

    PERSON = "person"
    FAMILY = "family"
    HOUSEHOLD = "household"
    DWELLING = "dwelling"


@dataclass(frozen=True)
class CountingUnit:
    """A unit the records belong to, one or more records each.

    Attributes:
        unit: Which unit.
        id: The column identifying the unit on each of its records.
        record_key: The unit's permanent record key column (uint32).
        weight: The unit's weight column, or ``None``.
        variables: The unit's variables: constant within a unit, the only
            ones a table of these units may use (groupings of them too).
    """

    unit: Unit
    id: str
    record_key: str
    weight: str | None
    variables: tuple[str, ...]

    @property
    def columns(self) -> tuple[str, ...]:
        """The unit's own columns: identifier, record key and weight."""
        return (self.id, self.record_key, *([self.weight] if self.weight else []))

    def to_dict(self) -> dict[str, Any]:
        """The TOML entry of this unit."""
        out: dict[str, Any] = {"unit": str(self.unit), "id": self.id, "record_key": self.record_key}
        if self.weight:
            out["weight"] = self.weight
        out["variables"] = list(self.variables)
        return out


def parse_units(
    raw: object, own: Unit, check_name: Callable[[object, str], str], variables: Sequence[str]
) -> dict[Unit, CountingUnit]:
    """Parse the ``[[units]]`` entries of a catalog.

    Args:
        raw: The parsed list (``[]`` when absent).
        own: The records' own unit (``[dataset] unit``): not declared again.
        check_name: The catalog's name check.
        variables: The catalog's source variables' names.

    Raises:
        CatalogError: naming the entry and what is wrong with it.
    """
    if not isinstance(raw, list):
        raise CatalogError("[[units]] must be a list of tables")
    out: dict[Unit, CountingUnit] = {}
    allowed = {"unit", "id", "record_key", "weight", "variables"}
    for i, entry in enumerate(raw):
        if not isinstance(entry, Mapping) or set(entry) - allowed:
            raise CatalogError(
                f"units entry {i + 1} must be a table with keys {', '.join(sorted(allowed))}"
            )
        unit = choice(Unit, entry.get("unit"), f"unit of units entry {i + 1}", CatalogError)
        if unit == own or unit in out:
            raise CatalogError(
                f"unit {unit} is declared twice (the records are {own}: [dataset] unit)"
            )
        names = entry.get("variables", [])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise CatalogError(f"unit {unit}: variables must be a list of variable names")
        unknown = [n for n in names if n not in variables]
        if unknown:
            raise CatalogError(
                f"unit {unit} names {', '.join(unknown)}, which are not variables of the "
                f"catalog (its variables: {', '.join(variables)})"
            )
        weight = entry.get("weight")
        out[unit] = CountingUnit(
            unit=unit,
            id=check_name(entry.get("id"), f"id column of unit {unit}"),
            record_key=check_name(entry.get("record_key"), f"record-key column of unit {unit}"),
            weight=None if weight is None else check_name(weight, f"weight column of unit {unit}"),
            variables=tuple(names),
        )
    return out


def unit_check_sql(
    unit: CountingUnit, columns: Sequence[str], ident: Callable[[str], str], source: str
) -> str:
    """One query over the records: what is wrong with a unit's columns, as five counts.

    Missing identifiers, units whose record key, weight or ``columns`` (its
    variables' columns) differ between their records, record keys outside
    0 .. 2**32 - 1 or missing, and weights missing, negative or not finite.
    Works in DuckDB and Spark SQL.
    """
    i, k = ident(unit.id), ident(unit.record_key)
    varying = [f"COUNT(DISTINCT {ident(c)}) > 1" for c in (unit.record_key, *columns)]
    w = None if unit.weight is None else ident(unit.weight)
    if w is not None:
        varying.append(f"COUNT(DISTINCT {w}) > 1")
    bad_weight = (
        "0"
        if w is None
        else f"SUM(CASE WHEN {w} IS NULL OR isnan(CAST({w} AS DOUBLE)) OR {w} < 0 OR "
        f"abs(CAST({w} AS DOUBLE)) = CAST('Infinity' AS DOUBLE) THEN 1 ELSE 0 END)"
    )
    return (
        f"SELECT SUM(CASE WHEN {i} IS NULL THEN 1 ELSE 0 END), "
        f"(SELECT COUNT(*) FROM (SELECT {i} FROM {source} GROUP BY {i} "
        f"HAVING {' OR '.join(varying)}) AS ts_u), "
        f"SUM(CASE WHEN {k} IS NULL OR {k} < 0 OR {k} >= 4294967296 THEN 1 ELSE 0 END), "
        f"{bad_weight} FROM {source}"
    )


def raise_unit_problem(unit: CountingUnit, row: Sequence[Any]) -> None:
    """Raise the :class:`DataError` for the first problem :func:`unit_check_sql` counted."""
    missing, varying, keys, weights = (int(v or 0) for v in row[:4])
    where = f"unit {unit.unit} (column {unit.id})"
    if missing:
        raise DataError(f"{where}: {missing} records have no {unit.id}")
    if varying:
        raise DataError(
            f"{where}: {varying} units have records that disagree on the unit's record key, "
            f"weight or variables ({', '.join(unit.variables)}); each must be the same on "
            "every record of a unit"
        )
    if keys:
        raise DataError(
            f"{where}: {keys} records have a record key in {unit.record_key} missing or outside "
            "0 .. 2**32 - 1"
        )
    if weights:
        raise DataError(
            f"{where}: {weights} records have a weight in {unit.weight} that is missing, "
            "negative or not finite"
        )
