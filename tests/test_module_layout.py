"""The house (issue 27): stage folders, layers that import downward only, no circle.

The layers, lowest first, are docs/decisions.md's ("The house"). A module
may import its own layer or a lower one, never a higher one; imports inside
functions and under ``TYPE_CHECKING`` count. No import circle, no private
name imported from another package, and a small top level.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tablesafe"

DECISIONS = Path(__file__).resolve().parents[1] / "docs" / "decisions.md"


def _layers() -> list[set[str]]:
    """The layers, lowest first, as docs/decisions.md's row "The layers (issue 39)" lists them.

    Lowest first: the foundation, the catalog, cells (and the plan types), the request,
    engines and ptables, mechanisms, the protection and settings and outputs, the
    statistics, the state store, the rules (the one admission), the builder (and the
    dp-marginals release), the service (the one path every door takes), the owner's
    preparation tools, the workbench, the server, the command line (which starts the
    server's processes, nothing more), the API: one list, written once, in the docs.
    """
    row = next(
        line
        for line in DECISIONS.read_text(encoding="utf-8").splitlines()
        if line.startswith("| The layers (issue 39) |")
    )
    # The layers are the backquoted groups joined by " · ", up to the sentence's end.
    listed = row.split("|")[2].split(":", 1)[1].split(". ", 1)[0]
    return [set(group.split()) for group in re.findall(r"`([^`]+)`", listed)]


LAYERS: list[set[str]] = _layers()
LAYER = {unit: i for i, units in enumerate(LAYERS) for unit in units}


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str:
    """The module a dotted import names (``tablesafe.engines.DuckDBEngine`` -> the package)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _unit(module: str) -> str:
    """The layer unit of a module: its package under tablesafe, or a top-level module's name."""
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def _imports(module: str) -> list[tuple[str, str, int]]:
    """(imported module, imported name or '', line) of every tablesafe import in ``module``."""
    out = []
    for node in ast.walk(ast.parse(MODULES[module].read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tablesafe"):
            for alias in node.names:
                target = _resolve(f"{node.module}.{alias.name}")
                name = "" if target == f"{node.module}.{alias.name}" else alias.name
                out.append((target, name, node.lineno))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("tablesafe"):
                    out.append((_resolve(alias.name), "", node.lineno))
    return out


GRAPH = {m: {t for t, _, _ in _imports(m) if t and t != m} for m in MODULES}


def test_every_module_has_a_layer():
    assert {_unit(m) for m in MODULES} <= set(LAYER)


def test_imports_go_down_the_layers_only():
    climbs = [
        f"{m}:{line} imports {t}"
        for m in MODULES
        for t, _, line in _imports(m)
        if t and LAYER[_unit(t)] > LAYER[_unit(m)]
    ]
    assert climbs == []


def test_no_import_circle():
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(GRAPH[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                circles.append(sorted(part))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert circles == []


def test_no_private_name_is_imported_from_another_package():
    crossing = [
        f"{m}:{line} imports {name} from {t}"
        for m in MODULES
        for t, name, line in _imports(m)
        if name.startswith("_") and not name.startswith("__") and _package(t) != _package(m)
    ]
    assert crossing == []


def _package(module: str) -> str:
    """A subpackage's name, or ``tablesafe`` for the top-level modules."""
    parts = module.split(".")
    return (
        parts[1]
        if len(parts) > 2 or (len(parts) == 2 and (SRC / parts[1]).is_dir())
        else "tablesafe"
    )


def test_the_top_level_is_small():
    top = sorted(p.stem for p in SRC.glob("*.py"))
    assert len(top) <= 15, top


def test_ptable_formats_depend_on_the_type_not_the_other_way_round():
    assert "tablesafe.ptable._ptable" in {t for t, _, _ in _imports("tablesafe.ptable._io")}
    assert "tablesafe.ptable._io" not in GRAPH["tablesafe.ptable._ptable"]


def test_table_level_commands_share_table_files_not_each_other():
    for command in ("_cyclic", "_resample"):
        imports = GRAPH[f"tablesafe._cli.{command}"]
        assert "tablesafe._cli._tablefiles" in imports
        other = "_resample" if command == "_cyclic" else "_cyclic"
        assert f"tablesafe._cli.{other}" not in imports, command
    assert not any(m.startswith("tablesafe._cli._") for m in GRAPH["tablesafe._cli._tablefiles"])


def test_the_state_store_sits_between_the_core_and_the_server():
    """DESIGN decision 10 and its layout: state/ below rules/ (it keeps rows, the rules read
    them); the server imports state/, never the reverse."""
    assert LAYER["state"] < LAYER["rules"] < LAYER["server"]
    state = [m for m in MODULES if _unit(m) == "state"]
    above = ("rules", "server", "_cli")
    assert state and not any(_unit(t) in above for m in state for t in GRAPH[m])
    assert "tablesafe.state" in {t for m in MODULES if _unit(m) == "server" for t in GRAPH[m]}


def test_the_doors_meet_in_the_core_not_in_each_other():
    """DESIGN 15 and its layout: the server and the command line build tables through the
    core (service/, the builder, the rules); the server never imports the command line,
    and the command line imports the server only to start its processes (serve, mcp,
    worker, a new API key), through the package's public names."""
    server_to_cli = [
        f"{m} imports {t}"
        for m in MODULES
        if _unit(m) == "server"
        for t in GRAPH[m]
        if _unit(t) == "_cli"
    ]
    assert server_to_cli == []
    cli_to_server = {
        (m, t) for m in MODULES if _unit(m) == "_cli" for t in GRAPH[m] if _unit(t) == "server"
    }
    assert {t for _, t in cli_to_server} <= {"tablesafe.server"}
    assert {m for m, _ in cli_to_server} <= {"tablesafe._cli._server", "tablesafe._cli._worker"}


#: The most imports between tablesafe modules inside functions (issue 39: 227 -> at most
#: 100; 44 when this was written).
MAX_LAZY_IMPORTS = 60
#: What a comment before an import inside a function must say: why it is not at the top.
LAZY_REASON = re.compile(r"#\s*(Start-up|Optional dependency)\b")


def _lazy_imports() -> list[tuple[str, int, bool]]:
    """(module, line, whether a reason precedes it in its function) of each import of a
    tablesafe module inside a function."""
    out = []
    for m, path in MODULES.items():
        lines = path.read_text(encoding="utf-8").splitlines()
        seen: set[int] = set()
        for fn in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if (
                    isinstance(node, ast.ImportFrom)
                    and (node.module or "").startswith("tablesafe")
                    and node.lineno not in seen
                ):
                    seen.add(node.lineno)
                    before = lines[fn.lineno - 1 : node.lineno - 1]
                    out.append((m, node.lineno, any(LAZY_REASON.search(t) for t in before)))
    return out


def test_imports_inside_functions_are_few_and_say_why():
    """Imports go at the top; inside a function only where an optional dependency or the
    start-up time needs it, and a comment there says which (``# Start-up: ...``,
    ``# Optional dependency: ...``)."""
    lazy = _lazy_imports()
    assert len(lazy) <= MAX_LAZY_IMPORTS
    assert [f"{m}:{line}" for m, line, why in lazy if not why] == []


def test_the_builder_is_a_loop_not_a_hub():
    """Issue 39: the statistics are the registry's, the rules the admission's; the builder
    reads as DESIGN's arrow (TableBuilder at most 400 lines, _builder.py at most 500)."""
    path = MODULES["tablesafe._builder"]
    text = path.read_text(encoding="utf-8")
    (builder,) = (
        n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "TableBuilder"
    )
    assert builder.end_lineno is not None
    assert builder.end_lineno - builder.lineno + 1 <= 400
    assert len(text.splitlines()) <= 500
