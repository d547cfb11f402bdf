"""Machine formats on the command line: standard output holds the document and nothing else.

Each command with ``--format json`` or ``--format csv`` runs in its own
process (a library printing on file descriptor 1, as HiGHS does when it is
constructed, is only seen there) and its standard output goes through a
parser whole.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from fastapi.testclient import TestClient

from tablesafe._cli import get_app
from tablesafe._settings import load_site_config
from tablesafe.server import create_app
from test_audit_reconstruct import SERVED, _config
from test_server import USER_KEY

SECRET = "machine-formats-secret-0123456789"

#: Every command with a --format option, and the arguments of a small run
#: of each machine format ({demo}, {table}, {site} filled in). A test checks
#: that no command is missing.
CASES: dict[tuple[str, str], list[str]] = {
    ("table", "json"): ["table", "{demo}", "--rows", "AGEGRP", "--cols", "SEX"],
    ("table", "csv"): ["table", "{demo}", "--rows", "AGEGRP", "--cols", "SEX", "--se"],
    ("table --footnotes", "csv"): [
        "table",
        "{demo}",
        "--rows",
        "REGION",
        "--statistic",
        "both,sum:INCOME",
        "--footnotes",
    ],
    ("attack reconstruct", "json"): [
        "attack",
        "reconstruct",
        "{demo}",
        "--all-k-way",
        "2",
        "--variables",
        "AGEGRP,SEX,REGION",
        "--method",
        "dp",
    ],
    ("attack sliver", "json"): [
        "attack",
        "sliver",
        "{demo}",
        "--table",
        "AGEGRP*SEX",
        "--universe",
        "AGE=40,41",
        "--method",
        "ckm",
        "--limit",
        "10",
    ],
    ("attack weighted", "json"): [
        "attack",
        "weighted",
        "{demo}",
        "--table",
        "AGEGRP*SEX",
        "--method",
        "ckm",
    ],
    ("attack averaging", "json"): [
        "attack",
        "averaging",
        "{demo}",
        "--variable",
        "AGE",
        "--targets",
        "81..85",
        "--pad",
        "20..60",
        "--second",
        "SEX",
        "--tables",
        "10",
        "--method",
        "ckm",
    ],
    ("attack zeros", "json"): [
        "attack",
        "zeros",
        "{demo}",
        "--variables",
        "AGEGRP,SEX,REGION",
        "--tables",
        "2",
    ],
    ("attack guard", "json"): ["attack", "guard", "{demo}", "--pairs", "4", "--tries", "2"],
    ("attack groups", "json"): [
        "attack",
        "groups",
        "{demo}",
        "--universe",
        "EMPSTAT=1",
        "--partners",
        "2",
        "--variants",
        "group",
    ],
    ("attack refusals", "json"): ["attack", "refusals", "{demo}", "--tables", "2"],
    ("cyclic perturb", "json"): ["cyclic", "perturb", "{table}", "--seed", "1"],
    ("cyclic posterior", "json"): ["cyclic", "posterior", "{table}"],
    ("resample bootstrap", "json"): [
        "resample",
        "bootstrap",
        "{table}",
        "--S",
        "3",
        "--M",
        "3",
        "--seed",
        "1",
    ],
    ("resample binomial", "json"): ["resample", "binomial", "{table}", "--S", "2", "--seed", "1"],
    ("evaluate", "json"): ["evaluate", "{demo}", "--table", "REGION*SEX", "--methods", "ckm"],
    ("reproduce shlomo2019", "json"): ["reproduce", "shlomo2019", "--reps", "10"],
    ("audit", "json"): ["audit", "--config", "{site}"],
    ("api-key list", "json"): ["api-key", "list", "--config", "{site}"],
    ("audit ledger", "json"): ["audit", "ledger", "--config", "{site}", "--dataset", "demo"],
    ("audit reconstruct", "json"): [
        "audit",
        "reconstruct",
        "--config",
        "{site}",
        "--dataset",
        "demo",
        "--no-store",
    ],
}

#: Commands whose --format names the format of files written, not of standard output.
FILE_FORMATS = {"demo-data"}

#: The cases of the default suite (the command HiGHS broke, and the table); the rest are system.
FAST = {("attack reconstruct", "json"), ("table", "json"), ("table --footnotes", "csv")}


def _format_commands() -> set[str]:
    """Every command (space-separated path) with a --format option."""
    found: set[str] = set()

    def walk(cmd: click.Command, path: tuple[str, ...]) -> None:
        if any("--format" in p.opts for p in cmd.params):
            found.add(" ".join(path))
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                walk(sub, (*path, name))

    walk(get_app(), ())
    return found


def test_every_command_with_a_machine_format_is_run():
    covered = {name.split(" --")[0] for name, _ in CASES}
    assert _format_commands() - FILE_FORMATS == covered


@pytest.fixture(scope="module")
def inputs(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("machine")
    table = folder / "t.csv"
    table.write_text("5,6,7\n8,9,10\n3,4,2\n")
    site = _config(demo_dir, folder / "site")
    with TestClient(create_app(load_site_config(site))) as c:
        for body in SERVED:
            r = c.post("/api/datasets/demo/tables", json=body, headers={"x-api-key": USER_KEY})
            assert r.status_code == 200, r.text
    return {"demo": str(demo_dir), "table": str(table), "site": str(site)}


def _parse_csv(text: str) -> list[list[str]]:
    """The CSV document: rows of one width, then (footnotes) a blank line and '#' lines."""
    body, _, notes = text.partition("\n\n")
    assert all(line.startswith("# ") for line in notes.splitlines()), notes
    rows = list(csv.reader(io.StringIO(body)))
    assert len(rows) > 1 and {len(r) for r in rows} == {len(rows[0])}, body
    return rows


def _run(case: tuple[str, str], inputs: dict[str, str]) -> Any:
    args = [a.format(**inputs) for a in CASES[case]]
    env = {**os.environ, "TABLESAFE_SECRET": SECRET}
    out = subprocess.run(
        [sys.executable, "-m", "tablesafe", *args, "--format", case[1]],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(inputs["table"]).parent,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    if case[1] == "json":
        return json.loads(out.stdout)
    return _parse_csv(out.stdout)


def _cases() -> list[Any]:
    marks = {c: [] if c in FAST else [pytest.mark.system] for c in CASES}
    return [pytest.param(c, marks=marks[c], id=f"{c[0]}-{c[1]}") for c in CASES]


@pytest.mark.parametrize("case", _cases())
def test_stdout_is_the_document(case: tuple[str, str], inputs: dict[str, str]):
    doc = _run(case, inputs)
    assert doc  # a document with content, not an empty one
