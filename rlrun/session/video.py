"""Writing rendered frames to a video file, `.gif` or `.mp4` by its extension: the evaluation
videos of training (`rlrun.session.eval_video`) and `enjoy --video`'s (`rlrun.enjoy.video`).

imageio does the encoding (Pillow for GIF, the ffmpeg binary that imageio-ffmpeg ships for MP4);
both come with the `video` extra, as does pygame, which Gymnasium's classic-control envs need to
render at all. Frames are streamed to the encoder as they come, never held all at once for MP4.
A GIF stores identical consecutive frames once, with their durations added, so its total duration
is still one frame time per environment step.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from rlrun.errors import BadInput, install_hint
from rlrun.fsutil import fsync_path

FORMATS = (".gif", ".mp4")
TEMPORARY = ".*.tmp-*"
"""The names an atomic `VideoWriter` writes under before the rename: what a killed writer leaves."""


def check_encoders(wanted_by: str) -> None:
    """BadInput naming the `video` extra when the encoders are missing; `wanted_by` is what asked
    for a video (`--video`, `meta.eval_video`)."""
    try:
        import imageio  # noqa: F401
        import imageio_ffmpeg  # noqa: F401
    except ImportError:
        raise BadInput(f"{wanted_by} needs imageio and imageio-ffmpeg: {install_hint('video')}") from None


def check_render_support(*, headless: bool = False) -> None:
    # pygame greets on stdout when imported (which would spoil --json), and SDL probes for a
    # display even to draw off-screen; a recording needs neither.
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    if headless:
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    try:
        import pygame  # noqa: F401
    except ImportError:
        raise BadInput(f"rendering Gymnasium's classic-control envs needs pygame: {install_hint('video')}") from None


class VideoWriter:
    """Frames in, a video file out. `atomic`: written beside `path` under a temporary name and
    renamed into place by `close`, so a reader (an uploader, a person) never finds half a video,
    and a run killed while recording leaves no `path` at all."""

    def __init__(self, path: Path, fps: float, *, atomic: bool = False) -> None:
        import imageio

        options: dict[str, Any] = {"fps": fps}
        if path.suffix.lower() == ".mp4":
            options["macro_block_size"] = 1  # keep the env's frame size exactly
        else:
            options["loop"] = 0
        self.path = path
        self.frames = 0
        # the extension picks imageio's format, so the temporary name keeps it
        self._writing = path.with_name(f".{path.stem}.tmp-{uuid.uuid4().hex[:8]}{path.suffix}") if atomic else path
        self._writer = imageio.get_writer(self._writing, **options)

    def __call__(self, frame: Any) -> None:
        self._writer.append_data(frame)
        self.frames += 1

    def close(self) -> None:
        self._writer.close()
        if self._writing != self.path:
            fsync_path(self._writing)  # the frames on disk before the name says they are there
            os.replace(self._writing, self.path)

    def discard(self) -> None:
        """Stop writing and leave nothing behind (an atomic video only: a plain one is the caller's)."""
        try:
            self._writer.close()
        finally:
            if self._writing != self.path:
                self._writing.unlink(missing_ok=True)
