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
Nothing is written unless the whole draft, data included, validates.
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
from tablesafe.catalog._catalog import NAME_PATTERN, Catalog, Code, reserved_name, toml_value

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
    """

    directory: Path
    records: int
    variables: tuple[str, ...]
    undecided: tuple[tuple[str, str], ...]
    renamed: tuple[tuple[str, str], ...]
    keys_added: bool


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
    if pd.api.types.is_datetime64_any_dtype(series.dtype):
        return "date or time values", None, [], ""
    if pd.api.types.is_bool_dtype(series.dtype):
        series = series.astype("Int64")
        labels = {0: "False", 1: "True", **labels}
    n_rows = len(series)
    numeric_dtype = pd.api.types.is_numeric_dtype(series.dtype)
    letters: set[str] = set()
    present: list[Any]
    if numeric_dtype:
        x = series.to_numpy(dtype=np.float64, na_value=np.nan)
        isnull = np.isnan(x)
        vals = x[~isnull]
        integral = np.isfinite(vals) & (np.mod(vals, 1.0) == 0) & (np.abs(vals) < 2**53)
        if not integral.all():
            return "continuous (values that are not integers)", None, [], ""
        if not labels and measure == "scale":
            return "continuous (measure 'scale' in the file, no value labels)", None, [], ""
        uniq = np.unique(vals)
        if not labels and n_rows > 1 and uniq.size == n_rows:
            return "an identifier (every value distinct)", None, [], ""
        if not labels and uniq.size > max_categories:
            return _too_many(uniq.size, max_categories), None, [], ""
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
        return "a mix of numbers and text", None, [], ""
    data_codes: set[Code]
    if text_kind:
        letters = set()  # single letters in a text column are ordinary codes
        data_codes = {str(v).strip() for v in present}
        has_empty = "" in data_codes
        data_codes.discard("")
    else:
        if any(not _is_integral(float(v)) for v in numeric):
            return "continuous (values that are not integers)", None, [], ""
        data_codes = {int(v) for v in numeric}
        has_empty = False
    lab: dict[Code, str] = {}
    for k, v in labels.items():
        if _is_letter_missing(k) and not text_kind:
            continue
        if not text_kind and not _is_integral(float(k)):
            return "continuous (value labels on values that are not integers)", None, [], ""
        lab[_as_code(k)] = str(v)
    if not lab and measure == "scale":
        return "continuous (measure 'scale' in the file, no value labels)", None, [], ""
    unlabelled = data_codes - set(lab)
    if not lab:
        if n_rows > 1 and len(present) == n_rows:
            return "an identifier (every value distinct)", None, [], ""
        if len(data_codes) > max_categories:
            return _too_many(len(data_codes), max_categories), None, [], ""
    elif len(unlabelled) > max_categories:
        return (
            f"{len(unlabelled)} values without a value label, more than --max-categories "
            f"{max_categories} (labels that cover only missing-value codes?)",
            None,
            [],
            "",
        )
    used: set[Code] = set(data_codes) | set(lab)
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
    for letter in sorted(letters | {k for k in labels if _is_letter_missing(k)}):
        code = _free_code(-2 - (ord(letter) - ord("a")), used)
        used.add(code)
        letter_codes[letter] = code
        missing.append(
            (code, str(labels.get(letter, f"Missing (.{letter})")), f"missing value .{letter}")
        )
    sys_code: Code | None = None
    if isnull.any() or has_empty:
        if text_kind:
            sys_code = _MISSING_TEXT
            while sys_code in used:
                sys_code = "_" + sys_code
        else:
            sys_code = _free_code(-1, used)
        missing.append((sys_code, "Missing", "empty in the file (system missing)"))
    # The coded column: integers or stripped text, missing values as their codes.
    coded: pd.Series
    if numeric_dtype:
        fill = float(sys_code) if isinstance(sys_code, int) else 0.0
        coded = pd.Series(np.where(isnull, fill, x).astype(np.int64), index=series.index)
    else:
        mapping: dict[Any, Code] = {}
        for v in present:
            if v in letter_codes:
                mapping[v] = letter_codes[v]
            elif text_kind:
                s = str(v).strip()
                mapping[v] = s if s else sys_code  # type: ignore[assignment]
            else:
                mapping[v] = int(v)
        values = series.map(mapping)
        if sys_code is not None:
            values = values.where(~isnull, sys_code)
        coded = values.astype("str" if text_kind else "int64")
    note = "" if lab else "the file has no value labels: the labels are the codes"
    return "", coded, regular + missing, note


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
) -> str:
    lines = [
        f"# Draft catalog written by `tablesafe catalog init` from {source.name}.",
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
        width = max(len(n) for n, _ in undecided)
        lines += [f"#   {n.ljust(width)}  {reason}" for n, reason in undecided]
    for var in variables:
        lines += ["", "[[variables]]", f"name = {toml_value(var.name)}"]
        lines.append(f"label = {toml_value(var.label)}")
        if var.note:
            lines.append(f"# {var.note}")
        lines.append("categories = [")
        for code, label, comment in var.categories:
            entry = f"  {{ code = {toml_value(code)}, label = {toml_value(label)} }},"
            lines.append(entry + (f"  # {comment}" if comment else ""))
        lines.append("]")
    return "\n".join(lines) + "\n"


def _comment(text: str) -> str:
    return text.replace("\n", " ").replace("\r", " ")


def init_catalog(
    source: str | Path,
    directory: str | Path,
    *,
    weight: str | None = None,
    record_key: str = "RKEY",
    variables: Sequence[str] | None = None,
    max_categories: int = 50,
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
        overwrite: Replace an existing catalog and microdata in ``directory``.
        rng: A Generator for reproducible record keys in tests only;
            ``None`` (the default) draws them from the secure source.

    Returns:
        What was written.

    Raises:
        FormatError: if the file cannot be read.
        DataError: if a named column is missing or unusable, the weight is
            not finite and non-negative, or existing record keys are invalid.
        ParameterError: if ``max_categories`` is below 2.
        CatalogError: if the draft does not validate (a bug; reported).
    """
    source, directory = Path(source), Path(directory)
    if max_categories < 2:
        raise ParameterError(f"max_categories must be at least 2, not {max_categories}")
    targets = [directory / "catalog.toml", directory / "microdata.parquet"]
    if not overwrite and any(t.exists() for t in targets):
        raise DataError(
            f"{directory} already holds a dataset (catalog.toml or microdata.parquet); "
            "choose another folder or pass overwrite (--overwrite)"
        )
    df, meta = _read(source)
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

    taken: set[str] = set()
    names: dict[str, str] = {}
    rk_name = _clean_name(record_key, taken)
    if rk_name != record_key or not NAME_PATTERN.match(record_key):
        raise DataError(
            f"record-key column name {record_key!r} is not allowed: use a letter followed by "
            "letters, digits or underscores"
        )
    for col in columns:
        names[col] = record_key if col == record_key else _clean_name(col, taken)
    renamed = [(c, n) for c, n in names.items() if c != n]

    out: dict[str, pd.Series] = {}
    undecided: list[tuple[str, str]] = []
    order = list(variables) if variables is not None else columns
    for col in columns:
        series = df[col]
        if col == record_key:
            continue
        if col == weight:
            out[names[col]] = _check_weight(series, col)
            continue
        out[names[col]] = series
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
    made = [decided[c] for c in order if c in decided]
    if not made:
        raise DataError(
            f"no column of {source.name} can be a classification variable (integer or text "
            "codes); columns: " + "; ".join(f"{n}: {r}" for n, r in undecided)
        )

    import pyarrow as pa

    from tablesafe._keys import check_record_keys, draw_record_keys

    table = pa.Table.from_pandas(pd.DataFrame(out), preserve_index=False)
    keys_added = record_key not in columns
    if keys_added:
        keys = pa.array(draw_record_keys(len(df), rng), type=pa.uint32())
    else:
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
        keys = keys.cast(pa.uint32())
    table = table.append_column(record_key, keys)

    text = _catalog_text(
        source, meta, record_key, names.get(weight) if weight else None, made, undecided,
        renamed, keys_added,
    )  # fmt: skip
    _write_validated(directory, table, text)
    return InitReport(
        directory=directory,
        records=len(df),
        variables=tuple(v.name for v in made),
        undecided=tuple(undecided),
        renamed=tuple(renamed),
        keys_added=keys_added,
    )


def _write_validated(directory: Path, table: Any, text: str) -> None:
    """Write the dataset to a temporary folder, validate it there, then move it in."""
    import pyarrow.parquet as pq

    from tablesafe.catalog._dataset import Dataset
    from tablesafe.engines._duckdb import DuckDBEngine

    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    try:
        (tmp / "catalog.toml").write_text(text, encoding="utf-8")
        pq.write_table(table, tmp / "microdata.parquet")
        dataset = Dataset(
            catalog=Catalog.from_toml(tmp / "catalog.toml"),
            path=tmp / "microdata.parquet",
            format="parquet",
            name=directory.name,
        )
        DuckDBEngine().validate(dataset)
        directory.mkdir(parents=True, exist_ok=True)
        (tmp / "microdata.parquet").replace(directory / "microdata.parquet")
        (tmp / "catalog.toml").replace(directory / "catalog.toml")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
