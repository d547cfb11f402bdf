"""The ``tablesafe`` command line (click).

Each command group lives in its own module and registers itself on
:data:`app` here. :data:`app` is a lazy group: looking a command up imports
only the modules that define it (:data:`COMMAND_MODULES`), and ``tablesafe
--help`` lists every command from :data:`COMMAND_HELP` without importing
any of them (tests check both maps against the full registration).
:func:`main` maps tablesafe errors to a one-line message on standard error
and an exit code (2 for user errors, 1 for the rest). Usage errors are
click's own (exit code 2).

Why click and not typer: docs/decisions.md ("Command line").
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import click

from tablesafe._errors import ParameterError, TablesafeError, UserError
from tablesafe._version import __version__

#: Each top-level command or group, and the modules that define it (and its
#: subcommands). Running one command imports only its modules (a test checks
#: this map against the full registration).
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "api-key": ("_server",),
    "attack": ("_attack", "_reconstruct", "_attack_tables", "_attack_groups"),
    "audit": ("_server", "_reconstruct", "_ledger"),
    "catalog": ("_catalog",),
    "cyclic": ("_cyclic",),
    "demo-data": ("_data",),
    "evaluate": ("_evaluate",),
    "keys": ("_data",),
    "mcp": ("_server",),
    "postprocess": ("_postprocess",),
    "ptable": ("_ptable",),
    "replicates": ("_replicates",),
    "reproduce": ("_reproduce",),
    "resample": ("_resample",),
    "serve": ("_server",),
    "table": ("_table",),
    "version": (),
    "worker": ("_worker",),
}

#: The one-line help of each top-level command, shown by ``tablesafe --help``
#: without importing the command's modules (a test checks that it is the
#: first paragraph of each registered command's help).
COMMAND_HELP: dict[str, str] = {
    "api-key": "API keys for the server.",
    "attack": "Attack simulations against the protection.",
    "audit": "Read the audit log of a site (newest first).",
    "catalog": "Catalogs: draft one from a Parquet, CSV, SPSS, Stata or SAS file.",
    "cyclic": "Cyclic perturbation (Duncan & Roehrig): perturb a table, or compute the "
    "posterior of the original cells from a published one.",
    "demo-data": "Write a realistic synthetic survey and its catalog.",
    "evaluate": "Risk and utility of each mechanism and parameter on a dataset's tables.",
    "keys": "Record keys: permanent random uint32 keys, one per record.",
    "mcp": "Serve the agent interface (Model Context Protocol) over standard input and output.",
    "postprocess": "Post-process protected tables into releasable inner cells (Langsrud 2019).",
    "ptable": "Perturbation tables: write those of DP, PRAM, drop/add-up-to-q and the Destatis "
    "cell-key method in the Destatis (probability) or ABS/ONS (sampled) layout; show one.",
    "replicates": "Replicate weights: made from strata and PSUs, for standard errors and "
    "intervals.",
    "reproduce": "Reproduce the source papers' studies.",
    "resample": "Resampling (Domingo-Ferrer & Mateo-Sanz): Heer's bootstrap table or the "
    "cell-oriented binomial method, with the quality condition S.",
    "serve": "Serve the table builder: HTTP API and web page.",
    "table": "Build a protected table: rows by columns (by layers) inside a universe.",
    "version": "Print the version of tablesafe.",
    "worker": "Build queued jobs: large tables asked for with POST /api/datasets/{name}/jobs.",
}

#: The parameter type of file and folder arguments: a :class:`pathlib.Path`,
#: not checked here (the commands say what is wrong with a path).
PATH = click.Path(path_type=Path)


class Number(click.ParamType):
    """A numeric option, checked against its documented range before the command runs.

    The range is :data:`tablesafe._protection_limits.RANGES`' (docs/cli.md lists
    them); a value outside it, or text that is no number, is a one-line
    ``error:`` (a :class:`~tablesafe.ParameterError`, exit code 2) naming the
    option and its range, before any work. ``1e3`` is read as 1000 for a whole number.
    """

    def __init__(self, key: str) -> None:
        # Start-up: the ranges load numpy, which `tablesafe --help` does not need.
        from tablesafe._protection_limits import RANGES

        self.key = key
        self.range = RANGES[key]
        self.name = "integer" if self.range.integer else "float"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> object:
        """``value`` as an ``int`` or ``float`` in the option's range."""
        label = param.opts[0] if isinstance(param, click.Option) else self.key
        given = value
        if isinstance(value, str):
            text = given = value.strip()
            try:
                value = int(text)
            except ValueError:
                try:
                    value = float(text)
                except ValueError:
                    value = None
        if self.range.integer and isinstance(value, float) and value.is_integer():
            value = int(value)
        if not self.range.holds(value):
            raise ParameterError(f"{label} must be {self.range.words()}, not {given}")
        return self.range.check(value, label)


#: ``--format`` of the commands that print a report: text (for people) or JSON, one choice.
text_or_json = click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", help="text or json."
)


def number(key: str) -> Number:
    """The parameter type of a numeric option whose range is ``RANGES[key]``."""
    return Number(key)


class LazyGroup(click.Group):
    """The top-level group: a command's modules are imported when it is looked up.

    This is click's documented lazy-loading pattern (``list_commands`` names
    every command, ``get_command`` imports on demand); ``format_commands``
    takes the one-line helps from :data:`COMMAND_HELP`, so that ``tablesafe
    --help`` imports no command module.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command, registered or not, sorted by name."""
        return sorted(set(COMMAND_MODULES) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command ``cmd_name``, importing its modules first if needed."""
        if cmd_name not in self.commands and cmd_name in COMMAND_MODULES:
            _register(cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Write the commands section of the help, as click's would, without imports."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            cmd = self.commands.get(name)
            if cmd is not None:
                if cmd.hidden:
                    continue
                rows.append((name, cmd.get_short_help_str(limit)))
            else:
                # A stand-in command shortens the help exactly as the real one would.
                stand_in = click.Command(name, help=COMMAND_HELP[name])
                rows.append((name, stand_in.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


app = LazyGroup(
    name="tablesafe",
    help="Flexible table builder for confidential microdata.",
    no_args_is_help=True,
    # Defaults are shown in every command's help (inherited by subcommands).
    context_settings={"show_default": True},
)


def _register(command: str | None = None) -> None:
    """Import the modules adding ``command`` to :data:`app` (every module for ``None``).

    Kept in a function so that importing this module stays cheap and cycle-free.
    """
    modules = COMMAND_MODULES.get(command) if command is not None else None
    if modules is None:
        modules = tuple(sorted({m for ms in COMMAND_MODULES.values() for m in ms}))
    for module in modules:
        importlib.import_module(f"tablesafe._cli.{module}")


def get_app(command: str | None = None) -> click.Group:
    """Return the command-line group with ``command`` (default: every command) registered."""
    _register(command)
    return app


def main(args: list[str] | None = None) -> None:
    """Run the command line; the entry point of the ``tablesafe`` command.

    Args:
        args: The arguments (default: ``sys.argv[1:]``).
    """
    try:
        app.main(args, prog_name="tablesafe")
    except TablesafeError as exc:
        click.echo(f"error: {exc}", err=True)
        for line in alternative_lines(exc):
            click.echo(line, err=True)
        sys.exit(2 if isinstance(exc, UserError) else 1)


def alternative_lines(refusal: Exception) -> list[str]:
    """A refusal's alternatives as the command prints them: what changes, then the options."""
    found = getattr(refusal, "alternatives", ())
    if not found:
        return []
    lines = [
        "tables near it that pass this site's request limits and universe-size rule (the "
        "server decides the rest when asked; other options as given):"
    ]
    for i, alternative in enumerate(found, 1):
        body = alternative.to_dict()["request"]
        dims = body["dimensions"]
        options = [f"--rows {dims[0]}"]
        options += [f"--cols {dims[1]}"] if len(dims) > 1 else []
        options += [f"--layers {d}" for d in dims[2:]]
        options += [
            f"--where {name}={','.join(str(c) for c in codes)}"
            for name, codes in body["universe"].items()
        ]
        options += [f"--margins {body['margins']}"] if "margins" in body else []
        options += [f"--statistic {body['statistic']}"]
        lines += [f"  {i}. {alternative.to_dict()['change']}", f"     {' '.join(options)}"]
    return lines


@app.command("version")
def version() -> None:
    """Print the version of tablesafe."""
    click.echo(__version__)
