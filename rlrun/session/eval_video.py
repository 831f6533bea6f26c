"""Videos of evaluation episodes (`meta.eval_video`), as the zoo's `--record-video`.

An evaluation that gets a video plays its first episode again, after the evaluation, on an env of
its own made to render (`render_mode="rgb_array"`): the same seed, the same copy of the policy and
the same frozen normalisation statistics, and, for wrappers of the user's that keep state, the
evaluation env's wrappers as that episode began. So the video is the evaluated episode (its return
is the evaluation's first; a video whose return is not says so), and training never sees it: the
replay draws on no random stream of training's and changes no state the evaluations carry.

A video is output, and output never stops training: an env that cannot render, or the `video`
extra missing, is said in one line and the session goes on without videos.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlrun import storage
from rlrun.algorithms.base import Actor
from rlrun.envs import make_env
from rlrun.envs.normalize import Normalizer
from rlrun.envs.state import restore_wrappers_state
from rlrun.errors import BadInput
from rlrun.session.video import TEMPORARY, VideoWriter, check_encoders, check_render_support
from rlrun.spec import Spec
from rlrun.trackers.delivery import describe

RENDER_MODE = "rgb_array"
FOLDER = "videos"
"""Where a tracker keeps a session's videos (an MLflow artifact folder; W&B's artifact name)."""


def due(number: int, every: int | None) -> bool:
    """Whether the session's evaluation `number` (0: its first) gets a video: the first, then every
    `every`-th. Counted over the session's evaluations, which every snapshot carries, so a resumed
    session records the videos the uninterrupted one does."""
    return every is not None and number % every == 0


@dataclass(frozen=True)
class Video:
    """What became of one evaluation's video: its file, or the line that says why there is none
    (or why it is not quite the evaluated episode)."""

    frame: int
    path: Path | None
    episode_return: float | None
    problem: str | None = None


Play = Callable[..., Any]
"""`rlrun.session.evaluation.play`, handed over by the evaluator (which owns how an episode is played)."""


class Recorder:
    """Replays evaluations' first episodes on a rendering env of its own, made when first needed,
    into `path_of(frame)`. After a problem that will not go away (no renderer, no encoder) it
    records nothing more: the line is said once."""

    def __init__(self, spec: Spec, path_of: Callable[[int], Path]) -> None:
        self.spec, self.path_of = spec, path_of
        self.env: Any = None
        self.given_up = False

    def record(
        self,
        play: Play,
        frame: int,
        seed: int,
        actor: Actor,
        normalizer: Normalizer | None,
        wrappers: list[Any] | None,
        evaluated_return: float,
    ) -> Video | None:
        """The episode of `seed` as the evaluation at `frame` played it, written to its file;
        `wrappers`: the evaluation env's wrappers' state as that episode began (None: none kept)."""
        if self.given_up:
            return None
        path = self.path_of(frame)
        try:
            episode_return = self._write(play, path, seed, actor, normalizer, wrappers)
        except Exception as error:  # output never stops training: said once, and no more videos
            self.given_up = True
            reason = str(error) if isinstance(error, BadInput) else f"meta.eval_video failed: {describe(error)}"
            return Video(frame, None, None, f"no evaluation videos: {reason}; training goes on without them")
        problem = (
            None
            if episode_return == evaluated_return
            else (
                f"the video of the evaluation at frame {frame} ({path.name}) played another episode than the one "
                f"evaluated (return {episode_return:g}, not {evaluated_return:g}): the env plays differently when it"
                " renders"
            )
        )
        return Video(frame, path, episode_return, problem)

    def _write(
        self, play: Play, path: Path, seed: int, actor: Actor, normalizer: Normalizer | None, wrappers: list[Any] | None
    ) -> float:
        """Play the episode into `path`, atomically; returns its return."""
        made = self.env is None
        env = self._env()
        if wrappers is not None:
            restore_wrappers_state(env, wrappers)
        path.parent.mkdir(parents=True, exist_ok=True)
        if made:  # what an attempt killed while recording left behind
            for stale in path.parent.glob(TEMPORARY):
                stale.unlink(missing_ok=True)
        writer = VideoWriter(path, fps=env.metadata.get("render_fps", 30), atomic=True)
        try:
            played = play(
                actor,
                env,
                [seed],
                deterministic=self.spec.meta.eval_deterministic,
                epsilon=self.spec.eval_epsilon,
                max_steps=self.spec.eval_max_steps,
                on_frame=writer,
                normalizer=normalizer,
            )
        except BaseException:
            writer.discard()
            raise
        writer.close()
        return float(played.returns[0])

    def _env(self) -> Any:
        """The rendering env, made once; BadInput when it cannot be (no renderer, no encoder)."""
        if self.env is None:
            check_encoders("meta.eval_video")
            check_render_support(headless=True)
            env = make_env(self.spec.env, render_mode=RENDER_MODE)
            if RENDER_MODE not in env.metadata.get("render_modes", []):
                env.close()
                renders = ", ".join(env.metadata.get("render_modes", [])) or "nothing"
                raise BadInput(
                    f"meta.eval_video needs {RENDER_MODE} frames, and {self.spec.env.id} renders {renders}"
                    f" (give it a {RENDER_MODE} render mode, or set meta.eval_video to null)"
                )
            self.env = env
        return self.env

    def close(self) -> None:
        if self.env is not None:
            self.env.close()


def upload_job(path: Path) -> Callable[[], None] | None:
    """A job that puts the video in the store of a home in object storage, for the session's
    uploader (None in a local home): the file is complete (renamed into place) and never changes."""
    mirror = storage.mirror_of(path)
    if mirror is None:
        return None
    return lambda: mirror.put(path)
