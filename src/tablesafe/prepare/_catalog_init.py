"""A draft dataset from a raw survey file: ``tablesafe catalog init``.

Statistical offices hold microdata as SPSS (.sav), Stata (.dta) or SAS
(.sas7bdat, .xpt) files with variable and value labels, or as Parquet and
CSV. :func:`init_catalog` reads such a file and writes a dataset folder:
``microdata.parquet`` and a draft ``catalog.toml`` that validates at once.

What it decides, and how:

- A column with value labels is a classification variable; its labels are
  the category labels (codes present in the data but not labelled keep
  their code as label, and are named in a comment).
- A column without value labels whose values are integers or text with at
  most ``max_categories`` distinct values is a classification variable with
  its codes as labels (a comment says so).
- Missing-value codes become explicit categories, placed after the others
  and marked with a comment: SPSS user-missing codes keep their code; Stata
  and SAS extended missing values (``.a`` .. ``.z``) and system-missing
  values (an empty cell, ``.`` or ``NaN``) get a free negative code (system
  missing prefers -1, ``.a`` prefers -2, ``.b`` -3, ...; a code in use is
  never reused), text variables the code ``MISSING``.
- The weight is the column given as ``weight``; it must be finite and not
  negative. The record key is kept if the file has it (and checked), drawn
  from the secure source otherwise, as ``tablesafe keys add`` does.
- Everything else (non-integer columns, columns with too many categories,
  identifiers, dates) is not made a variable: each such column is listed in
  a comment in the catalog with the reason, never guessed silently. Every
  column is kept in the microdata (a later ``tablesafe replicates add``
  reads the strata and PSU columns from it).

Column names that are not valid catalog names (spaces, reserved words) are
renamed in the written microdata, and the renames are listed in a comment.

Structural relations are proposed, not declared: the empty combinations of
two variables' large categories (:mod:`tablesafe.prepare._zero_proposals`)
are written as commented-out ``[[structural_zeros]]`` entries, since
declaring one publishes it; the owner uncomments those that hold by
definition. Nothing is written unless the whole draft, data included,
validates (and with every proposal uncommented, it still does).
"""

from __future__ import annotations

import math
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tablesafe._errors import DataError, FormatError, ParameterError, TablesafeError
from tablesafe._keys import check_record_keys, draw_record_keys
from tablesafe._protection_limits import check_number
from tablesafe.catalog._catalog import NAME_PATTERN, Catalog, Code, reserved_name, toml_value
from tablesafe.catalog._dataset import DataFormat, Dataset
from tablesafe.engines._duckdb import DuckDBEngine
from tablesafe.prepare._zero_proposals import (
    MIN_EXPECTED,
    ZeroProposal,
    code_runs,
    expected_words,
    holds_records,
    propose_zeros,
)

__all__ = ["READABLE_SUFFIXES", "InitReport", "init_catalog"]

#: File kinds :func:`init_catalog` reads, by suffix.
READABLE_SUFFIXES = (".parquet", ".csv", ".sav", ".zsav", ".dta", ".sas7bdat", ".xpt")

_MISSING_TEXT = "MISSING"


@dataclass(frozen=True)
class InitReport:
    """What :func:`init_catalog` wrote.

    Attributes:
        directory: The dataset folder.
        records: Number of records in the microdata.
        variables: The classification variables of the draft catalog.
        undecided: Columns not made variables, each with the reason.
        renamed: Columns renamed in the microdata: (name in the file, new name).
        keys_added: Whether record keys were drawn (``False``: the file had them).
        proposed_zeros: The structural zeros proposed, commented out in the
            catalog for the owner to approve.
    """

    directory: Path
    records: int
    variables: tuple[str, ...]
    undecided: tuple[tuple[str, str], ...]
    renamed: tuple[tuple[str, str], ...]
    keys_added: bool
    proposed_zeros: tuple[ZeroProposal, ...] = ()


@dataclass
class _Meta:
    """What a file says about its columns besides the values."""

    title: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    value_labels: dict[str, dict[Any, str]] = field(default_factory=dict)
    # SPSS user-missing ranges, (low, high) inclusive, per column.
    missing_ranges: dict[str, list[tuple[Any, Any]]] = field(default_factory=dict)
    measure: dict[str, str] = field(default_factory=dict)


@dataclass
class _Var:
    """A classification variable of the draft."""

    name: str
    label: str
    categories: list[tuple[Code, str, str]]  # code, label, comment
    note: str = ""


# -- reading --------------------------------------------------------------------------


def _read(path: Path) -> tuple[pd.DataFrame, _Meta]:
    suffix = path.suffix.lower()
    if suffix not in READABLE_SUFFIXES:
        raise FormatError(
            f"cannot read {path.name}: the file must end in one of {', '.join(READABLE_SUFFIXES)}"
        )
    if not path.is_file():
        raise DataError(f"input file {path} does not exist")
    try:
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pandas(), _Meta(title=path.stem)
        if suffix == ".csv":
            import pyarrow.csv as pacsv

            return pacsv.read_csv(path).to_pandas(), _Meta(title=path.stem)
        return _read_labelled(path, suffix)
    except TablesafeError:
        raise
    except Exception as exc:  # the readers raise many kinds; all mean "unreadable"
        raise FormatError(
            f"cannot read {path.name} as a {suffix} file: {type(exc).__name__}: {exc}"
        ) from None


def _read_labelled(path: Path, suffix: str) -> tuple[pd.DataFrame, _Meta]:
    import pyreadstat

    if suffix in (".sav", ".zsav"):
        df, m = pyreadstat.read_sav(path, user_missing=True)
    elif suffix == ".dta":
        df, m = pyreadstat.read_dta(path, user_missing=True)
    elif suffix == ".xpt":
        df, m = pyreadstat.read_xport(path)
    else:
        formats = path.with_suffix(".sas7bcat")
        df, m = pyreadstat.read_sas7bdat(
            path, user_missing=True, catalog_file=formats if formats.is_file() else None
        )
    meta = _Meta(title=(m.file_label or path.stem))
    meta.labels = {k: v for k, v in (m.column_names_to_labels or {}).items() if v}
    meta.value_labels = {k: dict(v) for k, v in (m.variable_value_labels or {}).items()}
    for col, ranges in (getattr(m, "missing_ranges", None) or {}).items():
        meta.missing_ranges[col] = [(r["lo"], r["hi"]) for r in ranges]
    meta.measure = dict(getattr(m, "variable_measure", None) or {})
    return df, meta


# -- names ----------------------------------------------------------------------------


def _clean_name(raw: object, taken: set[str]) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", str(raw).strip())
    if not name or not name[0].isalpha():
        name = "V" + name
    name = name[:60]
    if reserved_name(name) is not None:
        # A table column's name (whole, or ending in _label): add "_"; one of its
        # prefixes (sum_, mean_, ...): also put "V_" in front.
        name += "_"
        if reserved_name(name) is not None:
            name = "V_" + name
    base, i = name, 2
    while name.lower() in taken:
        name = f"{base[:58]}_{i}"
        i += 1
    taken.add(name.lower())
    return name


# -- columns --------------------------------------------------------------------------


def _is_integral(x: float) -> bool:
    return math.isfinite(x) and float(x).is_integer() and abs(x) < 2**53


def _as_code(value: Any) -> Code:
    if isinstance(value, str):
        return value.strip()
    return int(value)


def _free_code(preferred: int, used: set[Code]) -> int:
    if preferred not in used:
        return preferred
    ints = [c for c in used if isinstance(c, int)]
    return min([*ints, 0]) - 1


def _in_ranges(code: Code, ranges: Sequence[tuple[Any, Any]]) -> bool:
    for lo, hi in ranges:
        if isinstance(code, str) or isinstance(lo, str):
            if str(lo) == str(code):
                return True
        elif lo <= code <= hi:
            return True
    return False


def _is_letter_missing(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 1 and "a" <= value <= "z"


class _NotAVariable(Exception):
    """A column is not a classification variable, for the reason given."""


@dataclass
class _Values:
    """What one column's distinct values say about it."""

    series: pd.Series  # the column (booleans as 0/1)
    labels: Mapping[Any, str]  # its value labels (booleans: False/True)
    numeric_dtype: bool
    x: np.ndarray | None  # a numeric column as floats
    isnull: np.ndarray
    present: list[Any]  # the distinct values present
    letters: set[str]  # Stata/SAS extended missing values present (.a .. .z)
    text_kind: bool  # text codes (else integer codes)
    data_codes: set[Code]
    has_empty: bool  # empty text in the data (system missing)


def _decide(
    series: pd.Series,
    labels: Mapping[Any, str],
    ranges: Sequence[tuple[Any, Any]],
    measure: str,
    max_categories: int,
) -> tuple[str, pd.Series | None, list[tuple[Code, str, str]], str]:
    """Decide about one column.

    Works on the column's distinct values; only the final coding touches
    every record (vectorised).

    Returns:
        ``(reason, coded, categories, note)``: an empty reason, the coded
        column and its categories (code, label, comment) for a
        classification variable; otherwise the reason it is not one.
    """
    try:
        values = _values(series, labels, measure, max_categories)
        lab = _labels(values, measure, max_categories)
    except _NotAVariable as exc:
        return str(exc), None, [], ""
    categories, letter_codes, sys_code = _categories(values, lab, ranges)
    coded = _coded(values, letter_codes, sys_code)
    note = "" if lab else "the file has no value labels: the labels are the codes"
    return "", coded, categories, note


def _values(
    series: pd.Series, labels: Mapping[Any, str], measure: str, max_categories: int
) -> _Values:
    """The column's distinct values, and whether they are integer or text codes.

    Raises:
        _NotAVariable: for dates, non-integers, identifiers, too many values
            without labels, or a mix of numbers and text.
    """
    if pd.api.types.is_datetime64_any_dtype(series.dtype):
        raise _NotAVariable("date or time values")
    if pd.api.types.is_bool_dtype(series.dtype):
        series = series.astype("Int64")
        labels = {0: "False", 1: "True", **labels}
    n_rows = len(series)
    numeric_dtype = pd.api.types.is_numeric_dtype(series.dtype)
    letters: set[str] = set()
    present: list[Any]
    x = None
    if numeric_dtype:
        x = series.to_numpy(dtype=np.float64, na_value=np.nan)
        isnull = np.isnan(x)
        vals = x[~isnull]
        integral = np.isfinite(vals) & (np.mod(vals, 1.0) == 0) & (np.abs(vals) < 2**53)
        if not integral.all():
            raise _NotAVariable("continuous (values that are not integers)")
        if not labels and measure == "scale":
            raise _NotAVariable("continuous (measure 'scale' in the file, no value labels)")
        uniq = np.unique(vals)
        if not labels and n_rows > 1 and uniq.size == n_rows:
            raise _NotAVariable("an identifier (every value distinct)")
        if not labels and uniq.size > max_categories:
            raise _NotAVariable(_too_many(uniq.size, max_categories))
        present = [int(v) for v in uniq]
    else:
        isnull = np.asarray(pd.isna(series), dtype=bool)
        present = list(pd.unique(series[~isnull]))
        letters = {v for v in present if _is_letter_missing(v)}
    numeric = [v for v in present if not isinstance(v, str)]
    texts = [v for v in present if isinstance(v, str) and v not in letters]
    # Single letters are Stata/SAS extended missing values only beside numbers.
    numeric_labels = any(not isinstance(k, str) for k in labels)
    text_kind = bool(texts) or (not numeric and not numeric_labels and bool(present or labels))
    if text_kind and numeric:
        raise _NotAVariable("a mix of numbers and text")
    data_codes: set[Code]
    if text_kind:
        letters = set()  # single letters in a text column are ordinary codes
        data_codes = {str(v).strip() for v in present}
        has_empty = "" in data_codes
        data_codes.discard("")
    else:
        if any(not _is_integral(float(v)) for v in numeric):
            raise _NotAVariable("continuous (values that are not integers)")
        data_codes = {int(v) for v in numeric}
        has_empty = False
    return _Values(
        series, labels, numeric_dtype, x, isnull, present, letters, text_kind, data_codes, has_empty
    )


def _labels(v: _Values, measure: str, max_categories: int) -> dict[Code, str]:
    """The value labels by code (extended missing values aside).

    Raises:
        _NotAVariable: for labels on non-integers, a scale measure without
            labels, an identifier, or too many values without a label.
    """
    lab: dict[Code, str] = {}
    for k, label in v.labels.items():
        if _is_letter_missing(k) and not v.text_kind:
            continue
        if not v.text_kind and not _is_integral(float(k)):
            raise _NotAVariable("continuous (value labels on values that are not integers)")
        lab[_as_code(k)] = str(label)
    if not lab and measure == "scale":
        raise _NotAVariable("continuous (measure 'scale' in the file, no value labels)")
    unlabelled = v.data_codes - set(lab)
    if not lab:
        if len(v.series) > 1 and len(v.present) == len(v.series):
            raise _NotAVariable("an identifier (every value distinct)")
        if len(v.data_codes) > max_categories:
            raise _NotAVariable(_too_many(len(v.data_codes), max_categories))
    elif len(unlabelled) > max_categories:
        raise _NotAVariable(
            f"{len(unlabelled)} values without a value label, more than --max-categories "
            f"{max_categories} (labels that cover only missing-value codes?)"
        )
    return lab


def _categories(
    v: _Values, lab: Mapping[Code, str], ranges: Sequence[tuple[Any, Any]]
) -> tuple[list[tuple[Code, str, str]], dict[str, int], Code | None]:
    """The categories (code, label, comment): the regular ones, then the missing-value codes.

    Returns:
        The categories, the code given to each extended missing value, and
        the code of system missing (``None`` if nothing is missing).
    """
    used: set[Code] = set(v.data_codes) | set(lab)
    regular: list[tuple[Code, str, str]] = []
    missing: list[tuple[Code, str, str]] = []
    for code in sorted(used, key=lambda c: (isinstance(c, str), c)):
        is_missing = bool(ranges) and _in_ranges(code, ranges)
        label = lab.get(code, f"Missing ({code})" if is_missing else str(code))
        comment = ""
        if is_missing:
            comment = "missing-value code"
        elif lab and code not in lab:
            comment = "no value label in the file"
        (missing if is_missing else regular).append((code, label, comment))
    # SPSS discrete user-missing codes absent from the data are still categories.
    for lo, hi in ranges:
        if lo == hi and not isinstance(lo, str) and _is_integral(float(lo)):
            code = int(lo)
            if code not in used:
                used.add(code)
                missing.append((code, lab.get(code, f"Missing ({code})"), "missing-value code"))
    missing.sort(key=lambda c: (isinstance(c[0], str), c[0]))
    letter_codes: dict[str, int] = {}
    for letter in sorted(v.letters | {k for k in v.labels if _is_letter_missing(k)}):
        code = _free_code(-2 - (ord(letter) - ord("a")), used)
        used.add(code)
        letter_codes[letter] = code
        missing.append(
            (code, str(v.labels.get(letter, f"Missing (.{letter})")), f"missing value .{letter}")
        )
    sys_code: Code | None = None
    if v.isnull.any() or v.has_empty:
        if v.text_kind:
            sys_code = _MISSING_TEXT
            while sys_code in used:
                sys_code = "_" + sys_code
        else:
            sys_code = _free_code(-1, used)
        missing.append((sys_code, "Missing", "empty in the file (system missing)"))
    return regular + missing, letter_codes, sys_code


def _coded(v: _Values, letter_codes: Mapping[str, int], sys_code: Code | None) -> pd.Series:
    """The coded column: integers or stripped text, missing values as their codes."""
    if v.numeric_dtype:
        assert v.x is not None
        fill = float(sys_code) if isinstance(sys_code, int) else 0.0
        return pd.Series(np.where(v.isnull, fill, v.x).astype(np.int64), index=v.series.index)
    mapping: dict[Any, Code] = {}
    for value in v.present:
        if value in letter_codes:
            mapping[value] = letter_codes[value]
        elif v.text_kind:
            s = str(value).strip()
            mapping[value] = s if s else sys_code  # type: ignore[assignment]
        else:
            mapping[value] = int(value)
    values = v.series.map(mapping)
    if sys_code is not None:
        values = values.where(~v.isnull, sys_code)
    return values.astype("str" if v.text_kind else "int64")


def _too_many(count: int, max_categories: int) -> str:
    return (
        f"{count} distinct values, more than --max-categories {max_categories}"
        " (group them, or raise the limit)"
    )


def _check_weight(series: pd.Series, name: str) -> pd.Series:
    if not pd.api.types.is_numeric_dtype(series.dtype) or pd.api.types.is_bool_dtype(series.dtype):
        raise DataError(f"weight column {name} must hold numbers, not {series.dtype}")
    w = series.to_numpy(dtype=np.float64, na_value=np.nan)
    if np.isnan(w).any():
        raise DataError(
            f"weight column {name} has {int(np.isnan(w).sum())} missing values; every record "
            "needs a finite weight >= 0"
        )
    if not np.isfinite(w).all():
        raise DataError(f"weight column {name} has infinite values; weights must be finite")
    if (w < 0).any():
        raise DataError(
            f"weight column {name} has {int((w < 0).sum())} negative values; weights must be >= 0"
        )
    return pd.Series(w, index=series.index, dtype="float64")


# -- writing --------------------------------------------------------------------------


def _catalog_text(
    source: Path,
    meta: _Meta,
    record_key: str,
    weight: str | None,
    variables: list[_Var],
    undecided: list[tuple[str, str]],
    renamed: list[tuple[str, str]],
    keys_added: bool,
    proposals: Sequence[ZeroProposal] = (),
    min_records: int = 0,
) -> str:
    lines = [
        f"# Draft catalog written by `tablesafe catalog init` from {_comment(source.name)}.",
        "# Review it before serving: labels, the order of categories, which columns are",
        "# variables, groupings and structural zeros are the data owner's decisions.",
        "",
        "[dataset]",
        f"title = {toml_value(meta.title or source.stem)}",
        'file = "microdata.parquet"',
        f"record_key = {toml_value(record_key)}"
        + ("  # drawn by catalog init (secure random)" if keys_added else ""),
    ]
    if weight:
        lines.append(f"weight = {toml_value(weight)}")
    else:
        lines.append("# no weight given (--weight): only counts can be tabulated")
    if renamed:
        lines += ["", "# Columns renamed in microdata.parquet (not valid catalog names):"]
        lines += [f"#   {_comment(old)} -> {new}" for old, new in renamed]
    if undecided:
        lines += [
            "",
            "# Columns kept in microdata.parquet but not made variables (undecided);",
            "# add a [[variables]] entry by hand for any that should be one:",
        ]
        width = max(len(_comment(n)) for n, _ in undecided)
        lines += [f"#   {_comment(n).ljust(width)}  {_comment(r)}" for n, r in undecided]
    for var in variables:
        lines += ["", "[[variables]]", f"name = {toml_value(var.name)}"]
        lines.append(f"label = {toml_value(var.label)}")
        if var.note:
            lines.append(f"# {_comment(var.note)}")
        lines.append("categories = [")
        for code, label, comment in var.categories:
            entry = f"  {{ code = {toml_value(code)}, label = {toml_value(label)} }},"
            lines.append(entry + (f"  # {_comment(comment)}" if comment else ""))
        lines.append("]")
    lines += _proposal_lines(proposals, variables, min_records)
    return "\n".join(lines) + "\n"


def _proposal_lines(
    proposals: Sequence[ZeroProposal], variables: Sequence[_Var], min_records: int
) -> list[str]:
    """The proposed structural zeros, commented out, each with what the data says of it."""
    if not proposals:
        return []
    order = {v.name: [c for c, _, _ in v.categories] for v in variables}
    lines = [
        "",
        "# Proposed structural zeros: combinations of categories no record holds, although",
        f"# each side holds at least {min_records:,} records (--zeros-min-records) and at least",
        f"# {MIN_EXPECTED:g} would be expected if the two variables were unrelated. DECLARING ONE",
        "# PUBLISHES IT: every table shows its cells as structural zeros, telling every user",
        "# that no record has the combination. Uncomment an entry (remove the '# ' of its",
        "# lines) only once the owner has approved it as holding by definition (a rule of",
        "# the questionnaire or of the world), not by chance in this file.",
    ]
    for p in proposals:
        (a, codes_a), (b, codes_b) = p.codes
        lines += [
            "#",
            f"# {a} {code_runs(codes_a, order[a])} and {b} {code_runs(codes_b, order[b])}: "
            f"{p.records[0]:,} and {p.records[1]:,} records, none together "
            f"({expected_words(p.expected)} expected if unrelated)",
            "# [[structural_zeros]]",
            *(f"# {line}" for line in _code_list(a, codes_a)),
            *(f"# {line}" for line in _code_list(b, codes_b)),
        ]
    return lines


def _code_list(name: str, codes: Sequence[Code], width: int = 88) -> list[str]:
    """``NAME = [codes]`` on one line, or over several within ``width`` characters."""
    items = [toml_value(c) for c in codes]
    one = f"{name} = [{', '.join(items)}]"
    if len(one) <= width:
        return [one]
    lines, line = [f"{name} = ["], "  "
    for item in items:
        if len(line) + len(item) + 2 > width and line.strip():
            lines.append(line.rstrip())
            line = "  "
        line += f"{item}, "
    return [*lines, line.rstrip(), "]"]


def _comment(text: str) -> str:
    """Text for a ``#`` comment: on one line (values are :func:`toml_value`'s, by tomli-w).

    TOML ends a comment at a newline and allows no other control character in
    it but tab, so each is written as a space.
    """
    return "".join(" " if (ord(c) < 32 and c != "\t") or ord(c) == 127 else c for c in text)


def init_catalog(
    source: str | Path,
    directory: str | Path,
    *,
    weight: str | None = None,
    record_key: str = "RKEY",
    variables: Sequence[str] | None = None,
    max_categories: int = 50,
    zeros_min_records: int = 100,
    overwrite: bool = False,
    rng: np.random.Generator | None = None,
) -> InitReport:
    """Write a dataset folder (microdata and a draft catalog) from a raw survey file.

    Args:
        source: A Parquet, CSV, SPSS (.sav, .zsav), Stata (.dta) or SAS
            (.sas7bdat with an optional same-named .sas7bcat formats
            catalog, .xpt) file.
        directory: The dataset folder to write (``microdata.parquet`` and
            ``catalog.toml``); created if absent.
        weight: The survey-weight column (as named in the file), or ``None``.
        record_key: The record-key column: kept and checked if the file has
            it, drawn from the secure source otherwise.
        variables: Make exactly these columns (names as in the file) the
            classification variables, in this order; by default every column
            that can be one.
        max_categories: Columns without value labels and with more distinct
            values than this are not made variables (listed in a comment).
        zeros_min_records: Propose (commented out) as structural zeros empty combinations
            of two variables' categories each holding this many records (0: none).
        overwrite: Replace an existing catalog and microdata in ``directory``.
        rng: A Generator for reproducible record keys (tests); ``None``: secure.

    Returns:
        What was written.

    Raises:
        FormatError: if the file cannot be read.
        DataError: if a named column is missing or unusable, the weight is
            not finite and non-negative, or existing record keys are invalid.
        ParameterError: for an option out of range (``max_categories`` below 2).
        CatalogError: if the draft does not validate (a bug; reported).
    """
    source, directory = Path(source), Path(directory)
    _check_target(directory, overwrite, max_categories, zeros_min_records)
    df, meta = _read(source)
    columns = _check_columns(df, source, weight, record_key, variables)
    names = _names(columns, record_key)
    renamed = [(c, n) for c, n in names.items() if c != n]
    # Every column is kept; the weight checked, the variables' coded values set below.
    out = {
        names[c]: _check_weight(df[c], c) if c == weight else df[c]
        for c in columns
        if c != record_key
    }
    made, undecided = _variables(
        df, meta, columns, names, weight, record_key, variables, max_categories, out
    )
    if not made:
        raise DataError(
            f"no column of {source.name} can be a classification variable (integer or text "
            "codes); columns: " + "; ".join(f"{n}: {r}" for n, r in undecided)
        )
    keys_added = record_key not in columns
    table = _arrow_table(out, _record_keys(df, record_key, keys_added, rng), record_key)
    proposals = _proposals(made, out, zeros_min_records)
    text = _catalog_text(
        source, meta, record_key, names.get(weight) if weight else None, made, undecided,
        renamed, keys_added, proposals, zeros_min_records,
    )  # fmt: skip
    _write_validated(directory, table, text)
    return InitReport(
        directory=directory,
        records=len(df),
        variables=tuple(v.name for v in made),
        undecided=tuple(undecided),
        renamed=tuple(renamed),
        keys_added=keys_added,
        proposed_zeros=tuple(proposals),
    )


def _arrow_table(out: Mapping[str, pd.Series], keys: Any, record_key: str) -> Any:
    """The microdata to write: every column, coded, then the record keys."""
    import pyarrow as pa

    table = pa.Table.from_pandas(pd.DataFrame(out), preserve_index=False)
    return table.append_column(record_key, keys)


def _proposals(
    made: Sequence[_Var], out: Mapping[str, pd.Series], min_records: int
) -> list[ZeroProposal]:
    """The structural zeros to propose: empty boxes of large categories, none holding a record."""
    categories = {v.name: [c for c, _, _ in v.categories] for v in made}
    columns = {
        name: pd.Index(codes).get_indexer(pd.Index(out[name])).astype(np.int64)
        for name, codes in categories.items()
    }
    found = propose_zeros(columns, categories, min_records)
    # The boxes are empty by construction; checked again on the records all the same.
    return [p for p in found if not holds_records(p, columns, categories)]


def _check_target(
    directory: Path, overwrite: bool, max_categories: int, zeros_min_records: int
) -> None:
    """Check the options before reading anything.

    Raises:
        ParameterError: if ``max_categories`` is below 2, or ``zeros_min_records``
            outside its range.
        DataError: if ``directory`` holds a dataset and ``overwrite`` is false.
    """
    check_number("catalog.zeros_min_records", zeros_min_records)
    if max_categories < 2:
        raise ParameterError(f"max_categories must be at least 2, not {max_categories}")
    targets = [directory / "catalog.toml", directory / "microdata.parquet"]
    if not overwrite and any(t.exists() for t in targets):
        raise DataError(
            f"{directory} already holds a dataset (catalog.toml or microdata.parquet); "
            "choose another folder or pass overwrite (--overwrite)"
        )


def _check_columns(
    df: pd.DataFrame,
    source: Path,
    weight: str | None,
    record_key: str,
    variables: Sequence[str] | None,
) -> list[str]:
    """The file's column names (as text), checked against the weight and ``--variables``.

    Raises:
        DataError: for no records, an unknown weight or variable, the weight
            as the record key, or a variable named twice or as the weight or key.
    """
    if len(df) == 0:
        raise DataError(f"{source.name} has no records")
    columns = [str(c) for c in df.columns]
    df.columns = pd.Index(columns)
    if weight is not None and weight not in columns:
        raise DataError(
            f"weight column {weight!r} is not in {source.name}; columns: {', '.join(columns)}"
        )
    if weight is not None and weight == record_key:
        raise DataError("the weight and the record key must be different columns")
    if variables is not None:
        unknown = [v for v in variables if v not in columns]
        if unknown:
            raise DataError(
                f"--variables names {', '.join(unknown)}, not in {source.name}; columns: "
                f"{', '.join(columns)}"
            )
        clash = [v for v in variables if v in (weight, record_key)]
        if clash:
            raise DataError(f"{clash[0]} is the weight or the record key, not a variable")
        if len(set(variables)) != len(variables):
            raise DataError("--variables names a column twice")
    return columns


def _names(columns: Sequence[str], record_key: str) -> dict[str, str]:
    """Each column's name in the written microdata (the record key's kept as given).

    Raises:
        DataError: for a record-key name that is not a valid catalog name.
    """
    taken: set[str] = set()
    rk_name = _clean_name(record_key, taken)
    if rk_name != record_key or not NAME_PATTERN.match(record_key):
        raise DataError(
            f"record-key column name {record_key!r} is not allowed: use a letter followed by "
            "letters, digits or underscores"
        )
    return {col: record_key if col == record_key else _clean_name(col, taken) for col in columns}


def _variables(
    df: pd.DataFrame,
    meta: _Meta,
    columns: Sequence[str],
    names: Mapping[str, str],
    weight: str | None,
    record_key: str,
    variables: Sequence[str] | None,
    max_categories: int,
    out: dict[str, pd.Series],
) -> tuple[list[_Var], list[tuple[str, str]]]:
    """Decide about every column; a variable's coded values replace its column in ``out``.

    Returns:
        The variables (in ``--variables`` order, else the file's) and the
        columns not made variables, each with the reason.

    Raises:
        DataError: for a column named in ``--variables`` that cannot be a variable.
    """
    undecided: list[tuple[str, str]] = []
    decided: dict[str, _Var] = {}
    for col in columns:
        if col in (record_key, weight):
            continue
        if variables is not None and col not in variables:
            undecided.append((names[col], "not named in --variables"))
            continue
        reason, coded, cats, note = _decide(
            df[col],
            meta.value_labels.get(col, {}),
            meta.missing_ranges.get(col, []),
            meta.measure.get(col, ""),
            max_categories,
        )
        if reason:
            if variables is not None:
                raise DataError(f"--variables names {col}, which cannot be a variable: {reason}")
            undecided.append((names[col], reason))
            continue
        assert coded is not None
        out[names[col]] = coded
        decided[col] = _Var(names[col], meta.labels.get(col, col), cats, note)
    order = list(variables) if variables is not None else columns
    return [decided[c] for c in order if c in decided], undecided


def _record_keys(
    df: pd.DataFrame, record_key: str, draw: bool, rng: np.random.Generator | None
) -> Any:
    """The record keys (an Arrow uint32 array): drawn, or the file's, checked.

    Raises:
        DataError: for missing keys, or keys that are not integers in 0 .. 2**32 - 1.
    """
    import pyarrow as pa

    if draw:
        return pa.array(draw_record_keys(len(df), rng), type=pa.uint32())
    raw = df[record_key]
    if pd.isna(raw).any():
        raise DataError(
            f"record-key column {record_key} has {int(pd.isna(raw).sum())} missing values; "
            "drop the column to have keys drawn, or fix it"
        )
    try:
        keys = pa.array(raw.to_numpy(), type=pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError, TypeError):
        raise DataError(
            f"record-key column {record_key} must hold integers in 0 .. 2**32 - 1"
        ) from None
    check_record_keys(pa.table({record_key: keys}), record_key)
    return keys.cast(pa.uint32())


def uncomment_proposals(text: str) -> str:
    """A draft catalog with every proposed structural zero declared (its lines uncommented)."""
    out, inside = [], False
    for line in text.splitlines():
        # An entry runs from its header to the bare "#" before the next, or the end.
        if line == "# [[structural_zeros]]":
            inside = True
        elif line == "#" or not line.startswith("# "):
            inside = False
        out.append(line[2:] if inside else line)
    return "\n".join(out) + "\n"


def _write_validated(directory: Path, table: Any, text: str) -> None:
    """Write the dataset to a temporary folder, validate it there, then move it in."""
    import pyarrow.parquet as pq

    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    try:
        (tmp / "catalog.toml").write_text(text, encoding="utf-8")
        pq.write_table(table, tmp / "microdata.parquet")
        dataset = Dataset(
            catalog=Catalog.from_toml(tmp / "catalog.toml"),
            path=tmp / "microdata.parquet",
            format=DataFormat.PARQUET,
            name=directory.name,
        )
        DuckDBEngine().validate(dataset)
        if "# [[structural_zeros]]" in text:
            # The proposals, uncommented, load and hold for the data: the owner may approve any.
            (tmp / "catalog.toml").write_text(uncomment_proposals(text), encoding="utf-8")
            approved = Catalog.from_toml(tmp / "catalog.toml")
            DuckDBEngine().validate(
                Dataset(approved, tmp / "microdata.parquet", DataFormat.PARQUET, directory.name)
            )
            (tmp / "catalog.toml").write_text(text, encoding="utf-8")
        directory.mkdir(parents=True, exist_ok=True)
        (tmp / "microdata.parquet").replace(directory / "microdata.parquet")
        (tmp / "catalog.toml").replace(directory / "catalog.toml")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
