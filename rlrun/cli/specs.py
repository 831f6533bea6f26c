"""spec list, show and schema: the built-in specs and the spec's JSON Schema."""

import sys
from typing import Annotated

import typer

from rlrun.cli.app import help_if_bare, spec_app
from rlrun.cli.output import print_json


@spec_app.callback(invoke_without_command=True)
def spec(context: typer.Context) -> None:
    """Built-in specs and the spec schema."""
    help_if_bare(context)


@spec_app.command("list", short_help="List the built-in specs, search specs marked.")
def spec_list() -> None:
    """List the built-in specs: those `rlrun train` takes, then the search specs `rlrun search` takes."""
    from rlrun.cli.views import table
    from rlrun.spec import builtin_document, builtin_names, builtin_search_names

    rows = [
        [name, (document := builtin_document(name))["agent"]["algorithm"], document["env"]["id"], command]
        for names, command in ((builtin_names(), "train"), (builtin_search_names(), "search"))
        for name in names
    ]
    sys.stdout.write(table(("spec", "algorithm", "env", "for"), rows) + "\n")


@spec_app.command("show", short_help="Print a built-in spec as JSON.")
def spec_show(name: Annotated[str, typer.Argument(metavar="NAME", show_default=False)]) -> None:
    """Print a built-in spec as JSON, ready to save and edit."""
    from rlrun.spec import builtin_document

    print_json(builtin_document(name))


@spec_app.command("schema", short_help="Print the spec's JSON Schema (for editors).")
def spec_schema() -> None:
    """Print the JSON Schema of a spec (for editors)."""
    from rlrun.spec import json_schema

    print_json(json_schema())
