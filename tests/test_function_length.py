"""No long function without a reason (issue 27): every function of src/tablesafe fits ~80 lines.

A function is measured from its ``def`` to its last line. One over the limit
needs a comment starting ``# long:`` on the line just above it (above its
first decorator, if it has any) saying why it is long. A ``# long:``
reason above a function that is not long fails too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tablesafe"

#: The most lines a function may have without a reason.
LIMIT = 80

_Function = ast.FunctionDef | ast.AsyncFunctionDef


def _functions(
    node: ast.AST, prefix: str = ""
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function under ``node`` (methods and nested ones too), with its qualified name."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, _Function):
            name = prefix + child.name
            yield name, child
            yield from _functions(child, name + ".<locals>.")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, prefix + child.name + ".")
        else:
            yield from _functions(child, prefix)


def _measure_source(text: str, where: str) -> dict[str, tuple[int, str]]:
    """Per function of one module's source: its length and the line above it (and its decorators)."""
    out = {}
    lines = text.splitlines()
    for name, fn in _functions(ast.parse(text)):
        first = min([fn.lineno] + [d.lineno for d in fn.decorator_list])
        above = lines[first - 2].strip() if first >= 2 else ""
        length = (fn.end_lineno or fn.lineno) - fn.lineno + 1
        out[f"{where}::{name}"] = (length, above)
    return out


def _measure() -> dict[str, tuple[int, str]]:
    """Per function of the package: its length and the comment line above it."""
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        out.update(_measure_source(text, path.relative_to(SRC).as_posix()))
    return out


def _has_reason(comment: str) -> bool:
    return comment.startswith("# long:") and bool(comment.removeprefix("# long:").strip())


MEASURED = _measure()


def test_the_measure_sees_functions_methods_and_nested_ones():
    # Known shapes of the package: a method, a nested function, a module function.
    assert "output/_footnotes.py::footnotes" in MEASURED
    assert any("." in name.split("::")[1] for name in MEASURED)
    assert any(".<locals>." in name for name in MEASURED)
    assert all(length >= 1 for length, _ in MEASURED.values())


def _offenders(measured: dict[str, tuple[int, str]]) -> list[str]:
    return sorted(
        f"{name}: {length} lines"
        for name, (length, above) in measured.items()
        if length > LIMIT and not _has_reason(above)
    )


def test_the_rule_reads_the_line_above_the_first_decorator():
    body = "".join(f"    x{i} = {i}\n" for i in range(LIMIT))  # def + LIMIT lines: too long
    short = "    return None\n"
    source = (
        "# long: a table of cases\n@app.command('a')\n@option\ndef kept():\n" + body
        + "\n@app.command('b')\n# long: between the decorators\ndef missed():\n" + body
        + "\n# long:\ndef no_reason():\n" + body
        + "\nclass C:\n    def method(self):\n" + body.replace("    ", "        ")
        + "\ndef outer():\n    def inner():\n" + body.replace("    ", "        ") + short
    )  # fmt: skip
    measured = _measure_source(source, "m.py")
    assert measured["m.py::kept"][0] == LIMIT + 1
    assert _offenders(measured) == [
        f"m.py::C.method: {LIMIT + 1} lines",
        f"m.py::missed: {LIMIT + 1} lines",
        f"m.py::no_reason: {LIMIT + 1} lines",
        f"m.py::outer.<locals>.inner: {LIMIT + 1} lines",
        f"m.py::outer: {LIMIT + 3} lines",
    ]


def test_no_function_is_long_without_a_reason():
    offenders = _offenders(MEASURED)
    assert not offenders, "split these, or write '# long: <why>' on the line above the def:\n" + (
        "\n".join(offenders)
    )


def test_long_reasons_sit_above_long_functions_only():
    stale = sorted(
        f"{name}: {length} lines"
        for name, (length, above) in MEASURED.items()
        if length <= LIMIT and above.startswith("# long:")
    )
    assert not stale, "drop the '# long:' comment of these:\n" + "\n".join(stale)
