"""SDMX-CSV 2.0: a protected table as the data message .Stat and Eurostat exchange.

One row per published cell and statistic (SDMX-CSV 2.0, the field guide of
sdmx-twg/sdmx-csv): ``STRUCTURE`` (``dataflow``), ``STRUCTURE_ID``,
``ACTION`` (``I``, information), one column per dimension holding the
category code (``_T``, SDMX's total code, for a margin), a ``STATISTIC``
dimension naming the statistic (``n``, ``weighted``, ``se``, ``sum_VAR``...),
then the measure ``OBS_VALUE`` and the attributes ``OBS_STATUS`` and
``CONF_STATUS`` from SDMX's cross-domain code lists and ``COMMENT_OBS``:

=========================  ==========  ===========  ==========================================
cell                       OBS_VALUE   OBS_STATUS   CONF_STATUS
=========================  ==========  ===========  ==========================================
structural zero            0           M            F (free)
suppressed (small count;   empty       Q            C (confidential)
a base of few records)
withheld (the account of   empty       Q            C (confidential)
published figures; also a
percentage of a withheld
denominator, a sum or mean
of a total over one)
sensitive sum or mean      as shown    as shown     C where the site blanks it, F where shown
not published (an SE       empty       O            F
below the site's count)
too unreliable ("np" by    empty       U            F
the precision rule; not an
SE never published: O)
unreliable, flagged        the value   U            F
other, protection changes  the value   E            F
values
other, no protection       the value   A            F
=========================  ==========  ===========  ==========================================

``M`` is "missing value; data cannot exist", ``Q`` "missing value;
suppressed", ``O`` "missing value", ``U`` "low reliability", ``E``
"estimated value" and ``A`` "normal value" (CL_OBS_STATUS); ``C`` is "confidential statistical
information" and ``F`` "free" (CL_CONF_STATUS). ``E`` is table-wide: every
value of a statistic the protection changes (or derives from changed
figures) is marked, never the cells it happened to change, which would tell
which published values are exact. ``COMMENT_OBS`` holds the footnotes' flag
legend on a flagged row, and on a total of the cells published only (some of
its cells withheld), which keeps its value and statuses: SDMX's code lists
have no code for it.

With footnotes (the default), the message adds the dataset-level attributes
``TITLE`` (the table's title) and ``COMMENT_DSET`` (the universe in words
and the protection statement) in a first row whose dimensions are empty,
as SDMX-CSV writes attributes attached to no key. With ``labels``, every
header, code and coded attribute is written ``ID: name`` (the field guide's
``labels=both``).

The dataflow (``STRUCTURE_ID``) is the one the catalog declares in
``[dataset.sdmx]`` (:mod:`tablesafe.catalog._sdmx`), whose ``dimensions``
also rename the dimension columns to the data structure's ids; without it,
the table's own, ``TABLESAFE:DF_<dataset>_<digest>(1.0)``: the dataset's
name as served with characters SDMX ids cannot hold replaced by ``_``, and
the first 10 hex digits of a hash of the table's structure (its title, its
dimensions' ids, codes and labels, its statistics, the status codes), so
that tables of one structure name one dataflow and tables of two never do.
Its structure (code lists, concepts, data structure definition, dataflow)
is served as ``format=sdmx-structure`` (:mod:`tablesafe.output._sdmx_structure`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from tablesafe.catalog._sdmx import STATISTIC_DIMENSION, SdmxStructure
from tablesafe.output._published import WITHHELD, sensitive_flag, unreliable_flag
from tablesafe.output._render import TOTAL_CODE, TOTAL_LABEL, to_csv

if TYPE_CHECKING:
    from tablesafe.output._published import Published

__all__ = [
    "AGENCY",
    "CONF_STATUS",
    "OBS_STATUS",
    "VERSION",
    "dataflow",
    "declared",
    "dimension_ids",
    "sdmx_code",
    "sdmx_codes",
    "sdmx_csv",
    "structure_id",
    "table_codelists",
    "table_dataflow",
]

#: The maintenance agency and version of the dataflow every table names.
AGENCY = "TABLESAFE"
VERSION = "1.0"
#: The codes used, with their names in SDMX's cross-domain code lists.
OBS_STATUS = {
    "A": "Normal value",
    "E": "Estimated value",
    "M": "Missing value; data cannot exist",
    "O": "Missing value",
    "Q": "Missing value; suppressed",
    "U": "Low reliability",
}
CONF_STATUS = {"C": "Confidential statistical information", "F": "Free"}
_COUNTS = ("n", "weighted", "se", "ci_low", "ci_high")


def dataflow(dataset: str) -> str:
    """The ``STRUCTURE_ID`` of a dataset's tables where its catalog declares none."""
    ident = re.sub(r"[^A-Za-z0-9_@$-]", "_", dataset) or "TABLE"
    return f"{AGENCY}:{ident}({VERSION})"


def declared(table: Published) -> SdmxStructure | None:
    """The SDMX structure the table's catalog declares (``[dataset.sdmx]``), or ``None``."""
    return table.catalog.sdmx if table.catalog is not None else None


def structure_id(table: Published) -> str:
    """The dataflow a table's SDMX messages name: the catalog's, or the table's own.

    The table's own is :func:`table_dataflow` (``TABLESAFE:DF_demo_3FA9...(1.0)``).
    """
    structure = declared(table)
    if structure is not None:
        return structure.reference
    return table_dataflow(table)


def table_codelists(table: Published) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """The table's coded dimensions: ``(SDMX id, name, [(code, label), ...])``, the statistic last.

    A dimension's codes are its categories in the table and the total
    ``_T``, as SDMX ids (:func:`sdmx_code`); the statistic's are the
    table's statistic columns with their names in words.
    """
    ids, stat_id = dimension_ids(table)
    out = []
    for d, ident in zip(table.dimensions, ids, strict=True):
        codes = [sdmx_code(c) for c in [*map(str, d.codes), TOTAL_CODE]]
        out.append((ident, d.label, list(zip(codes, [*d.labels, TOTAL_LABEL], strict=True))))
    out.append((stat_id, "Statistic", list(table.statistic_labels().items())))
    return out


def table_dataflow(table: Published) -> str:
    """The dataflow of the table's own structure: ``TABLESAFE:DF_<dataset>_<digest>(1.0)``.

    The digest hashes what the structure says (title, code lists, status
    codes): one structure, one dataflow, whatever the universe or the figures.
    """
    content = [table.title, table_codelists(table), OBS_STATUS, CONF_STATUS]
    digest = hashlib.sha256(json.dumps(content, ensure_ascii=False).encode()).hexdigest()
    ident = dataflow(str(table.metadata.get("dataset", ""))).split(":", 1)[1].split("(")[0]
    return f"{AGENCY}:DF_{ident}_{digest[:10].upper()}({VERSION})"


def dimension_ids(table: Published) -> tuple[list[str], str]:
    """The SDMX ids of the table's dimensions and of its statistic dimension.

    The catalog's ``[dataset.sdmx] dimensions`` where it maps a name, else the
    name; the statistic's id gets ``_`` added until no dimension has it.
    """
    structure = declared(table)
    ids = [structure.dimension_id(d.name) if structure else d.name for d in table.dimensions]
    stat = structure.dimension_id(STATISTIC_DIMENSION) if structure else STATISTIC_DIMENSION
    while stat.upper() in {i.upper() for i in ids}:
        stat += "_"
    return ids, stat


def _changes(table: Published, statistic: str) -> bool:
    """Whether the protection changes (or derives from changed) values of ``statistic``."""
    counts = str(table.mechanism.get("name", "none")) != "none"
    mags = table.metadata.get("magnitudes")
    sums = isinstance(mags, Mapping) and str(mags.get("method", "none")) != "none"
    if statistic in _COUNTS or statistic.startswith("percent_"):
        return counts
    if statistic.startswith("mean_"):
        return counts or sums
    return sums


def _missing(values: np.ndarray) -> np.ndarray:
    """Which values are not published: NaN, or ``None`` in an object column."""
    if values.dtype.kind == "f":
        out: np.ndarray = np.isnan(values)
        return out
    if values.dtype.kind == "O":
        return np.array([v is None or v != v for v in values.tolist()], dtype=bool)
    return np.zeros(values.shape, dtype=bool)


def _named(codes: np.ndarray, names: Mapping[str, str]) -> np.ndarray:
    """``ID: name`` for each code (SDMX-CSV's ``labels=both``); empty stays empty."""
    out = np.array([f"{c}: {names[c]}" if c else "" for c in codes.tolist()], dtype=object)
    return out


def _rows(table: Published) -> dict[str, np.ndarray]:
    """The observation columns: dimension positions, statistic, value, statuses, comment."""
    stats = table.statistics()
    names = list(stats)
    cells = np.nonzero(table.computed.reshape(-1))[0]
    n_cells, n_stats = len(cells), len(names)
    values = np.empty((n_cells, n_stats), dtype=object)
    obs = np.empty((n_cells, n_stats), dtype=object)
    conf = np.full((n_cells, n_stats), "F", dtype=object)
    comment = np.full((n_cells, n_stats), "", dtype=object)
    flags = dict(table.footnotes()["flags"])
    for s, name in enumerate(names):
        arr = stats[name].reshape(-1)[cells]
        col = arr.astype(object)
        missing = _missing(arr)
        col[missing] = None
        values[:, s] = col
        obs[:, s] = np.where(missing, "O", "E" if _changes(table, name) else "A")
        found = sensitive_flag(table, name)
        if found is not None:
            hit = found[1].reshape(-1)[cells]
            obs[hit & missing, s] = "Q"
            conf[hit & missing, s] = "C"
            comment[hit, s] = flags.get(f"sensitive_{found[0]}", "")
        unsure = unreliable_flag(table, name)
        if unsure is not None:
            # The precision rule: U, empty where the site shows "np", the value where it flags;
            # a standard error or interval that was never published (under the site's count)
            # stays O, missing, as for any other estimate.
            hit = unsure.reshape(-1)[cells] & ~missing
            obs[hit, s] = "U"
            if table.unreliable_display is not None:
                values[hit, s] = None
            comment[hit, s] = next(
                (str(v) for k, v in flags.items() if k == "np" or k.startswith("unreliable_")), ""
            )
        withheld = (table.suppressed_bases or {}).get(name)
        if withheld is not None:
            # A base the small-cell rule withholds is suppressed, as a count is: Q and C.
            hit = withheld.reshape(-1)[cells]
            obs[hit, s] = "Q"
            conf[hit, s] = "C"
            comment[hit, s] = flags.get("suppressed", WITHHELD)
    if table.suppressed is not None:
        hidden = table.suppressed.reshape(-1)[cells]
        values[hidden] = None
        obs[hidden] = "Q"
        conf[hidden] = "C"
        comment[hidden] = flags.get("suppressed", "")
    _withheld_rows(table, names, cells, flags, (values, obs, conf, comment))
    zero = table.structural_zero.reshape(-1)[cells]
    obs[zero] = "M"
    comment[zero] = flags["structural_zero"]
    multi = np.unravel_index(cells, table.shape)
    out: dict[str, np.ndarray] = {}
    for d, pos in zip(table.dimensions, multi, strict=True):
        out[d.name] = np.repeat(
            np.array([*map(str, d.codes), TOTAL_CODE], dtype=object)[pos], n_stats
        )
    out["STATISTIC"] = np.tile(np.array(names, dtype=object), n_cells)
    out["OBS_VALUE"] = values.reshape(-1)
    out["OBS_STATUS"] = obs.reshape(-1)
    out["CONF_STATUS"] = conf.reshape(-1)
    out["COMMENT_OBS"] = comment.reshape(-1)
    return out


def _withheld_rows(
    table: Published,
    names: list[str],
    cells: np.ndarray,
    flags: Mapping[str, Any],
    columns: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
) -> None:
    """Withheld figures missing and confidential (``Q``, ``C``); partial totals commented.

    A total of the cells published only keeps its value and statuses, with
    the flag's legend in COMMENT_OBS.

    ``columns``: the value, OBS_STATUS, CONF_STATUS and COMMENT_OBS of every
    cell (row) and statistic (column), changed in place.
    """
    figures = table.withheld_figures()
    if not figures:
        return
    values, obs, conf, comment = columns
    excluding = table.excludes_withheld
    for s, name in enumerate(names):
        hidden = figures[name].reshape(-1)[cells]
        values[hidden, s] = None
        obs[hidden, s] = "Q"
        conf[hidden, s] = "C"
        comment[hidden, s] = flags.get("withheld", "")
        if excluding is not None:
            total = excluding.reshape(-1)[cells] & ~hidden & (comment[:, s] == "")
            comment[total, s] = flags.get("excludes_withheld", "")


def sdmx_code(code: str) -> str:
    """A category code as an SDMX id: each character an id cannot hold as ``$`` and hex.

    SDMX ids hold ``A-Z a-z 0-9 _ @ $ -``; any other character (and ``$``
    itself) is written as ``$`` and the two hex digits of each of its UTF-8
    bytes, so ``90+`` is ``90$2B`` and no two codes meet: the codes read back.
    """
    return re.sub(r"[^A-Za-z0-9_@-]", lambda m: "".join(f"${b:02X}" for b in m[0].encode()), code)


def sdmx_codes(table: Published, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The rows with every dimension's codes written as SDMX ids (:func:`sdmx_code`)."""
    for d in table.dimensions:
        rows[d.name] = np.array([sdmx_code(c) for c in rows[d.name].tolist()], dtype=object)
    return rows


def _labelled(table: Published, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The rows with every code written ``ID: name`` (codes as SDMX ids already)."""
    stat_names = table.statistic_labels()
    for d in table.dimensions:
        codes = [sdmx_code(c) for c in [*map(str, d.codes), TOTAL_CODE]]
        names = dict(zip(codes, [*d.labels, TOTAL_LABEL], strict=True))
        rows[d.name] = _named(rows[d.name], names)
    rows["STATISTIC"] = _named(rows["STATISTIC"], stat_names)
    rows["OBS_STATUS"] = _named(rows["OBS_STATUS"], OBS_STATUS)
    rows["CONF_STATUS"] = _named(rows["CONF_STATUS"], CONF_STATUS)
    return rows


def sdmx_csv(table: Published, *, footnotes: bool = True, labels: bool = False) -> str:
    """The table as an SDMX-CSV 2.0 data message.

    Args:
        table: The protected table.
        footnotes: Add the dataset-level ``TITLE`` and ``COMMENT_DSET`` (a first row);
            always there for an unprotected table (its title says ``UNPROTECTED``).
        labels: Write ``ID: name`` for every column header and code.
    """
    meta = table.public_metadata()
    rows = sdmx_codes(table, _rows(table))
    if labels:
        rows = _labelled(table, rows)
    ids, stat_id = dimension_ids(table)
    rename = {d.name: i for d, i in zip(table.dimensions, ids, strict=True)}
    rows = {(stat_id if k == "STATISTIC" else rename.get(k, k)): v for k, v in rows.items()}
    n = len(rows["OBS_VALUE"])
    structure = structure_id(table)
    if labels:
        structure = f"{structure}: {meta['title']}"
    head: dict[str, Any] = {}
    # An unprotected table always says so in its title, footnotes asked or not.
    footnotes = footnotes or not table.protected
    if footnotes:
        # Dataset-level attributes: a first row attached to no key (every dimension empty).
        statement = [f"Universe: {meta['universe_label']}.", *meta["footnotes"]["statement"]]
        rows["TITLE"] = np.full(n, "", dtype=object)
        rows["COMMENT_DSET"] = np.full(n, "", dtype=object)
        head = {"TITLE": meta["title"], "COMMENT_DSET": " ".join(statement)}
    columns: dict[str, np.ndarray] = {
        "STRUCTURE": np.full(n, "dataflow", dtype=object),
        "STRUCTURE_ID": np.full(n, structure, dtype=object),
        "ACTION": np.full(n, "I", dtype=object),
        **rows,
    }
    if footnotes:
        first = {"STRUCTURE": "dataflow", "STRUCTURE_ID": structure, "ACTION": "I", **head}
        columns = {
            k: np.concatenate([np.array([first.get(k, "")], dtype=object), v])
            for k, v in columns.items()
        }
    if labels:
        names = {i: d.label for d, i in zip(table.dimensions, ids, strict=True)}
        columns = {_header(k, names, stat_id): v for k, v in columns.items()}
    return to_csv(columns)


_ATTRIBUTE_NAMES = {
    "OBS_VALUE": "Observation value",
    "OBS_STATUS": "Observation status",
    "CONF_STATUS": "Confidentiality status",
    "COMMENT_OBS": "Observation comment",
    "TITLE": "Title",
    "COMMENT_DSET": "Dataset comment",
}


def _header(column: str, dims: Mapping[str, str], stat_id: str) -> str:
    """A column header with its name (``labels=both``); the structure columns stay as they are."""
    name = dims.get(column) or _ATTRIBUTE_NAMES.get(column)
    if column == stat_id:
        name = "Statistic"
    return f"{column}: {name}" if name else column
