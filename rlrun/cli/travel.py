"""push and pull: a run as one file that travels (a path or a store's URL) and still resumes
(`rlrun.home.bundle`)."""

from typing import Annotated

import typer

from rlrun.cli.app import app
from rlrun.cli.options import AsJson, Home, reference_argument
from rlrun.cli.output import print_json, say


@app.command(short_help="Write a run as one file, to a path or a URL.")
def push(
    reference: Annotated[str, reference_argument("The run, as for show (a whole run).")],
    destination: Annotated[str, typer.Argument(
        metavar="URL", show_default=False,
        help="A file (run.rlrun), a folder, or a URL: s3://…, gs://…, az://…, hf://… (a folder: ending in /).")],
    home: Home = None,
    as_json: AsJson = False,
) -> None:
    """Write a run (spec, registry rows, every listed snapshot with its replay memory, metrics
    logs, evaluations) as one bundle file that `rlrun pull` adds to another home, where it resumes
    exactly. A bundle already at URL is replaced."""
    from rlrun.cli.views import format_bytes
    from rlrun.home.bundle import push as push_run

    pushed = push_run(reference, destination, home=home)
    if as_json:
        print_json(pushed.to_json())
        return
    run = pushed.run
    say(f"pushed run {run.id}{f' ({run.name})' if run.name else ''}, {run.spec_name}, {run.status}, to"
        f" {pushed.destination} ({pushed.files} files, {format_bytes(pushed.size_bytes)}); sha256 {pushed.sha256}")


@app.command(short_help="Add a run pushed as one file to the home.")
def pull(
    source: Annotated[str, typer.Argument(
        metavar="URL", show_default=False, help="The bundle `rlrun push` wrote: a file or a URL.")],
    sha256: Annotated[str | None, typer.Option(
        metavar="HEX", help="Refuse the bundle unless its sha256 (the one `rlrun push` printed) is this.")] = None,
    home: Home = None,
    as_json: AsJson = False,
) -> None:
    """Add the run in a bundle to the home, every file checked against the bundle's hashes first; a
    damaged or altered bundle, or a run the home already has, is refused and nothing is written."""
    from rlrun.home.bundle import pull as pull_run

    pulled = pull_run(source, home=home, expected_sha256=sha256)
    if as_json:
        print_json(pulled.to_json())
        return
    run = pulled.run
    say(f"pulled run {run.id}{f' ({run.name})' if run.name else ''}, {run.spec_name}, {run.status}, from"
        f" {pulled.source}: see `rlrun show {run.id}`, or `rlrun resume {run.id}` to continue it")
