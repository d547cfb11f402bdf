"""The SDMX structure a site declares for a dataset's tables (``[dataset.sdmx]``).

An office that publishes to .Stat or Eurostat has its data structure
definition, dataflow and code lists in an SDMX registry already; the
catalog names them so that every SDMX message of a table points at them::

    [dataset.sdmx]
    dataflow = "ESTAT:DF_CENSUS_HC(1.0)"           # agency:id(version)
    dimensions = { AGEGRP = "AGE", REGION = "GEO" }  # optional: the DSD's id of a dimension
    codelists = { AGEGRP = "ESTAT:CL_AGE(1.0)" }     # optional: the code list of its codes

Keys of ``dimensions`` and ``codelists`` are the catalog's variables and
groupings, or ``STATISTIC`` (the dimension naming the statistic). Without
the table, tables name ``TABLESAFE:<dataset>(1.0)``, a structure no registry
holds. Levels of one variable may share a dimension id (a table holds one
of them at most); variables of different microdata columns may not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tablesafe._errors import CatalogError

__all__ = ["STATISTIC_DIMENSION", "SdmxStructure", "parse_sdmx"]

#: The key of ``dimensions`` and ``codelists`` for the statistic dimension.
STATISTIC_DIMENSION = "STATISTIC"
#: SDMX's identifiers: a maintainable's (agencies, dataflows, code lists) and a component's.
_ID = r"[A-Za-z0-9_@$-]+"
_REFERENCE = re.compile(rf"^({_ID}(?:\.{_ID})*):({_ID})\((\d+(?:\.\d+){{0,2}})\)$")
_COMPONENT = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
_FORM = "AGENCY:ID(VERSION), e.g. ESTAT:DF_CENSUS(1.0)"


@dataclass(frozen=True)
class SdmxStructure:
    """A dataflow in an SDMX registry, and how the catalog's names map onto its structure.

    Attributes:
        agency: The maintenance agency (``ESTAT``).
        id: The dataflow's id.
        version: Its version (``1.0``).
        dimensions: Catalog name -> the dimension's id in the data structure definition.
        codelists: Catalog name -> the code list of its codes (``AGENCY:ID(VERSION)``).
    """

    agency: str
    id: str
    version: str
    dimensions: Mapping[str, str] = field(default_factory=dict)
    codelists: Mapping[str, str] = field(default_factory=dict)

    @property
    def reference(self) -> str:
        """``AGENCY:ID(VERSION)``, as SDMX-CSV's ``STRUCTURE_ID`` names a dataflow."""
        return f"{self.agency}:{self.id}({self.version})"

    def dimension_id(self, name: str) -> str:
        """The data structure's id of a table dimension (its name when not mapped)."""
        return self.dimensions.get(name, name)

    def to_dict(self) -> dict[str, Any]:
        """The ``[dataset.sdmx]`` table (the inverse of :func:`parse_sdmx`)."""
        out: dict[str, Any] = {"dataflow": self.reference}
        if self.dimensions:
            out["dimensions"] = dict(self.dimensions)
        if self.codelists:
            out["codelists"] = dict(self.codelists)
        return out


def _mapping(raw: object, key: str, names: Mapping[str, str]) -> dict[str, str]:
    """``dataset.sdmx.<key>``: a table from catalog names (or STATISTIC) to text."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or not all(isinstance(v, str) for v in raw.values()):
        raise CatalogError(f"dataset.sdmx.{key} must be a table of names to text")
    unknown = sorted(set(raw) - {*names, STATISTIC_DIMENSION})
    if unknown:
        raise CatalogError(
            f"dataset.sdmx.{key} names {', '.join(unknown)}, which the catalog does not; "
            f"allowed: its variables and groupings, and {STATISTIC_DIMENSION}"
        )
    return {str(k): str(v) for k, v in raw.items()}


def parse_sdmx(raw: object, names: Mapping[str, str]) -> SdmxStructure | None:
    """Parse ``[dataset.sdmx]``; ``None`` when the catalog declares no structure.

    Args:
        raw: The table (``None`` when absent).
        names: The catalog's variables and groupings, each with its microdata column.

    Raises:
        CatalogError: naming the key that is wrong and what it allows.
    """
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise CatalogError("[dataset.sdmx] must be a table")
    extra = sorted(set(raw) - {"dataflow", "dimensions", "codelists"})
    if extra:
        raise CatalogError(
            f"unknown key(s) {extra} in [dataset.sdmx]; allowed: codelists, dataflow, dimensions"
        )
    ref = raw.get("dataflow")
    m = _REFERENCE.match(ref) if isinstance(ref, str) else None
    if m is None:
        raise CatalogError(f"dataset.sdmx.dataflow must be written {_FORM}, not {ref!r}")
    dimensions = _mapping(raw.get("dimensions"), "dimensions", names)
    bad = [v for v in dimensions.values() if not _COMPONENT.match(v)]
    if bad:
        raise CatalogError(
            f"dataset.sdmx.dimensions: {bad[0]!r} is not an SDMX id (a letter, then "
            "letters, digits, _ or -)"
        )
    # Levels of one variable (AGE, AGEGRP) may share a dimension of the DSD: no table
    # holds two of them; variables of different columns may not.
    columns: dict[str, set[str]] = {}
    for name, column in (*names.items(), (STATISTIC_DIMENSION, "")):
        columns.setdefault(dimensions.get(name, name), set()).add(column)
    clash = sorted(i for i, cols in columns.items() if len(cols) > 1)
    if clash:
        raise CatalogError(
            f"dataset.sdmx.dimensions gives the id {clash[0]} to variables of different columns"
        )
    codelists = _mapping(raw.get("codelists"), "codelists", names)
    bad = [v for v in codelists.values() if not _REFERENCE.match(v)]
    if bad:
        raise CatalogError(f"dataset.sdmx.codelists: {bad[0]!r} must be written {_FORM}")
    return SdmxStructure(m.group(1), m.group(2), m.group(3), dimensions, codelists)
