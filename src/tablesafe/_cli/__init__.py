"""The ``tablesafe`` command line.

Each command group lives in its own module and registers itself on
:data:`app` here; :func:`main` maps tablesafe errors to a one-line message
on standard error and an exit code (2 for user errors, 1 for the rest). Usage errors are
typer's own (exit code 2).
"""

from __future__ import annotations

import importlib
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


#: Each top-level command or group, and the modules that define it (and its
#: subcommands). Running one command imports only its modules, so typer turns
#: only its signatures into options (a test checks this map against the full
#: registration).
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "api-key": ("_server",),
    "attack": ("_attack", "_reconstruct"),
    "audit": ("_server", "_reconstruct"),
    "catalog": ("_catalog",),
    "cyclic": ("_cyclic",),
    "demo-data": ("_data",),
    "evaluate": ("_evaluate",),
    "keys": ("_data",),
    "postprocess": ("_postprocess",),
    "ptable": ("_ptable",),
    "replicates": ("_replicates",),
    "reproduce": ("_reproduce",),
    "resample": ("_resample",),
    "serve": ("_server",),
    "table": ("_table",),
    "version": (),
}


def _register(command: str | None = None) -> None:
    """Import the modules adding ``command`` to :data:`app` (every module for ``None``).

    Kept in a function so that importing this module stays cheap and cycle-free.
    """
    modules = COMMAND_MODULES.get(command) if command is not None else None
    if modules is None:
        modules = tuple(sorted({m for ms in COMMAND_MODULES.values() for m in ms}))
    for module in modules:
        importlib.import_module(f"tablesafe._cli.{module}")


def get_app(command: str | None = None) -> typer.Typer:
    """Return the command-line application with ``command`` (default: every command) registered."""
    _register(command)
    return app


def main() -> None:
    """Run the command line; the entry point of the ``tablesafe`` command."""
    # The command is the first argument that is not an option; with none
    # (``tablesafe --help``) or an unknown one, everything is registered so
    # that help and typer's "no such command" list every command.
    first = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    try:
        get_app(first)()
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
