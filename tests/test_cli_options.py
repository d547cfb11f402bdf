"""The command line (click): every command keeps its options, and help is cheap.

The option list below is the one typer generated before the port to click
(issue 14); a renamed or lost option, or a bool flag that changed its
spelling, fails here.
"""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from tablesafe._cli import COMMAND_HELP, COMMAND_MODULES, get_app

#: Every command and subcommand: its arguments (upper case) and options, with
#: the secondary spelling of bool switches (``--mono/--no-mono``).
OPTIONS: dict[str, list[str]] = {
    "": [],
    "api-key": [],
    "api-key new": ["KEY_ID", "--role", "--expires"],
    "api-key revoke": ["KEY_ID", "--config (required)", "--reason"],
    "api-key list": ["--config (required)", "--format"],
    "attack": [],
    "attack reconstruct": [
        "DATA_DIR",
        "--tables",
        "--all-k-way",
        "--variables",
        "--method",
        "--epsilon",
        "--cap",
        "--rate",
        "--max-deviation",
        "--variance",
        "--seeds",
        "--secret-env",
        "--additivity",
        "--min-cell-size",
        "--time-limit",
        "--ranked",
        "--format",
    ],
    "attack averaging": [
        "DATA_DIR",
        "--variable (required)",
        "--targets (required)",
        "--pad (required)",
        "--second (required)",
        "--universe (repeatable)",
        "--grouping-of",
        "--magnitude",
        "--tables",
        "--method",
        "--seeds",
        "--epsilon",
        "--cap",
        "--rate",
        "--config",
        "--seed",
        "--format",
    ],
    "attack zeros": [
        "DATA_DIR",
        "--variables",
        "--tables",
        "--exclude",
        "--base",
        "--universe (repeatable)",
        "--method",
        "--seeds",
        "--epsilon",
        "--cap",
        "--rate",
        "--config",
        "--format",
    ],
    "attack groups": [
        "DATA_DIR",
        "--variable",
        "--second",
        "--by",
        "--universe (repeatable)",
        "--variants",
        "--method",
        "--config",
        "--min-difference",
        "--partners",
        "--format",
    ],
    "attack guard": [
        "DATA_DIR",
        "--attacks",
        "--config",
        "--min-difference",
        "--pairs",
        "--tries",
        "--format",
    ],
    "attack refusals": [
        "DATA_DIR",
        "--config",
        "--method",
        "--min-difference",
        "--tables",
        "--seed",
        "--format",
    ],
    "attack sliver": [
        "DATA_DIR",
        "--table (required)",
        "--universe (repeatable)",
        "--method",
        "--epsilon",
        "--cap",
        "--rate",
        "--limit",
        "--seed",
        "--format",
    ],
    "attack weighted": [
        "DATA_DIR",
        "--table (required)",
        "--universe (repeatable)",
        "--method",
        "--epsilon",
        "--cap",
        "--rate",
        "--weight-noise",
        "--rounding",
        "--integer-weights",
        "--format",
    ],
    "mcp": ["--config (required)", "--api-key"],
    "worker": ["--config (required)", "--poll-seconds", "--once"],
    "audit": ["--config", "--key-id", "--dataset", "--since", "--limit", "--format"],
    "audit ledger": ["--config (required)", "--dataset (required)", "--format"],
    "audit reconstruct": [
        "--config (required)",
        "--dataset (required)",
        "--time-limit",
        "--store/--no-store",
        "--format",
    ],
    "catalog": [],
    "catalog init": [
        "DATA_FILE",
        "DIRECTORY",
        "--weight",
        "--record-key",
        "--variables",
        "--max-categories",
        "--zeros-min-records",
        "--overwrite",
    ],
    "cyclic": [],
    "cyclic perturb": ["TABLE", "--alpha", "--beta", "--cycles", "--skip", "--seed", "--format"],
    "cyclic posterior": [
        "TABLE",
        "--alpha",
        "--beta",
        "--cycles",
        "--prior",
        "--skip",
        "--likelihood",
        "--tables",
        "--format",
    ],
    "demo-data": ["OUT_DIR", "--records", "--seed", "--replicates", "--format"],
    "evaluate": [
        "DATA_DIR",
        "--table (required) (repeatable)",
        "--methods",
        "--epsilon",
        "--cap",
        "--out",
        "--format",
        "--magnitude (repeatable)",
    ],
    "keys": [],
    "keys add": ["SOURCE", "TARGET", "--column", "--overwrite-keys"],
    "postprocess": [],
    "postprocess fit": [
        "TABLE",
        "--value",
        "--method",
        "--exact (repeatable)",
        "--weight",
        "--loglinear/--no-loglinear",
        "--round",
        "--seed",
    ],
    "ptable": [],
    "ptable destatis": [
        "--out (required)",
        "--D",
        "--V",
        "--js",
        "--pstay",
        "--mono/--no-mono",
        "--layout",
        "--keys",
    ],
    "ptable dp": ["--out (required)", "--epsilon", "--sensitivity", "--cap", "--layout", "--keys"],
    "ptable pram": ["--out (required)", "--epsilon", "--cap", "--layout"],
    "ptable q": ["--out (required)", "--rate", "--cap", "--layout", "--keys"],
    "ptable show": ["FILE", "--rows"],
    "replicates": [],
    "replicates add": [
        "DIRECTORY",
        "--psu (required)",
        "--method (required)",
        "--strata",
        "--replicates",
        "--fay",
        "--prefix",
        "--seed",
        "--replace",
    ],
    "reproduce": [],
    "reproduce shlomo2019": ["--reps", "--seed", "--out", "--format", "--pram", "--pram-alpha"],
    "resample": [],
    "resample binomial": ["TABLE", "--S", "--preserve", "--seed", "--format"],
    "resample bootstrap": ["TABLE", "--S", "--M", "--round/--no-round", "--seed", "--format"],
    "serve": ["--config (required)", "--host", "--port"],
    "table": [
        "DATA_DIR",
        "--rows (required)",
        "--cols",
        "--layers (repeatable)",
        "--where (repeatable)",
        "--group (repeatable)",
        "--statistic",
        "--margins",
        "--unit",
        "--se",
        "--format",
        "--labels",
        "--footnotes",
        "--method",
        "--epsilon",
        "--cap",
        "--rate",
        "--max-deviation",
        "--variance",
        "--seeds",
        "--secret-env",
        "--weight-noise",
        "--rounding",
        "--se-min-count",
        "--additivity",
        "--config",
        "--owner-flags",
        "--engine",
        "--spark-master",
    ],
    "version": [],
}


def _walk(command: click.Command, path: str = ""):
    yield path, command
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None, name
            yield from _walk(sub, f"{path} {name}".strip())


def _names(command: click.Command) -> list[str]:
    out = []
    for p in command.params:
        if isinstance(p, click.Argument):
            out.append(p.human_readable_name)
            continue
        assert isinstance(p, click.Option)
        name = "/".join([*p.opts, *p.secondary_opts])
        out.append(
            name + (" (required)" if p.required else "") + (" (repeatable)" if p.multiple else "")
        )
    return out


def test_every_command_keeps_its_arguments_and_options():
    found = {path: _names(cmd) for path, cmd in _walk(get_app())}
    assert found == OPTIONS


def test_the_static_one_line_helps_are_the_commands_own():
    app = get_app()
    assert set(COMMAND_HELP) == set(COMMAND_MODULES) == set(app.commands)
    for name, cmd in app.commands.items():
        assert cmd.help is not None
        assert COMMAND_HELP[name] == cmd.help.split("\n\n")[0].strip(), name
        for limit in (30, 45, 80, 300):
            stand_in = click.Command(name, help=COMMAND_HELP[name])
            assert stand_in.get_short_help_str(limit) == cmd.get_short_help_str(limit), name


def _run(code: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout


_HELP = (
    "import sys\n"
    "sys.argv = ['tablesafe', '--help']\n"
    "from tablesafe._cli import main\n"
    "try:\n    main()\nexcept SystemExit:\n    pass\n"
)


def test_help_lists_every_command_without_importing_them():
    """``tablesafe --help`` imports no command module, no numpy, DuckDB or pydantic."""
    code = _HELP + (
        "heavy = ('numpy', 'duckdb', 'pydantic', 'rich', 'typer')\n"
        "print(sorted(m for m in sys.modules if m.startswith('tablesafe._cli.')))\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))\n"
    )
    lines = _run(code).splitlines()
    assert lines[-2:] == ["[]", "[]"]
    for name in COMMAND_MODULES:
        assert any(line.startswith(f"  {name} ") for line in lines), name


def test_lazy_help_is_the_help_of_the_full_registration():
    lazy = _run(_HELP)
    full = _run("from tablesafe._cli import get_app\nget_app()\n" + _HELP)
    assert lazy == full
    assert "Commands:" in lazy


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["table", "x", "--rows", "A", "--bogus"], 2, "No such option"),
        (["nosuch"], 2, "No such command"),
        (["table", "x"], 2, "Missing option '--rows'"),
    ],
)
def test_usage_errors_exit_2(args, code, message):
    result = CliRunner().invoke(get_app(args[0]), args)
    assert result.exit_code == code
    assert message in result.output


def test_a_number_that_is_no_number_is_a_one_line_error(capsys):
    """A numeric option's text is checked against its range (tests/test_number_ranges.py)."""
    from tablesafe._cli import main

    with pytest.raises(SystemExit) as info:
        main(["ptable", "destatis", "--out", "x.csv", "--D", "many"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err == "error: --D must be a whole number from 1 to 10, not many\n"


def test_user_errors_exit_2_with_one_line_on_stderr(tmp_path):
    """``main`` maps a tablesafe UserError to ``error: ...`` on standard error and exit 2."""
    code = (
        "import sys\n"
        f"sys.argv = ['tablesafe', 'table', {str(tmp_path / 'none')!r}, '--rows', 'A']\n"
        "from tablesafe._cli import main\n"
        "main()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.startswith("error: ")
    assert len(out.stderr.strip().splitlines()) == 1


def test_bool_switches_keep_their_spellings(tmp_path):
    """Flags typer generated: ``--se`` alone, ``--mono/--no-mono``, ``--round/--no-round``."""
    runner = CliRunner()
    for mono in ("--mono", "--no-mono"):
        out = tmp_path / f"{mono}.csv"
        result = runner.invoke(
            get_app("ptable"), ["ptable", "destatis", "--out", str(out), "--D", "2", mono]
        )
        assert result.exit_code == 0, result.output
    assert (tmp_path / "--mono.csv").read_text() != (tmp_path / "--no-mono.csv").read_text()
    result = runner.invoke(get_app("table"), ["table", "x", "--rows", "A", "--no-se"])
    assert result.exit_code == 2
    assert "No such option" in result.output
