"""Writing rendered frames to a video file, `.gif` or `.mp4` by its extension.

imageio does the encoding (Pillow for GIF, the ffmpeg binary that imageio-ffmpeg ships for MP4);
both come with the `video` extra, as does pygame, which Gymnasium's classic-control envs need to
render at all. Frames are streamed to the encoder as they come, never held all at once for MP4.
A GIF stores identical consecutive frames once, with their durations added, so its total duration
is still one frame time per environment step.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rlrun.errors import BadInput, install_hint

FORMATS = (".gif", ".mp4")


def check_video_path(path: Path) -> None:
    """Reject what cannot be written before anything runs."""
    if path.suffix.lower() not in FORMATS:
        raise BadInput(f"--video {path}: write a .gif or an .mp4 (the extension picks the format)")
    if not path.parent.exists():
        raise BadInput(f"--video {path}: folder {path.parent} does not exist; create it or choose another path")
    check_render_support(headless=True)
    try:
        import imageio  # noqa: F401
        import imageio_ffmpeg  # noqa: F401
    except ImportError:
        raise BadInput(f"--video needs imageio and imageio-ffmpeg: {install_hint('video')}") from None


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
    def __init__(self, path: Path, fps: float) -> None:
        import imageio

        options: dict[str, Any] = {"fps": fps}
        if path.suffix.lower() == ".mp4":
            options["macro_block_size"] = 1  # keep the env's frame size exactly
        else:
            options["loop"] = 0
        self.path = path
        self.frames = 0
        self._writer = imageio.get_writer(path, **options)

    def __call__(self, frame: Any) -> None:
        self._writer.append_data(frame)
        self.frames += 1

    def close(self) -> None:
        self._writer.close()
