"""ls, show and rm: the registry-only commands (with `db …`, `rlrun.cli.home`). They read and write
the registry and the run folders only, so they never import torch or gymnasium, and ls and show
not even Rich."""

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rlrun import paths
from rlrun.cli.app import app
from rlrun.cli.options import AsJson, Home, filtered, reference_argument, reference_label, references_argument
from rlrun.cli.output import answer, print_json, say
from rlrun.errors import BadInput

if TYPE_CHECKING:
    from rlrun.refs import RunFilter


@app.command("ls", short_help="List runs (or searches), newest first.")
@filtered()
def list_runs(
    limit: Annotated[
        int,
        typer.Option("-n", "--limit", min=1, show_default=True, metavar="INTEGER RANGE", help="Show at most N runs."),
    ] = 20,
    show_all: Annotated[bool, typer.Option("--all", help="Show every run.")] = False,
    *,
    filters: "RunFilter",
    home: Home = None,
    as_json: AsJson = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="Print only CSV on stdout.")] = False,
    search_ref: Annotated[
        str | None,
        typer.Option("--search", metavar="SEARCH", help="List a search's trials instead: --search search:latest."),
    ] = None,
    searches: Annotated[bool, typer.Option("--searches", help="List the searches instead.")] = False,
    trials: Annotated[
        bool, typer.Option("--trials", help="List the runs of search trials too (--json and --csv always do).")
    ] = False,
) -> None:
    """List runs, newest first (or --sort best | frames); filters narrow the list and the row numbers."""
    from rlrun import catalog
    from rlrun.cli import views

    if as_json and as_csv:
        raise BadInput("choose --json or --csv, not both")
    if search_ref is not None or searches:
        _list_searches(search_ref, home, as_json, None if show_all else limit)
        return
    # Scripts read every run; a person's table keeps a search's trial runs out of the way.
    listing = catalog.list_runs(
        filters, home=home, limit=None if show_all else limit, trials=trials or as_json or as_csv
    )
    if as_json:
        print_json([run.to_json() for run in listing.runs])
    elif as_csv:
        sys.stdout.write(views.runs_csv(listing.runs))
    elif not listing.runs and not listing.hidden_trials:
        say(views.nothing_listed(listing))
    else:
        width = views.terminal_width()
        if listing.runs:
            # "1 of 3 runs" would count the trial runs the line under the table counts
            answer(
                views.runs_table(
                    listing.runs,
                    total=listing.total - listing.hidden_trials,
                    filters=filters.describe(),
                    colour=views.colour_enabled(),
                    width=width,
                    jobs=views.slurm_states(run.slurm_jobs for run in listing.runs),
                )
            )
        if listing.hidden_trials:  # under the table, its last line; alone, a hint as "no runs" is
            (answer if listing.runs else say)(
                views.fit(views.hidden_trials(listing.hidden_trials, alone=not listing.runs), width)
            )


def _list_searches(reference: str | None, home: str | None, as_json: bool, limit: int | None) -> None:
    """`ls --searches` (the searches, newest first) or `ls --search REF` (one search's trials). Read-only."""
    from rlrun import catalog
    from rlrun.cli import views

    if reference is None:
        root = paths.resolve_home(home)
        found = catalog.list_searches(home=root, limit=limit)
        if as_json:
            print_json([{**s.to_json(), "ended": ended, "best": best} for s, ended, best in found])
        else:
            if found:
                answer(views.searches_table(found, colour=views.colour_enabled()))
            else:
                say(f"no searches in {paths.home_address(root)} yet; start one with `rlrun search SPEC`")
        return
    chosen = catalog.lookup_search(reference, home=home)
    say(views.resolved_search(chosen.detail.search, chosen.reference))
    if as_json:
        print_json([t.to_json() for t in chosen.detail.trials])
    else:
        answer(views.trials_table(chosen.detail, colour=views.colour_enabled()))


@app.command(short_help="Show a run: sessions, checkpoints, evals.")
@filtered()
def show(
    reference: Annotated[
        str,
        reference_argument(
            "latest, latest~N, a row of `rlrun ls`, an id, id prefix or name, or a run folder (anywhere)."
        ),
    ] = "latest",
    *,
    filters: "RunFilter",
    home: Home = None,
    as_json: AsJson = False,
    metrics: Annotated[
        bool, typer.Option("--metrics", help="Show the training metrics instead: latest values and sparklines.")
    ] = False,
    spec_json: Annotated[
        bool,
        typer.Option(
            "--spec-json", help="Print the run's latest spec as JSON on stdout instead (to edit for resume --spec)."
        ),
    ] = False,
) -> None:
    """Show a run: sessions with sparklines of their evaluations, checkpoints, evaluations, spec
    revisions and their changes, attempts and lineage (the spec itself with --spec-json)."""
    from rlrun import catalog
    from rlrun.cli import views

    found = catalog.lookup(reference, filters, home=home)
    if isinstance(found, catalog.SearchLookup):
        _show_search(found, as_json)
        return
    which = views.resolved(found.run, reference_label(reference, filters), found.where)
    say(views.fit(which, views.terminal_width(sys.stderr)))
    if found.checkpoint is not None:
        say(f"checkpoint: session s{found.checkpoint.session.index}, frame {found.checkpoint.checkpoint.frame:,}")
    if metrics:
        _show_metrics(found.detail, found.home, as_json)
    elif spec_json:
        print(views.spec_document(found.detail))
    elif as_json:  # and the software each session ran on last, as the table's `software:` lines say
        stacks = _recorded_stacks(found)
        print_json({**found.to_json(), "software": [{"session": i, "stack": stacks[i]} for i in sorted(stacks)]})
    else:
        jobs = views.slurm_states([found.run.slurm_jobs])
        stacks = _recorded_stacks(found)
        answer(
            views.run_detail(
                found.detail, colour=views.colour_enabled(), width=views.terminal_width(), jobs=jobs, stacks=stacks
            )
        )
        for line in views.tracker_lines(found.run.id, found.trackers):
            say(line)


def _recorded_stacks(found: Any) -> dict[int, dict[str, str]]:
    from rlrun.session.stack import recorded_stacks

    return recorded_stacks(found.home, found.detail)


def _show_search(found: Any, as_json: bool) -> None:
    from rlrun.cli import views

    say(views.resolved_search(found.detail.search, found.reference))
    if as_json:
        document = found.detail.to_json()
        if found.lineage:
            document["lineage"] = [line.to_json() for line in found.lineage]
        print_json(document)
    else:
        answer(views.search_detail(found.detail, colour=views.colour_enabled()))
        if found.lineage:
            answer(views.lineage_tree(found.detail, found.lineage))


def _show_metrics(detail: Any, root: Path, as_json: bool) -> None:
    """`show --metrics`: each session's log, summarised (or, with --json, whole, as columns)."""
    from rlrun.cli import views
    from rlrun.session import metrics_log

    logs = metrics_log.session_logs(root, detail)
    if as_json:
        print_json(metrics_log.gather(logs))
        return
    tables = [(f"s{log.session}", metrics_log.read(log.path) if log.path.exists() else {}) for log in logs]
    answer(views.metrics_summary(tables, colour=views.colour_enabled()))


@app.command(short_help="Delete runs, their folders included.")
@filtered()
def rm(
    references: Annotated[list[str] | None, references_argument("the runs to delete, as for show.")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Delete without asking.")] = False,
    *,
    filters: "RunFilter",
    home: Home = None,
) -> None:
    """Delete runs: their registry rows, then their folders (snapshots included). Asks first."""
    from rlrun.cli import views
    from rlrun.home.maintenance import plan_removal, remove

    if not references:
        raise BadInput("name the runs to delete, e.g. `rlrun rm latest` or `rlrun rm RUN_ID`")
    plan = plan_removal(references, filters, home=home)
    plan.check()
    for reference, run in plan.named:
        say(views.resolved(run, reference_label(reference, filters), plan.where(run)))
    count = len(plan.named)
    what = f"{count} run{'s' if count != 1 else ''} and {views.format_bytes(plan.bytes_freed)} of files"
    if plan.copy_bytes:  # runs in object storage: their objects, and this machine's working copy of them
        what += f" (and {views.format_bytes(plan.copy_bytes)} of their working copy on this machine)"
    if not yes and not _confirm(f"delete {what}? [y/N] "):
        say("nothing deleted")
        raise SystemExit(1)
    remove(plan)
    say(f"deleted {what}")


def _confirm(question: str) -> bool:
    sys.stderr.write(question)
    sys.stderr.flush()
    reply = sys.stdin.readline()
    if not reply:
        sys.stderr.write("\n(no answer on stdin; pass --yes to delete without asking)\n")
    return reply.strip().lower() in ("y", "yes")
