"""Edges of what tablesafe says (issue 38, item 8): messages, terminals, docs, titles.

Each test here failed before its fix: the 422 message's list of fields, the audit
log cut to 80 columns when piped, a docs example needing a dev-only package, the
repeated ``--where`` undocumented, standard errors of unweighted counts silently
absent, household tables whose title did not say they count households.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from tablesafe._cli import get_app
from tablesafe.server import create_app
from tablesafe.service._bodies import GroupBody, GroupingBody, TableBody
from test_server import USER_KEY, error_of, site

ROOT = Path(__file__).resolve().parents[1]
TABLES = "/api/datasets/demo/tables"


# -- the 422 message names every field of the body, from the model ------------------------


@pytest.fixture
def client(demo_dir, tmp_path):
    with TestClient(create_app(site(demo_dir, tmp_path))) as c:
        c.headers["x-api-key"] = USER_KEY
        yield c


def _allowed(message: str) -> list[str]:
    found = re.search(r"unknown field; allowed: ([a-z_, ]+)", message)
    assert found, message
    return found.group(1).split(", ")


def test_unknown_field_lists_every_field_of_the_body(client):
    err = error_of(client.post(TABLES, json={"dimensions": ["SEX"], "colour": "red"}))
    assert err["status"] == 422
    assert _allowed(err["message"]) == list(TableBody.model_fields)
    # Every field listed is taken: a body holding all of them is not refused for a field.
    assert "unit" in _allowed(err["message"])


def test_unknown_field_of_a_grouping_lists_the_grouping_fields(client):
    grouping = {"name": "G", "variable": "SEX", "groups": [{"code": "a", "members": [1]}]}
    err = error_of(
        client.post(TABLES, json={"dimensions": ["G"], "groupings": [{**grouping, "kind": 1}]})
    )
    assert err["message"].startswith("invalid request: groupings.0.kind: unknown field")
    assert _allowed(err["message"]) == list(GroupingBody.model_fields)
    grouping["groups"][0]["size"] = 2
    err = error_of(client.post(TABLES, json={"dimensions": ["G"], "groupings": [grouping]}))
    assert _allowed(err["message"]) == list(GroupBody.model_fields)


def test_the_job_route_names_the_same_fields(client):
    err = error_of(client.post("/api/datasets/demo/jobs", json={"dimensions": ["SEX"], "x": 1}))
    assert err["status"] == 422
    assert _allowed(err["message"]) == list(TableBody.model_fields)


# -- `tablesafe audit` piped: whole lines, not a table cut to 80 columns -------------------


def test_audit_piped_prints_whole_tab_separated_lines(demo_dir, tmp_path):
    cfg = site(demo_dir, tmp_path)
    body = {
        "dimensions": ["AGEGRP", "SEX"],
        "universe": {"REGION": [1, 2, 3, 4], "EDUC": [1, 2, 3]},
        "statistic": "both",
    }
    with TestClient(create_app(cfg)) as c:
        assert c.post(TABLES, json=body, headers={"x-api-key": USER_KEY}).status_code == 200
        refusal = c.post(TABLES, json={"dimensions": ["NOPE"]}, headers={"x-api-key": USER_KEY})
        assert refusal.status_code == 400
    path = tmp_path / "site.toml"
    path.write_text(
        f'[server]\naudit_db = "{tmp_path / "audit.sqlite"}"\n[[datasets]]\nname = "demo"\n'
        f'path = "{demo_dir}"\n[datasets.protection]\nmethod = "none"\n'
    )
    out = CliRunner().invoke(get_app(), ["audit", "--config", str(path)])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0].split("\t") == [
        "time",
        "key",
        "client",
        "dataset",
        "endpoint",
        "status",
        "outcome",
        "request",
    ]
    rows = [line.split("\t") for line in lines[1:]]
    assert len(rows) == 2 and {len(r) for r in rows} == {8}
    refused, answered = rows  # newest first
    assert json.loads(answered[7]) == {**body, **json.loads(answered[7])} and len(answered[7]) > 80
    assert json.loads(answered[7])["universe"] == {"REGION": [1, 2, 3, 4], "EDUC": [1, 2, 3]}
    assert refused[5] == "400" and "unknown variable 'NOPE'" in refused[6]
    assert max(map(len, lines)) > 80


# -- docs examples run on what `make demo` installs (tablesafe and its mcp extra) ---------


def _base_install() -> set[str]:
    """What ``make demo`` installs, ``pip install 'tablesafe[mcp]'``: its dependencies, transitively.

    The ``mcp`` extra (the agent interface's SDK, docs/agents.md) is the only one.
    """
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: set[str] = set()
    todo = [("tablesafe", "mcp")]
    while todo:
        raw, extra = todo.pop()
        name = canonicalize_name(raw)
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": extra}):
                todo.append((req.name, ""))
    return seen


def _imports(source: str) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module.split(".")[0])
    return modules


def test_docs_python_examples_need_only_the_base_install():
    from packaging.utils import canonicalize_name

    from test_docs import BLOCKS

    base = _base_install()
    assert {"numpy", "pandas", "pyarrow"} <= base and "openpyxl" not in base
    providers = metadata.packages_distributions()
    outside = {
        (block.where, module)
        for block in BLOCKS
        if block.language in ("python", "py") and not block.skip
        for module in _imports(block.source)
        if module not in sys.stdlib_module_names
        and module != "tablesafe"
        and not any(canonicalize_name(d) in base for d in providers.get(module, [module]))
    }
    assert outside == set()


# -- a repeated --where on one variable: "or" of its codes, as docs/cli.md says ------------


def _table_csv(demo_dir: Path, *args: str) -> str:
    cmd = ["table", str(demo_dir), "--rows", "SEX", "--format", "csv", "--footnotes", *args]
    out = CliRunner().invoke(get_app(), cmd)
    assert out.exit_code == 0, out.output
    return out.output


def test_repeated_where_is_documented_and_does_what_the_docs_say(demo_dir):
    text = " ".join((ROOT / "docs" / "cli.md").read_text().split())
    found = re.search(r"`(--where REGION=1 --where REGION=2)` is `(--where REGION=1,2)`", text)
    assert found, "docs/cli.md says what a repeated --where does, with an example"
    assert 'Within one variable the codes are combined with "or"' in text
    repeated, listed = (_table_csv(demo_dir, *g.split()) for g in found.groups())
    assert repeated == listed
    assert "# Universe: Region is North or North East." in listed

    # "or", not "and": the unprotected table holds the records of both regions.
    def total(*where: str) -> int:
        cmd = ["table", str(demo_dir), "--rows", "SEX", "--format", "csv", "--method", "none"]
        out = CliRunner().invoke(get_app(), [*cmd, *where])
        assert out.exit_code == 0, out.output
        return int(next(r for r in out.output.splitlines() if r.startswith("_T,")).split(",")[1])

    both = total("--where", "REGION=1", "--where", "REGION=2")
    assert both == total("--where", "REGION=1") + total("--where", "REGION=2") > 0
    assert "A code given twice counts once." in text
    assert _table_csv(demo_dir, "--where", "REGION=1", "--where", "REGION=1") == _table_csv(
        demo_dir, "--where", "REGION=1"
    )


# -- standard errors asked on unweighted counts: the table says why there are none ---------


def test_se_on_unweighted_counts_says_why_on_the_command_line(demo_dir):
    from tablesafe.output._footnotes import SE_UNWEIGHTED

    args = ["table", str(demo_dir), "--rows", "SEX", "--statistic", "count,percent:column"]
    out = CliRunner().invoke(get_app(), [*args, "--se", "--format", "csv", "--footnotes"])
    assert out.exit_code == 0, out.stderr
    assert out.stderr == f"note: {SE_UNWEIGHTED}\n"
    header, *_ = out.stdout.splitlines()
    assert not any(c.endswith(("se", "ci_low", "ci_high")) for c in header.split(","))
    assert f"# {SE_UNWEIGHTED}" in out.stdout.splitlines()
    # Without --se, or with weighted figures (which get them), nothing is said.
    plain = CliRunner().invoke(get_app(), [*args, "--format", "csv", "--footnotes"])
    assert plain.stderr == "" and SE_UNWEIGHTED not in plain.stdout
    weighted = CliRunner().invoke(
        get_app(), ["table", str(demo_dir), "--rows", "SEX", "--statistic", "both", "--se"]
    )
    assert weighted.exit_code == 0 and weighted.stderr == ""
    assert "Standard error" in weighted.stdout


def test_se_on_unweighted_counts_says_why_in_the_api(client):
    from tablesafe.output._footnotes import SE_UNWEIGHTED

    body = {"dimensions": ["SEX"], "statistic": "count,mean:INCOME", "se": True}
    doc = client.post(TABLES, json=body).json()
    assert doc["meta"]["se_unavailable"] == SE_UNWEIGHTED
    assert SE_UNWEIGHTED in doc["meta"]["footnotes"]["statement"]
    assert not any(k.endswith("_se") or k == "se" for k in doc["cells"][0])
    weighted = client.post(TABLES, json={**body, "statistic": "weighted"}).json()
    assert "se_unavailable" not in weighted["meta"]
    assert SE_UNWEIGHTED not in weighted["meta"]["footnotes"]["statement"]
    assert "se" in weighted["cells"][0]


# -- a table of households says so in its title, in every format that carries one ---------


def test_household_tables_say_what_they_count_in_every_title(make_dataset):
    import io

    import openpyxl

    import tablesafe as ts
    from tablesafe.mechanisms import destatis
    from test_units import _catalog, _persons

    ds = make_dataset(_persons(600, 8), _catalog())
    build = ts.TableBuilder(ds, ts.Protection(destatis(3, 1.0))).build
    households = build(ts.TableRequest(("A", "D"), statistic="both", unit="household"))
    persons = build(ts.TableRequest(("A", "D"), statistic="both"))
    want = "Count and weighted count of households by A and D"
    assert households.title == want
    assert persons.title == "Count and weighted count by A and D"
    assert households.universe_label == "All households"
    assert persons.universe_label == "All records"
    assert json.loads(households.render("json"))["meta"]["title"] == want
    assert json.loads(households.render("jsonstat"))["label"] == want
    sdmx_json = json.loads(households.render("sdmx-json"))
    assert sdmx_json["meta"]["name"] == want
    assert sdmx_json["data"]["structures"][0]["attributes"]["dataSet"][0]["values"] == [
        {"value": want}
    ]
    from tablesafe.output._sdmx import sdmx_csv

    assert f",{want}," in sdmx_csv(households, footnotes=True).splitlines()[1]
    assert households.render("text").splitlines()[0] == want
    book = openpyxl.load_workbook(io.BytesIO(households.to_xlsx_bytes()))
    about = {r[0]: r[1] for r in book["about"].iter_rows(values_only=True) if r and r[0]}
    assert about["Title"] == want
    # Each statistic's sheet is headed by its own title, households named too.
    assert book["Count"]["A1"].value == "Count of households by A and D"
    assert book["Weighted count"]["A1"].value == "Weighted count of households by A and D"
