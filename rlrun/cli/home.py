"""gc, import and db: the upkeep of a runs home, its folders (unlisted ones collected, copied ones
imported) and its registry database (schema revision, upgrade, rebuild from the folders)."""

import sys
from pathlib import Path
from typing import Annotated

import typer

from rlrun import paths
from rlrun.cli.app import app, db_app, help_if_bare
from rlrun.cli.options import AsJson, Home
from rlrun.cli.output import print_json, say
from rlrun.errors import BadInput


@app.command(short_help="Remove folders the registry does not list.")
def gc(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would be removed.")] = False,
    home: Home = None,
    as_json: AsJson = False,
) -> None:
    """Remove snapshot folders the registry does not list, unfinished snapshot writes, and the
    snapshots each run's retention setting (meta.keep_checkpoints) no longer keeps."""
    from rlrun.cli import views
    from rlrun.home.maintenance import collect_garbage
    from rlrun.registry import Registry

    root = paths.resolve_home(home)
    with Registry.open(root, create=False) as registry:
        report = collect_garbage(registry, dry_run=dry_run)
    if as_json:
        print_json(report.to_json())
    else:
        say(views.garbage_report(report, paths.home_address(root)))


@app.command("import", short_help="Add run folders copied from elsewhere.")
def import_(
    folders: Annotated[
        list[Path] | None,
        typer.Argument(
            metavar="PATH...",
            show_default=False,
            help="Run folders (each with its run.json) to add to the home; or `sb3` then RL Zoo log folders.",
        ),
    ] = None,
    move: Annotated[bool, typer.Option("--move", help="Move the folders into the home, not copy them.")] = False,
    home: Home = None,
) -> None:
    """Add runs copied from elsewhere (a cluster, a colleague) to the home: each folder is checked
    (every snapshot against its MANIFEST.json), copied (or moved) in and registered. `rlrun import
    sb3 PATH...` reads RL Zoo / Stable-Baselines3 log folders instead, each run as a read-only
    foreign run with its evaluations, for `ls`, `show`, `plot` and `compare`."""
    from rlrun.cli.imports import import_foreign, names_a_source

    if names_a_source(folders or []):
        return import_foreign(list(folders or []), home, move=move)
    from rlrun.cli.views import described
    from rlrun.home.maintenance import check_imports, import_runs
    from rlrun.registry import Registry

    if not folders:
        raise BadInput("name the run folders to import, e.g. `rlrun import ~/Downloads/k3ab9x2m`")
    root = paths.resolve_home(home)
    with Registry.open(root, create=False) as registry:  # checked before anything is written
        checked = check_imports(registry, folders)
    with Registry.open(root) as registry:
        imported = import_runs(registry, checked, move=move)
    for run in imported:
        say(f"imported {described(run)}: see `rlrun show {run.id}`")


@db_app.callback(invoke_without_command=True)
def db(context: typer.Context) -> None:
    """The registry database: schema revision, upgrade, rebuild from run folders."""
    help_if_bare(context)


@db_app.command("current", short_help="Print the schema revision, and the needed one.")
def db_current(home: Home = None, as_json: AsJson = False) -> None:
    """Print the registry's schema revision and the one this rlrun needs."""
    from rlrun.registry import schema_state

    state = schema_state(paths.resolve_home(home))
    if as_json:
        print_json(
            {
                "database": state.label,
                "revision": state.revision,
                "head": state.head,
                "exists": state.exists,
                "up_to_date": state.up_to_date,
            }
        )
        return
    if not state.exists:
        verdict = "no registry yet (created by `rlrun train`)"
    elif state.up_to_date:
        verdict = f"schema {state.revision} (head, up to date)"
    else:
        verdict = f"schema {state.revision or 'none'}, this rlrun needs {state.head}; run `rlrun db upgrade`"
    sys.stdout.write(f"{state.label}: {verdict}\n")


@db_app.command("upgrade", short_help="Upgrade the registry's schema.")
def db_upgrade(home: Home = None) -> None:
    """Upgrade the registry's schema to this rlrun's (a SQLite file is copied first)."""
    from rlrun.registry import SCHEMA_HEAD, upgrade_registry

    done = upgrade_registry(paths.resolve_home(home))
    if done is None:
        sys.stdout.write(f"registry already at schema {SCHEMA_HEAD}\n")
        return
    kept = f"; the old file is kept at {done.backup}" if done.backup else ""
    sys.stdout.write(f"upgraded {done.label} from schema {done.before or 'none'} to {done.after}{kept}\n")


@db_app.command("rebuild", short_help="Restore the registry from the run folders.")
def db_rebuild(home: Home = None, as_json: AsJson = False) -> None:
    """Restore the registry from the run folders (their run.json manifests and snapshots) and the
    searches' manifests (searches/<id>.json): every run and search it does not list yet is added back."""
    from rlrun.home.maintenance import rebuild
    from rlrun.registry import Registry

    root = paths.resolve_home(home)
    with Registry.open(root) as registry:
        report = rebuild(registry)
    if as_json:
        print_json(report.to_json())
        return
    for problem in report.problems:
        say(f"skipped {problem}")
    say(
        f"restored {len(report.restored)} runs ({report.sessions} sessions, {report.checkpoints} checkpoints,"
        f" {report.evaluations} evaluations) and {len(report.searches)} searches from {paths.home_address(root)};"
        f" {len(report.already_known)} were already in the registry"
    )
