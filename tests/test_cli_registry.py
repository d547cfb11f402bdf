"""The command line registers only the command it runs, and the map of commands is whole."""

from __future__ import annotations

import subprocess
import sys

from tablesafe._cli import COMMAND_MODULES, get_app


def _modules(command) -> set[str]:
    """Modules defining a registered command or group (recursively)."""
    out = {command.callback.__module__} if command.callback is not None else set()
    for sub in getattr(command, "commands", {}).values():
        out |= _modules(sub)
    return out


def test_every_command_is_mapped_to_the_modules_that_define_it():
    app = get_app()
    registered = {name: _modules(c) for name, c in app.commands.items()}
    assert set(registered) == set(COMMAND_MODULES)
    for name, modules in registered.items():
        mapped = {f"tablesafe._cli.{m}" for m in COMMAND_MODULES[name]}
        # Commands defined in the package's __init__ (version) need no import.
        assert modules - {"tablesafe._cli"} <= mapped, name


def test_running_one_command_imports_only_its_modules(tmp_path):
    code = (
        "import sys\n"
        "sys.argv = ['tablesafe', 'version']\n"
        "from tablesafe._cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('tablesafe._cli.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path
    ).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_a_csv_table_imports_no_text_or_frame_libraries(tmp_path):
    """What `tablesafe table --format csv` does not need, it does not import.

    No pydantic either: it validates a site configuration (``--config``),
    which this table has none of.

    The second call: the first may build the ptable (with scipy) into the cache.
    """
    from tablesafe.prepare._demo import write_demo_data

    data = write_demo_data(tmp_path / "demo", 500, seed=3)
    code = (
        "import sys\n"
        f"sys.argv = ['tablesafe', 'table', {str(data)!r}, '--rows', 'REGION', '--cols', 'SEX',"
        " '--method', 'ckm', '--format', 'csv']\n"
        "from tablesafe._cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = ('rich', 'pandas', 'scipy', 'pyarrow', 'markdown_it', 'pydantic', 'typer')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))\n"
    )
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path
        ).stdout
    assert out.strip().splitlines()[-1] == "[]"
