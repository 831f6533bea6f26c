"""The documentation cannot drift from the code: the site builds with --strict (no broken link,
anchor or generated reference), every `rlrun ...` command line in the README's and the docs' code
blocks parses against the real command line, every spec in the docs validates against the real
schema, and no table breaks into literal `|` text (which --strict lets through). Fast: nothing
trains (a command line is parsed, never run)."""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

import rlrun

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

# A fenced block (```lang ... ```), or an indented one (four spaces after a blank line): the README
# writes its commands the second way.
FENCED = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
INDENTED = re.compile(r"(?:^\n)((?:^(?: {4}.*)?\n)+)", re.MULTILINE)
NOT_SHELL = {"json", "python", "text"}  # text blocks hold outputs and file trees, not commands


def code_blocks(page: Path) -> list[tuple[str, str]]:
    """(language, text) of every code block on a page; indented blocks count as shell."""
    text = page.read_text()
    blocks = [(match[1], match[2]) for match in FENCED.finditer(text)]
    unfenced = FENCED.sub("", text)
    blocks += [("", "\n".join(line[4:] for line in match[1].splitlines())) for match in INDENTED.finditer(unfenced)]
    return blocks


def command_lines() -> list[tuple[str, list[str]]]:
    """Every `rlrun` invocation in a shell block: (where, its arguments), read as a shell reads the
    line (quotes, comments, `;`, `&&`, `||`, `|`), less the prompt, variable assignments and
    redirections."""
    found = []
    for page in PAGES:
        for language, block in code_blocks(page):
            if language in NOT_SHELL:
                continue
            for line in _with_variables_set(block).replace("\\\n", " ").splitlines():
                if not re.search(r"\brlrun\b", line):
                    continue
                for words in _shell_commands(line.strip().removeprefix("$ ")):
                    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
                        words.pop(0)
                    if words and words[0] == "rlrun":
                        found.append((f"{page.relative_to(ROOT)}: {shlex.join(words)}", words[1:]))
    return found


def _with_variables_set(block: str) -> str:
    """The block with each shell variable it sets (`port=6390` on a line of its own) in place of
    its uses (`--ray 127.0.0.1:$port`), as the shell would run it."""
    variables = dict(re.findall(r"^([A-Za-z_]\w*)=(\S+)", block, re.MULTILINE))
    return re.sub(r"\$(\w+)", lambda match: variables.get(match[1], match[0]), block)


def _shell_commands(line: str) -> list[list[str]]:
    """The simple commands of one shell line, each cut at its first redirection."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    redirected = False
    for token in lexer:
        if token in (";", "&&", "||", "|", "&"):
            commands.append([])
            redirected = False
        elif token in (">", ">>", "<", ">&") or redirected:
            redirected = True
        else:
            commands[-1].append(token)
    return commands


def spec_blocks() -> list[tuple[str, str]]:
    """Every ```json block of the docs: each is a whole spec (fragments are written inline)."""
    return [
        (f"{page.relative_to(ROOT)}: block {n}", block)
        for page in PAGES
        for n, (language, block) in enumerate(code_blocks(page))
        if language == "json"
    ]


def parse_command_line(args: list[str]) -> None:
    """Parse `rlrun ARGS` as the command line would, down to the last subcommand, without running
    it: a usage error (an unknown command or option, a missing argument, a bad value) raises."""
    import typer.main
    from typer.core import TyperGroup

    from rlrun.cli import _bare_ray, app

    command: Any = typer.main.get_command(app)
    context = command.make_context("rlrun", _bare_ray(args))
    while isinstance(command, TyperGroup) and (context._protected_args or context.args):
        name, command, rest = command.resolve_command(context, [*context._protected_args, *context.args])
        context = command.make_context(name, rest, parent=context)


def validate_spec_block(text: str) -> None:
    """The block as `rlrun train` (or, with a `search` block, `rlrun search`) would take it. An env of
    the reader's own (`module:EnvId`) is not importable here, so only its spelling is checked."""
    from rlrun.spec import validate_spec

    document = json.loads(text)
    if "search" in document:
        from rlrun.search.plan import plan_search

        plan_search(document, trials=1)
        return
    validate_spec(document, check_env_id=":" not in document.get("env", {}).get("id", ""))


def stray_table_rows(page: Path) -> list[str]:
    """The lines of a page that read as table rows (they start with `|`) but render as text: a
    table broken by a paragraph or a blank line inside it leaves its rows as literal `|` text, and
    `mkdocs build --strict` passes it. The page renders with mkdocs.yml's own Markdown extensions,
    so a table is one exactly where the site has one."""
    import markdown

    extensions, extension_configs = _site_markdown_extensions()
    html = markdown.markdown(page.read_text(), extensions=extensions, extension_configs=extension_configs)
    text = _TextOutsideTablesAndCode()
    text.feed(html)
    return [line.strip() for line in "".join(text.parts).splitlines() if line.strip().startswith("|")]


@functools.cache
def _site_markdown_extensions() -> tuple[list[str], dict[str, Any]]:
    """mkdocs.yml's Markdown extensions with mkdocs' own defaults (toc, tables, fenced_code)."""
    from mkdocs.config import load_config

    config = load_config(str(ROOT / "mkdocs.yml"))
    return config["markdown_extensions"], config["mdx_configs"]


class _TextOutsideTablesAndCode(HTMLParser):
    """The text of an HTML page less what tables and code blocks hold (where a `|` is meant); an
    inline code span keeps its backticks, so a line that opens with one (`|` ...) is no row."""

    KEEP_OUT = frozenset({"table", "pre"})

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.depth = 0

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        self.depth += tag in self.KEEP_OUT
        self._backtick(tag)

    def handle_endtag(self, tag: str) -> None:
        self.depth -= tag in self.KEEP_OUT
        self._backtick(tag)

    def handle_data(self, data: str) -> None:
        if not self.depth:
            self.parts.append(data)

    def _backtick(self, tag: str) -> None:
        if tag == "code":
            self.handle_data("`")


def lines_swallowed_by_tables(page: Path) -> list[str]:
    """The lines a table takes in as rows though they do not start with `|`: after a table's
    delimiter row (`|---|---|`) every line up to a blank one is a row to Markdown, so a paragraph
    written into a table without blank lines around it becomes a row of one cell."""
    found, in_table, fenced = [], False, False
    for line in (text.strip() for text in page.read_text().splitlines()):
        fenced ^= line.startswith("```")
        if fenced or not line:
            in_table = False
        elif not line.startswith("|"):
            found += [line] if in_table else []
        elif TABLE_DELIMITER.fullmatch(line):
            in_table = True
    return found


TABLE_DELIMITER = re.compile(r"\|(\s*:?-{3,}:?\s*\|)*\s*:?-{3,}:?\s*\|?")

TABLE = """| algorithm | outputs |
|---|---|
| DQN | `action`, `q_values` |
"""
ROWS = """| PPO | `action`, `logits` |
| SAC | `action`, `mean`, `log_std` |
"""
PARAGRAPH = "A paragraph written inside the table.\n"


def test_a_broken_table_is_caught(tmp_path: Path) -> None:
    """docs/how-to/deploy.md's old bug: a paragraph inside the ONNX outputs table, between blank
    lines, turned its last two rows into literal `|` text; without the blank lines, the paragraph
    becomes a row. The whole table, the paragraph after it, passes."""
    page = tmp_path / "page.md"
    page.write_text(f"Outputs:\n\n{TABLE}\n{PARAGRAPH}\n{ROWS}")
    assert stray_table_rows(page) == ["| PPO | `action`, `logits` |", "| SAC | `action`, `mean`, `log_std` |"]
    page.write_text(f"Outputs:\n\n{TABLE}{PARAGRAPH}{ROWS}")
    assert lines_swallowed_by_tables(page) == [PARAGRAPH.strip()]
    page.write_text(f"Outputs:\n\n{TABLE}{ROWS}\n{PARAGRAPH}\n```text\n|---|---|\nnot a row\n```\n")
    assert stray_table_rows(page) == lines_swallowed_by_tables(page) == []


@pytest.mark.parametrize("page", PAGES, ids=[str(page.relative_to(ROOT)) for page in PAGES])
def test_tables_are_whole(page: Path) -> None:
    where = page.relative_to(ROOT)
    assert stray_table_rows(page) == [], f"{where}: rows outside a table (no blank line or paragraph inside one)"
    assert lines_swallowed_by_tables(page) == [], f"{where}: lines a table reads as rows (start each row with |)"


def undocumented_parameters(path: str) -> list[str]:
    """The parameters of the call at `path` (or of a class's public methods) that its docstring's
    Args section leaves out, read as the Python API page reads them (griffe, Google style). A
    documented parameter the call lacks is mkdocstrings' warning, so the strict build's failure."""
    found = _api_package()[path.removeprefix("rlrun.")]
    target = found.final_target if found.is_alias else found
    calls = [target] if target.is_function else [m for m in target.members.values() if m.is_function]
    missing = []
    for call in (call for call in calls if not call.name.startswith("_")):
        sections = call.docstring.parse("google") if call.docstring else []
        documented = {p.name for s in sections if s.kind.value == "parameters" for p in s.value}
        missing += [f"{call.path}({p.name})" for p in call.parameters if p.name not in {"self", "cls", *documented}]
    return missing


@functools.cache
def _api_package() -> Any:
    import griffe

    return griffe.load("rlrun", search_paths=[str(ROOT)], docstring_parser="google")


PUBLIC_API = [f"rlrun.{name}" for name in rlrun.__all__ if not name.startswith("_")] + [
    "rlrun.enjoy.policy.Policy"  # what load_policy returns, acted with in users' code
]


@pytest.mark.parametrize("path", PUBLIC_API)
def test_the_python_api_documents_every_parameter(path: str) -> None:
    """docs/reference/python-api.md renders each call's parameter list from its docstring."""
    assert undocumented_parameters(path) == []
    assert f"::: {path}" in (ROOT / "docs" / "reference" / "python-api.md").read_text() or path in UNLISTED


UNLISTED = {"rlrun.Spec"}  # the spec's keys have a page of their own (reference/spec.md)


def nav_pages() -> list[str]:
    """Every page mkdocs.yml's navigation lists, as a path under docs/."""
    from mkdocs.config import load_config

    def walk(items: Any) -> list[str]:
        pages = []
        for item in items if isinstance(items, list) else [items]:
            for entry in item.values() if isinstance(item, dict) else [item]:
                pages += walk(entry) if isinstance(entry, (list, dict)) else [entry]
        return pages

    return walk(load_config(str(ROOT / "mkdocs.yml"))["nav"])


def test_the_home_page_links_every_page() -> None:
    """docs/index.md's "Where to go" names every page of the navigation, each with what it is for:
    a page the nav gains needs its line there too."""
    linked = set(re.findall(r"\]\(([^)#]+\.md)", (ROOT / "docs" / "index.md").read_text()))
    pages = nav_pages()
    assert len(pages) >= 40 and "index.md" in pages
    unlinked = [page for page in pages if page not in linked | {"index.md"}]
    assert unlinked == [], "docs/index.md's 'Where to go' needs a line (what it is for, the link) for each"


def test_site_builds_strictly(tmp_path: Path) -> None:
    """Every page, link, anchor and generated table; a warning is a failure (mkdocs.yml: strict)."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    import typer.main
    from typer._click import Context

    from rlrun.cli import app

    root: Any = typer.main.get_command(app)
    for name in root.list_commands(Context(root, info_name="rlrun")):  # every command `rlrun --help` lists
        assert f"rlrun {name}" in cli, name


def test_the_docs_have_commands_and_specs_to_check() -> None:
    """The extractors find what the docs hold: a regex that matches nothing would pass every check."""
    assert len(COMMAND_LINES) >= 50
    assert len(SPEC_BLOCKS) >= 4


COMMAND_LINES, SPEC_BLOCKS = command_lines(), spec_blocks()


@pytest.mark.parametrize(("where", "args"), COMMAND_LINES, ids=[where for where, _ in COMMAND_LINES])
def test_command_line_parses(where: str, args: list[str]) -> None:
    from typer import Exit

    try:
        parse_command_line(args)
    except Exit as done:  # `--help` or `--version`: parsed, then the command line would stop
        assert done.exit_code == 0, where
    except Exception as error:
        pytest.fail(f"{where}\n  does not parse: {type(error).__name__}: {error}")


@pytest.mark.parametrize(("where", "text"), SPEC_BLOCKS, ids=[where for where, _ in SPEC_BLOCKS])
def test_spec_block_validates(where: str, text: str) -> None:
    from rlrun.errors import SpecError

    try:
        validate_spec_block(text)
    except (SpecError, json.JSONDecodeError) as error:
        pytest.fail(f"{where}\n  is not a valid spec: {error}")
