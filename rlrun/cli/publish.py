"""publish: a run as a model repository anyone can check (`rlrun.publish`): the model card with a
score that re-derives, portable weights, and the resumable run beside them."""

from typing import Annotated

import typer

from rlrun.cli.app import app
from rlrun.cli.options import AsJson, Home, reference_argument
from rlrun.cli.output import print_json, say
from rlrun.publish import EPISODES


@app.command(short_help="Publish a run as a model anyone can check.")
def publish(
    reference: Annotated[
        str, reference_argument("The run, as for enjoy; /sK picks a session, @best, @latest or @5M a checkpoint.")
    ],
    destination: Annotated[
        str,
        typer.Argument(
            metavar="DEST",
            show_default=False,
            help="A folder (made if missing), a URL (s3://bucket/models/x, gs://…, az://…) or hf://ORG/NAME.",
        ),
    ],
    episodes: Annotated[
        int,
        typer.Option(min=1, max=10_000, metavar="N", help="Seeded greedy episodes the card's score is played over."),
    ] = EPISODES,
    seed: Annotated[
        int | None,
        typer.Option(min=0, metavar="INTEGER RANGE", help="Seed of those episodes (default: the session's)."),
    ] = None,
    home: Home = None,
    as_json: AsJson = False,
) -> None:
    """Write the run's chosen checkpoint (as enjoy chooses it) to DEST as a model repository laid out
    as the Hugging Face Hub expects: README.md (the model card: its mean_reward from enjoy over N
    seeded episodes, the IQM across sessions, the learning curve, the commands that re-derive it),
    model.safetensors, agent.pt (TorchScript), policy.onnx, replay.mp4, spec.json, versions.json, and
    the run's bundle, which `rlrun pull DEST` adds to a home, where it resumes exactly. No file
    needs pickle. hf:// needs the hub extra; the score is recorded as an enjoy evaluation."""
    from rlrun.publish import publish as publish_run

    done = publish_run(reference, destination, home=home, episodes=episodes, seed=seed)
    if as_json:
        print_json(done.to_json())
    for note in done.notes:
        say(f"left out {note}")
    if not as_json:
        say(
            f"published run {done.run_id} s{done.session} at frame {done.checkpoint_frame:,} to {done.destination}:"
            f" mean_reward {done.mean_reward} over {done.episodes} episodes, seed {done.seed}"
            f" ({len(done.files)} files); its README.md says how anyone pulls, re-scores and resumes it"
        )
