"""The `rlrun` command: parse, resolve, print, and call the library. Nothing else lives here.

Human output goes to stderr (Rich for training, plain text for the registry commands); `--json`
puts one JSON document on stdout. Domain errors and usage errors become one line on stderr and an
exit code in `main`, the only error handler.

Built on Click, which parses and converts arguments itself: Typer (from 0.2x on) validates every
argument through pydantic, whose import alone costs more than `rlrun ls` may take in all. Heavy
modules (torch, gymnasium, Rich, SQLAlchemy) are imported inside the commands that need them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from rlrun import __version__, paths
from rlrun.errors import BadInput, EditRefused, RlrunError, SpecError, TrainingFailed

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


@click.group(help="Train reinforcement-learning agents from JSON specs; every run is recorded, resumable and"
                  " replayable.")  # fmt: skip
@click.version_option(__version__, "--version", message="rlrun %(version)s", help="Show the version.")
def app() -> None:
    """rlrun: runs that survive the real world."""


def _home(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--home", type=click.Path(path_type=Path), envvar=paths.HOME_ENV,
                        help="Runs home (default ./runs, or $RLRUN_HOME).")(command)  # fmt: skip


def _json(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True, help="Print only JSON on stdout.")(command)


_FILTERS = {
    "status": ("--status", "Only runs with this status: running, finished, failed, preempted, crashed."),
    "algo": ("--algo", "Only runs of this algorithm."),
    "env": ("--env", "Only runs on this env id."),
    "spec": ("--spec", "Only runs of this spec name."),
    "name": ("--name", "Only runs whose name matches this glob (* and ?)."),
    "since": ("--since", "Only runs started since: 2d, 12h, 30m, 1w or a date such as 2025-05-01."),
    "sort": ("--sort", "Row order for row numbers: started (newest first, the default), best, frames."),
}


def _filter_options(*names: str) -> Decorator:
    """The filter options: they narrow the runs a command considers, before `latest` and row
    numbers count them (`rlrun enjoy latest --algo ppo` is the newest PPO run)."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        for name in reversed(names or tuple(_FILTERS)):
            flag, text = _FILTERS[name]
            command = click.option(flag, name, default=None, metavar="TEXT", help=text)(command)
        return command

    return decorate


def _filters(status: str | None = None, algo: str | None = None, env: str | None = None, spec: str | None = None,
             name: str | None = None, since: str | None = None, sort: str | None = None) -> Any:  # fmt: skip
    from rlrun.refs import RunFilter

    return RunFilter.of(status=status, algorithm=algo, env=env, spec=spec, name=name, since=since, sort=sort)


def _console() -> Any:
    from rlrun.display import stderr_console

    return stderr_console()


def _say(text: str) -> None:
    """A line for the person at the terminal (stderr: stdout is kept for --json)."""
    sys.stderr.write(text + "\n")


def _print_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2) + "\n")


# ---------------------------------------------------------------------------------------------
# train, resume, enjoy


@app.command()
@click.argument("spec")
@click.option("--name", help="A unique name for the run.")
@click.option("--frames", help="Frame budget per session, e.g. 200k or 1.5M.")
@click.option("--sessions", type=click.IntRange(min=1), help="Sessions (seeds) to train in parallel.")
@click.option("--seed", type=click.IntRange(min=0), help="Base seed; session i uses seed + i.")
@click.option("--set", "overrides", multiple=True,
              help="Override a spec value: --set agent.optimizer.lr=0.01 (repeatable).")  # fmt: skip
@_home
@_json
def train(spec: str, name: str | None, frames: str | None, sessions: int | None, seed: int | None,
          overrides: tuple[str, ...], home: Path | None, as_json: bool) -> None:  # fmt: skip
    """Train a run from SPEC (a spec file, or a built-in spec: `rlrun spec list`) and record it."""
    from rlrun.display import TrainingDisplay
    from rlrun.sizes import parse_size
    from rlrun.spec import load_spec
    from rlrun.training import train as train_run

    edits = list(overrides)
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
        raise SystemExit(128 + result.signal)
    console.print(f"run {result.run_id} {result.status}: see `rlrun show {result.run_id}`", highlight=False,
                  markup=False)


@app.command()
@click.argument("reference", default="latest")
@click.option("--frames", help="New frame target per session, e.g. 20M.")
@click.option("--more", help="Frames to add to the target, e.g. 500k.")
@click.option("--spec", "spec_file", type=click.Path(path_type=Path), help="An edited spec file.")
@click.option("--set", "overrides", multiple=True,
              help="Edit one spec value: --set meta.eval_frequency=5k (repeatable).")  # fmt: skip
@click.option("--fork", is_flag=True, help="Branch a new run from the snapshot instead.")
@_filter_options("status", "algo", "env", "since")
@_home
@_json
def resume(reference: str, frames: str | None, more: str | None, spec_file: Path | None, overrides: tuple[str, ...],
           fork: bool, home: Path | None, as_json: bool, **filters: str | None) -> None:  # fmt: skip
    """Continue a run bit for bit from its newest snapshots, with an optional consistent spec edit.

    REFERENCE: latest, latest~N, a row, an id, prefix or name; /sK for one session.
    """
    from rlrun.display import TrainingDisplay, resume_plan
    from rlrun.sizes import parse_size
    from rlrun.training import resume as resume_run

    target, label = _pin(reference, _filters(**filters), home)
    console = _console()
    with TrainingDisplay(console) as display:
        result = resume_run(
            target, home=home, frames=None if frames is None else parse_size(frames, what="--frames"),
            more=None if more is None else parse_size(more, what="--more"), spec=spec_file, overrides=list(overrides),
            fork=fork, on_event=display, on_plan=lambda plan: console.print(resume_plan(plan, label)),
        )
    _conclude(result, console, as_json)


@app.command()
@click.argument("reference", default="latest")
@click.option("--episodes", type=click.IntRange(min=1), default=5, show_default=True, help="Episodes to play.")
@click.option("--seed", type=click.IntRange(min=0), help="Seed of the episodes (default: the session's).")
@click.option("--stochastic", is_flag=True, help="Sample actions, not the greedy ones.")
@click.option("--render", is_flag=True, help="Show the episodes in a window.")
@click.option("--video", type=click.Path(path_type=Path), help="Record the episodes to a .gif or .mp4 file.")
@_filter_options()
@_home
@_json
def enjoy(reference: str, episodes: int, seed: int | None, stochastic: bool, render: bool, video: Path | None,
          home: Path | None, as_json: bool, **filters: str | None) -> None:  # fmt: skip
    """Replay a checkpoint (the best by default) and score it, without touching the training records.

    REFERENCE: the run, as for show; /sK picks a session, @best, @latest or @5M a checkpoint.
    """
    from rlrun.display import enjoy_table, enjoy_target
    from rlrun.enjoy import enjoy as enjoy_run

    target, label = _pin(reference, _filters(**filters), home)
    console = _console()
    result = enjoy_run(target, home=home, episodes=episodes, seed=seed, stochastic=stochastic, render=render,
                       video=video, on_target=lambda chosen: console.print(enjoy_target(chosen, label)))
    if as_json:
        _print_json(result.to_json())
    else:
        console.print(enjoy_table(result))


def _pin(reference: str, filters: Any, home: Path | None) -> tuple[str, str]:
    """With filters, resolve the run part of `reference` here and hand the library the run's id
    (keeping any /sK and @checkpoint suffix); returns it and the label "resolved" lines show."""
    if not filters.narrows and filters.sort == "started":
        return reference, reference
    from rlrun.refs import parse_ref
    from rlrun.registry import Registry

    parsed = parse_ref(reference)
    with Registry.open(paths.resolve_home(home), create=False) as registry:
        run = registry.resolve(parsed, filters)
    return str(parsed._replace(kind="token", token=run.id)), _label(reference, filters)


def _label(reference: str, filters: Any) -> str:
    narrowed = filters.narrows or filters.sort != "started"
    return f"{reference} {filters.describe()}" if narrowed else reference


# ---------------------------------------------------------------------------------------------
# Registry commands (ls, show, plot, rm, gc, db): they read and write the registry and the run
# folders only, so they never import torch or gymnasium, and ls and show not even Rich.


@app.command("ls")
@click.option("-n", "--limit", type=click.IntRange(min=1), default=20, show_default=True, help="Show at most N runs.")
@click.option("--all", "show_all", is_flag=True, help="Show every run.")
@_filter_options()
@_home
@_json
@click.option("--csv", "as_csv", is_flag=True, help="Print only CSV on stdout.")
def list_runs(limit: int, show_all: bool, home: Path | None, as_json: bool, as_csv: bool,
              **filter_values: str | None) -> None:  # fmt: skip
    """List runs, newest first (or --sort best | frames); filters narrow the list and the row numbers."""
    from rlrun.registry import Registry

    if as_json and as_csv:
        raise BadInput("choose --json or --csv, not both")
    filters = _filters(**filter_values)
    root = paths.resolve_home(home)
    page = None if show_all else limit
    with Registry.open(root, create=False) as registry:
        runs = registry.list_runs(filters=filters, limit=page)
        # Counting is only needed when the page may not hold them all.
        total = registry.count_runs(filters) if page is not None and len(runs) == page else len(runs)
        everything = registry.count_runs() if not runs and filters.narrows else total
    from rlrun import views

    if as_json:
        _print_json([run.to_json() for run in runs])
    elif as_csv:
        sys.stdout.write(views.runs_csv(runs))
    elif not runs:
        _say(_nothing_listed(root, filters, everything))
    else:
        _say(views.runs_table(runs, total=total, filters=filters.describe(), colour=views.colour_enabled()))


def _nothing_listed(root: Path, filters: Any, everything: int) -> str:
    if filters.narrows and everything:
        return f"no runs match {filters.describe()} ({everything} runs in {root}); see `rlrun ls`"
    return f"no runs in {root} yet; start one with `rlrun train reinforce_cartpole`"


@app.command()
@click.argument("reference", default="latest")
@_filter_options()
@_home
@_json
def show(reference: str, home: Path | None, as_json: bool, **filter_values: str | None) -> None:
    """Show a run: sessions with sparklines of their evaluations, checkpoints, evaluations, spec
    revisions and their changes, attempts, lineage and the spec.

    REFERENCE: latest, latest~N, a row of `rlrun ls`, an id, id prefix or name.
    """
    from rlrun import views
    from rlrun.registry import Registry

    filters = _filters(**filter_values)
    with Registry.open(paths.resolve_home(home), create=False) as registry:
        run = registry.resolve(reference, filters)
        detail = registry.get_run(run.id)
    _say(views.resolved(run, _label(reference, filters)))
    if as_json:
        _print_json(detail.to_json())
    else:
        _say(views.run_detail(detail, colour=views.colour_enabled()))


@app.command()
@click.argument("references", nargs=-1)
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Image file to write: .png, .svg or .pdf.")
@click.option("--title", help="Title of the plot.")
@_filter_options()
@_home
def plot(references: tuple[str, ...], output: Path | None, title: str | None, home: Path | None,
         **filter_values: str | None) -> None:  # fmt: skip
    """Plot evaluation return against frames: mean ± std across each run's sessions, runs overlaid.

    REFERENCES: the runs to draw (default: latest).
    """
    from rlrun import views
    from rlrun.plot import check_output, curve, draw
    from rlrun.registry import Registry

    if output is None:
        raise BadInput("rlrun plot needs an image to write: -o FILE.png")
    check_output(output)
    filters = _filters(**filter_values)
    details: list[Any] = []
    with Registry.open(paths.resolve_home(home), create=False) as registry:
        for reference in references or ("latest",):
            run = registry.resolve(reference, filters)
            _say(views.resolved(run, _label(reference, filters)))
            if run.id not in [d.run.id for d in details]:
                details.append(registry.get_run(run.id))
    _say(f"wrote {draw([curve(d) for d in details], output, title=title)}")


@app.command()
@click.argument("references", nargs=-1)
@click.option("--yes", "-y", is_flag=True, help="Delete without asking.")
@_filter_options()
@_home
def rm(references: tuple[str, ...], yes: bool, home: Path | None, **filter_values: str | None) -> None:
    """Delete runs: their registry rows, then their folders (snapshots included). Asks first.

    REFERENCES: the runs to delete, as for show.
    """
    from rlrun import views
    from rlrun.maintenance import folder_size, remove_runs
    from rlrun.registry import Registry

    if not references:
        raise BadInput("name the runs to delete, e.g. `rlrun rm latest` or `rlrun rm RUN_ID`")
    filters = _filters(**filter_values)
    root = paths.resolve_home(home)
    with Registry.open(root, create=False) as registry:
        chosen: dict[str, tuple[str, Any]] = {}
        for reference in references:
            run = registry.resolve(reference, filters)
            chosen.setdefault(run.id, (reference, run))
        running = [run.id for _, run in chosen.values() if run.status == "running"]
        if running:
            raise BadInput(f"run {', '.join(running)} is still running; stop it (SIGTERM) before deleting it")
        for reference, run in chosen.values():
            _say(views.resolved(run, _label(reference, filters)))
        size = sum(folder_size(paths.run_dir(root, run_id)) for run_id in chosen)
        what = f"{len(chosen)} run{'s' if len(chosen) != 1 else ''} and {views.format_bytes(size)} of files"
        if not yes and not _confirm(f"delete {what}? [y/N] "):
            _say("nothing deleted")
            raise SystemExit(1)
        remove_runs(registry, [run for _, run in chosen.values()])
    _say(f"deleted {what}")


def _confirm(question: str) -> bool:
    sys.stderr.write(question)
    sys.stderr.flush()
    answer = sys.stdin.readline()
    if not answer:
        sys.stderr.write("\n(no answer on stdin; pass --yes to delete without asking)\n")
    return answer.strip().lower() in ("y", "yes")


@app.command()
@click.option("--dry-run", is_flag=True, help="Only say what would be removed.")
@_home
@_json
def gc(dry_run: bool, home: Path | None, as_json: bool) -> None:
    """Remove snapshot folders the registry does not list, unfinished snapshot writes, and the
    snapshots each run's retention setting (meta.keep_checkpoints) no longer keeps."""
    from rlrun import views
    from rlrun.maintenance import collect_garbage
    from rlrun.registry import Registry

    root = paths.resolve_home(home)
    with Registry.open(root, create=False) as registry:
        report = collect_garbage(registry, dry_run=dry_run)
    if as_json:
        _print_json(report.to_json())
    else:
        _say(views.garbage_report(report, root))


@app.group()
def db() -> None:
    """The registry database: schema revision, upgrade, rebuild from run folders."""


@db.command("current")
@_home
@_json
def db_current(home: Path | None, as_json: bool) -> None:
    """Print the registry's schema revision and the one this rlrun needs."""
    from rlrun.registry import schema_state

    state = schema_state(paths.resolve_home(home))
    if as_json:
        _print_json({"database": state.label, "revision": state.revision, "head": state.head,
                     "exists": state.exists, "up_to_date": state.up_to_date})  # fmt: skip
        return
    if not state.exists:
        verdict = "no registry yet (created by `rlrun train`)"
    elif state.up_to_date:
        verdict = f"schema {state.revision} (head, up to date)"
    else:
        verdict = f"schema {state.revision or 'none'}, this rlrun needs {state.head}; run `rlrun db upgrade`"
    sys.stdout.write(f"{state.label}: {verdict}\n")


@db.command("upgrade")
@_home
def db_upgrade(home: Path | None) -> None:
    """Upgrade the registry's schema to this rlrun's (a SQLite file is copied first)."""
    from rlrun.registry import SCHEMA_HEAD, upgrade_registry

    done = upgrade_registry(paths.resolve_home(home))
    if done is None:
        sys.stdout.write(f"registry already at schema {SCHEMA_HEAD}\n")
        return
    kept = f"; the old file is kept at {done.backup}" if done.backup else ""
    sys.stdout.write(f"upgraded {done.label} from schema {done.before or 'none'} to {done.after}{kept}\n")


@db.command("rebuild")
@_home
@_json
def db_rebuild(home: Path | None, as_json: bool) -> None:
    """Restore the registry from the run folders (their run.json manifests and snapshots): every
    run it does not list yet is added back."""
    from rlrun.maintenance import rebuild
    from rlrun.registry import Registry

    root = paths.resolve_home(home)
    with Registry.open(root) as registry:
        report = rebuild(registry)
    if as_json:
        _print_json(report.to_json())
        return
    for problem in report.problems:
        _say(f"skipped {problem}")
    _say(f"restored {len(report.restored)} runs ({report.sessions} sessions, {report.checkpoints} checkpoints,"
         f" {report.evaluations} evaluations) from {root}; {len(report.already_known)} were already in the registry")


# ---------------------------------------------------------------------------------------------
# spec


@app.group()
def spec() -> None:
    """Built-in specs and the spec schema."""


@spec.command("list")
def spec_list() -> None:
    """List the built-in specs."""
    from rlrun.spec import builtin_document, builtin_names

    for name in builtin_names():
        document = builtin_document(name)
        sys.stdout.write(f"{name}\t{document['agent']['algorithm']}\t{document['env']['id']}\n")


@spec.command("show")
@click.argument("name")
def spec_show(name: str) -> None:
    """Print a built-in spec as JSON, ready to save and edit."""
    from rlrun.spec import builtin_document

    _print_json(builtin_document(name))


@spec.command("schema")
def spec_schema() -> None:
    """Print the JSON Schema of a spec (for editors)."""
    from rlrun.spec import json_schema

    _print_json(json_schema())


# ---------------------------------------------------------------------------------------------


def main() -> None:
    """Entry point: run the app and turn domain errors and usage errors into one line and an exit
    code."""
    try:
        app.main(prog_name="rlrun", standalone_mode=False)
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
    except click.exceptions.NoArgsIsHelpError as error:
        sys.stderr.write(error.format_message() + "\n")  # `rlrun` alone: the help text
        raise SystemExit(error.exit_code) from None
    except click.ClickException as error:
        context = getattr(error, "ctx", None)
        command = context.command_path if context is not None else "rlrun"
        sys.stderr.write(f"error: {error.format_message().rstrip('.')}; see `{command} --help`\n")
        raise SystemExit(error.exit_code) from None
    except click.exceptions.Abort:
        raise SystemExit(130) from None
