"""`enjoy --video`: the file a person asks for, checked before anything runs. The writing itself is
shared with training's evaluation videos (`rlrun.session.video`), and reachable from here too.
"""

from __future__ import annotations

from pathlib import Path

from rlrun.errors import BadInput
from rlrun.session.video import FORMATS, VideoWriter, check_encoders, check_render_support

__all__ = ["FORMATS", "VideoWriter", "check_encoders", "check_render_support", "check_video_path"]


def check_video_path(path: Path) -> None:
    """Reject what cannot be written before anything runs."""
    if path.suffix.lower() not in FORMATS:
        raise BadInput(f"--video {path}: write a .gif or an .mp4 (the extension picks the format)")
    if not path.parent.exists():
        raise BadInput(f"--video {path}: folder {path.parent} does not exist; create it or choose another path")
    check_render_support(headless=True)
    check_encoders("--video")
