"""`enjoy`: replay a checkpoint — score it, watch it, or record it — without touching training.

The run, session and checkpoint come from one reference; the env and the agent are rebuilt from the
spec revision stored with the run; the snapshot is verified against the registry's sha256 before a
single step runs. The result is recorded as an evaluation of kind "enjoy", which never changes the
training evaluations, the best score, the checkpoints or the run's status. A video of a run that
tracks (`meta.track`) also goes to its session's tracker runs, as an artifact beside their history.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlrun import paths
from rlrun.errors import BadInput, RunReferenceError
from rlrun.imports.foreign import refuse_foreign
from rlrun.refs import RunFilter, RunRef, parse_ref
from rlrun.registry import CheckpointRecord, Registry, RunRecord, SessionRecord, choose_checkpoint
from rlrun.spec.cores import torch_threads

if TYPE_CHECKING:
    from rlrun.enjoy.onnx_policy import PolicyFile

MAX_EPISODES = 10_000
"""The most episodes one `enjoy` plays: a score needs far fewer, and a slip of the finger
(`--episodes 10000000`) would never end."""


@dataclass(frozen=True)
class EnjoyTarget:
    run: RunRecord
    session: SessionRecord
    checkpoint: CheckpointRecord
    score: float | None
    """The training evaluation mean at the checkpoint's frame (what made it best), if any."""
    spec_json: str


@dataclass(frozen=True)
class Episode:
    episode_return: float
    length: int


@dataclass(frozen=True)
class EnjoyResult:
    run_id: str
    session: int
    checkpoint_frame: int
    checkpoint_kind: str
    score_at_checkpoint: float | None
    seed: int
    stochastic: bool
    episodes: list[Episode]
    mean: float
    std: float
    video: str | None
    video_frames: int | None
    video_not_sent: list[str] = field(default_factory=list)
    """One line per tracker of the run (`meta.track`) that did not get the video."""

    def to_json(self) -> dict[str, Any]:
        document = asdict(self)
        document["episodes"] = [{"return": e.episode_return, "length": e.length} for e in self.episodes]
        return document


def choose(registry: Registry, reference: RunRef | str, filters: RunFilter | None = None) -> EnjoyTarget:
    """The session with the best training evaluation (or `/sK`), and its checkpoint with the best
    evaluation mean (or `@best`, `@latest`, `@FRAMES`; a checkpoint folder's path names its frame);
    the newest when nothing was evaluated.
    The run is the one `reference` names among those `filters` let through."""
    ref = parse_ref(reference) if isinstance(reference, str) else reference
    run = registry.resolve(ref, filters)
    refuse_foreign(run, "enjoy")  # and `export --onnx`, which plays the policy enjoy chooses
    detail = registry.get_run(run.id)
    chosen = choose_checkpoint(detail, ref)
    revision = max((r for r in detail.spec_revisions if r.frame <= chosen.checkpoint.frame), key=lambda r: r.revision)
    return EnjoyTarget(run, chosen.session, chosen.checkpoint, chosen.score, revision.spec_json)


@dataclass(frozen=True)
class Located:
    """Where a reference's checkpoint is: the runs home (or the folder holding an outside run folder),
    the outside run folder if it is one (read where it is, recorded nowhere), and the checkpoint."""

    root: Path
    outside: Path | None
    target: EnjoyTarget


def locate(reference: RunRef | str, filters: RunFilter | None = None, *, home: Path | str | None = None) -> Located:
    """The checkpoint `reference` names (`choose`), in the home or in a run folder from elsewhere;
    reads the registry, never writes it."""
    from rlrun.home.folders import open_registry, outside_folder

    ref = parse_ref(reference) if isinstance(reference, str) else reference
    outside = outside_folder(ref, home)  # a run folder from elsewhere: read where it is, recorded nowhere
    root = outside.parent if outside is not None else paths.resolve_home(home)
    with open_registry(ref, home) as registry:
        target = choose(registry, ref, filters)
    return Located(root, outside, target)


def with_checkpoint(reference: RunRef | str, checkpoint: str | int | None, option: str = "checkpoint") -> RunRef:
    """`reference` with its checkpoint named apart (`--checkpoint best|latest|5M`, `checkpoint=`):
    the same grammar as `@best`, `@latest`, `@5M`; naming two different ones is bad input."""
    ref = parse_ref(reference) if isinstance(reference, str) else reference
    if checkpoint is None:
        return ref
    text = str(checkpoint).strip()
    try:
        named = parse_ref(f"latest@{text}").checkpoint
    except RunReferenceError:
        raise BadInput(f"{option} {text!r} is not best, latest or a frame count like 5M") from None
    if ref.checkpoint is not None and ref.checkpoint != named:
        raise BadInput(f"{ref} names checkpoint @{ref.checkpoint} and {option} {text!r} another; give one of them")
    return ref._replace(checkpoint=named)


def enjoy(
    reference: RunRef | str = "latest",
    filters: RunFilter | None = None,
    *,
    home: Path | str | None = None,
    episodes: int = 5,
    seed: int | None = None,
    stochastic: bool = False,
    render: bool = False,
    video: Path | None = None,
    on_target: Any = None,
    policy: Path | None = None,
) -> EnjoyResult:
    """Play `episodes` episodes with the chosen checkpoint and record the score as kind "enjoy".
    `policy`: an ONNX file exported from that checkpoint (`rlrun export --onnx`) plays in its place,
    through onnxruntime, and nothing is recorded."""
    if not 1 <= episodes <= MAX_EPISODES:
        raise BadInput(f"--episodes {episodes}: play from 1 to {MAX_EPISODES:,} episodes at a time")
    if render and video is not None:
        raise BadInput("choose --render (a window) or --video (a file), not both")
    if policy is not None and stochastic:
        raise BadInput(
            "--policy plays the ONNX file's greedy action; drop --stochastic (the file's other outputs"
            " are there to sample from in your own runtime)"
        )
    policy_file = None
    if policy is not None:
        from rlrun.enjoy.onnx_policy import check_policy_file

        policy_file = check_policy_file(policy)  # the extra and the file, before the registry is read
    located = locate(reference, filters, home=home)
    root, outside, target = located.root, located.outside, located.target
    if policy_file is not None:
        policy_file.check_target(target)
    _check_output(render, video)
    if on_target is not None:
        on_target(target)
    result = _play(
        root,
        target,
        episodes=episodes,
        seed=target.session.seed if seed is None else seed,
        stochastic=stochastic,
        render=render,
        video=video,
        policy=policy_file,
    )
    if outside is not None or policy is not None:
        return result
    with Registry.open(root) as registry:
        returns = [e.episode_return for e in result.episodes]
        registry.add_evaluation(
            target.session.id,
            frame=target.checkpoint.frame,
            mean=result.mean,
            std=result.std,
            min=min(returns),
            max=max(returns),
            episodes=len(returns),
            kind="enjoy",
        )
        search = registry.search_of(target.run.id)
    if video is not None:
        result = replace(result, video_not_sent=_send_video(target, search, video))
    return result


def _send_video(target: EnjoyTarget, search: str | None, video: Path) -> list[str]:
    """The video, to the session's tracker runs (the spec's `meta.track`); what did not get it, one line each."""
    spec = json.loads(target.spec_json)
    names = spec.get("meta", {}).get("track") or []
    if not names:
        return []
    from rlrun.trackers import Identity
    from rlrun.trackers.artifacts import send_file

    return send_file(
        names, Identity(target.run.id, target.session.index, target.session.seed, spec, group=search), video
    )


def _check_output(render: bool, video: Path | None) -> None:
    from rlrun.enjoy.video import check_render_support, check_video_path

    if render:
        if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
            raise BadInput(
                "--render needs a display and this machine has none (DISPLAY is not set);"
                " record the episodes instead with --video enjoy.mp4 (or .gif)"
            )
        check_render_support()
    if video is not None:
        check_video_path(video)


@dataclass
class Acting:
    """A checkpoint ready to act as enjoy plays it: the spec it was trained with, the env that
    evaluation builds (its observations are what the agent acts on), the agent with the
    checkpoint's weights (it plays through `agent.actor`), and the frozen normalisation
    statistics (None: no `env.normalize`)."""

    spec: Any
    env: Any
    agent: Any
    normalizer: Any


def acting_env(target: EnjoyTarget, render_mode: str | None = None) -> tuple[Any, Any]:
    """The spec the checkpoint was trained with, and the env evaluation and enjoy play it on."""
    from rlrun.envs import make_env
    from rlrun.spec import recorded_spec

    spec = recorded_spec(json.loads(target.spec_json), check_env_id=True)
    return spec, make_env(spec.env, render_mode=render_mode)


def load_acting(
    root: Path, target: EnjoyTarget, *, render_mode: str | None = None, with_memory: bool = False
) -> Acting:
    """The checkpoint's agent, verified against the registry's sha256 before it is loaded: the one
    loader of enjoy, `load_policy`, `record` and export. The caller's global generators (torch's,
    NumPy's, Python's) are left as they were: building an agent seeds torch's. `with_memory`: its
    replay memory restored too (`record --replay` reads it); acting alone leaves it out."""
    from rlrun import snapshot
    from rlrun.algorithms import build_agent
    from rlrun.envs.normalize import make_normalizer
    from rlrun.session.evaluation import acting_state

    saved = snapshot.read(root / target.checkpoint.path, target.checkpoint.sha256)  # verified before any step
    spec, env = acting_env(target, render_mode)
    try:
        with _global_generators_kept():
            agent = build_agent(spec, env.observation_space, env.action_space, target.session.seed)
        state = saved.tensors["agent"]
        memory = {"arrays": saved.arrays, "logs": saved.logs}  # as a resume restores it (`session.state`)
        agent.load_state_dict({**state, **memory} if with_memory else acting_state(state))
        normalizer = make_normalizer(spec, env.observation_space, saved.tensors)  # the training statistics
    except BaseException:
        env.close()
        raise
    return Acting(spec, env, agent, normalizer)


@contextmanager
def _global_generators_kept() -> Iterator[None]:
    """torch's, NumPy's and Python's global generators as they were before, whatever ran inside."""
    import random

    import torch

    python, numpy, torch_rng = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        yield
    finally:
        random.setstate(python)
        np.random.set_state(numpy)
        torch.set_rng_state(torch_rng)


@contextmanager
def torch_threads_for(spec: Any) -> Iterator[None]:
    """torch's thread count as the run's sessions act with it, the caller's back after."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(torch_threads(spec, spec.meta.sessions))
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _play(
    root: Path,
    target: EnjoyTarget,
    *,
    episodes: int,
    seed: int,
    stochastic: bool,
    render: bool,
    video: Path | None,
    policy: PolicyFile | None = None,
) -> EnjoyResult:
    from rlrun import seeding
    from rlrun.enjoy.video import VideoWriter
    from rlrun.session.evaluation import play

    render_mode = "human" if render else "rgb_array" if video else None
    if policy is None:
        acting = load_acting(root, target, render_mode=render_mode)
        spec, env, actor, normalizer = acting.spec, acting.env, acting.agent.actor, acting.normalizer
    else:  # the file in place of the checkpoint: its graph normalises the observations itself
        from rlrun.enjoy.onnx_policy import OnnxActor

        spec, env = acting_env(target, render_mode)
        try:
            actor, normalizer = OnnxActor.open(policy, env), None
        except BaseException:
            env.close()
            raise
    writer = VideoWriter(video, fps=env.metadata.get("render_fps", 30)) if video is not None else None
    try:
        seeds = seeding.enjoy_episode_seeds(seed, episodes)
        with torch_threads_for(spec):
            played = play(actor, env, seeds, deterministic=not stochastic, on_frame=writer, normalizer=normalizer)
    finally:
        if writer is not None:
            writer.close()
        env.close()
    return EnjoyResult(
        run_id=target.run.id,
        session=target.session.index,
        checkpoint_frame=target.checkpoint.frame,
        checkpoint_kind=target.checkpoint.kind,
        score_at_checkpoint=target.score,
        seed=seed,
        stochastic=stochastic,
        episodes=[Episode(r, n) for r, n in zip(played.returns, played.lengths, strict=True)],
        mean=float(np.mean(played.returns)),
        std=float(np.std(played.returns)),
        video=str(video) if video else None,
        video_frames=writer.frames if writer else None,
    )
