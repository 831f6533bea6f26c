"""MkDocs hook: the reference pages' tables, generated from the code on every build so they cannot
drift from it. A page asks for one by a marker on a line of its own:

    <!-- rlrun:cli-reference -->       every command and option of the Typer app (rlrun.cli)
    <!-- rlrun:spec-reference -->      every spec key: type, default, meaning (the spec's JSON Schema)
    <!-- rlrun:builtins-reference -->  every built-in spec with its algorithm, env and budget

Registered under `hooks:` in mkdocs.yml; tests/test_docs.py builds the site with --strict.
"""

from __future__ import annotations

import json
from typing import Any

GENERATED = {
    "<!-- rlrun:cli-reference -->": lambda: cli_reference(),
    "<!-- rlrun:spec-reference -->": lambda: spec_reference(),
    "<!-- rlrun:builtins-reference -->": lambda: builtins_reference(),
}


def on_page_markdown(markdown: str, **_: Any) -> str:
    for marker, generate in GENERATED.items():
        if marker in markdown:
            markdown = markdown.replace(marker, generate())
    return markdown


def cell(text: Any) -> str:
    """Text safe inside a Markdown table cell: one line, no column separator."""
    return " ".join(str(text).split()).replace("|", "&#124;")


# ---------------------------------------------------------------------------------------------
# Commands and options: walked from the Click command Typer builds, as `rlrun --help` prints them.


def cli_reference() -> str:
    import typer.main
    from typer._click import Context  # Typer 0.28 vendors Click

    from rlrun.cli import app

    root = typer.main.get_command(app)
    root_context = Context(root, info_name="rlrun")
    sections: list[str] = []

    def describe(command: Any, context: Any) -> None:
        path = context.command_path
        usage = command.get_usage(context).removeprefix("Usage:").strip()
        records = [param.get_help_record(context) for param in command.get_params(context)]
        rows = [f"| `{cell(name)}` | {cell(help_text)} |" for name, help_text in filter(None, records)]
        sections.append(
            "\n".join(
                [
                    f"### {path}",
                    "",
                    cell(command.help or command.short_help or ""),
                    "",
                    "```text",
                    usage,
                    "```",
                    "",
                    "| argument or option | meaning |",
                    "|---|---|",
                    *rows,
                    "",
                ]
            )
        )
        for name in getattr(command, "commands", {}) and command.list_commands(context):
            sub = command.get_command(context, name)
            describe(sub, Context(sub, info_name=name, parent=context))

    describe(root, root_context)
    return "\n".join(sections)


# ---------------------------------------------------------------------------------------------
# Spec keys: flattened from `rlrun.spec.json_schema()`, the schema `rlrun spec schema` prints.


def spec_reference() -> str:
    from rlrun.spec import json_schema

    schema = json_schema()
    definitions = schema["$defs"]
    header = ["| key | type | default | meaning |", "|---|---|---|---|"]
    common = [
        row
        for name, node in schema["properties"].items()
        if name != "agent"
        for row in _rows(name, node, definitions, schema.get("required", []))
    ]
    parts = ["### Every spec", "", *header, *common, ""]
    for choice in schema["properties"]["agent"]["oneOf"]:
        agent = _resolve(choice, definitions)
        algorithm = agent["properties"]["algorithm"].get("const") or agent["properties"]["algorithm"].get("default")
        rows = [
            row
            for name, node in agent["properties"].items()
            for row in _rows(f"agent.{name}", node, definitions, agent.get("required", []))
        ]
        parts += [f"### agent: {algorithm}", "", *header, *rows, ""]
    return "\n".join(parts)


def _resolve(node: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = definitions[node["$ref"].rsplit("/", 1)[-1]]
    return node


def _rows(path: str, node: dict[str, Any], definitions: dict[str, Any], required: list[str]) -> list[str]:
    """One row for `path`, then one per key of the object it holds (a single object, or that object
    or null); unions of several shapes (a number or a schedule) stay one row."""
    shapes = [option for option in node.get("anyOf", [node]) if option.get("type") != "null"]
    inner = _resolve(shapes[0], definitions) if len(shapes) == 1 else {}
    name = path.rsplit(".", 1)[-1]
    default = "required" if name in required else json.dumps(node.get("default")) if "default" in node else ""
    meaning = node.get("description") or inner.get("description", "")
    rows = [f"| `{path}` | {cell(_type(node, definitions))} | {cell(default)} | {cell(meaning)} |"]
    for key, child in inner.get("properties", {}).items():
        rows += _rows(f"{path}.{key}", child, definitions, inner.get("required", []))
    return rows


def _type(node: dict[str, Any], definitions: dict[str, Any]) -> str:
    if "$ref" in node:
        return node["$ref"].rsplit("/", 1)[-1]
    for union in ("anyOf", "oneOf"):
        if union in node:
            return " or ".join(_type(option, definitions) for option in node[union])
    if "const" in node:
        return json.dumps(node["const"])
    if "enum" in node:
        return "one of " + ", ".join(json.dumps(value) for value in node["enum"])
    if node.get("type") == "array":
        return f"list of {_type(node.get('items', {}), definitions)}"
    if node.get("type") == "object" and "additionalProperties" in node:
        values = node["additionalProperties"]
        return "object" if values is True else f"object of {_type(values, definitions)}"
    return str(node.get("type", "any"))


# ---------------------------------------------------------------------------------------------
# Built-in specs: read from the package, as `rlrun spec list` and `rlrun spec show` read them.


def builtins_reference() -> str:
    from rlrun.spec import builtin_document, builtin_names, builtin_search_names

    rows = ["| spec | algorithm | env | frames per session | sessions |", "|---|---|---|---|---|"]
    for name in builtin_names() + builtin_search_names():
        document = builtin_document(name)
        meta = document.get("meta", {})
        kind = " (search: `rlrun search`)" if name in builtin_search_names() else ""
        rows.append(
            f"| `{name}`{kind} | {document['agent']['algorithm']} | `{document['env']['id']}` "
            f"| {cell(meta.get('max_frame', ''))} | {cell(meta.get('sessions', 1))} |"
        )
    return "\n".join(rows) + "\n\n`rlrun spec show NAME` prints one, ready to save and edit.\n"
