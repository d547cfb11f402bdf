"""Continuous variables of a catalog: what magnitude tables sum.

A *magnitude* (continuous variable) is a numeric microdata column that
tables sum or average (annual income, hours worked, turnover), as opposed
to the categorical variables that classify records into cells. The data
owner declares each one in the catalog with its unit and bounds::

    [[magnitudes]]
    name = "INCOME"
    label = "Annual income"
    unit = "EUR"
    column = "INCOME"     # optional, defaults to the name
    lower = 0             # the owner's bounds: every value must lie inside
    upper = 2000000
    negative = false      # whether negative values occur (then lower < 0)
    missing = [-9, -8]    # optional: item non-response (NULL and NaN are missing too)

The bounds are the owner's, never learnt from the data: they give the
sensitivity of differentially private sums and are checked when the
microdata is validated (a value outside them, a missing, NaN or infinite
value is a :class:`~tablesafe.DataError`, in every engine). A magnitude that
declares ``missing`` (a list of codes, possibly empty) has item
non-response: a record whose value is NULL, NaN or one of the codes has no
value, and its sums, means and quantiles are over the records that have one.

Sums are exact (:data:`MAGNITUDE_BITS` fractional bits of binary fixed
point, as :mod:`tablesafe.cells._fixed` does for weights), so the total of
``|x|`` (or ``|w x|`` for weighted tables) over the file must stay below
:data:`MAX_MAGNITUDE_TOTAL` (2**48, 2.8e14).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tablesafe._errors import CatalogError, DataError, RequestError

__all__ = [
    "MAGNITUDE_BITS",
    "MAGNITUDE_SCALE",
    "MAX_MAGNITUDE_TOTAL",
    "WEIGHTED_SUFFIX",
    "Magnitude",
    "base_column",
    "check_magnitude_values",
    "from_magnitude_fixed",
    "magnitude_check_result",
    "magnitude_check_sql",
    "magnitude_column",
    "magnitude_fixed",
    "magnitude_fixed_sql",
    "parse_magnitudes",
    "parse_quantile_item",
    "present_sql",
    "present_values",
    "quantile_column",
    "quantile_item",
    "quantile_words",
    "read_base_column",
    "read_magnitude_column",
    "read_quantile_column",
    "require_numeric",
]

#: The end of a weighted sum's or mean's column name (no catalog name ends so).
WEIGHTED_SUFFIX = "_weighted"

#: Fractional bits of the fixed point in which magnitudes are summed (1/16 of a unit).
MAGNITUDE_BITS = 4
#: Units per magnitude unit.
MAGNITUDE_SCALE = 2**MAGNITUDE_BITS
#: Largest sum of absolute values (weighted: of |w x|) over a file: partial
#: sums in fixed point stay below 2**52, exact in doubles.
MAX_MAGNITUDE_TOTAL = 2.0**48


@dataclass(frozen=True)
class Magnitude:
    """A continuous variable: a numeric column that tables sum or average.

    Attributes:
        name: The name used in requests (``sum:NAME``, ``mean:NAME``).
        label: A human-readable label.
        unit: The unit of the values (``"EUR"``, ``"hours"``); may be empty.
        column: The microdata column.
        lower: The owner's lower bound on every value.
        upper: The owner's upper bound on every value.
        negative: Whether negative values occur (``lower < 0`` then).
        missing: The codes of item non-response (NULL and NaN are missing
            too), or ``None``: every record must have a value.
    """

    name: str
    label: str
    unit: str
    column: str
    lower: float
    upper: float
    negative: bool = False
    missing: tuple[float, ...] | None = None

    @property
    def bound(self) -> float:
        """The largest absolute value a record can contribute: ``max(|lower|, |upper|)``."""
        return max(abs(self.lower), abs(self.upper))

    def to_dict(self) -> dict[str, Any]:
        """The TOML entry of this variable."""
        out: dict[str, Any] = {"name": self.name, "label": self.label}
        if self.unit:
            out["unit"] = self.unit
        if self.column != self.name:
            out["column"] = self.column
        out.update(lower=_num(self.lower), upper=_num(self.upper), negative=self.negative)
        if self.missing is not None:
            out["missing"] = [_num(c) for c in self.missing]
        return out


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() and abs(x) < 2**53 else float(x)


def magnitude_column(kind: str, name: str, *, weighted: bool) -> str:
    """A sum's or mean's column in every output: ``sum_INCOME``, ``mean_INCOME_weighted``.

    A weighted figure (over the survey weights) and an unweighted one (over
    the records) are different statistics, so they never share a name.

    Args:
        kind: ``"sum"`` or ``"mean"``.
        name: The magnitude's name.
        weighted: Whether the figure is over the survey weights.
    """
    return f"{kind}_{name}{WEIGHTED_SUFFIX if weighted else ''}"


def read_magnitude_column(column: str) -> tuple[str, str, bool] | None:
    """``(kind, magnitude, weighted)`` of a column :func:`magnitude_column` named, else ``None``.

    Exact because no catalog name ends in ``_weighted`` (a reserved suffix).
    """
    kind, _, rest = column.partition("_")
    if kind not in ("sum", "mean") or not rest:
        return None
    if rest.endswith(WEIGHTED_SUFFIX):
        return kind, rest[: -len(WEIGHTED_SUFFIX)], True
    return kind, rest, False


# -- quantiles ------------------------------------------------------------------------------


def quantile_item(name: str, percent: int) -> str:
    """The canonical request item of a quantile: ``median:NAME`` or ``quantile:NAME:0.9``."""
    if percent == 50:
        return f"median:{name}"
    return f"quantile:{name}:{percent / 100:g}"


def parse_quantile_item(item: object) -> tuple[str, int] | None:
    """``(magnitude, percent)`` of a ``median:VAR`` or ``quantile:VAR:P`` item, else ``None``.

    ``P`` is a fraction strictly between 0 and 1 with at most two decimals
    (``0.9``, ``0.25``): quantiles are percentiles.

    Raises:
        RequestError: for a quantile item whose ``P`` is not such a fraction.
    """
    if not isinstance(item, str):
        return None
    kind, _, rest = item.partition(":")
    if kind == "median" and rest and ":" not in rest:
        return rest, 50
    if kind != "quantile":
        return None
    name, _, p = rest.partition(":")
    match = re.fullmatch(r"0?\.(\d{1,2})", p.strip())
    percent = int(match.group(1).ljust(2, "0")) if match else 0
    if not name or not 1 <= percent <= 99:
        raise RequestError(
            f"quantile item {item!r} is written quantile:VAR:P with P a fraction strictly "
            "between 0 and 1 with at most two decimals (quantile:INCOME:0.9), or median:VAR"
        )
    return name, percent


def base_column(name: str, *, weighted: bool) -> str:
    """The base of a magnitude with item non-response: ``n_INCOME``, ``weighted_INCOME``.

    The protected count (weighted count) of the records that hold a value.
    """
    return f"{'weighted' if weighted else 'n'}_{name}"


def read_base_column(column: str) -> tuple[str, bool] | None:
    """``(magnitude, weighted)`` of a column :func:`base_column` named, else ``None``."""
    kind, _, rest = column.partition("_")
    if kind not in ("n", "weighted") or not rest:
        return None
    return rest, kind == "weighted"


def quantile_column(percent: int, name: str, *, weighted: bool) -> str:
    """A quantile's column: ``median_INCOME``, ``p90_INCOME_weighted``."""
    kind = "median" if percent == 50 else f"p{percent:02d}"
    return f"{kind}_{name}{WEIGHTED_SUFFIX if weighted else ''}"


def read_quantile_column(column: str) -> tuple[int, str, bool] | None:
    """``(percent, magnitude, weighted)`` of a :func:`quantile_column` column, else ``None``."""
    kind, _, rest = column.partition("_")
    match = re.fullmatch(r"p(\d\d)", kind)
    if not rest or (kind != "median" and (match is None or match.group(1) in ("00", "50"))):
        return None
    percent = 50 if kind == "median" else int(kind[1:])
    if rest.endswith(WEIGHTED_SUFFIX):
        return percent, rest[: -len(WEIGHTED_SUFFIX)], True
    return percent, rest, False


def quantile_words(percent: int) -> str:
    """A quantile in words: ``Median``, ``90th percentile``, ``1st percentile``."""
    if percent == 50:
        return "Median"
    last = percent % 10 if percent // 10 != 1 else 0
    return f"{percent}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(last, 'th') } percentile"


def parse_magnitudes(
    raw: object, check_name: Callable[[object, str], str], taken: Sequence[str]
) -> dict[str, Magnitude]:
    """Parse the ``[[magnitudes]]`` entries of a catalog.

    Args:
        raw: The parsed list of entries (``[]`` when the section is absent).
        check_name: The catalog's name check (alphabet and reserved words).
        taken: Names of categorical variables and groupings (a magnitude may
            not reuse one, nor read the same column).

    Raises:
        CatalogError: naming the entry and what is wrong with it.
    """
    if not isinstance(raw, list):
        raise CatalogError("[[magnitudes]] must be a list of tables")
    out: dict[str, Magnitude] = {}
    allowed = {"name", "label", "unit", "column", "lower", "upper", "negative", "missing"}
    for i, entry in enumerate(raw):
        if not isinstance(entry, Mapping):
            raise CatalogError(f"magnitudes entry {i + 1} must be a table")
        extra = set(entry) - allowed
        if extra:
            raise CatalogError(
                f"unknown key(s) {sorted(extra)} in magnitudes entry {i + 1}; allowed: "
                f"{', '.join(sorted(allowed))}"
            )
        name = check_name(entry.get("name"), "magnitude")
        where = f"magnitude {name}"
        if name in out or name in taken:
            raise CatalogError(
                f"{where}: the name is already used by a variable, grouping or magnitude"
            )
        label = entry.get("label", name)
        unit = entry.get("unit", "")
        if not isinstance(label, str) or not isinstance(unit, str):
            raise CatalogError(f"{where}: label and unit must be strings")
        column = check_name(entry.get("column", name), f"column of {where}")
        bounds = []
        for key in ("lower", "upper"):
            if key not in entry:
                raise CatalogError(
                    f"{where} has no {key} bound; give the owner's bounds lower and upper "
                    "(every value must lie inside them; they set the noise of DP sums)"
                )
            value = entry[key]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise CatalogError(f"{where}: {key} must be a number, not {value!r}")
            if not math.isfinite(float(value)) or abs(float(value)) >= MAX_MAGNITUDE_TOTAL:
                raise CatalogError(
                    f"{where}: {key} must be a finite number of absolute size below 2**48"
                )
            bounds.append(float(value))
        lower, upper = bounds
        if not lower < upper:
            raise CatalogError(f"{where}: lower ({lower:g}) must be below upper ({upper:g})")
        negative = entry.get("negative", False)
        if not isinstance(negative, bool):
            raise CatalogError(f"{where}: negative must be true or false")
        if not negative and lower < 0:
            raise CatalogError(
                f"{where}: lower is {lower:g} but negative = false; set lower >= 0 or "
                "negative = true"
            )
        if negative and lower >= 0:
            raise CatalogError(
                f"{where}: negative = true needs a lower bound below 0, not {lower:g}"
            )
        missing = _missing_codes(entry.get("missing"), where)
        out[name] = Magnitude(name, label, unit, column, lower, upper, negative, missing)
    columns = [m.column for m in out.values()]
    dup = sorted({c for c in columns if columns.count(c) > 1})
    if dup:
        raise CatalogError(f"column(s) {dup} are read by more than one magnitude")
    return out


def _missing_codes(raw: object, where: str) -> tuple[float, ...] | None:
    """A magnitude's ``missing`` codes: a list of finite numbers (``None`` when not given)."""
    if raw is None:
        return None
    if not isinstance(raw, list) or len(raw) > 20:
        raise CatalogError(
            f"{where}: missing must be a list of at most 20 codes of item non-response "
            "(numbers such as -9), or [] when only empty values (NULL, NaN) are missing"
        )
    codes = []
    for code in raw:
        if isinstance(code, bool) or not isinstance(code, int | float):
            raise CatalogError(f"{where}: missing codes must be numbers, not {code!r}")
        if not math.isfinite(float(code)):
            raise CatalogError(f"{where}: missing codes must be finite (NaN is always missing)")
        codes.append(float(code))
    return tuple(dict.fromkeys(codes))


def present_sql(column: str, missing: Sequence[float]) -> str:
    """An SQL condition: ``column`` holds a value (not NULL, not NaN, none of ``missing``).

    The codes are the owner's (the catalog's numbers), written as literals.
    Works in DuckDB and Spark SQL.
    """
    x = f"CAST({column} AS DOUBLE)"
    cond = f"{x} IS NOT NULL AND NOT isnan({x})"
    if missing:
        cond += f" AND {x} NOT IN ({', '.join(repr(float(c)) for c in missing)})"
    return f"({cond})"


def present_values(values: npt.ArrayLike, missing: Sequence[float]) -> npt.NDArray[np.bool_]:
    """Which values are present: not NaN (pandas' missing) and none of ``missing``."""
    x = np.asarray(values, dtype=np.float64)
    return np.asarray(~np.isnan(x) & ~np.isin(x, np.asarray(missing, dtype=np.float64)))


# -- exact sums ---------------------------------------------------------------------------


def magnitude_fixed(values: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Values as fixed-point integers ``round(x * 2**4)``, halves away from zero."""
    x = np.asarray(values, dtype=np.float64) * float(MAGNITUDE_SCALE)
    whole = np.trunc(x)
    return (whole + np.copysign(np.abs(x - whole) >= 0.5, x)).astype(np.int64)


def from_magnitude_fixed(values: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Fixed-point sums back to floats (one correctly rounded division)."""
    return np.asarray(values, dtype=np.int64).astype(np.float64) / float(MAGNITUDE_SCALE)


def magnitude_fixed_sql(expr: str) -> str:
    """:func:`magnitude_fixed` as SQL (DuckDB and Spark round halves away from zero alike)."""
    return f"ROUND(CAST({expr} AS DOUBLE) * CAST({MAGNITUDE_SCALE} AS DOUBLE))"


# -- validation ---------------------------------------------------------------------------


def require_numeric(
    magnitudes: Sequence[Magnitude], types: Mapping[str, str], numeric: Sequence[str]
) -> None:
    """Raise a :class:`DataError` for a magnitude column that is missing or not numeric.

    Args:
        magnitudes: The catalog's magnitudes.
        types: Column name -> type name, as the engine spells it.
        numeric: Prefixes of the engine's numeric type names (case-insensitive).
    """
    for m in magnitudes:
        if m.column not in types:
            raise DataError(
                f"the microdata lacks column {m.column} of magnitude {m.name}; columns: "
                f"{', '.join(types)}"
            )
        t = str(types[m.column])
        if not any(t.upper().startswith(p.upper()) for p in numeric):
            raise DataError(
                f"magnitude column {m.column} ({m.name}) holds {t} values; a continuous "
                "variable must be numeric"
            )


def magnitude_check_sql(
    magnitudes: Sequence[Magnitude], ident: Callable[[str], str], weight: str | None
) -> list[str]:
    """Aggregate expressions checking every magnitude column (four or five per column).

    Per column: bad values (NULL, NaN, infinite), values below ``lower``,
    values above ``upper``, the sum of ``|x|`` and, with a weight, of ``|w x|``.
    Works in DuckDB and Spark SQL.
    """
    exprs = []
    for m in magnitudes:
        x = f"CAST({ident(m.column)} AS DOUBLE)"
        infinite = f"abs({x}) = CAST('Infinity' AS DOUBLE)"
        bad = infinite if m.missing is not None else f"{x} IS NULL OR isnan({x}) OR {infinite}"
        # Item non-response is no value: neither out of bounds nor summed.
        there = present_sql(ident(m.column), m.missing) if m.missing is not None else "TRUE"
        exprs += [
            f"SUM(CASE WHEN {bad} THEN 1 ELSE 0 END)",
            f"SUM(CASE WHEN {there} AND {x} < {m.lower!r} THEN 1 ELSE 0 END)",
            f"SUM(CASE WHEN {there} AND {x} > {m.upper!r} THEN 1 ELSE 0 END)",
            f"SUM(CASE WHEN {there} THEN ABS({x}) ELSE 0 END)",
        ]
        if weight is not None:
            exprs.append(
                f"SUM(CASE WHEN {there} THEN ABS({x} * CAST({ident(weight)} AS DOUBLE)) ELSE 0 END)"
            )
    return exprs


def magnitude_check_result(
    magnitudes: Sequence[Magnitude], row: Sequence[Any], weighted: bool
) -> None:
    """Raise the :class:`DataError` for the first problem in :func:`magnitude_check_sql`'s row."""
    width = 5 if weighted else 4
    for i, m in enumerate(magnitudes):
        vals = [v or 0 for v in row[i * width : (i + 1) * width]]
        _raise_first(m, int(vals[0]), int(vals[1]), int(vals[2]), [float(v) for v in vals[3:]])


def check_magnitude_values(
    magnitudes: Sequence[Magnitude],
    columns: Mapping[str, npt.ArrayLike],
    weight: npt.ArrayLike | None,
) -> None:
    """The same checks on columns in memory (the memory engine)."""
    w = None if weight is None else np.asarray(weight, dtype=np.float64)
    for m in magnitudes:
        x = np.asarray(columns[m.column], dtype=np.float64)
        finite = np.isfinite(x)
        bad = ~finite
        if m.missing is not None:
            # Item non-response is no value: neither out of bounds nor summed.
            bad = np.isinf(x)
            finite &= present_values(x, m.missing)
        inside = x[finite]
        totals = [float(np.abs(inside).sum())]
        if w is not None:
            totals.append(float(np.abs(x[finite] * w[finite]).sum()))
        _raise_first(
            m,
            int(bad.sum()),
            int((inside < m.lower).sum()),
            int((inside > m.upper).sum()),
            totals,
        )


def _raise_first(m: Magnitude, bad: int, low: int, high: int, totals: list[float]) -> None:
    where = f"magnitude column {m.column} ({m.name})"
    if bad:
        what = "infinite" if m.missing is not None else "missing, NaN or infinite"
        hint = (
            ""
            if m.missing is not None
            else "; for item non-response declare missing = [codes] in its [[magnitudes]] entry "
            "(NULL and NaN are missing then): sums, means and quantiles are then over the "
            "records with a value, and coding missing as 0 would bias a mean"
        )
        raise DataError(f"{where} has {bad} {what} values; every record needs a finite value{hint}")
    if low or high:
        raise DataError(
            f"{where} has {low} values below its lower bound {m.lower:g} and {high} above its "
            f"upper bound {m.upper:g}; every value must lie inside the catalog's bounds"
        )
    for total in totals:
        if total >= MAX_MAGNITUDE_TOTAL:
            raise DataError(
                f"{where} sums to {total:.6g} in absolute value (weighted or not); exact "
                f"fixed-point sums hold totals below {MAX_MAGNITUDE_TOTAL:.0f} (2**48)"
            )
