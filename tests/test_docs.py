"""The docs runner: every sh/bash/console/python block of README.md and docs/*.md runs.

Each Markdown file gets its own working directory, a copy of one made per session in
which ``data/demo`` holds the demo survey (20,000 records, seed 2026, 80 replicate
weights, record keys), ``data/demo-secret`` a secret, ``demo/site.toml`` the demo site
configuration and ``.venv/bin`` the running interpreter's scripts, so the commands of
the README (``.venv/bin/tablesafe ...``) and the bare ``tablesafe ...`` of the guide
both work. The blocks of one file run in order, like a reader copying them: shell
blocks with ``bash -e -o pipefail`` (a ``console`` block's commands are its lines that
start with ``$ ``), Python blocks in one namespace per file, so a page may build on
its earlier blocks.

TOML and JSON blocks are parsed (fast, not ``system``); a block without a language
that holds a command must say it is one (``sh``). A block that cannot run (a usage
synopsis with placeholders, a server that never returns, a cluster) has
``<!-- docs-runner: skip -->`` (optionally followed by a reason) on the line before it. Record counts are scaled down by the substitutions in
``SCALE`` (the same commands on 20,000 instead of 200,000 records). A failure names
the file and line of the block; Python tracebacks point at the Markdown lines.

The blocks are ``system`` tests (about a minute together on an idle machine, most of
it in the command-line blocks); ``-k 'docs/python-api.md'`` runs one page, and a block
selected alone runs the earlier blocks of its page first.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUN_LANGUAGES = {"sh", "bash", "shell", "console", "python", "py"}
SKIP_MARK = re.compile(r"^\s*<!--\s*docs-runner:\s*skip\b.*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)")
RECORDS = 20_000
SCALE: tuple[tuple[str, str], ...] = (
    # The demo survey of the docs has 200,000 records; the runner uses 20,000.
    ("--records 200000", f"--records {RECORDS}"),
    ("--records 1000000", f"--records {RECORDS}"),
    ("200_000", f"{RECORDS:_}"),
)
BLOCK_TIMEOUT = 300


@dataclass(frozen=True)
class Block:
    """One fenced block of a Markdown file."""

    path: Path
    line: int  # 1-based line of the opening fence
    language: str
    source: str
    skip: bool

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def doc_files() -> list[Path]:
    """README.md and every Markdown page of docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]


def parse_blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path``, in order, with its language and skip mark."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        fence, indent = m.group("fence"), len(m.group("indent"))
        start = i
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        if j == len(lines):
            raise AssertionError(f"{path.relative_to(ROOT)}:{start + 1}: unclosed code fence")
        body = [line[indent:] if line[:indent].isspace() else line for line in lines[start + 1 : j]]
        skip = start > 0 and SKIP_MARK.match(lines[start - 1]) is not None
        language = m.group("info").lower()
        blocks.append(Block(path, start + 1, language, "\n".join(body) + "\n", skip))
        i = j + 1
    return blocks


def stray_skip_marks(path: Path) -> list[int]:
    """Lines with a skip mark that is not right before a code fence."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [
        i + 1
        for i, line in enumerate(lines)
        if SKIP_MARK.match(line) and (i + 1 >= len(lines) or FENCE.match(lines[i + 1]) is None)
    ]


def runnable_blocks() -> list[Block]:
    return [b for p in doc_files() for b in parse_blocks(p) if b.language in RUN_LANGUAGES]


BLOCKS = runnable_blocks()


def scaled(source: str) -> str:
    for old, new in SCALE:
        source = source.replace(old, new)
    return source


def shell_script(block: Block) -> str:
    source = scaled(block.source)
    if block.language != "console":
        return source
    commands: list[str] = []
    continuing = False
    for line in source.splitlines():
        if line.startswith("$ ") or continuing:
            command = line[2:] if line.startswith("$ ") and not continuing else line
            commands.append(command)
            continuing = command.rstrip().endswith("\\")
    return "\n".join(commands) + "\n"


@pytest.fixture(scope="session")
def docs_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working directory with the demo data, a secret, the demo site and .venv/bin."""
    from tablesafe.prepare._demo import write_demo_data

    root = tmp_path_factory.mktemp("docs-template")
    write_demo_data(root / "data" / "demo", RECORDS, seed=2026)
    (root / "data" / "demo-secret").write_text("docs-runner-secret-" + "0" * 45 + "\n")
    shutil.copytree(ROOT / "demo", root / "demo")
    if sys.prefix != sys.base_prefix:  # a virtual environment: link it whole (pyvenv.cfg)
        (root / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    else:
        (root / ".venv").mkdir()
        (root / ".venv" / "bin").symlink_to(Path(sys.executable).parent, target_is_directory=True)
    return root


class PageState:
    """The working directory and Python namespace shared by the blocks of one page."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.namespace: dict[str, Any] = {"__name__": "__docs__"}
        self.done: set[int] = set()  # lines of the blocks already run (or tried)


@pytest.fixture(scope="session")
def page_states() -> dict[Path, PageState]:
    return {}


def page_state(
    states: dict[Path, PageState], template: Path, factory: pytest.TempPathFactory, path: Path
) -> PageState:
    if path not in states:
        name = re.sub(r"[^A-Za-z0-9]+", "-", str(path.relative_to(ROOT)))
        workdir = factory.mktemp(f"docs-{name}")
        shutil.copytree(template, workdir, dirs_exist_ok=True, symlinks=True)
        states[path] = PageState(workdir)
    return states[path]


def run_shell(block: Block, workdir: Path) -> None:
    bin_dir = workdir / ".venv" / "bin"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("TABLESAFE_SECRET", None)
    env.setdefault("TABLESAFE_CACHE_DIR", str(workdir / ".cache"))
    proc = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", shell_script(block)],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"{block.where}: the {block.language} block exited with {proc.returncode}\n"
            f"--- block ---\n{block.source}--- stdout (tail) ---\n{proc.stdout[-3000:]}\n"
            f"--- stderr (tail) ---\n{proc.stderr[-3000:]}",
            pytrace=False,
        )


def run_python(block: Block, state: PageState, monkeypatch: pytest.MonkeyPatch) -> None:
    # Pad with blank lines so that tracebacks show the Markdown file's line numbers.
    source = "\n" * block.line + scaled(block.source)
    code = compile(source, str(block.path), "exec")
    monkeypatch.chdir(state.workdir)
    exec(code, state.namespace)  # running the documentation is the point


@pytest.mark.system
@pytest.mark.parametrize("block", [b for b in BLOCKS if not b.skip], ids=lambda b: b.where)
def test_docs_block(
    block: Block,
    docs_template: Path,
    page_states: dict[Path, PageState],
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = page_state(page_states, docs_template, tmp_path_factory, block.path)
    # A block may build on the earlier blocks of its page: run those first when they
    # have not run yet (e.g. when this block was selected alone with -k).
    for earlier in BLOCKS:
        same_page = earlier.path == block.path and earlier.line < block.line
        if same_page and not earlier.skip and earlier.line not in state.done:
            run_block(earlier, state, monkeypatch)
    run_block(block, state, monkeypatch)


def run_block(block: Block, state: PageState, monkeypatch: pytest.MonkeyPatch) -> None:
    state.done.add(block.line)
    if block.language in {"python", "py"}:
        run_python(block, state, monkeypatch)
    else:
        run_shell(block, state.workdir)


PARSED_LANGUAGES = {"toml", "json"}


@pytest.mark.parametrize(
    "block",
    [
        b
        for p in doc_files()
        for b in parse_blocks(p)
        if b.language in PARSED_LANGUAGES and not b.skip
    ],
    ids=lambda b: b.where,
)
def test_docs_data_block_parses(block: Block) -> None:
    """TOML and JSON blocks are valid as written (abridged ones carry the skip mark)."""
    import json
    import tomllib

    try:
        if block.language == "toml":
            tomllib.loads(block.source)
        else:
            json.loads(block.source)
    except ValueError as exc:
        pytest.fail(
            f"{block.where}: the {block.language} block does not parse: {exc}", pytrace=False
        )


def test_command_blocks_say_they_are_commands() -> None:
    """A fence without a language whose first line is a command would escape the runner."""
    unlabelled = [
        b.where
        for p in doc_files()
        for b in parse_blocks(p)
        if b.language == "" and b.source.lstrip().startswith(("tablesafe ", ".venv/bin/", "$ "))
    ]
    assert unlabelled == []


def test_runner_finds_the_blocks() -> None:
    """The parser sees the README's blocks, and skip marks sit right before a fence."""
    readme = [b for b in BLOCKS if b.path.name == "README.md"]
    assert {b.language for b in readme} >= {"sh", "python"}
    assert len(BLOCKS) > 30
    stray = {str(p.relative_to(ROOT)): stray_skip_marks(p) for p in doc_files()}
    assert {k: v for k, v in stray.items() if v} == {}


def test_parser_on_a_small_page(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "text\n```sh\necho one\n```\n<!-- docs-runner: skip (synopsis) -->\n```bash\nx [--y]\n```\n"
        "  ```python\n  a = 1\n  ```\n```\nplain\n```\n"
    )
    blocks = parse_blocks(page)
    assert [(b.line, b.language, b.skip) for b in blocks] == [
        (2, "sh", False),
        (6, "bash", True),
        (9, "python", False),
        (12, "", False),
    ]
    assert blocks[2].source == "a = 1\n"
    console = Block(page, 1, "console", "$ echo a \\\n  b\nout\n$ ls\n", False)
    assert shell_script(console) == "echo a \\\n  b\nls\n"
