"""train, resume, enjoy and stop: a run trained, continued bit for bit, replayed, stopped (a
search's resume and stop are `rlrun.cli.search`'s)."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rlrun.cli.app import app
from rlrun.cli.hints import in_context
from rlrun.cli.options import (
    ONE_RUN_FILTERS,
    Account,
    AsJson,
    Cpus,
    Detach,
    Gpus,
    Home,
    Memory,
    Partition,
    Qos,
    Ray,
    Sbatch,
    Slurm,
    SupervisorOn,
    Time,
    Track,
    Wait,
    filtered,
    reference_argument,
    reference_label,
    session_executor,
    slurm_edits,
    track_edit,
    trial_executors,
)
from rlrun.cli.output import make_console, print_json, say
from rlrun.cli.search import resume_search_command, search_hand_over, stop_search_command
from rlrun.errors import TrainingFailed

if TYPE_CHECKING:
    from rlrun.refs import RunFilter


@app.command(short_help="Train a run from a spec and record it.")
def train(
    spec: Annotated[str, typer.Argument(metavar="SPEC", show_default=False)],
    name: Annotated[str | None, typer.Option(metavar="TEXT", help="A unique name for the run.")] = None,
    frames: Annotated[
        str | None, typer.Option(metavar="TEXT", help="Frame budget per session, e.g. 200k or 1.5M.")
    ] = None,
    sessions: Annotated[
        int | None, typer.Option(min=1, metavar="INTEGER RANGE", help="Sessions (seeds) to train in parallel.")
    ] = None,
    seed: Annotated[
        int | None, typer.Option(min=0, metavar="INTEGER RANGE", help="Base seed; session i uses seed + i.")
    ] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Option(
            "--set", metavar="TEXT", help="Override a spec value: --set agent.optimizer.lr=0.01 (repeatable)."
        ),
    ] = None,
    track: Track = None,
    ray: Ray = None,
    cpus: Cpus = None,
    gpus: Gpus = None,
    detach: Detach = False,
    supervisor_on: SupervisorOn = None,
    slurm: Slurm = False,
    partition: Partition = None,
    time: Time = None,
    memory: Memory = None,
    account: Account = None,
    qos: Qos = None,
    sbatch: Sbatch = None,
    wait: Wait = False,
    home: Home = None,
    as_json: AsJson = False,
) -> None:
    """Train a run from SPEC (a spec file, or a built-in spec: `rlrun spec list`) and record it."""
    from rlrun.cli.display import TrainingDisplay
    from rlrun.sizes import parse_size
    from rlrun.spec import load_spec
    from rlrun.training import train as train_run

    edits = list(overrides or ())
    if frames is not None:
        edits.append(f"meta.max_frame={parse_size(frames, what='--frames')}")
    if sessions is not None:
        edits.append(f"meta.sessions={sessions}")
    if seed is not None:
        edits.append(f"meta.seed={seed}")
    edits += track_edit(track)
    edits += slurm_edits(
        slurm, cpus=cpus, gpus=gpus, partition=partition, time=time, memory=memory, account=account, qos=qos,
        sbatch=sbatch, wait=wait,
    )  # fmt: skip
    executor = session_executor(ray, cpus, gpus, detach=detach, supervisor_on=supervisor_on, slurm=slurm, wait=wait)
    loaded = load_spec(spec, edits)
    if slurm:
        executor.use(loaded.meta.slurm)
    console = make_console()

    def announce(run: Any) -> None:
        label = f" ({run.name})" if run.name else ""
        console.print(
            in_context(
                f"run {run.id}{label}: {loaded.name}, {loaded.agent.algorithm} on {loaded.env.id}, "
                f"{run.num_sessions} session(s), {run.max_frame:,} frames each"
            ),
            highlight=False,
            markup=False,
        )

    with TrainingDisplay(console) as display:
        result = train_run(loaded, home=home, name=name, on_event=display, on_start=announce, executor=executor)
    _conclude(result, console, as_json)


def _conclude(result: Any, console: Any, as_json: bool) -> None:
    """Print the outcome and leave with its exit code: 0 done (or handed to a detached
    supervisor), 1 a session failed, 128 + the signal after a graceful stop."""
    if result.detached:
        console.print(
            in_context(
                f"run {result.run_id} detached: supervised by {result.detached}; follow it with"
                f" `rlrun ls` or `rlrun show {result.run_id}`, stop it with `rlrun stop {result.run_id}`"
            ),
            highlight=False,
            markup=False,
        )
    if as_json:
        print_json(result.to_json())
    if result.detached:
        return
    if result.outcome == "failed":
        raise TrainingFailed(f"run {result.run_id} failed: {result.error}; see `rlrun show {result.run_id}`")
    if result.outcome == "preempted":
        console.print(
            in_context(
                f"run {result.run_id} stopped by signal {result.signal} with a snapshot; continue it with"
                f" `rlrun resume {result.run_id}`"
            ),
            highlight=False,
            markup=False,
        )
        raise SystemExit(128 + result.signal)
    console.print(
        in_context(f"run {result.run_id} {result.status}: see `rlrun show {result.run_id}`"),
        highlight=False,
        markup=False,
    )


@app.command(short_help="Continue a run (or a search) bit for bit.")
@filtered(*ONE_RUN_FILTERS)
def resume(
    reference: Annotated[
        str, reference_argument("latest, latest~N, a row, an id, prefix or name, or a run folder; /sK for one session.")
    ] = "latest",
    frames: Annotated[str | None, typer.Option(metavar="TEXT", help="New frame target per session, e.g. 20M.")] = None,
    more: Annotated[str | None, typer.Option(metavar="TEXT", help="Frames to add to the target, e.g. 500k.")] = None,
    spec_file: Annotated[Path | None, typer.Option("--spec", metavar="PATH", help="An edited spec file.")] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Option("--set", metavar="TEXT", help="Edit one spec value: --set meta.eval_frequency=5k (repeatable)."),
    ] = None,
    fork: Annotated[bool, typer.Option("--fork", help="Branch a new run from the snapshot instead.")] = False,
    *,
    filters: "RunFilter",
    ray: Ray = None,
    cpus: Cpus = None,
    gpus: Gpus = None,
    detach: Detach = False,
    supervisor_on: SupervisorOn = None,
    slurm: Slurm = False,
    partition: Partition = None,
    time: Time = None,
    memory: Memory = None,
    account: Account = None,
    qos: Qos = None,
    sbatch: Sbatch = None,
    wait: Wait = False,
    home: Home = None,
    as_json: AsJson = False,
) -> None:
    """Continue a run bit for bit from its newest snapshots, with an optional consistent spec edit;
    or a search (`search:latest`, `search:ID`): its trials as they would have been."""
    from rlrun.refs import SearchRef, parse_target

    target = parse_target(reference)
    if isinstance(target, SearchRef):
        hand_over = None if slurm and wait else search_hand_over(ray, cpus, gpus, detach, supervisor_on, slurm=slurm)
        slurm_options = [partition, time, memory, account, qos, sbatch, (wait and not slurm) or None]
        slurm_options += [cpus, gpus] if slurm else []
        given = {
            "--frames": frames,
            "--more": more,
            "--spec": spec_file,
            "--set": overrides,
            "--fork": fork,
            filters.describe(): filters.narrows,
            # a search's jobs (its driver's; with --slurm --wait, its trials') have the options its spec recorded
            "--partition, --time, --memory, --account, --qos, --sbatch, --wait (or --cpus, --gpus with --slurm)": [
                given for given in slurm_options if given is not None
            ],
        }  # the filters as typed: `--status finished --algo ppo`
        executors = None if slurm and not wait else trial_executors(ray, cpus, gpus, slurm=slurm, wait=wait)
        resume_search_command(reference, home, as_json, given, executors, hand_over)
        return
    from rlrun.cli.display import TrainingDisplay, resume_plan
    from rlrun.sizes import parse_size
    from rlrun.training import resume as resume_run

    edits = list(overrides or ()) + slurm_edits(
        slurm, cpus=cpus, gpus=gpus, partition=partition, time=time, memory=memory, account=account, qos=qos,
        sbatch=sbatch, wait=wait,
    )  # fmt: skip
    executor = session_executor(ray, cpus, gpus, detach=detach, supervisor_on=supervisor_on, slurm=slurm, wait=wait)
    console = make_console()

    def planned(plan: Any) -> None:
        console.print(resume_plan(plan, reference_label(reference, filters)))
        if slurm:
            executor.use(plan.spec.meta.slurm, earlier=None if plan.fork else plan.run)

    with TrainingDisplay(console) as display:
        result = resume_run(
            target,
            filters,
            home=home,
            frames=None if frames is None else parse_size(frames, what="--frames"),
            more=None if more is None else parse_size(more, what="--more"),
            spec=spec_file,
            overrides=edits,
            fork=fork,
            on_event=display,
            executor=executor,
            on_plan=planned,
        )
    if result.nothing_to_do:
        _nothing_to_do(result, console, as_json)
        return
    _conclude(result, console, as_json)


def _nothing_to_do(result: Any, console: Any, as_json: bool) -> None:
    """A run already at its target: say so and exit 0, so a scheduler may requeue `resume` safely."""
    if as_json:
        print_json(result.to_json())
    trained = max(s.frame for s in result.sessions)
    console.print(
        in_context(
            f"nothing to do: run {result.run_id} has trained {trained:,} of its {result.max_frame:,} frames;"
            " raise the target with --frames or --more"
        ),
        highlight=False,
        markup=False,
    )


@app.command(short_help="Replay a checkpoint and score it.")
@filtered()
def enjoy(
    reference: Annotated[
        str,
        reference_argument(
            "the run, as for show; /sK picks a session, @best, @latest or @5M a checkpoint (or its folder)."
        ),
    ] = "latest",
    episodes: Annotated[
        int, typer.Option(min=1, show_default=True, metavar="INTEGER RANGE", help="Episodes to play.")
    ] = 5,
    seed: Annotated[
        int | None, typer.Option(min=0, metavar="INTEGER RANGE", help="Seed of the episodes (default: the session's).")
    ] = None,
    stochastic: Annotated[bool, typer.Option("--stochastic", help="Sample actions, not the greedy ones.")] = False,
    render: Annotated[bool, typer.Option("--render", help="Show the episodes in a window.")] = False,
    video: Annotated[
        Path | None,
        typer.Option(
            metavar="PATH",
            help="Record the episodes to a .gif or .mp4 file (also sent to the run's trackers, its meta.track).",
        ),
    ] = None,
    policy: Annotated[
        Path | None,
        typer.Option(
            metavar="PATH",
            help="Play this policy file (`rlrun export --onnx`) in place of the checkpoint, through"
            " onnxruntime; nothing is recorded.",
        ),
    ] = None,
    *,
    filters: "RunFilter",
    home: Home = None,
    as_json: AsJson = False,
) -> None:
    """Replay a checkpoint (the best by default) and score it, without touching the training records;
    or, with --policy, the ONNX file exported from it, on the same env, seeds and episodes."""
    from rlrun.cli.display import enjoy_table, enjoy_target, enjoy_video_line
    from rlrun.enjoy import enjoy as enjoy_run

    label = reference_label(reference, filters)
    console = make_console()
    result = enjoy_run(
        _parse(reference),
        filters,
        home=home,
        episodes=episodes,
        seed=seed,
        stochastic=stochastic,
        render=render,
        video=video,
        policy=policy,
        on_target=lambda chosen: console.print(enjoy_target(chosen, label)),
    )
    if as_json:
        print_json(result.to_json())
    else:
        make_console(stdout=True).print(enjoy_table(result))  # the answer: on stdout
        video_line = enjoy_video_line(result)
        if video_line:
            console.print(video_line, highlight=False, markup=False, soft_wrap=True)
    for line in result.video_not_sent:  # a tracker never fails enjoy: said, exit 0
        console.print(f"warning: {line}", style="yellow", highlight=False, markup=False, soft_wrap=True)


def _parse(reference: str) -> Any:
    """The reference, parsed once here; the library resolves it (with the filters) once."""
    from rlrun.refs import parse_ref

    return parse_ref(reference)


@app.command(short_help="Stop a running run (or search) with snapshots.")
@filtered(*ONE_RUN_FILTERS)
def stop(
    reference: Annotated[
        str,
        reference_argument(
            "latest, latest~N, a row, an id, prefix or name, or a run folder; or search:latest, search:ID."
        ),
    ] = "latest",
    *,
    filters: "RunFilter",
    home: Home = None,
    as_json: AsJson = False,
) -> None:
    """Stop a running run, wherever it runs (this machine, a Ray cluster, detached): every session
    stops at its next heartbeat with a snapshot, and `rlrun resume` continues it bit for bit. Or a
    search (`search:latest`, `search:ID`): it starts no more trials, and its trials in flight stop
    with snapshots. Safe to repeat; a run or search that has ended has nothing to stop (exit 0)."""
    from rlrun.cli import views
    from rlrun.refs import SearchRef, parse_target
    from rlrun.training.control import resume_command
    from rlrun.training.control import stop as stop_run

    target = parse_target(reference)
    if isinstance(target, SearchRef):
        stop_search_command(target, filters, home, as_json)
        return
    outcome = stop_run(target, filters, home=home)
    say(views.resolved(outcome.run, reference_label(reference, filters)))
    if as_json:
        print_json(outcome.to_json())
    run = outcome.run
    if not outcome.stopping:
        advice = f"; continue it with `{resume_command(run)}`" if run.status in ("crashed", "preempted") else ""
        say(f"run {run.id} is {run.status}: nothing to stop{advice}")
    elif outcome.repeated:
        say(
            f"run {run.id}: a stop was already requested {views.when(outcome.requested_at)}; its sessions stop at"
            " their next heartbeat with a snapshot (`rlrun ls` says preempted once they have)"
        )
    else:
        say(
            f"run {run.id}: stop requested; its sessions stop at their next heartbeat with a snapshot"
            f" (`rlrun ls` says preempted once they have); continue it with `{resume_command(run)}`"
        )
