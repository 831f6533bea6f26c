"""The one Typer app: its command groups (`db`, `spec`), its root callback (`--version`, help for a
bare `rlrun`), and the order `rlrun --help` lists the commands in. The commands themselves live in
their modules (`train`, `search`, `registry_commands`, `exports`, `home`, `specs`)."""

import sys
from typing import Annotated, Any

import typer

from rlrun import __version__

app = typer.Typer(
    help="Train reinforcement-learning agents from JSON specs; every run is recorded, resumable and replayable.",
    add_completion=False,
    # Usage errors, tracebacks and help are ours (see `main`) and plain: no Rich on the way.
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer()  # help: the docstrings of their callbacks, below
spec_app = typer.Typer()
app.add_typer(db_app, name="db", short_help="Registry schema: current, upgrade, rebuild.")
app.add_typer(spec_app, name="spec")


# `rlrun --help` lists the commands in this order (what a user reaches for first), whatever order
# their modules register them in.
HELP_ORDER = (
    "train",
    "resume",
    "enjoy",
    "search",
    "ls",
    "show",
    "track",
    "plot",
    "compare",
    "export",
    "stop",
    "rm",
    "gc",
    "import",
    "push",
    "pull",
    "publish",
    "record",
)


def in_help_order(command: Any) -> int:
    """A registered command's place in `rlrun --help` (`app.registered_commands.sort(key=...)`)."""
    return HELP_ORDER.index(command.name or command.callback.__name__)


def help_if_bare(context: typer.Context) -> None:
    """`rlrun`, `rlrun db` or `rlrun spec` alone: the help, on stderr, and exit code 2 (a usage error)."""
    if context.invoked_subcommand is None:
        sys.stderr.write(context.get_help() + "\n")
        raise typer.Exit(2)


def _show_version(value: bool) -> None:
    if value:
        sys.stdout.write(f"rlrun {__version__}\n")
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def rlrun(
    context: typer.Context,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_show_version, is_eager=True, expose_value=False, help="Show the version."),
    ] = False,
) -> None:
    """rlrun: runs that survive the real world."""
    help_if_bare(context)
