"""push, pull and record: a run as one file that travels (a path or a store's URL) and still
resumes (`rlrun.home.bundle`), and a checkpoint's episodes as a Minari dataset (`rlrun.enjoy.dataset`)."""

from typing import TYPE_CHECKING, Annotated

import typer

from rlrun.cli.app import app
from rlrun.cli.options import AsJson, Home, filtered, reference_argument
from rlrun.cli.output import print_json, say

if TYPE_CHECKING:
    from rlrun.refs import RunFilter


@app.command(short_help="Write a run as one file, to a path or a URL.")
def push(
    reference: Annotated[str, reference_argument("The run, as for show (a whole run).")],
    destination: Annotated[
        str,
        typer.Argument(
            metavar="URL",
            show_default=False,
            help="A file (run.rlrun), a folder, or a URL: s3://…, gs://…, az://…, hf://… (a folder: ending in /).",
        ),
    ],
    home: Home = None,
    as_json: AsJson = False,
) -> None:
    """Write a run (spec, registry rows, every listed snapshot with its replay memory, metrics
    logs, evaluations) as one bundle file that `rlrun pull` adds to another home, where it resumes
    exactly. A bundle already at URL is replaced."""
    from rlrun.cli.views import described, format_bytes
    from rlrun.home.bundle import push as push_run

    pushed = push_run(reference, destination, home=home)
    if as_json:
        print_json(pushed.to_json())
        return
    say(
        f"pushed {described(pushed.run)}, to {pushed.destination} ({pushed.files} files,"
        f" {format_bytes(pushed.size_bytes)}); sha256 {pushed.sha256}"
    )


@app.command(short_help="Add a run pushed as one file to the home.")
def pull(
    source: Annotated[
        str, typer.Argument(metavar="URL", show_default=False, help="The bundle `rlrun push` wrote: a file or a URL.")
    ],
    sha256: Annotated[
        str | None,
        typer.Option(metavar="HEX", help="Refuse the bundle unless its sha256 (the one `rlrun push` printed) is this."),
    ] = None,
    home: Home = None,
    as_json: AsJson = False,
) -> None:
    """Add the run in a bundle to the home, every file checked against the bundle's hashes first; a
    damaged or altered bundle, or a run the home already has, is refused and nothing is written."""
    from rlrun.cli.views import described
    from rlrun.home.bundle import pull as pull_run

    pulled = pull_run(source, home=home, expected_sha256=sha256)
    if as_json:
        print_json(pulled.to_json())
        return
    run_id = pulled.run.id
    say(
        f"pulled {described(pulled.run)}, from {pulled.source}: see `rlrun show {run_id}`, or `rlrun resume"
        f" {run_id}` to continue it"
    )


@app.command(short_help="Record episodes as a Minari dataset.")
@filtered()
def record(
    reference: Annotated[
        str, reference_argument("The run, as for enjoy; /sK picks a session, @best, @latest or @5M a checkpoint.")
    ] = "latest",
    minari: Annotated[
        str,
        typer.Option(
            "--minari",
            metavar="NAME",
            show_default=False,
            help="The Minari dataset id to write: (namespace/)name-v(version), e.g. cartpole/dqn-expert-v0.",
        ),
    ] = "",
    episodes: Annotated[
        int | None, typer.Option(min=1, metavar="INTEGER RANGE", help="Episodes to record (default: 10).")
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            min=0, metavar="INTEGER RANGE", help="Seed of the episodes (default: the session's), as for enjoy."
        ),
    ] = None,
    stochastic: Annotated[bool, typer.Option("--stochastic", help="Sample actions, not the greedy ones.")] = False,
    checkpoint: Annotated[
        str | None,
        typer.Option(
            metavar="best|latest|FRAMES", help="The checkpoint (default: the best), as @best, @latest or @5M."
        ),
    ] = None,
    epsilon: Annotated[
        float | None,
        typer.Option(
            metavar="E",
            help="A uniformly random action with probability E (0 to 1), for a discrete action space: a"
            " 'medium' policy's data.",
        ),
    ] = None,
    noise: Annotated[
        float | None,
        typer.Option(
            metavar="SIGMA",
            help="Gaussian noise of standard deviation SIGMA on each action, clipped to the bounds, for a"
            " continuous action space: a 'medium' policy's data.",
        ),
    ] = None,
    replay: Annotated[
        bool,
        typer.Option(
            "--replay",
            help="Write the run's own training transitions (the checkpoint's replay memory) instead of playing:"
            " 'medium-replay' data.",
        ),
    ] = False,
    *,
    filters: "RunFilter",
    home: Home = None,
    as_json: AsJson = False,
) -> None:
    """Play a checkpoint as `rlrun enjoy` does and write its episodes as a Minari dataset (under
    $MINARI_DATASETS_PATH), whose metadata names the run, the checkpoint's sha256, the spec and the
    seeds; the same checkpoint, seed and flags give the same dataset. Needs the minari extra."""
    from rlrun.enjoy.dataset import Behaviour
    from rlrun.enjoy.dataset import record as record_episodes
    from rlrun.errors import BadInput

    if not minari:
        raise BadInput("name the dataset to write: --minari NAME, e.g. --minari cartpole/dqn-expert-v0")
    done = record_episodes(
        reference,
        filters,
        dataset_id=minari,
        episodes=episodes,
        home=home,
        seed=seed,
        stochastic=stochastic,
        checkpoint=checkpoint,
        behaviour=Behaviour(epsilon=epsilon, noise=noise, replay=replay),
    )
    if as_json:
        print_json(done.to_json())
        return
    source = done.metadata
    mean = sum(done.returns) / len(done.returns)
    what = "training episodes replayed" if source["replay"] else "episodes"
    say(
        f"recorded {done.episodes} {what} ({done.steps:,} steps, mean return {mean:.1f}) of run {source['run_id']}"
        f" s{source['session']}, checkpoint at frame {source['checkpoint']['frame']:,}, into Minari dataset"
        f" {done.dataset_id} ({done.path}): `minari.load_dataset({done.dataset_id!r})` reads it"
    )
