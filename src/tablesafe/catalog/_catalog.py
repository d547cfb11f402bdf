"""The catalog: variables, categories, groupings and structural zeros.

A catalog describes the microdata a statistical office serves: which columns
hold the classification variables (with their ordered categories, each a
code and a label), which column holds the survey weight, the replicate
weights and the record key. It is written by the data owner as a TOML file
beside the data (``catalog.toml``) and validated on load, before any
microdata is read.

A *grouping* is a coarser classification derived from a variable (single
years of age into five-year bands, say). It has a name of its own and can be
used in a request exactly like a variable; its categories map onto sets of
the source variable's codes.

A *structural zero* is a combination of categories that cannot occur (a
married five-year-old). It is declared as a mapping from variable (or
grouping) names to the codes that together cannot occur; cells of a table
that lie entirely inside such a combination are flagged and never perturbed.

The TOML layout::

    [dataset]
    title = "Demo survey"
    citation = "Office (2026), Demo survey [data set]"   # optional; printed under every table
    reference_date = "2021-03-21"     # optional: the date or period the data describe
    updated = "2024-05-02"            # optional: the date the data were last released or revised

    [dataset.sdmx]                     # optional (tablesafe.catalog._sdmx): the SDMX dataflow
    dataflow = "ESTAT:DF_CENSUS(1.0)"
    file = "microdata.parquet"        # Parquet or CSV, relative to the catalog
    record_key = "RKEY"
    weight = "WEIGHT"                  # optional
    replicate_weights = ["RW1", ...]  # optional, or "RW*" as a prefix pattern
    replicate_method = "JK1"          # JK1 | JK2 | BRR | bootstrap
    replicate_coefficient = 0.9875    # optional; derived from the method if absent

    [[variables]]
    name = "SEX"
    label = "Sex"
    categories = [{ code = 1, label = "Male" }, { code = 2, label = "Female" }]

    [[variables.groupings]]
    name = "AGE5"
    label = "Age in five-year bands"
    groups = [{ code = "0-4", label = "0 to 4", members = [0, 1, 2, 3, 4] }]

    [[structural_zeros]]
    AGEGRP = [1]
    MARSTAT = [2, 3, 4]

    [[hierarchies]]                    # levels of one variable, broadest first
    name = "AGE_TREE"
    levels = ["AGEGRP", "AGE5", "AGE"]

    [[magnitudes]]                     # continuous variables (tablesafe.catalog._magnitudes)
    name = "INCOME"
    label = "Annual income"
    unit = "EUR"
    lower = 0
    upper = 2000000
"""

from __future__ import annotations

import datetime
import math
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import tomli_w

from tablesafe._errors import CatalogError, FormatError, RequestError, choice
from tablesafe.catalog._hierarchy import Hierarchy, parse_hierarchies, resolve_grouping_levels
from tablesafe.catalog._magnitudes import WEIGHTED_SUFFIX, Magnitude, parse_magnitudes
from tablesafe.catalog._sdmx import SdmxStructure, parse_sdmx
from tablesafe.catalog._units import CountingUnit, Unit, parse_units
from tablesafe.catalog._variables import Category, Code, Variable, _show_codes

__all__ = [
    "NAME_PATTERN",
    "REPLICATE_METHODS",
    "Catalog",
    "Category",
    "Code",
    "ReplicateDesign",
    "ReplicateMethod",
    "StructuralZero",
    "Variable",
    "check_name",
    "dump_toml",
    "reserved_name",
    "toml_value",
]


class ReplicateMethod(StrEnum):
    """Replicate-weight methods a catalog may declare (a member equals its text)."""

    JK1 = "JK1"
    JK2 = "JK2"
    BRR = "BRR"
    BOOTSTRAP = "bootstrap"


#: The replicate-weight methods, in the order messages list them.
REPLICATE_METHODS: tuple[ReplicateMethod, ...] = tuple(ReplicateMethod)

# Names become SQL identifiers (quoted) and CSV/JSON column names; keeping them
# to a conservative alphabet makes every later stage safe without escaping.
NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,62}$")
#: Column names of published tables, which no variable, level or custom grouping
#: may take (a dimension's column would clash with them): whole names, prefixes
#: and a suffix, compared without case.
RESERVED_NAMES = frozenset(
    {
        "n",
        "weighted",
        "cell_key",
        "total",
        "se",
        "ci_low",
        "ci_high",
        "structural_zero",
        "suppressed",
        "perturbed",
        "adjusted",
    }
)
RESERVED_PREFIXES = ("sum_", "mean_", "sensitive_", "percent_", "unreliable_")
#: ``_weighted`` ends a weighted sum's or mean's column (``sum_INCOME_weighted``);
#: ``_se``, ``_ci_low`` and ``_ci_high`` an estimate's standard error and interval
#: (``mean_INCOME_se``: a magnitude ``INCOME_se`` would give the same column).
RESERVED_SUFFIXES = ("_label", WEIGHTED_SUFFIX, "_se", "_ci_low", "_ci_high")


def reserved_name(name: str) -> str | None:
    """Why ``name`` may not name a table's dimension (one of its columns), or ``None``."""
    low = name.lower()
    if (
        low in RESERVED_NAMES
        or low.startswith(RESERVED_PREFIXES)
        or low.endswith(RESERVED_SUFFIXES)
    ):
        return (
            f"reserved (a column of the table); reserved: {', '.join(sorted(RESERVED_NAMES))}, "
            f"names starting with {', '.join(RESERVED_PREFIXES)} and names ending in "
            f"{' or '.join(RESERVED_SUFFIXES)}"
        )
    return None


def check_name(name: object, what: str) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise CatalogError(
            f"{what} name {name!r} is not allowed: use a letter followed by up to 62 "
            "letters, digits or underscores"
        )
    why = reserved_name(name)
    if why is not None:
        raise CatalogError(f"{what} name {name!r} is {why}")
    return name


@dataclass(frozen=True)
class StructuralZero:
    """A combination of categories that cannot occur.

    Attributes:
        codes: For each variable (or grouping) name, the codes that together
            make the impossible combination.
    """

    codes: Mapping[str, frozenset[Code]]


@dataclass(frozen=True)
class ReplicateDesign:
    """Replicate weights and how to turn them into a variance.

    The variance of an estimate is ``coefficient * sum_r (theta_r - theta)^2``
    (Fay's BRR divides by ``R (1 - fay)^2``; JK1 uses ``(R - 1) / R``; JK2 uses
    1; the bootstrap uses ``1 / (R - 1)``, or ``1 / R`` if declared so).

    Attributes:
        columns: The replicate-weight columns, in order.
        method: One of :class:`ReplicateMethod`.
        coefficient: The factor in front of the sum of squared deviations.
        fay: Fay's factor for BRR (0 for plain BRR).
        declared: Whether the catalog declares the coefficient (else it is
            the method's default; a JK1 default is checked against the
            replicate weights when the microdata is validated).
    """

    columns: tuple[str, ...]
    method: ReplicateMethod
    coefficient: float
    fay: float = 0.0
    declared: bool = True


@dataclass(frozen=True)
class Catalog:
    """Variables, groupings, structural zeros and the special columns of a dataset.

    Build one with :meth:`Catalog.from_toml` (or :meth:`Catalog.from_dict`);
    the constructor checks that names are unique and well formed.

    Attributes:
        variables: Every variable and grouping, by name, in declaration order.
        record_key: The column holding the permanent uint32 record key.
        weight: The survey-weight column, or ``None`` for unweighted data.
        replicates: The replicate-weight design, or ``None``.
        structural_zeros: Impossible combinations of categories.
        title: A human-readable title of the dataset.
        citation: How to cite the dataset; printed in every table's footnotes.
        reference_date: The date or period the data describe (ISO 8601: ``2021``,
            ``2021-03`` or ``2021-03-21``), or ``""``; printed in every table's footnotes.
        updated: The date the data were last released or revised (``2024-05-02``),
            or ``""``; printed in every table's footnotes.
        sdmx: The SDMX dataflow the site's tables belong to (``[dataset.sdmx]``), or ``None``.
        data_file: The microdata file named by the catalog (may be ``None``).
        unit: What one record is (``[dataset] unit``, default person).
        units: The other units the records belong to (households...), by unit
            (:mod:`tablesafe.catalog._units`).
    """

    variables: Mapping[str, Variable]
    record_key: str
    weight: str | None = None
    replicates: ReplicateDesign | None = None
    structural_zeros: tuple[StructuralZero, ...] = ()
    title: str = ""
    citation: str = ""
    reference_date: str = ""
    updated: str = ""
    sdmx: SdmxStructure | None = None
    data_file: Path | None = field(default=None, compare=False)
    magnitudes: Mapping[str, Magnitude] = field(default_factory=dict)
    hierarchies: tuple[Hierarchy, ...] = ()
    unit: Unit = Unit.PERSON
    units: Mapping[Unit, CountingUnit] = field(default_factory=dict)

    def __post_init__(self) -> None:
        special = [self.record_key, *([self.weight] if self.weight else [])]
        if self.replicates is not None:
            special += list(self.replicates.columns)
        for name in special:
            check_name(name, "column")
        if len(set(special)) != len(special):
            raise CatalogError(
                "the record key, weight and replicate-weight columns must be different columns"
            )
        for var in self.variables.values():
            if var.column in special:
                raise CatalogError(
                    f"variable {var.name} reads column {var.column}, which is the record key, "
                    "weight or a replicate weight"
                )
        categorical = {v.column for v in self.variables.values()}
        for mag in self.magnitudes.values():
            if mag.column in special or mag.column in categorical:
                raise CatalogError(
                    f"magnitude {mag.name} reads column {mag.column}, which is already a "
                    "categorical variable, the record key or a weight"
                )
        for zero in self.structural_zeros:
            for name, codes in zero.codes.items():
                var = self.variable(name)
                bad = [c for c in codes if c not in var.codes]
                if bad:
                    raise CatalogError(
                        f"structural zero names unknown category {bad[0]!r} of {var.name}; "
                        f"allowed: {_show_codes(var.codes)}"
                    )

    # -- lookup -------------------------------------------------------------

    def variable(self, name: str) -> Variable:
        """Return the variable or grouping called ``name``.

        Raises:
            RequestError: if there is none, naming the ones that exist.
        """
        try:
            return self.variables[name]
        except (KeyError, TypeError):
            raise RequestError(
                f"unknown variable {name!r}; available: {', '.join(self.variables)}"
            ) from None

    def magnitude(self, name: str) -> Magnitude:
        """Return the continuous variable (magnitude) called ``name``.

        Raises:
            RequestError: if there is none (a categorical variable is not a
                magnitude), naming the magnitudes that exist.
        """
        if isinstance(name, str) and name in self.magnitudes:
            return self.magnitudes[name]
        what = (
            "a categorical variable, not a continuous one"
            if name in self.variables
            else ("not a variable of this dataset")
        )
        allowed = ", ".join(self.magnitudes) or "none (the catalog declares no [[magnitudes]])"
        raise RequestError(f"{name!r} is {what}; sums and means are available for: {allowed}")

    @property
    def source_variables(self) -> tuple[Variable, ...]:
        """The plain (non-grouping) variables: one microdata column each."""
        return tuple(v for v in self.variables.values() if not v.is_grouping)

    @property
    def columns(self) -> tuple[str, ...]:
        """Every microdata column the catalog needs."""
        cols = [v.column for v in self.source_variables]
        cols.append(self.record_key)
        if self.weight:
            cols.append(self.weight)
        if self.replicates:
            cols.extend(self.replicates.columns)
        for unit in self.units.values():
            cols.extend(c for c in unit.columns if c not in cols)
        return tuple(cols)

    # -- construction -------------------------------------------------------

    @classmethod
    def from_toml(cls, path: str | Path) -> Catalog:
        """Load and validate a catalog from a TOML file.

        Raises:
            FormatError: if the file is not valid TOML or cannot be read.
            CatalogError: if its content is not a valid catalog.
        """
        path = Path(path)
        try:
            with path.open("rb") as fh:
                raw = tomllib.load(fh)
        except FileNotFoundError:
            raise CatalogError(f"catalog file {path} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise FormatError(f"catalog file {path} is not valid TOML: {exc}") from None
        return cls.from_dict(raw, base=path.parent)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], *, base: Path | None = None) -> Catalog:
        """Build and validate a catalog from its parsed TOML structure.

        Args:
            raw: The parsed document (see the module docstring for the layout).
            base: The folder relative to which ``dataset.file`` is resolved.

        Raises:
            CatalogError: naming the first problem found.
        """
        ds = _dataset_section(raw)
        record_key = ds.get("record_key", "RKEY")
        weight = ds.get("weight")
        if weight is not None and not isinstance(weight, str):
            raise CatalogError("dataset.weight must be a column name (string)")
        replicates = _parse_replicates(ds)
        variables = _parse_variables(raw.get("variables"))
        zeros = _parse_zeros(raw.get("structural_zeros", []), variables)
        magnitudes = parse_magnitudes(raw.get("magnitudes", []), check_name, list(variables))
        hierarchies = parse_hierarchies(raw.get("hierarchies", []), variables, check_name)
        own = choice(Unit, ds.get("unit", Unit.PERSON), "dataset.unit", CatalogError)
        sources = [n for n, v in variables.items() if not v.is_grouping]
        units = parse_units(raw.get("units", []), own, check_name, sources)
        data_file, title, citation = _dataset_texts(ds)
        return cls(
            variables=variables,
            record_key=check_name(record_key, "record-key column"),
            weight=check_name(weight, "weight column") if weight is not None else None,
            replicates=replicates,
            structural_zeros=zeros,
            title=title,
            citation=citation.strip(),
            reference_date=_iso_date(ds, "reference_date", periods=True),
            updated=_iso_date(ds, "updated", periods=False),
            sdmx=parse_sdmx(ds.get("sdmx"), {n: v.column for n, v in variables.items()}),
            data_file=(base / data_file if base is not None else Path(data_file))
            if data_file
            else None,
            magnitudes=magnitudes,
            hierarchies=hierarchies,
            unit=own,
            units=units,
        )

    def to_dict(self) -> dict[str, Any]:
        """Return the catalog in its TOML structure (the inverse of :meth:`from_dict`)."""
        ds: dict[str, Any] = {"title": self.title, "record_key": self.record_key}
        if self.citation:
            ds["citation"] = self.citation
        for key in ("reference_date", "updated"):
            if getattr(self, key):
                ds[key] = getattr(self, key)
        if self.sdmx is not None:
            ds["sdmx"] = self.sdmx.to_dict()
        if self.data_file is not None:
            ds["file"] = self.data_file.name
        if self.weight:
            ds["weight"] = self.weight
        if self.replicates:
            ds["replicate_weights"] = list(self.replicates.columns)
            ds["replicate_method"] = str(self.replicates.method)
            if self.replicates.declared:
                # A default coefficient stays a default: written, it would be
                # declared and skip the check of a JK1 design's strata.
                ds["replicate_coefficient"] = self.replicates.coefficient
            if self.replicates.method == ReplicateMethod.BRR:
                ds["fay"] = self.replicates.fay
        out_vars = []
        for var in self.source_variables:
            entry: dict[str, Any] = {
                "name": var.name,
                "label": var.label,
                "categories": [{"code": c.code, "label": c.label} for c in var.categories],
            }
            if var.column != var.name:
                entry["column"] = var.column
            groupings = [g for g in self.variables.values() if g.source == var.name]
            if groupings:
                entry["groupings"] = [
                    {
                        "name": g.name,
                        "label": g.label,
                        "groups": [
                            {"code": c.code, "label": c.label, "members": list(m)}
                            for c, m in zip(g.categories, g.members or (), strict=True)
                        ],
                    }
                    for g in groupings
                ]
            out_vars.append(entry)
        out: dict[str, Any] = {"dataset": ds, "variables": out_vars}
        if self.structural_zeros:
            out["structural_zeros"] = [
                {k: sorted(v, key=str) for k, v in z.codes.items()} for z in self.structural_zeros
            ]
        if self.magnitudes:
            out["magnitudes"] = [m.to_dict() for m in self.magnitudes.values()]
        if self.hierarchies:
            out["hierarchies"] = [h.to_dict() for h in self.hierarchies]
        if self.unit != Unit.PERSON:
            ds["unit"] = str(self.unit)
        if self.units:
            out["units"] = [u.to_dict() for u in self.units.values()]
        return out

    def to_toml(self) -> str:
        """Return the catalog as TOML text."""
        return dump_toml(self.to_dict())


def _dataset_section(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """Step 1 of Catalog.from_dict: the known sections, and the [dataset] table's known keys."""
    if not isinstance(raw, Mapping):
        raise CatalogError("a catalog must be a table (mapping) at the top level")
    sections = {"dataset", "variables", "structural_zeros", "magnitudes", "hierarchies", "units"}
    unknown = set(raw) - sections
    if unknown:
        raise CatalogError(
            f"unknown catalog section(s) {sorted(unknown)}; allowed: dataset, variables, "
            "structural_zeros, magnitudes, hierarchies, units"
        )
    ds = raw.get("dataset", {})
    if not isinstance(ds, Mapping):
        raise CatalogError("[dataset] must be a table")
    allowed_ds = {
        "title",
        "citation",
        "reference_date",
        "updated",
        "sdmx",
        "file",
        "record_key",
        "weight",
        "replicate_weights",
        "replicate_method",
        "replicate_coefficient",
        "fay",
        "unit",
    }
    if set(ds) - allowed_ds:
        raise CatalogError(
            f"unknown key(s) {sorted(set(ds) - allowed_ds)} in [dataset]; allowed: "
            f"{', '.join(sorted(allowed_ds))}"
        )
    return ds


def _parse_variables(raw_vars: object) -> dict[str, Variable]:
    """Step 2 of Catalog.from_dict: the variables and groupings, each name and column once."""
    if not isinstance(raw_vars, list) or not raw_vars:
        raise CatalogError("a catalog needs at least one [[variables]] entry")
    variables: dict[str, Variable] = {}
    for i, rv in enumerate(raw_vars):
        for var in _parse_variable(rv, i):
            if var.name in variables:
                raise CatalogError(f"variable or grouping name {var.name!r} is used twice")
            variables[var.name] = var
    columns = [v.column for v in variables.values() if not v.is_grouping]
    dup = {c for c in columns if columns.count(c) > 1}
    if dup:
        raise CatalogError(f"column(s) {sorted(dup)} are read by more than one variable")
    return variables


def _dataset_texts(ds: Mapping[str, Any]) -> tuple[str | None, str, str]:
    """Step 3 of Catalog.from_dict: the [dataset] table's file, title and citation, checked."""
    data_file = ds.get("file")
    if data_file is not None and not isinstance(data_file, str):
        raise CatalogError("dataset.file must be a path (string)")
    title = ds.get("title", "")
    if not isinstance(title, str):
        raise CatalogError("dataset.title must be a string")
    citation = ds.get("citation", "")
    if not isinstance(citation, str) or len(citation) > 1000:
        raise CatalogError("dataset.citation must be a string of at most 1000 characters")
    return data_file, title, citation


#: ISO 8601 calendar dates and periods: a year, a month or a day.
_ISO_PERIOD = re.compile(r"^(\d{4})(?:-(\d{2})(?:-(\d{2}))?)?$")


def _iso_date(ds: Mapping[str, Any], key: str, *, periods: bool) -> str:
    """Step 4 of Catalog.from_dict: ``dataset.<key>`` as ISO 8601 text, or ``""`` if absent.

    A TOML date (``updated = 2024-05-02``, unquoted) is taken as it is.

    Args:
        ds: The ``[dataset]`` table.
        key: ``reference_date`` or ``updated``.
        periods: Also allow a year (``2021``) or a month (``2021-03``).

    Raises:
        CatalogError: for anything else, or a day that does not exist.
    """
    value = ds.get(key, "")
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        value = value.isoformat()
    allowed = "YYYY, YYYY-MM or YYYY-MM-DD" if periods else "YYYY-MM-DD"
    m = _ISO_PERIOD.match(value) if isinstance(value, str) else None
    if value == "":
        return ""
    if m is None or (not periods and m.group(3) is None):
        raise CatalogError(f"dataset.{key} must be an ISO 8601 date ({allowed}), not {value!r}")
    year, month, day = (int(g) if g else 1 for g in m.groups())
    try:
        datetime.date(year, month, day)
    except ValueError:
        raise CatalogError(f"dataset.{key} {value!r} is not a date of the calendar") from None
    return str(value)


def _parse_categories(raw: object, where: str, key: str = "categories") -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not raw:
        raise CatalogError(f"{where} needs a non-empty list '{key}'")
    for i, c in enumerate(raw):
        if not isinstance(c, Mapping) or "code" not in c:
            raise CatalogError(f"{where}: entry {i + 1} of {key} needs a 'code'")
    return [dict(c) for c in raw]


def _check_code(code: object, where: str) -> Code:
    if isinstance(code, bool) or not isinstance(code, int | str):
        raise CatalogError(f"{where}: code {code!r} must be an integer or a string")
    if isinstance(code, str) and (not code.strip() or code != code.strip()):
        raise CatalogError(f"{where}: code {code!r} must be non-empty without outer spaces")
    if isinstance(code, int) and not -(2**62) < code < 2**62:
        raise CatalogError(f"{where}: code {code} is out of range")
    return code


def _make_categories(raw: list[dict[str, Any]], where: str) -> tuple[Category, ...]:
    cats = []
    for c in raw:
        code = _check_code(c["code"], where)
        label = c.get("label", str(code))
        if not isinstance(label, str):
            raise CatalogError(f"{where}: label of code {code!r} must be a string")
        cats.append(Category(code, label))
    codes = [c.code for c in cats]
    if len(set(codes)) != len(codes):
        dup = sorted({c for c in codes if codes.count(c) > 1}, key=str)
        raise CatalogError(f"{where}: duplicate code(s) {dup}")
    if len({type(c) for c in codes}) > 1:
        raise CatalogError(f"{where}: codes must be all integers or all strings, not a mix")
    return tuple(cats)


def _parse_variable(rv: object, i: int) -> Iterable[Variable]:
    if not isinstance(rv, Mapping):
        raise CatalogError(f"variables entry {i + 1} must be a table")
    allowed = {"name", "label", "column", "categories", "groupings"}
    if set(rv) - allowed:
        raise CatalogError(
            f"unknown key(s) {sorted(set(rv) - allowed)} in variable entry {i + 1}; allowed: "
            f"{', '.join(sorted(allowed))}"
        )
    name = check_name(rv.get("name"), "variable")
    where = f"variable {name}"
    label = rv.get("label", name)
    if not isinstance(label, str):
        raise CatalogError(f"{where}: label must be a string")
    column = check_name(rv.get("column", name), f"column of {where}")
    cats = _make_categories(_parse_categories(rv.get("categories"), where), where)
    var = Variable(name=name, label=label, categories=cats, column=column)
    yield var
    for j, rg in enumerate(resolve_grouping_levels(rv.get("groupings", []) or [], var)):
        yield _parse_grouping(rg, var, j)


def _parse_grouping(rg: object, var: Variable, j: int) -> Variable:
    if not isinstance(rg, Mapping):
        raise CatalogError(f"grouping {j + 1} of {var.name} must be a table")
    gname = check_name(rg.get("name"), "grouping")
    where = f"grouping {gname} of {var.name}"
    raw_groups = _parse_categories(rg.get("groups"), where, key="groups")
    cats = _make_categories(raw_groups, where)
    members: list[tuple[Code, ...]] = []
    seen: dict[Code, Code] = {}
    for g, cat in zip(raw_groups, cats, strict=True):
        m = g.get("members")
        if not isinstance(m, list) or not m:
            raise CatalogError(f"{where}: group {cat.code!r} needs a non-empty 'members' list")
        for code in m:
            if code not in var.codes:
                raise CatalogError(
                    f"{where}: group {cat.code!r} names {code!r}, which is not a category of "
                    f"{var.name}; allowed: {_show_codes(var.codes)}"
                )
            if code in seen:
                raise CatalogError(
                    f"{where}: code {code!r} is in groups {seen[code]!r} and {cat.code!r}; "
                    "groups must not overlap"
                )
            seen[code] = cat.code
        members.append(tuple(m))
    missing = [c for c in var.codes if c not in seen]
    if missing:
        raise CatalogError(
            f"{where}: categories {_show_codes(missing)} of {var.name} are in no group; "
            "every category must be in exactly one group"
        )
    label = rg.get("label", gname)
    if not isinstance(label, str):
        raise CatalogError(f"{where}: label must be a string")
    return Variable(
        name=gname,
        label=label,
        categories=cats,
        column=var.column,
        members=tuple(members),
        source=var.name,
    )


def _parse_replicates(ds: Mapping[str, Any]) -> ReplicateDesign | None:
    cols = ds.get("replicate_weights")
    if cols is None:
        return None
    if isinstance(cols, str):
        raise CatalogError(
            "dataset.replicate_weights must be a list of column names, e.g. ['RW1', 'RW2']"
        )
    if not isinstance(cols, list) or len(cols) < 2:
        raise CatalogError("dataset.replicate_weights must list at least two columns")
    cols = [check_name(c, "replicate-weight column") for c in cols]
    given = ds.get("replicate_method", ReplicateMethod.JK1)
    if given not in REPLICATE_METHODS:
        raise CatalogError(
            f"dataset.replicate_method {given!r} is not known; allowed: "
            f"{', '.join(REPLICATE_METHODS)}"
        )
    method = ReplicateMethod(given)
    fay = ds.get("fay", 0.0)
    if not isinstance(fay, int | float) or not 0 <= fay < 1:
        raise CatalogError("dataset.fay must be a number in [0, 1)")
    r = len(cols)
    default = {
        ReplicateMethod.JK1: (r - 1) / r,
        ReplicateMethod.JK2: 1.0,
        ReplicateMethod.BRR: 1.0 / (r * (1.0 - fay) ** 2),
        ReplicateMethod.BOOTSTRAP: 1.0 / (r - 1),
    }[method]
    coef = ds.get("replicate_coefficient", default)
    if not isinstance(coef, int | float) or not math.isfinite(coef) or coef <= 0:
        raise CatalogError("dataset.replicate_coefficient must be a positive number")
    declared = "replicate_coefficient" in ds
    return ReplicateDesign(tuple(cols), method, float(coef), float(fay), declared)


def _parse_zeros(raw: object, variables: Mapping[str, Variable]) -> tuple[StructuralZero, ...]:
    if not isinstance(raw, list):
        raise CatalogError("structural_zeros must be a list of tables ([[structural_zeros]])")
    out = []
    for i, rz in enumerate(raw):
        if not isinstance(rz, Mapping) or len(rz) < 1:
            raise CatalogError(f"structural zero {i + 1} must map variable names to code lists")
        codes: dict[str, frozenset[Code]] = {}
        for name, vals in rz.items():
            if name not in variables:
                raise CatalogError(
                    f"structural zero {i + 1} names unknown variable {name!r}; variables: "
                    f"{', '.join(variables)}"
                )
            if not isinstance(vals, list) or not vals:
                raise CatalogError(
                    f"structural zero {i + 1}: {name} must map to a non-empty list of codes"
                )
            var = variables[name]
            for v in vals:
                if v not in var.codes:
                    raise CatalogError(
                        f"structural zero {i + 1} names unknown category {v!r} of {name}; "
                        f"allowed: {_show_codes(var.codes)}"
                    )
            codes[name] = frozenset(vals)
        sources = [variables[n].source or n for n in codes]
        if len(set(sources)) != len(sources):
            raise CatalogError(
                f"structural zero {i + 1} names the same variable twice (directly or through "
                "a grouping)"
            )
        out.append(StructuralZero(codes))
    return tuple(out)


def toml_value(v: object) -> str:
    """``v`` as a TOML value, written by tomli-w (any text escaped: newlines, quotes, backslashes).

    For a value on a line the caller writes (``f"title = {toml_value(t)}"``);
    whole documents are :func:`dump_toml`'s.

    Raises:
        TypeError: for a table (a mapping: TOML writes it under a header, not as a
            value) or a value TOML cannot hold (``None``).
    """
    if isinstance(v, Mapping):
        raise TypeError("a table is written by dump_toml, not as a value")
    return tomli_w.dumps({"v": v}).removeprefix("v = ").removesuffix("\n")


def dump_toml(doc: Mapping[str, Any]) -> str:
    """A whole TOML document, written by tomli-w (the standard library only reads TOML)."""
    return tomli_w.dumps(doc)
