"""JSON-stat 2.0: a protected table as the dataset that PxWeb, Eurostat and Cantabular serve.

One JSON-stat ``dataset`` (https://json-stat.org/full/): the table's
dimensions in request order, then a ``STATISTIC`` dimension (role
``metric``) with one category per published statistic, so the ``value``
array is the table's cells in row-major order with the statistic varying
fastest. Each dimension's categories are its codes in table order, then
``_T`` (its total, the SDMX code) where the table publishes a margin over it;
``child`` makes the total the parent of the categories it adds up. A
dimension that is a grouping lists the source codes of each category in its
``extension.members``; a level of one of the catalog's hierarchies names the
level above and each category's parent there (``extension.hierarchy``).

Cells that are not published are ``null``: suppressed cells, standard errors
below the site's threshold, margins the request did not ask for. ``status``
marks the flagged cells by their position in ``value`` (the codes are in
:data:`STATUS`, their meanings for this table in ``extension.status``):

``M``
    a structural zero (SDMX's "missing value; data cannot exist"); the value is 0.
``Q``
    suppressed by the small-cell rule (SDMX's "missing value; suppressed"); ``null``.
``<k``
    suppressed and shown as ``"<k"`` by the site's rule; ``null``.
``d``
    a sum or mean the dominance or p% rule flags (blank if the site suppresses them).
``U``
    an estimate the precision rule finds too unreliable (SDMX's "low reliability"),
    with its standard error and interval where they were published: ``null``
    where the site shows "np", the value where it flags (a standard error never
    published, under the site's count, is a plain ``null``).

``C``
    withheld by the account of published figures (with figures already
    published, it would let differences isolate a few records); ``null``:
    every statistic of a withheld cell, a percentage of a withheld
    denominator, a sum, mean or quantile of a total over a withheld cell.
``t``
    a total of the cells published only (some of its cells are withheld),
    where the figure has no other status.

A base (``n_VAR``, ``weighted_VAR``) the small-cell rule withholds is ``Q``
too. The metric dimension's ``category.unit`` gives each statistic's unit
(label, decimals where its rounding is to a base, ``%`` for percentages).

``label`` is the table's title, ``source`` the catalog's citation (or title),
``updated`` the catalog's date of the last update (when it gives one),
``note`` the universe in words and the protection statement, and
``extension.meta`` the public metadata of the JSON format. Nothing depends on
the clock: the same table gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from tablesafe._rounding import Rounding
from tablesafe.catalog._magnitudes import read_base_column, read_quantile_column
from tablesafe.output._published import WITHHELD, sensitive_flag, unreliable_flag
from tablesafe.output._render import TOTAL_CODE, TOTAL_LABEL, _plain

if TYPE_CHECKING:
    from tablesafe.cells._plan import DimensionPlan
    from tablesafe.output._published import Published

__all__ = ["STATUS", "jsonstat_bytes", "jsonstat_dataset", "statistic_dimension_id"]

#: The status codes of a cell (``<k`` stands for the site's ``"<k"`` display).
STATUS = {
    "structural_zero": "M",
    "suppressed": "Q",
    "withheld": "C",
    "excludes_withheld": "t",
    "sensitive": "d",
    "unreliable": "U",
}


def statistic_dimension_id(names: list[str]) -> str:
    """The id of the statistic dimension: ``STATISTIC``, or with ``_`` added until it is new."""
    taken = {n.upper() for n in names}
    out = "STATISTIC"
    while out in taken:
        out += "_"
    return out


def _kept(table: Published) -> list[np.ndarray]:
    """For each axis, the positions some published cell uses (a total only if a margin is)."""
    computed = table.computed
    out = []
    for axis in range(computed.ndim):
        other = tuple(a for a in range(computed.ndim) if a != axis)
        out.append(np.nonzero(computed.any(axis=other) if other else computed)[0])
    return out


def _dimension(d: DimensionPlan, kept: np.ndarray, table: Published) -> dict[str, Any]:
    """One table dimension: its categories (and total), labels, child, members and hierarchy."""
    codes = [*map(str, d.codes), TOTAL_CODE]
    labels = [*d.labels, TOTAL_LABEL]
    index = [codes[j] for j in kept]
    category: dict[str, Any] = {
        "index": index,
        "label": {codes[j]: labels[j] for j in kept},
    }
    inner = [c for c in index if c != TOTAL_CODE]
    if TOTAL_CODE in index and inner:
        category["child"] = {TOTAL_CODE: inner}
    out: dict[str, Any] = {"label": d.label, "category": category}
    extension: dict[str, Any] = {}
    if any(m != (c,) for c, m in zip(d.codes, d.members, strict=True)):
        # A grouping: which codes of the microdata's variable each category holds.
        extension["variable"] = d.column
        extension["members"] = {
            str(d.codes[j]): list(d.members[j]) for j in kept.tolist() if j < d.size
        }
    hierarchy = _hierarchy(d, inner, table)
    if hierarchy:
        extension["hierarchy"] = hierarchy
    if extension:
        out["extension"] = extension
    return out


def _hierarchy(d: DimensionPlan, inner: list[str], table: Published) -> dict[str, Any]:
    """The catalog hierarchy ``d`` is a level of below its top: the level above, each parent."""
    catalog = table.catalog
    if catalog is None:
        return {}
    for h in catalog.hierarchies:
        if d.name in h.levels[1:]:
            depth = h.levels.index(d.name)
            var = catalog.variables[d.name]
            parents = dict(zip(map(str, var.codes), h.parents[depth - 1], strict=True))
            return {
                "name": h.name,
                "label": h.label,
                "parent_level": h.levels[depth - 1],
                "parent": {c: parents[c] for c in inner if c in parents},
            }
    return {}


def _cells(table: Published, kept: list[np.ndarray]) -> tuple[list[Any], dict[str, str], list[str]]:
    """The values (row-major, the statistic fastest), the status by position, the statistics."""
    stats = table.statistics()
    names = list(stats)
    grid = np.ix_(*kept)
    shape = (*(len(k) for k in kept), len(names))
    values = np.empty(shape, dtype=object)
    status = np.full(shape, "", dtype=object)
    for s, name in enumerate(names):
        arr = stats[name][grid]
        col = arr.astype(object)
        if arr.dtype.kind == "f":
            col[np.isnan(arr)] = None
        values[..., s] = col
    computed = table.computed[grid]
    values[~computed] = None
    if table.sensitive:
        for s, stat in enumerate(names):
            found = sensitive_flag(table, stat)
            if found is not None:
                status[..., s][found[1][grid] & computed] = STATUS["sensitive"]
    for s, stat in enumerate(names):
        unsure = unreliable_flag(table, stat)
        if unsure is not None:
            # The precision rule: "np" is null with status U; a flagged value keeps it. A
            # standard error or interval never published (under the site's count) stays a
            # plain null, as SDMX's O.
            shown = np.vectorize(lambda v: v is not None, otypes=[bool])(values[..., s])
            hit = unsure[grid] & computed & shown
            status[..., s][hit] = STATUS["unreliable"]
            if table.unreliable_display is not None:
                values[..., s][hit] = None
    for s, stat in enumerate(names):
        withheld = (table.suppressed_bases or {}).get(stat)
        if withheld is not None:
            # A base the small-cell rule withholds (null already): suppressed, as a count is.
            status[..., s][withheld[grid] & computed] = STATUS["suppressed"]
    if table.suppressed is not None:
        hidden = table.suppressed[grid] & computed
        values[hidden] = None
        status[hidden] = table.suppressed_display or STATUS["suppressed"]
    _withheld_status(table, names, grid, values, status)
    status[table.structural_zero[grid] & computed] = STATUS["structural_zero"]
    flat = status.reshape(-1)
    marked = {str(i): str(flat[i]) for i in np.nonzero(flat != "")[0].tolist()}
    return values.reshape(-1).tolist(), marked, names


def _withheld_status(
    table: Published, names: list[str], grid: Any, values: np.ndarray, status: np.ndarray
) -> None:
    """Withheld figures null with status ``C``; a total of the cells published only ``t``.

    A withheld figure is every statistic of a withheld cell, a percentage of a
    withheld denominator, a sum, mean or quantile of a total that leaves
    withheld cells out (:meth:`ProtectedTable.withheld_figures`); the other
    figures of such a total keep any status they have, else get ``t``.
    """
    figures = table.withheld_figures()
    if not figures:
        return
    excluding = table.excludes_withheld
    for s, stat in enumerate(names):
        hidden = figures[stat][grid]
        values[..., s][hidden] = None
        status[..., s][hidden] = STATUS["withheld"]
        if excluding is not None:
            total = excluding[grid] & table.computed[grid] & ~hidden & (status[..., s] == "")
            status[..., s][total] = STATUS["excludes_withheld"]


def _decimals(rounding: str | None) -> int | None:
    """The decimals a rounding leaves (``"1"``: 0, ``"0.01"``: 2); ``None`` for ``"3sf"``."""
    if rounding is None:
        return 0
    r = Rounding.parse(rounding)
    if r.base is None:
        return None
    text = f"{r.base:.15g}"
    return 0 if "." not in text or "e" in text else len(text.split(".")[1])


def _unit(table: Published, column: str) -> dict[str, Any]:
    """A statistic's unit of measure for the metric dimension's ``category.unit``.

    Its label (what is counted, percent, or the continuous variable's unit),
    its decimals where its rounding is to a base (every published figure of
    it has at most those), and for percentages the symbol ``%`` after the
    figure. A standard error or interval has its estimate's unit.
    """
    base = "weighted" if column in ("se", "ci_low", "ci_high") else column
    for suffix in ("_se", "_ci_low", "_ci_high"):
        if column.endswith(suffix):
            base = column.removesuffix(suffix)
    meta, catalog = table.metadata, table.catalog
    counted = f"{meta.get('unit') or (catalog.unit if catalog is not None else 'record')}s"
    raw = meta.get("magnitudes")
    mags: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    rounding: str | None
    if base.startswith("percent_"):
        return {"label": "percent", "decimals": 2, "symbol": "%", "position": "end"}
    if base == "n" or (read_base_column(base) is not None and base.startswith("n_")):
        return {"label": counted, "decimals": 0}
    if base == "weighted" or read_base_column(base) is not None:
        rounding = str(table.roundings[-1]) if table.roundings else None
        label = f"{counted} (weighted)"
    else:
        quantile = read_quantile_column(base)
        name = (
            quantile[1] if quantile is not None else base.split("_", 1)[1].removesuffix("_weighted")
        )
        magnitude = catalog.magnitudes.get(name) if catalog is not None else None
        label = (magnitude.unit or magnitude.label) if magnitude is not None else name
        if quantile is not None:
            rounding = str(dict(meta.get("quantiles") or {}).get("rounding", "3sf"))
        else:
            kind = "mean" if base.startswith("mean_") else "sum"
            rounding = str(dict(mags.get("rounding") or {}).get(kind, "1"))
    decimals = _decimals(rounding)
    return {"label": label} if decimals is None else {"label": label, "decimals": decimals}


def _status_legend(table: Published, notes: Mapping[str, Any]) -> dict[str, str]:
    """Each status code this table can carry, with its meaning from the footnotes' flags."""
    flags = dict(notes.get("flags", {}))
    out = {STATUS["structural_zero"]: str(flags["structural_zero"])}
    if "suppressed" in flags:
        out[table.suppressed_display or STATUS["suppressed"]] = str(flags["suppressed"])
    if any(w.any() for w in (table.suppressed_bases or {}).values()):
        out[STATUS["suppressed"]] = str(flags.get("suppressed", WITHHELD))
    if "withheld" in flags:
        out[STATUS["withheld"]] = str(flags["withheld"])
    if "excludes_withheld" in flags:
        out[STATUS["excludes_withheld"]] = str(flags["excludes_withheld"])
    sensitive = [f"{k}: {v}" for k, v in flags.items() if k.startswith("sensitive_")]
    if sensitive:
        out[STATUS["sensitive"]] = "; ".join(sensitive)
    unsure = [str(v) for k, v in flags.items() if k == "np" or k.startswith("unreliable_")]
    if unsure:
        out[STATUS["unreliable"]] = unsure[0]
    return out


def jsonstat_dataset(table: Published) -> dict[str, Any]:
    """The table as a JSON-stat 2.0 dataset (a dict ready for a JSON writer)."""
    meta = table.public_metadata()
    notes = meta["footnotes"]
    kept = _kept(table)
    values, status, names = _cells(table, kept)
    stat_id = statistic_dimension_id([d.name for d in table.dimensions])
    labels = table.statistic_labels()
    dimension = {
        d.name: _dimension(d, k, table) for d, k in zip(table.dimensions, kept, strict=True)
    }
    dimension[stat_id] = {
        "label": "Statistic",
        "category": {
            "index": names,
            "label": {n: labels[n] for n in names},
            "unit": {n: _unit(table, n) for n in names},
        },
    }
    catalog = table.catalog
    source = meta.get("citation") or (catalog.title if catalog is not None else "")
    doc: dict[str, Any] = {
        "version": "2.0",
        "class": "dataset",
        "label": meta["title"],
    }
    if source:
        doc["source"] = str(source).replace("`", "")
    if meta.get("updated"):
        # The catalog's date of the data's last update (JSON-stat: an ISO 8601 date).
        doc["updated"] = str(meta["updated"])
    doc["note"] = [f"Universe: {meta['universe_label']}.", *notes["statement"]]
    doc["id"] = [*dimension]
    doc["size"] = [*(len(k) for k in kept), len(names)]
    doc["role"] = {"metric": [stat_id]}
    doc["dimension"] = dimension
    doc["value"] = values
    if status:
        doc["status"] = status
    doc["extension"] = {"status": _status_legend(table, notes), "meta": meta}
    return doc


def jsonstat_bytes(table: Published) -> bytes:
    """The JSON-stat document as UTF-8 bytes (the same table, the same bytes)."""
    return orjson.dumps(
        jsonstat_dataset(table),
        option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE,
        default=_plain,
    )
