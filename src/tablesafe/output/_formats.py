"""The output formats of a protected table, registered in one place.

Like Datasette's output renderers, each format is one :class:`OutputFormat`
in a registry: its name (what ``--format`` and the API's ``format`` take),
media type, file extension, and how it writes a table. The command line,
the server and :meth:`~tablesafe.ProtectedTable.render` look formats up
here, so a new format (JSON-stat, SDMX) is one :func:`register_format` call
and every interface offers it.

The built-in formats: ``text`` (a readable table, the command line's
default), ``csv`` (one row per cell), ``json`` (``{"meta", "cells"}``,
streamed by the server), ``xlsx`` (a workbook, binary), ``jsonstat``
(a JSON-stat 2.0 dataset), ``sdmx-csv`` (an SDMX-CSV 2.0 data message)
and ``sdmx-json`` (an SDMX-JSON 2.0 data message), and ``sdmx-structure``
(an SDMX-ML 2.1 structure message: what an SDMX client reads those two with).
A format writes a table with :class:`WriteOptions`: whether to add the
footnotes, and whether to add the category labels beside the codes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from tablesafe._errors import ParameterError, RequestError
from tablesafe.output._jsonstat import jsonstat_bytes
from tablesafe.output._sdmx import sdmx_csv
from tablesafe.output._sdmx_json import sdmx_json_bytes
from tablesafe.output._sdmx_structure import sdmx_structure

__all__ = ["OutputFormat", "WriteOptions", "format_names", "output_format", "register_format"]


class PublishedTable(Protocol):
    """What a format reads of a table (:class:`~tablesafe.ProtectedTable` provides it)."""

    def to_csv(self, *, footnotes: bool = False, labels: bool = False) -> str: ...

    def to_json(self) -> str: ...

    def iter_json(self) -> Iterator[bytes]: ...

    def to_xlsx_bytes(self, *, labels: bool = False) -> bytes: ...

    def render_text(self, *, footnotes: bool = False) -> str: ...


@dataclass(frozen=True)
class WriteOptions:
    """How a format writes a table.

    Attributes:
        footnotes: Add the footnotes where the format keeps them apart from
            the cells (the CSV's ``#`` lines, SDMX-CSV's dataset attributes);
            JSON, JSON-stat and XLSX always carry them.
        labels: Add the category labels beside the codes (CSV and the
            XLSX's ``cells`` sheet: a ``<name>_label`` column per dimension;
            SDMX-CSV: ``ID: name``).
    """

    footnotes: bool = True
    labels: bool = False


@dataclass(frozen=True)
class OutputFormat:
    """One output format of a protected table.

    Attributes:
        name: The format's name in ``--format`` and the API's ``format``.
        media_type: Its HTTP media type.
        extension: Its file extension (without the first dot): ``sdmx.csv`` for
            SDMX-CSV, so that a table's CSV and SDMX-CSV (or JSON, JSON-stat
            and SDMX-JSON) downloaded side by side keep different names.
        write: ``write(table, options)``: the whole document, text or bytes.
        stream: Optionally, the document in pieces (the server streams them).
        binary: Whether the document is bytes (not printable on a terminal).
        served: Whether the HTTP API offers it.
    """

    name: str
    media_type: str
    extension: str
    write: Callable[[Any, WriteOptions], str | bytes]
    stream: Callable[[Any], Iterator[bytes]] | None = None
    binary: bool = False
    served: bool = True

    def served_bytes(self, table: Any, options: WriteOptions) -> bytes:
        """The bytes the HTTP API answers for ``table``: the stream joined, where it streams."""
        if self.stream is not None:
            return b"".join(self.stream(table))
        data = self.write(table, options)
        return data.encode() if isinstance(data, str) else data


_REGISTRY: dict[str, OutputFormat] = {}


def register_format(fmt: OutputFormat) -> None:
    """Add an output format to every interface.

    Raises:
        ParameterError: if a format of that name is registered already.
    """
    if fmt.name in _REGISTRY:
        raise ParameterError(f"an output format named {fmt.name!r} is registered already")
    _REGISTRY[fmt.name] = fmt


def format_names(*, served: bool = False, binary: bool = True) -> tuple[str, ...]:
    """The registered formats' names, in registration order.

    Args:
        served: Only those the HTTP API offers.
        binary: Include formats whose documents are bytes.
    """
    return tuple(
        f.name for f in _REGISTRY.values() if (f.served or not served) and (binary or not f.binary)
    )


def output_format(name: str, *, served: bool = False, binary: bool = True) -> OutputFormat:
    """The format named ``name``.

    Args:
        name: Its name.
        served: Look among the formats the HTTP API offers only.
        binary: Allow formats whose documents are bytes.

    Raises:
        RequestError: for an unknown (or, as asked, unserved or binary) format,
            naming those allowed.
    """
    allowed = format_names(served=served, binary=binary)
    if name not in allowed:
        raise RequestError(f"unknown format {name!r}; allowed: {', '.join(allowed)}")
    return _REGISTRY[name]


def _text(table: PublishedTable, options: WriteOptions) -> str:
    return table.render_text(footnotes=options.footnotes)


def _csv(table: PublishedTable, options: WriteOptions) -> str:
    return table.to_csv(footnotes=options.footnotes, labels=options.labels)


def _json(table: PublishedTable, options: WriteOptions) -> str:
    # The footnotes are always in the document's meta.
    return table.to_json() + "\n"


def _json_stream(table: PublishedTable) -> Iterator[bytes]:
    return table.iter_json()


def _xlsx(table: PublishedTable, options: WriteOptions) -> bytes:
    # The footnotes are always in the workbook's "about" sheet.
    return table.to_xlsx_bytes(labels=options.labels)


def _jsonstat(table: Any, options: WriteOptions) -> str:
    # The footnotes are always in the dataset's note and extension.

    return jsonstat_bytes(table).decode()


def _sdmx_json(table: Any, options: WriteOptions) -> str:
    # The footnotes are always in the data set's attributes.

    return sdmx_json_bytes(table).decode()


def _sdmx_structure(table: Any, options: WriteOptions) -> str:
    # The code lists, concepts, DSD and dataflow the SDMX data messages name.

    return sdmx_structure(table).decode()


def _sdmx_csv(table: Any, options: WriteOptions) -> str:
    return sdmx_csv(table, footnotes=options.footnotes, labels=options.labels)


register_format(OutputFormat("text", "text/plain; charset=utf-8", "txt", _text, served=False))
register_format(OutputFormat("csv", "text/csv; charset=utf-8", "csv", _csv))
register_format(OutputFormat("json", "application/json", "json", _json, stream=_json_stream))
register_format(
    OutputFormat(
        "xlsx",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "xlsx",
        _xlsx,
        binary=True,
    )
)
# JSON-stat has no media type of its own: json-stat.org serves it as JSON.
register_format(OutputFormat("jsonstat", "application/json", "jsonstat.json", _jsonstat))
register_format(
    OutputFormat(
        "sdmx-csv",
        "application/vnd.sdmx.data+csv; version=2.0.0; charset=utf-8",
        "sdmx.csv",
        _sdmx_csv,
    )
)
register_format(
    OutputFormat(
        "sdmx-json", "application/vnd.sdmx.data+json; version=2.0.0", "sdmx.json", _sdmx_json
    )
)
# The structure of the two SDMX data messages above: what an SDMX client reads them with.
register_format(
    OutputFormat(
        "sdmx-structure",
        "application/vnd.sdmx.structure+xml; version=2.1",
        "structure.xml",
        _sdmx_structure,
    )
)
