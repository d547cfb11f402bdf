"""The output formats of a protected table, registered in one place.

Like Datasette's output renderers, each format is one :class:`OutputFormat`
in a registry: its name (what ``--format`` and the API's ``format`` take),
media type, file extension, and how it writes a table. The command line,
the server and :meth:`~tablesafe.ProtectedTable.render` look formats up
here, so a new format (JSON-stat, SDMX) is one :func:`register_format` call
and every interface offers it.

The built-in formats: ``text`` (a readable table, the command line's
default), ``csv`` (one row per cell), ``json`` (``{"meta", "cells"}``,
streamed by the server) and ``xlsx`` (a workbook, binary).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from tablesafe._errors import ParameterError, RequestError

__all__ = ["OutputFormat", "format_names", "output_format", "register_format"]


class PublishedTable(Protocol):
    """What a format reads of a table (:class:`~tablesafe.ProtectedTable` provides it)."""

    def to_csv(self, *, footnotes: bool = False) -> str: ...

    def to_json(self) -> str: ...

    def iter_json(self) -> Iterator[bytes]: ...

    def to_xlsx_bytes(self) -> bytes: ...

    def render_text(self, *, footnotes: bool = False) -> str: ...


@dataclass(frozen=True)
class OutputFormat:
    """One output format of a protected table.

    Attributes:
        name: The format's name in ``--format`` and the API's ``format``.
        media_type: Its HTTP media type.
        extension: Its file extension (without the dot).
        write: ``write(table, footnotes)``: the whole document, text or bytes.
        stream: Optionally, the document in pieces (the server streams them).
        binary: Whether the document is bytes (not printable on a terminal).
        served: Whether the HTTP API offers it.
    """

    name: str
    media_type: str
    extension: str
    write: Callable[[Any, bool], str | bytes]
    stream: Callable[[Any], Iterator[bytes]] | None = None
    binary: bool = False
    served: bool = True


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


def _text(table: PublishedTable, footnotes: bool) -> str:
    return table.render_text(footnotes=footnotes)


def _csv(table: PublishedTable, footnotes: bool) -> str:
    return table.to_csv(footnotes=footnotes)


def _json(table: PublishedTable, footnotes: bool) -> str:
    # The footnotes are always in the document's meta.
    return table.to_json() + "\n"


def _json_stream(table: PublishedTable) -> Iterator[bytes]:
    return table.iter_json()


def _xlsx(table: PublishedTable, footnotes: bool) -> bytes:
    # The footnotes are always in the workbook's "about" sheet.
    return table.to_xlsx_bytes()


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
