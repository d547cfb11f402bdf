"""The ``tablesafe`` command line.

Each command group lives in its own module and registers itself on
:data:`app` here; :func:`main` maps tablesafe errors to a one-line message
on standard error and an exit code (2 for user errors, 1 for the rest). Usage errors are
typer's own (exit code 2).
"""

from __future__ import annotations

import sys

import typer

from tablesafe._errors import TablesafeError, UserError

app = typer.Typer(
    name="tablesafe",
    help="Flexible table builder for confidential microdata.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    # Imported for their side effect of adding commands to ``app``; kept in a
    # function so that importing this module stays cheap and cycle-free.
    from tablesafe._cli import (  # noqa: F401
        _attack,
        _catalog,
        _cyclic,
        _data,
        _evaluate,
        _postprocess,
        _ptable,
        _reconstruct,
        _replicates,
        _reproduce,
        _resample,
        _server,
        _table,
    )


def get_app() -> typer.Typer:
    """Return the command-line application with every command group registered."""
    _register()
    return app


def main() -> None:
    """Run the command line; the entry point of the ``tablesafe`` command."""
    try:
        get_app()()
    except TablesafeError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2 if isinstance(exc, UserError) else 1)


@app.callback()
def _root() -> None:
    """Flexible table builder for confidential microdata."""


@app.command()
def version() -> None:
    """Print the version of tablesafe."""
    from tablesafe import __version__

    typer.echo(__version__)
