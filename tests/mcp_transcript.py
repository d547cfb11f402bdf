"""The transcript of docs/agents.md: a real session against the demo, driven by the MCP SDK's client.

The demo is ``make demo``'s: ``tablesafe demo-data data/demo --records 200000 --seed 2026``
with ``demo/site.toml``, and :data:`SECRET` in ``data/demo-secret`` (``make demo`` writes a
random one, so its figures differ from these by the noise). :func:`transcript` spawns
``tablesafe mcp --config demo/site.toml`` in such a folder, asks what an assistant would
ask for "how many women aged 30 to 39 in the North rent their home?", and writes each
call and answer as Markdown. ``tests/test_mcp.py`` checks that docs/agents.md holds
exactly what it writes;

    python tests/mcp_transcript.py

rewrites the page's transcript (between :data:`START` and :data:`END`).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from mcp_client import stdio_parameters

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "agents.md"
START = "<!-- transcript: written by tests/mcp_transcript.py; do not edit -->"
END = "<!-- transcript end -->"
SECRET = "agents-transcript-secret-" + "0" * 39
RECORDS, SEED = 200_000, 2026

#: The session: (what the assistant is after, tool, arguments).
STEPS: list[tuple[str, str, dict[str, Any]]] = [
    ("Which datasets are there?", "list_datasets", {}),
    ("Which variable says whether people rent?", "find_variables", {"words": "rent"}),
    ("Which codes are the North, and ages 30 to 39?", "find_variables", {"words": "North 30 39"}),
    (
        "Age group by sex in the North (the table of the HTTP API's example).",
        "build_table",
        {"dimensions": ["AGEGRP", "SEX"], "universe": {"REGION": [1]}, "statistic": "count"},
    ),
    (
        "The table: tenure by sex of 30-39-year-olds in the North, with standard errors.",
        "build_table",
        {
            "dimensions": ["TENURE", "SEX"],
            "universe": {"REGION": [1], "AGE5": ["30-34", "35-39"]},
            "se": True,
        },
    ),
    (
        "The same ages without the widowed: a sliver of the table above, refused.",
        "build_table",
        {
            "dimensions": ["TENURE", "SEX"],
            "universe": {"REGION": [1], "AGE5": ["30-34", "35-39"], "MARSTAT": [1, 2, 4]},
            "se": True,
        },
    ),
    (
        "Why?",
        "explain_table",
        {
            "dimensions": ["TENURE", "SEX"],
            "universe": {"REGION": [1], "AGE5": ["30-34", "35-39"], "MARSTAT": [1, 2, 4]},
            "se": True,
        },
    ),
]


def demo_folder(where: Path) -> Path:
    """``make demo``'s layout in ``where``: demo/site.toml, data/demo, data/demo-secret."""
    from tablesafe.prepare._demo import write_demo_data

    (where / "demo").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "demo" / "site.toml", where / "demo" / "site.toml")
    (where / "data").mkdir(exist_ok=True)
    (where / "data" / "demo-secret").write_text(SECRET + "\n")
    if not (where / "data" / "demo" / "catalog.toml").exists():
        write_demo_data(where / "data" / "demo", RECORDS, seed=SEED)
    return where / "demo" / "site.toml"


def transcript(config: Path) -> str:
    """The session's Markdown, from a spawned ``tablesafe mcp --config CONFIG``."""
    return session(config)[0]


def session(config: Path) -> tuple[str, list[Any]]:
    """The session's Markdown and each step's result (the SDK's ``CallToolResult``)."""
    return anyio.run(_session, config)


async def _session(config: Path) -> tuple[str, list[Any]]:
    out: list[str] = []
    results = []
    async with Client(stdio_parameters(config, None)) as client:
        tools = [t.name for t in (await client.list_tools()).tools]
        out += ["The server's tools: " + ", ".join(f"`{t}`" for t in tools) + ".", ""]
        for why, tool, arguments in STEPS:
            results.append(await client.call_tool(tool, arguments))
            out += _step(why, tool, arguments, results[-1])
    return "\n".join(out).strip("\n"), results


def _step(why: str, tool: str, arguments: dict[str, Any], result: Any) -> list[str]:
    lines = [f"**{why}** The assistant calls `{tool}`:", "", "```json"]
    lines += [json.dumps(arguments, ensure_ascii=False), "```", ""]
    data = result.structured_content
    if result.is_error:
        lines += ["tablesafe answers with an error (`isError`):", "", "```json"]
        lines += [_json(data), "```", ""]
        return lines
    if tool == "build_table":
        return lines + _table(data)
    shown = _shortened(tool, data)
    lines += ["tablesafe answers (structured content"]
    lines[-1] += ", shortened where it says so):" if shown is not data else "):"
    lines += ["", "```json", _json(shown), "```", ""]
    return lines


def _json(value: Any, level: int = 0) -> str:
    """JSON for the page: the top level's keys and lists of objects one per line, the rest compact."""
    if level == 0 and isinstance(value, dict):
        items = [f" {json.dumps(k)}: {_json(v, 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n}"
    if level == 1 and isinstance(value, list) and value and isinstance(value[0], dict):
        return "[\n" + ",\n".join(f"  {_json(v, 2)}" for v in value) + "\n ]"
    return json.dumps(value, ensure_ascii=False)


def _shortened(tool: str, data: dict[str, Any]) -> dict[str, Any]:
    """list_datasets' protection and rules and find_variables' long lists, cut for the page."""
    if tool == "list_datasets":
        keep = ("name", "title", "weighted", "variables", "magnitudes")
        return {"datasets": [{k: d[k] for k in keep} for d in data["datasets"]], "...": "..."}
    return data


def _table(data: dict[str, Any]) -> list[str]:
    """A table's cells as a Markdown table, with its universe and footnotes, as answered."""
    meta = data["meta"]
    dims = meta["dimensions"]
    stats = [s for s in meta["statistics"] if s in data["cells"][0]]
    lines = [f"tablesafe answers **{meta['title']}**, universe: *{meta['universe_label']}*", ""]
    lines.append("| " + " | ".join([*dims, *stats, "flags"]) + " |")
    lines.append("|" + "---|" * (len(dims) + len(stats) + 1))
    flags = list(meta["footnotes"]["flags"])
    for cell in data["cells"]:
        codes = [f"{cell[d]} {cell[f'{d}_label']}" for d in dims]
        values = [str(cell[s]) for s in stats]
        marked = ", ".join(f for f in flags if cell.get(f) is True)
        lines.append("| " + " | ".join([*codes, *values, marked]) + " |")
    lines += ["", "with its footnotes:", ""]
    lines += [f"> {sentence}" for sentence in meta["footnotes"]["statement"]]
    lines.append("")
    return lines


def page_transcript(page: str) -> str:
    """The transcript docs/agents.md holds (between the markers)."""
    start = page.index(START) + len(START)
    return page[start : page.index(END)].strip("\n")


def main() -> None:
    """Rewrite docs/agents.md's transcript from a real session (a demo in a temporary folder)."""
    with tempfile.TemporaryDirectory() as tmp:
        text = transcript(demo_folder(Path(tmp)))
    page = PAGE.read_text()
    start = page.index(START) + len(START)
    PAGE.write_text(page[:start] + "\n\n" + text + "\n\n" + page[page.index(END) :])
    print(f"wrote {PAGE}", file=sys.stderr)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    main()
