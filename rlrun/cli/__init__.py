"""The `rlrun` command: parse, resolve, print, and call the library. Nothing else lives here.

Human output goes to stderr (Rich for training, plain text for the registry commands); `--json`
puts one JSON document on stdout. Domain errors and usage errors become one line on stderr and an
exit code in `main`, the only error handler.

A Typer app: one function per command, its options as `Annotated` parameters. Typer is pinned to
0.28: from 0.29 on it validates every argument through pydantic, whose import alone costs more than
`rlrun ls` may take in all. Rich help and Rich tracebacks are off, so parsing loads neither Rich nor
anything else heavy; heavy modules (torch, gymnasium, Rich, SQLAlchemy) are imported inside the
commands that need them.

The commands, by group: `train` (train, resume, enjoy, stop), `search` (search, and resume and
stop of a search), `registry_commands` (ls, show, rm), `exports` (track, plot, export), `home` (gc,
import, db), `travel` (push, pull, record) and `specs` (spec); the app they register on (`app`), the options they share
(`options`) and how they speak (`output`). This module runs the app: `main` and `run`, and the one
error handler.
"""

import os
import sys

import typer
from typer._click.exceptions import NoSuchOption  # Typer 0.28 vendors Click; see _usage_message

# Importing the command modules registers their commands on the app.
from rlrun.cli import (  # noqa: F401
    compare,
    exports,
    hints,
    home,
    publish,
    registry_commands,
    search,
    specs,
    train,
    travel,
)
from rlrun.cli.app import app, in_help_order
from rlrun.cli.output import make_console, outlived
from rlrun.errors import EditRefused, RlrunError, SpecError

app.registered_commands.sort(key=in_help_order)


def main() -> None:
    """Entry point of the `rlrun` command: `run` with the process's arguments, its result as the exit status."""
    # First thing, before the heavy imports of start-up: a SIGTERM from now on stops a training
    # command gracefully (128 + signal, nothing or a consistent record written), never kills it.
    from rlrun.session.stopping import TRAINING_COMMANDS, close_to_signals, defer_signals_for

    outlived()  # a reader gone away (`| head`, a lost terminal) never ends the command
    defer_signals_for(sys.argv[1:])
    trains = bool(sys.argv[1:2]) and sys.argv[1] in TRAINING_COMMANDS
    if trains:  # before torch loads: OpenMP reads it then
        from rlrun.spec.cores import let_idle_threads_sleep

        let_idle_threads_sleep(os.environ)
    try:
        code = run(sys.argv[1:])
    finally:
        zygote = sys.modules.get("rlrun.training.zygote")  # imported by a command that ran sessions
        if zygote is not None:
            zygote.stop_kept()  # the process keeps it for its next run: a command has none
    if trains:
        close_to_signals()
    if code:
        raise SystemExit(code)


def _bare_ray(argv: list[str]) -> list[str]:
    """`--ray` takes the next argument as its ADDRESS only when it reads as one (HOST:PORT, a
    ray:// URL, `auto` or `local`), so `rlrun resume --ray latest` resumes `latest` on the cluster
    that `auto` finds; otherwise it is `--ray=` (no address given)."""
    fixed = list(argv)
    for i, arg in enumerate(fixed):
        if arg == "--":
            break
        if arg == "--ray":
            following = fixed[i + 1] if i + 1 < len(fixed) else ""
            if not (_reads_as_address(following) or following in ("auto", "local")):
                fixed[i] = "--ray="
    return fixed


def _reads_as_address(text: str) -> bool:
    """HOST:PORT with a numeric port, or a ray:// URL (not a reference such as `search:abc`)."""
    host, sep, port = text.rpartition(":")
    return text.startswith("ray://") or bool(sep and host and port.isdigit())


def run(argv: list[str]) -> int:
    """Run the app on `argv` and return the exit code; the only error handler: domain errors and
    usage errors become one line on stderr and an exit code, never a traceback. In-process
    callers (tests, scripts) get exactly what the command line gets."""
    argv = _bare_ray(argv)
    with hints.context():
        return _run(argv)


def _run(argv: list[str]) -> int:
    try:
        # Not standalone: Typer hands usage errors to us instead of printing them its own way.
        code = app(args=argv, prog_name="rlrun", standalone_mode=False)
    except EditRefused as error:
        from rlrun.cli.display import refusal_table

        make_console().print(refusal_table(error.changes))
        sys.stderr.write(hints.in_context(f"error: {error}\n"))
        return error.exit_code
    except SpecError as error:
        for problem in error.problems:
            sys.stderr.write(f"error: {problem}\n")
        return error.exit_code
    except RlrunError as error:
        sys.stderr.write(hints.in_context(f"error: {error}\n"))
        return error.exit_code
    except typer.TyperException as error:  # usage errors: unknown option or command, missing argument, bad value
        context = getattr(error, "ctx", None)
        command = context.command_path if context is not None else "rlrun"
        sys.stderr.write(f"error: {_usage_message(error)}; see `{command} --help`\n")
        return error.exit_code
    except typer.Abort:
        return 130
    except SystemExit as stop:  # a command's own status: 128+signal after a graceful stop, 1 when rm is declined
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        sys.stderr.write(hints.in_context(f"{stop.code}\n"))  # what Python itself does with a message
        return 1
    # typer.Exit (--version, help for a bare group, Ctrl-C) comes back as its code.
    return code if isinstance(code, int) else 0


def _usage_message(error: typer.TyperException) -> str:
    """A usage error in one phrase, without the final full stop. An unknown option reads as it
    did under Click (`No such option '--colour'. Did you mean '--color'?`), not as Typer's vendored
    Click words it (`No such option: --colour (Possible options: --color)`)."""
    if isinstance(error, NoSuchOption):
        close = ", ".join(repr(name) for name in sorted(error.possibilities or ()))
        return f"No such option {error.option_name!r}" + (f". Did you mean {close}?" if close else "")
    return error.format_message().rstrip(".")
