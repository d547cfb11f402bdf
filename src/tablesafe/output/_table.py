"""Protected tables: what a user receives.

A :class:`ProtectedTable` holds protected values only: perturbed sample
counts, adjusted weighted counts, per-cell flags and the public description
of the protection. It never holds a true value, a cell key or a seed, so
every export of it is safe to publish.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from tablesafe._errors import FormatError
from tablesafe._request import TableRequest
from tablesafe._rounding import Rounding
from tablesafe.catalog._magnitudes import read_base_column
from tablesafe.cells._plan import DimensionPlan
from tablesafe.output._describe import file_stem, statistic_label, title, universe_label
from tablesafe.output._footnotes import footnote_lines, footnotes
from tablesafe.output._formats import WriteOptions, output_format
from tablesafe.output._published import estimate_companions, figure_masks
from tablesafe.output._render import (
    EXCLUDES_WITHHELD_MARK,
    UNPROTECTED,
    UNPROTECTED_TITLE,
    WITHHELD_MARK,
    iter_json,
    long_rows,
    render_text,
    to_csv,
    to_json,
    to_json_bytes,
)
from tablesafe.output._workbook import table_workbook

if TYPE_CHECKING:
    import pandas as pd

    from tablesafe.catalog import Catalog

__all__ = ["ProtectedTable"]


@dataclass(frozen=True, eq=False)
class ProtectedTable:
    """A protected frequency table: inner cells, margins, flags and metadata.

    Arrays have the extended shape ``(s_1 + 1, ..., s_k + 1)`` (the last slot
    of each axis is that dimension's total); ``computed`` marks the cells
    the request asked for.

    Attributes:
        request: The request the table answers.
        dimensions: The table's dimensions.
        computed: Which cells are part of the table.
        counts: Protected sample counts (int64), or ``None`` if not requested.
        weighted: Protected weighted counts (float64), or ``None``.
        perturbed: Cells whose count the mechanism changed.
        adjusted: Cells changed by the additivity step (IPF and rounding).
        structural_zero: Cells that cannot hold records (never perturbed).
        mechanism: The public description of the protection.
        metadata: Further public facts: dataset, additivity option and its
            iterations, the mean weight used for weighted counts.
        replicate_weighted: Protected replicate weighted counts ``(R, ...)``
            for variance estimation, or ``None``.
        suppressed: Cells hidden by the small-cell rule (their values are
            blank, or ``"<k"``, in every export), or ``None``.
        se: Replicate standard errors of the protected weighted counts, rounded,
            NaN where not published (too few protected records), or ``None``.
        suppressed_display: What suppressed cells show: ``None`` (blank) or ``"<k"``.
        ci_low: Lower ends of the 95% confidence intervals (as ``se``), or ``None``.
        ci_high: Upper ends of the 95% confidence intervals, or ``None``.
        roundings: The roundings of the weighted figures, in order: the site's,
            then the request's where it asked for another.
        percentages: Row, column or total percentages of the published
            weighted counts (of the counts in a table without weights), by
            column name (``percent_row``...), each followed by its standard
            error and interval (``percent_row_se``, ``percent_row_ci_low``,
            ``percent_row_ci_high``) where the table has replicates; NaN where
            blank; or ``None``.
        magnitudes: Protected sums and means of continuous variables, by
            column name (``sum_VAR``, ``mean_VAR``; NaN where blank), or ``None``.
        sensitive: Cells the dominance or p% rule flags, by magnitude name, or ``None``.
        unreliable: Estimates the precision rule finds too unreliable, by statistic
            column (``weighted``, ``percent_row``, ``mean_VAR``...), or ``None``.
        base_counts: The protected counts behind each cell's estimates (for the
            precision rule; not exported: a request may not ask for counts), or ``None``.
        suppressed_bases: By column, cells the small-cell rule withholds beyond
            ``suppressed``: a base (``n_VAR``, ``weighted_VAR``) of 1 to
            ``min_cell_size - 1`` records with a value, in a cell whose own count
            is shown (SDMX ``Q``/``C``, JSON-stat ``Q``), or ``None``.
        estimate_counts: By magnitude or quantile column, the protected counts
            its estimates rest on where they differ from ``base_counts``: a
            variable with item non-response rests on its base, the records
            holding a value (for the precision rule; not exported), or ``None``.
        unreliable_display: What an unreliable estimate, its standard error and
            interval show: ``"np"``, or ``None`` (published, with an
            ``unreliable_STATISTIC`` flag column).
        catalog: The catalog the table was built from (public: labels, hierarchies,
            magnitudes' units), for the outputs' words; ``None`` describes by codes.
        protected: Whether every figure is protected, as the builder's protection
            says (:meth:`~tablesafe.TableBuilder.protects`); an unprotected table
            says so in every format (``"protected": false``, an ``UNPROTECTED``
            title, and a first ``#`` line in CSV).
        withheld: Cells left out because publishing them would let differences
            of published figures isolate a few records (:mod:`tablesafe.output._withheld`):
            every statistic blank, in every export; or ``None``.
        excludes_withheld: Margins that add up only the cells published (some
            of their cells are withheld), or ``None``.
    """

    request: TableRequest
    dimensions: tuple[DimensionPlan, ...]
    computed: npt.NDArray[np.bool_]
    counts: npt.NDArray[np.int64] | None
    weighted: npt.NDArray[np.float64] | None
    perturbed: npt.NDArray[np.bool_]
    adjusted: npt.NDArray[np.bool_]
    structural_zero: npt.NDArray[np.bool_]
    mechanism: Mapping[str, Any]
    metadata: Mapping[str, Any] = field(default_factory=dict)
    replicate_weighted: npt.NDArray[np.float64] | None = None
    suppressed: npt.NDArray[np.bool_] | None = None
    se: npt.NDArray[np.float64] | None = None
    suppressed_display: str | None = None
    ci_low: npt.NDArray[np.float64] | None = None
    ci_high: npt.NDArray[np.float64] | None = None
    roundings: tuple[Rounding, ...] = ()
    percentages: Mapping[str, npt.NDArray[np.float64]] | None = None
    magnitudes: Mapping[str, npt.NDArray[np.float64]] | None = None
    sensitive: Mapping[str, npt.NDArray[np.bool_]] | None = None
    unreliable: Mapping[str, npt.NDArray[np.bool_]] | None = None
    unreliable_display: str | None = None
    base_counts: npt.NDArray[np.int64] | None = field(default=None, repr=False)
    estimate_counts: Mapping[str, npt.NDArray[np.int64]] | None = field(default=None, repr=False)
    suppressed_bases: Mapping[str, npt.NDArray[np.bool_]] | None = None
    catalog: Catalog | None = field(default=None, repr=False)
    protected: bool = field(kw_only=True)
    withheld: npt.NDArray[np.bool_] | None = None
    excludes_withheld: npt.NDArray[np.bool_] | None = None
    #: A partly withheld table's nearest passing alternatives, where a door asked for them
    #: (no format writes them: the table's bytes stay a function of its request).
    alternatives: tuple[Any, ...] = field(default=(), repr=False)

    @property
    def shape(self) -> tuple[int, ...]:
        """The extended shape."""
        return self.computed.shape

    @property
    def inner(self) -> tuple[slice, ...]:
        """Index of the inner cells in the extended arrays."""
        return tuple(slice(0, d.size) for d in self.dimensions)

    def statistics(self) -> dict[str, np.ndarray]:
        """Statistic name -> extended array.

        ``n`` and ``weighted``, and, when the request asked for replicates,
        ``se`` (the weighted count's standard error: the replicates' variance
        plus the protection's) and the 95% confidence interval ``ci_low``,
        ``ci_high`` (NaN where not published); then the percentages
        (``percent_row``...) and the sums and means, each followed by its
        ``_se``, ``_ci_low``, ``_ci_high`` where asked. Weighted figures
        rounded to whole units are integers.
        """
        out: dict[str, np.ndarray] = {}
        whole = self._whole()
        if self.counts is not None:
            out["n"] = self.counts
        if self.weighted is not None:
            out["weighted"] = self.weighted.astype(np.int64) if whole else self.weighted
            for name, arr in (("se", self.se), ("ci_low", self.ci_low), ("ci_high", self.ci_high)):
                if arr is not None:
                    out[name] = _whole_or_nan(arr) if whole else arr
        for name, arr in (self.percentages or {}).items():
            out[name] = arr
        for name, arr in (self.magnitudes or {}).items():
            # A base (n_VAR, weighted_VAR in whole units) is a count: integers, blanks None.
            base = read_base_column(name) is not None and (name.startswith("n_") or whole)
            out[name] = _whole_or_nan(arr) if base and arr.dtype.kind == "f" else arr
        return out

    @property
    def rounding(self) -> str | None:
        """The roundings in words for people: ``"1"``, or ``"1, then 1000"``."""
        return ", then ".join(str(r) for r in self.roundings) if self.roundings else None

    def _whole(self) -> bool:
        return bool(self.roundings) and all(r.whole for r in self.roundings)

    def shown_statistics(self) -> dict[str, np.ndarray]:
        """Statistics as shown to people (text, the XLSX's cross-tabs).

        Suppressed cells blank (``None``) or ``"<k"``; a withheld figure
        (:meth:`withheld_figures`) the mark ``c``
        (:data:`~tablesafe.output._render.WITHHELD_MARK`).
        """
        shown = self.published(self.statistics())
        for name, mask in self.withheld_figures().items():
            if name in shown and mask.any():
                values = shown[name].astype(object)
                values[mask] = WITHHELD_MARK
                shown[name] = values
        return shown

    def withheld_figures(self) -> dict[str, npt.NDArray[np.bool_]]:
        """Per statistic, the computed cells whose figure is withheld; empty if none is.

        Every statistic of a withheld cell, a percentage of a withheld
        denominator, a sum, mean or quantile of a total that leaves withheld
        cells out (:func:`tablesafe.output._published.figure_masks`).
        """
        if self.withheld is None or not self.withheld.any():
            return {}
        masks = figure_masks(
            list(self.statistics()),
            self.withheld,
            self.excludes_withheld,
            frozenset(self.magnitudes or {}),
        )
        return {name: mask & self.computed for name, mask in masks.items()}

    def published(
        self, statistics: Mapping[str, np.ndarray], cells: npt.NDArray[np.intp] | None = None
    ) -> dict[str, np.ndarray]:
        """``statistics`` (:meth:`statistics`' arrays) as published, at some cells or all.

        Args:
            statistics: Statistic name -> extended array.
            cells: Flat positions in the extended shape: the values there, as
                1-D arrays (a streamed writer's piece); all cells, in the
                extended shape, when None.
        """

        def at(values: np.ndarray) -> np.ndarray:
            return values if cells is None else values.reshape(-1)[cells]

        cols = {name: at(values) for name, values in statistics.items()}
        for name in (
            "se",
            "ci_low",
            "ci_high",
            *(self.percentages or {}),
            *(self.magnitudes or {}),
        ):
            if name in cols and cols[name].dtype.kind == "f" and np.isnan(cols[name]).any():
                values = cols[name].astype(object)
                values[np.isnan(cols[name])] = None
                cols[name] = values
        if self.unreliable_display is not None:
            for name, unreliable in (self.unreliable or {}).items():
                flag = at(unreliable)
                for column in (name, *estimate_companions(name)):
                    if column in cols and flag.any():
                        values = cols[column].astype(object)
                        values[flag] = self.unreliable_display
                        cols[column] = values
        if self.suppressed is not None and self.suppressed.any():
            shown, suppressed = self.suppressed_display, at(self.suppressed)
            for name in list(cols):
                values = cols[name].astype(object)
                values[suppressed] = shown
                cols[name] = values
        if self.withheld is not None and self.withheld.any():
            hidden = at(self.withheld)
            for name in list(cols):
                values = cols[name].astype(object)
                values[hidden] = None
                cols[name] = values
        return cols

    def to_frame(
        self, *, labels: bool = False, flags: bool = True, owner: bool = False
    ) -> pd.DataFrame:
        """Long DataFrame: one row per cell, ``_T`` codes for totals, statistics and flags.

        Args:
            labels: Add a ``<name>_label`` column per dimension.
            flags: Add the public flags ``structural_zero`` and ``suppressed``.
            owner: Also add ``perturbed`` and ``adjusted``. These tell which
                published values are exact, which weakens the protection
                (under DP it breaks the privacy guarantee): for the data
                owner's evaluation only, never for publication.
        """
        import pandas as pd

        return pd.DataFrame(self.long_columns(labels=labels, flags=flags, owner=owner))

    def long_columns(
        self, *, labels: bool = False, flags: bool = True, owner: bool = False
    ) -> dict[str, np.ndarray]:
        """The columns of :meth:`to_frame` as numpy arrays (no pandas needed)."""
        return self.long_rows(
            np.flatnonzero(self.computed), labels=labels, flags=flags, owner=owner
        )

    def long_rows(
        self,
        cells: npt.NDArray[np.intp],
        *,
        labels: bool = False,
        flags: bool = True,
        owner: bool = False,
        statistics: Mapping[str, np.ndarray] | None = None,
    ) -> dict[str, np.ndarray]:
        """The rows of :meth:`long_columns` at some computed cells (a streamed writer's piece).

        Args:
            cells: Flat positions of computed cells in the extended shape, ascending.
            labels: Add a ``<name>_label`` column per dimension.
            flags: Add the public flags (as :meth:`to_frame`).
            owner: Add the owner's flags (as :meth:`to_frame`).
            statistics: :meth:`statistics`, computed once for every piece (default: now).
        """
        cols = self.published(self.statistics() if statistics is None else statistics, cells)

        def at(values: np.ndarray) -> np.ndarray:
            return values.reshape(-1)[cells]

        if flags:
            cols["structural_zero"] = at(self.structural_zero)
            if self.suppressed is not None:
                cols["suppressed"] = at(self.suppressed)
            if self.withheld is not None:
                cols["withheld"] = at(self.withheld)
            if self.excludes_withheld is not None:
                cols["excludes_withheld"] = at(self.excludes_withheld)
            for name, flag in (self.sensitive or {}).items():
                cols[f"sensitive_{name}"] = at(flag)
            if self.unreliable_display is None:
                for name, flag in (self.unreliable or {}).items():
                    cols[f"unreliable_{name}"] = at(flag)
        if owner:
            cols["perturbed"] = at(self.perturbed)
            cols["adjusted"] = at(self.adjusted)
        return long_rows(self.dimensions, self.computed.shape, cells, cols, labels=labels)

    @property
    def title(self) -> str:
        """The table's statistics by its dimensions, in words (the catalog's labels)."""
        words = title(
            [d.label for d in self.dimensions], list(self.statistics()), self.catalog, self.metadata
        )
        return words if self.protected else f"{UNPROTECTED_TITLE}: {words}"

    @property
    def universe_label(self) -> str:
        """The universe in words: ``"Region is North or North East"``, or ``"All records"``."""
        return universe_label(self.request, self.catalog)

    def statistic_labels(self) -> dict[str, str]:
        """Each statistic column of :meth:`statistics` in words, in order."""
        return {s: statistic_label(s, self.catalog, self.metadata) for s in self.statistics()}

    def file_stem(self) -> str:
        """A file name for the table's downloads, without extension: ``AGEGRP-by-SEX-North``."""
        return file_stem([d.name for d in self.dimensions], self.request, self.catalog)

    def public_metadata(self) -> dict[str, Any]:
        """Everything published with the table besides its cells.

        ``title`` and ``universe_label`` say in words what the table holds and
        the population it covers; ``universe`` gives the same conditions as codes;
        ``statistics`` names each statistic column in words; ``file_stem`` is
        the name of the table's downloads, without extension.
        """
        return {
            "protected": self.protected,
            "title": self.title,
            "file_stem": self.file_stem(),
            "dimensions": [d.name for d in self.dimensions],
            "universe": {k: list(v) for k, v in self.request.universe.items()},
            "universe_label": self.universe_label,
            "statistic": str(self.request.statistic),
            "statistics": self.statistic_labels(),
            "mechanism": dict(self.mechanism),
            **dict(self.metadata),
            "footnotes": self.footnotes(),
        }

    def footnotes(self) -> dict[str, Any]:
        """The plain-language statement of the protection, the flag legend and the citation.

        Built from public facts only (see :mod:`tablesafe.output._footnotes`).
        """
        return footnotes(
            self.mechanism,
            self.metadata,
            statistic=self.request.statistic,
            roundings=self.roundings,
            suppressed_display=self.suppressed_display,
            magnitudes=self.request.magnitudes,
        )

    def to_csv(self, *, footnotes: bool = False, labels: bool = False) -> str:
        """CSV text, one row per cell, with exact numbers.

        Args:
            footnotes: Append the footnotes after the cells: a blank line,
                then one line per sentence starting with ``#``, the universe
                first (read the cells back with ``pandas.read_csv(..., comment="#")``).
            labels: Add a ``<name>_label`` column after each dimension's codes
                (custom groups' labels included; ``Total`` for a total).
        """
        text = self.unprotected_line() + to_csv(self.long_columns(labels=labels))
        return text + "\n" + self.footnote_comments() if footnotes else text

    def unprotected_line(self) -> str:
        """CSV's first line for an unprotected table (``# UNPROTECTED ...``); empty otherwise."""
        return "" if self.protected else f"# {UNPROTECTED}\n"

    def to_json(self) -> str:
        """JSON text: ``{"meta": ..., "cells": [...]}``."""
        return to_json(self.long_columns(), self.public_metadata())

    def to_json_bytes(self) -> bytes:
        """:meth:`to_json` as UTF-8 bytes."""
        return to_json_bytes(self.long_columns(), self.public_metadata())

    def iter_json(self) -> Iterator[bytes]:
        """:meth:`to_json_bytes` in pieces, for a streamed response (joined: the same bytes)."""
        return iter_json(self.long_columns(), self.public_metadata())

    def to_xlsx(self, path: str | Path, *, labels: bool = False) -> Path:
        """Write an Excel workbook (:meth:`to_xlsx_bytes`) to ``path`` (ending in ``.xlsx``)."""
        path = Path(path)
        if path.suffix.lower() != ".xlsx":
            raise FormatError(f"an Excel export must end in .xlsx, not {path.suffix!r}")
        path.write_bytes(self.to_xlsx_bytes(labels=labels))
        return path

    def to_xlsx_bytes(self, *, labels: bool = False) -> bytes:
        """The Excel workbook as bytes, identical for identical tables.

        One sheet per statistic laid out as the cross-tab the page shows
        (rows by columns, layers as blocks, labels, the title and universe
        above, the protection statement below), then ``cells`` (one row per
        cell: codes, with ``labels`` a ``<name>_label`` column beside each
        dimension's, as in :meth:`to_csv`) and ``about`` (the table in words,
        its source, notes, flag legend and settings); see
        :mod:`tablesafe.output._workbook`.
        Written with no document properties and a fixed date on the zip
        entries (:mod:`tablesafe.output._xlsx`), so the same table always gives
        the same bytes (the API promises byte-identical answers).
        """
        return table_workbook(self, labels=labels)

    def render(self, fmt: str = "text", *, labels: bool = False) -> str:
        """Render in a text format of the registry: ``text``, ``csv``, ``json``, ``jsonstat``...

        The formats are :mod:`tablesafe.output._formats`'; the footnotes are in JSON's
        meta and JSON-stat's note, and not appended to text, CSV or SDMX-CSV.

        Args:
            fmt: The format's name.
            labels: Add the category labels beside the codes (CSV, SDMX-CSV).

        Raises:
            RequestError: for an unknown format, or a binary one (``xlsx``: use
                :meth:`to_xlsx_bytes`).
        """
        out = output_format(fmt, binary=False).write(
            self, WriteOptions(footnotes=False, labels=labels)
        )
        assert isinstance(out, str)
        return out

    def render_text(self, *, footnotes: bool = False) -> str:
        """The table as readable text (via rich), with its footnotes as ``#`` lines if asked.

        Headed by the title and the universe in words, each statistic named in
        words (:meth:`statistic_labels`), then the dataset.
        """
        dataset = str(self.metadata.get("dataset", ""))
        if self.catalog is not None and self.catalog.title:
            dataset = f"{self.catalog.title} ({dataset})"
        mech = ", ".join(f"{k}={_flat(v)}" for k, v in self.mechanism.items())
        meta = self.metadata
        caption = f"protection: {mech}\nadditivity: {meta.get('additivity', '')}" + (
            f"\nweighted figures: {meta['weighted']['method']}, rounding {self.rounding}"
            if "weighted" in meta
            else ""
        )
        caption += "".join(f"\n{line}" for line in self.mark_legend())
        text = render_text(
            self.dimensions,
            self.shown_statistics(),
            self.computed,
            title=f"{self.title}\nUniverse: {self.universe_label}\nDataset: {dataset}",
            caption=caption,
            labels=self.statistic_labels(),
            excluding=self.excludes_withheld,
        )
        return text + ("\n" + self.footnote_comments() if footnotes else "")

    def mark_legend(self) -> list[str]:
        """What the marks of withheld figures mean, from the footnotes' flags (text, XLSX).

        ``c: withheld: ...`` where a figure is withheld, ``t: a total of the
        cells published only ...`` where a total leaves withheld cells out.
        """
        if not self.withheld_figures():
            return []
        flags = self.footnotes()["flags"]
        lines = [f"{WITHHELD_MARK}: {flags.get('withheld', 'withheld')}"]
        if self.excludes_withheld is not None and self.excludes_withheld.any():
            meaning = flags.get("excludes_withheld", "excludes_withheld")
            lines.append(f"{EXCLUDES_WITHHELD_MARK}: {meaning}")
        return lines

    def footnote_comments(self) -> str:
        """The universe and the footnotes as ``#`` lines, one per sentence (CSV and text)."""
        lines = [f"Universe: {self.universe_label}.", *footnote_lines(self.footnotes())]
        return "".join(f"# {line.replace(chr(10), ' ')}\n" for line in lines)


def _whole_or_nan(a: np.ndarray) -> np.ndarray:
    """Whole numbers as Python ints in an object array, NaN as None (not published)."""
    if not np.isnan(a).any():
        return a.astype(np.int64)
    out = a.astype(object)
    mask = np.isnan(a)
    out[~mask] = a[~mask].astype(np.int64)
    out[mask] = None
    return out


def _flat(v: object) -> object:
    if isinstance(v, Mapping | list | tuple):
        buf = io.StringIO()
        buf.write(str(v))
        return buf.getvalue()
    return v
