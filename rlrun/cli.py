"""The `rlrun` command: parse, resolve, print, and call the library. Nothing else lives here.

Human output goes to stderr through Rich; `--json` puts one JSON document on stdout. Domain errors
become one line on stderr and an exit code in `main`, the only error handler.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from rlrun import __version__, paths
from rlrun.errors import EditRefused, RlrunError, SpecError, TrainingFailed

app = typer.Typer(
    help="Train reinforcement-learning agents from JSON specs; every run is recorded, resumable and replayable.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    add_completion=False,
)
spec_app = typer.Typer(help="Built-in specs and the spec schema.", no_args_is_help=True)
app.add_typer(spec_app, name="spec")

HomeOption = Annotated[
    Optional[Path],  # noqa: UP045 - typer needs Optional at runtime on 3.11 annotations
    typer.Option("--home", envvar=paths.HOME_ENV, help="Runs home (default ./runs).", show_default=False),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print only JSON on stdout.")]


def _console() -> Any:
    from rlrun.display import stderr_console

    return stderr_console()


def _print_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2) + "\n")


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"rlrun {__version__}\n")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    """rlrun: runs that survive the real world."""


# ---------------------------------------------------------------------------------------------
# train


@app.command()
def train(
    spec: Annotated[str, typer.Argument(help="A spec file, or the name of a built-in spec (`rlrun spec list`).")],
    name: Annotated[Optional[str], typer.Option(help="A unique name for the run.")] = None,  # noqa: UP045
    frames: Annotated[Optional[str], typer.Option(help="Frame budget per session, e.g. 200k or 1.5M.")] = None,  # noqa: UP045
    sessions: Annotated[Optional[int], typer.Option(help="Sessions (seeds) to train in parallel.", min=1)] = None,  # noqa: UP045
    seed: Annotated[Optional[int], typer.Option(help="Base seed; session i uses seed + i.", min=0)] = None,  # noqa: UP045
    overrides: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option("--set", help="Override a spec value: --set agent.optimizer.lr=0.01 (repeatable)."),
    ] = None,
    home: HomeOption = None,
    as_json: JsonOption = False,
) -> None:
    """Train a run from SPEC and record it in the registry."""
    from rlrun.display import TrainingDisplay
    from rlrun.sizes import parse_size
    from rlrun.spec import load_spec
    from rlrun.training import train as train_run

    edits = list(overrides or [])
    if frames is not None:
        edits.append(f"meta.max_frame={parse_size(frames, what='--frames')}")
    if sessions is not None:
        edits.append(f"meta.sessions={sessions}")
    if seed is not None:
        edits.append(f"meta.seed={seed}")
    loaded = load_spec(spec, edits)
    console = _console()

    def announce(run: Any) -> None:
        label = f" ({run.name})" if run.name else ""
        console.print(f"run {run.id}{label}: {loaded.name}, {loaded.agent.algorithm} on {loaded.env.id}, "
                      f"{run.num_sessions} session(s), {run.max_frame:,} frames each", highlight=False, markup=False)

    with TrainingDisplay(console) as display:
        result = train_run(loaded, home=home, name=name, on_event=display, on_start=announce)
    _conclude(result, console, as_json)


def _conclude(result: Any, console: Any, as_json: bool) -> None:
    """Print the outcome and leave with its exit code: 0 done, 1 a session failed, 128 + the
    signal after a graceful stop."""
    if as_json:
        _print_json(result.to_json())
    statuses = {s.status for s in result.sessions}
    if "failed" in statuses:
        raise TrainingFailed(f"run {result.run_id} failed: {result.error}; see `rlrun show {result.run_id}`")
    if "preempted" in statuses:
        console.print(f"run {result.run_id} stopped by signal {result.signal} with a snapshot; continue it with"
                      f" `rlrun resume {result.run_id}`", highlight=False, markup=False)
        raise typer.Exit(128 + result.signal)
    console.print(f"run {result.run_id} {result.status}: see `rlrun show {result.run_id}`", highlight=False,
                  markup=False)


@app.command()
def resume(
    reference: Annotated[
        str, typer.Argument(help="The run: latest, latest~N, a row, an id, prefix or name; /sK for one session.")
    ] = "latest",
    frames: Annotated[Optional[str], typer.Option(help="New frame target per session, e.g. 20M.")] = None,  # noqa: UP045
    more: Annotated[Optional[str], typer.Option(help="Frames to add to the target, e.g. 500k.")] = None,  # noqa: UP045
    spec: Annotated[Optional[Path], typer.Option("--spec", help="An edited spec file.")] = None,  # noqa: UP045
    overrides: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Option("--set", help="Edit one spec value: --set meta.eval_frequency=5k (repeatable)."),
    ] = None,
    fork: Annotated[bool, typer.Option("--fork", help="Branch a new run from the snapshot instead.")] = False,
    home: HomeOption = None,
    as_json: JsonOption = False,
) -> None:
    """Continue a run bit for bit from its newest snapshots, with an optional consistent spec edit."""
    from rlrun.display import TrainingDisplay, resume_plan
    from rlrun.sizes import parse_size
    from rlrun.training import resume as resume_run

    console = _console()
    with TrainingDisplay(console) as display:
        result = resume_run(
            reference, home=home, frames=None if frames is None else parse_size(frames, what="--frames"),
            more=None if more is None else parse_size(more, what="--more"), spec=spec, overrides=list(overrides or []),
            fork=fork, on_event=display, on_plan=lambda plan: console.print(resume_plan(plan, reference)),
        )
    _conclude(result, console, as_json)


@app.command()
def enjoy(
    reference: Annotated[
        str, typer.Argument(help="The run, as for show; /sK picks a session, @best, @latest or @5M a checkpoint.")
    ] = "latest",
    episodes: Annotated[int, typer.Option(help="Episodes to play.", min=1)] = 5,
    seed: Annotated[Optional[int], typer.Option(help="Seed of the episodes (default: the session's).", min=0)] = None,  # noqa: UP045
    stochastic: Annotated[bool, typer.Option("--stochastic", help="Sample actions, not the greedy ones.")] = False,
    render: Annotated[bool, typer.Option("--render", help="Show the episodes in a window.")] = False,
    video: Annotated[Optional[Path], typer.Option(help="Record the episodes to a .gif or .mp4 file.")] = None,  # noqa: UP045
    home: HomeOption = None,
    as_json: JsonOption = False,
) -> None:
    """Replay a checkpoint (the best by default) and score it, without touching the training records."""
    from rlrun.display import enjoy_table, enjoy_target
    from rlrun.enjoy import enjoy as enjoy_run

    console = _console()
    result = enjoy_run(reference, home=home, episodes=episodes, seed=seed, stochastic=stochastic, render=render,
                       video=video, on_target=lambda target: console.print(enjoy_target(target, reference)))
    if as_json:
        _print_json(result.to_json())
    else:
        console.print(enjoy_table(result))


# ---------------------------------------------------------------------------------------------
# ls / show: registry only, so they never import torch or gymnasium


@app.command("ls")
def list_runs(
    limit: Annotated[int, typer.Option("-n", "--limit", help="Show at most N runs.", min=1)] = 20,
    show_all: Annotated[bool, typer.Option("--all", help="Show every run.")] = False,
    status: Annotated[Optional[str], typer.Option(help="Only runs with this status.")] = None,  # noqa: UP045
    home: HomeOption = None,
    as_json: JsonOption = False,
) -> None:
    """List runs, newest first."""
    from rlrun.display import runs_table
    from rlrun.registry import Registry

    root = paths.resolve_home(home)
    with Registry.open(root, create=False) as registry:
        runs = registry.list_runs(status=status, limit=None if show_all else limit)
        total = registry.count_runs(status=status)
    if as_json:
        _print_json([run.to_json() for run in runs])
        return
    console = _console()
    if not runs:
        where = f" with status {status}" if status else ""
        console.print(f"no runs{where} in {root} yet; start one with `rlrun train reinforce_cartpole`", markup=False)
        return
    console.print(runs_table(runs, total=total))


@app.command()
def show(
    reference: Annotated[
        str, typer.Argument(help="latest, latest~N, a row of `rlrun ls`, an id, id prefix or name.")
    ] = "latest",
    home: HomeOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show a run: sessions, checkpoints, evaluations and spec."""
    from rlrun.display import resolved, run_detail
    from rlrun.registry import Registry

    with Registry.open(paths.resolve_home(home), create=False) as registry:
        run = registry.resolve(reference)
        detail = registry.get_run(run.id)
    console = _console()
    console.print(resolved(run, reference), highlight=False, markup=False)
    if as_json:
        _print_json(detail.to_json())
        return
    console.print(run_detail(detail))


# ---------------------------------------------------------------------------------------------
# spec


@spec_app.command("list")
def spec_list() -> None:
    """List the built-in specs."""
    from rlrun.spec import builtin_document, builtin_names

    for name in builtin_names():
        document = builtin_document(name)
        sys.stdout.write(f"{name}\t{document['agent']['algorithm']}\t{document['env']['id']}\n")


@spec_app.command("show")
def spec_show(name: Annotated[str, typer.Argument(help="A built-in spec name.")]) -> None:
    """Print a built-in spec as JSON, ready to save and edit."""
    from rlrun.spec import builtin_document

    _print_json(builtin_document(name))


@spec_app.command("schema")
def spec_schema() -> None:
    """Print the JSON Schema of a spec (for editors)."""
    from rlrun.spec import json_schema

    _print_json(json_schema())


# ---------------------------------------------------------------------------------------------


def main() -> None:
    """Entry point: run the app and turn domain errors into one line and an exit code."""
    try:
        app()
    except EditRefused as error:
        from rlrun.display import refusal_table

        _console().print(refusal_table(error.changes))
        sys.stderr.write(f"error: {error}\n")
        raise SystemExit(error.exit_code) from None
    except SpecError as error:
        for problem in error.problems:
            sys.stderr.write(f"error: {problem}\n")
        raise SystemExit(error.exit_code) from None
    except RlrunError as error:
        sys.stderr.write(f"error: {error}\n")
        raise SystemExit(error.exit_code) from None
