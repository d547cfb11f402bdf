"""The module structure stays as docs/decisions.md records it (issue 18)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tablesafe"


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top or inside a function."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_ptable_formats_depend_on_the_type_not_the_other_way_round():
    assert "tablesafe._ptable" in _imports(SRC / "_ptable_io.py")
    assert not any("_ptable_io" in m for m in _imports(SRC / "_ptable.py"))


def test_table_level_commands_share_table_files_not_each_other():
    for command in ("_cyclic", "_resample"):
        imports = _imports(SRC / "_cli" / f"{command}.py")
        assert "tablesafe._cli._tablefiles" in imports
        other = "_resample" if command == "_cyclic" else "_cyclic"
        assert not any(m.startswith(f"tablesafe._cli.{other}") for m in imports), command
    assert not any(
        m.startswith("tablesafe._cli._") for m in _imports(SRC / "_cli" / "_tablefiles.py")
    )
