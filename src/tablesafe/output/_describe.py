"""A protected table in words: its title, its universe, its statistics and its file name.

Every output of a table states what it holds (issue 30): a title naming the
statistics and the variables (``"Count and weighted count by Age group and
Sex"``), the universe with the catalog's category labels (``"Region is North
or North East"``), and a file name made from the table
(``AGEGRP-by-SEX-North``). The words come from the catalog the table was
built from (variable, category and magnitude labels); a table built without
one (``ProtectedTable.catalog`` is ``None``) is described by its codes.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tablesafe._errors import RequestError
from tablesafe.catalog._custom import extend_catalog
from tablesafe.catalog._magnitudes import (
    quantile_words,
    read_base_column,
    read_magnitude_column,
    read_quantile_column,
)

if TYPE_CHECKING:
    from tablesafe._request import TableRequest
    from tablesafe.catalog import Catalog, Variable

__all__ = [
    "ALL_RECORDS",
    "file_stem",
    "quoted_label",
    "statistic_label",
    "title",
    "universe_conditions",
    "universe_label",
]

#: The universe of a table without conditions, in words.
ALL_RECORDS = "All records"
#: Universe conditions with more categories than this name the variable in a file name.
_FILE_CATEGORIES = 3
#: The longest file name stem (without the extension).
_FILE_STEM_MAX = 120

#: The statistics of the counts, in words (the columns of ``ProtectedTable.statistics``).
_COUNT_WORDS = {
    "n": "Count",
    "weighted": "Weighted count",
    "se": "Standard error of the weighted count",
    "ci_low": "Weighted count, lower end of the 95% confidence interval",
    "ci_high": "Weighted count, upper end of the 95% confidence interval",
}


#: An estimate's standard error and interval in words (``{0}`` its words, ``{1}`` lower-cased).
_COMPANION_WORDS = {
    "_se": "Standard error of the {1}",
    "_ci_low": "{0}, lower end of the 95% confidence interval",
    "_ci_high": "{0}, upper end of the 95% confidence interval",
}


def _catalog_variable(catalog: Catalog | None, name: str) -> Variable | None:
    if catalog is None:
        return None
    try:
        return catalog.variable(name)
    except RequestError:
        return None


def _magnitude_words(catalog: Catalog | None, name: str) -> str:
    """A continuous variable's label and unit: ``"Annual income (currency units)"``."""
    mag = None if catalog is None else catalog.magnitudes.get(name)
    if mag is None:
        return name
    return f"{mag.label} ({mag.unit})" if mag.unit else mag.label


def statistic_label(column: str, catalog: Catalog | None, metadata: Mapping[str, Any]) -> str:
    """One statistic column in words: ``"Weighted count"``, ``"Mean of Annual income (EUR)"``.

    A sum or mean over the survey weights (``sum_VAR_weighted``) is a
    ``"Weighted sum"`` or ``"Weighted mean"``; over the records, a ``"Sum"``
    or ``"Mean"``.

    Args:
        column: The column's name (``n``, ``weighted``, ``se``, ``sum_VAR``,
            ``mean_VAR_weighted``...).
        catalog: The catalog (for magnitude labels and units), or ``None``.
        metadata: The table's metadata.
    """
    if column in _COUNT_WORDS:
        return _COUNT_WORDS[column]
    for suffix, words in _COMPANION_WORDS.items():
        if column.endswith(suffix):
            base = statistic_label(column.removesuffix(suffix), catalog, metadata)
            return words.format(base, base[:1].lower() + base[1:])
    if column.startswith("percent_"):
        return f"{column.removeprefix('percent_').capitalize()} percentage"
    with_value = read_base_column(column)
    if with_value is not None and catalog is not None and with_value[0] in catalog.magnitudes:
        kind = "Weighted count" if with_value[1] else "Count"
        return f"{kind} of records with a value of {_magnitude_words(catalog, with_value[0])}"
    quantile = read_quantile_column(column)
    if quantile is not None:
        percent, name, weighted = quantile
        kind = quantile_words(percent)
        kind = f"Weighted {kind[:1].lower() + kind[1:]}" if weighted else kind
        return f"{kind} of {_magnitude_words(catalog, name)}"
    parts = read_magnitude_column(column)
    if parts is None:
        return column
    kind, name, weighted = parts
    words = _magnitude_words(catalog, name)
    return f"{'Weighted ' + kind if weighted else kind.capitalize()} of {words}"


def _listed(items: Sequence[str], conjunction: str) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} {conjunction} {items[-1]}"


def title(
    dimension_labels: Sequence[str],
    statistics: Sequence[str],
    catalog: Catalog | None,
    metadata: Mapping[str, Any],
) -> str:
    """The table's title: its statistics by its dimensions, in words.

    Standard errors and confidence intervals qualify their estimate and are
    not named in the title (each has its own label). A table counting a unit
    other than the records (``metadata["unit"]``) says so: ``"Count and
    weighted count of households by Region"``.

    Args:
        dimension_labels: The dimensions' labels, in table order.
        statistics: The statistic columns, in order.
        catalog: The catalog, or ``None``.
        metadata: The table's metadata.
    """
    main = [
        s
        for s in statistics
        if s not in ("se", "ci_low", "ci_high") and not s.endswith(tuple(_COMPANION_WORDS))
    ]
    words = [statistic_label(s, catalog, metadata) for s in main]
    # "Count and weighted count": each later statistic lower-cased at its start.
    words = [w if i == 0 else w[:1].lower() + w[1:] for i, w in enumerate(words)]
    unit = f" of {metadata['unit']}s" if metadata.get("unit") else ""
    return f"{_listed(words, 'and')}{unit} by {_listed(list(dimension_labels), 'and')}"


def universe_conditions(
    request: TableRequest, catalog: Catalog | None
) -> list[tuple[str, str, list[str]]]:
    """The universe's conditions: (name, variable label, category labels), in request order.

    Codes are read with the catalog's variable (custom groupings of the
    request included); a name or code the catalog does not know stays as given.
    """
    if catalog is not None and request.groupings:
        catalog = extend_catalog(catalog, request.groupings)
    out = []
    for name, codes in request.universe.items():
        var = _catalog_variable(catalog, name)
        if var is None:
            out.append((name, name, [str(c) for c in codes]))
            continue
        labels = {c.code: c.label for c in var.categories}
        shown = []
        for code in codes:
            try:
                shown.append(labels.get(var.coerce(code), str(code)))
            except RequestError:
                shown.append(str(code))
        out.append((name, var.label, shown))
    return out


#: A category label that could be misread inside a list of categories: it holds a
#: separator of the list (a comma, a semicolon, the word "or" or "and") or a quote,
#: starts or ends with a space, or is empty.
_MISREAD = re.compile(r'[,;"]|\b(?:or|and)\b|^\s|\s$|^$', re.IGNORECASE)


def quoted_label(label: str) -> str:
    """A category label in a list of categories: in double quotes where it could be misread.

    ``North`` stays as it is; ``Married or in a civil partnership`` and
    ``Divorced, widowed`` are quoted, a double quote inside doubled (as in
    CSV): the universe's words then read one way only.
    """
    if not _MISREAD.search(label):
        return label
    return '"' + label.replace('"', '""') + '"'


def universe_label(request: TableRequest, catalog: Catalog | None) -> str:
    """The universe in words: ``"Region is North or North East; Sex is Female"``.

    ``"All records"`` for a table without conditions (``"All households"``
    for one counting households). A category label that
    holds a comma, a semicolon, "or", "and" or a quote is written in double
    quotes (:func:`quoted_label`): ``Marital status is "Divorced, widowed" or
    Single``.
    """
    conditions = universe_conditions(request, catalog)
    if not conditions:
        counted = request.unit if catalog is not None and request.unit != catalog.unit else None
        return f"All {counted}s" if counted else ALL_RECORDS
    return "; ".join(
        f"{label} is {_listed([quoted_label(c) for c in cats], 'or')}"
        for _, label, cats in conditions
    )


def _file_part(text: str) -> str:
    """Text as a file-name part: ASCII letters, digits and ``_``; anything else one ``-``."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[^A-Za-z0-9_]+", "-", ascii_text).strip("-")


def file_stem(dimensions: Sequence[str], request: TableRequest, catalog: Catalog | None) -> str:
    """A file name for the table, without extension: ``AGEGRP-by-SEX-North``.

    The dimensions' names joined by ``-by-``, then each universe condition's
    category labels (or, above three categories, the variable's name and how
    many it keeps: ``REGION-5-categories``). ASCII only, at most 120 characters,
    cut at a ``-``.
    """
    parts = ["-by-".join(dimensions)]
    for name, _, cats in universe_conditions(request, catalog):
        if len(cats) > _FILE_CATEGORIES:
            parts.append(f"{name}-{len(cats)}-categories")
        else:
            parts.extend(cats)
    stem = "-".join(p for p in map(_file_part, parts) if p) or "table"
    if len(stem) > _FILE_STEM_MAX:
        cut = stem[: _FILE_STEM_MAX + 1]
        stem = cut[: cut.rfind("-")] if "-" in cut else cut[:_FILE_STEM_MAX]
    return stem
