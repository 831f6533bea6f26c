"""`rlrun publish RUN DEST`: a run as a model repository anyone can check, laid out as the Hugging
Face Hub expects (a model card in `README.md`, weights beside it) and holding the run's resumable
bundle, so the card's score re-derives (`rlrun enjoy --episodes 50 --seed S` after `rlrun pull`)
and the run continues exactly (`rlrun resume`).

    layout   what the repository holds and how each file is made (`publish`, `Published`)
    card     the model card's text: YAML front matter (`library_name`, tags, `model-index`), body
    upload   where it goes: a folder, an fsspec URL (the home's storage layer), or `hf://ORG/NAME`

No file in a repository needs pickle to read: JSON, safetensors, a frozen TorchScript module,
ONNX, a tar of the run folder (read as `rlrun pull` reads a bundle), PNG, MP4 and Markdown.
"""

from __future__ import annotations

from rlrun.publish.layout import EPISODES, Published, publish

__all__ = ["EPISODES", "Published", "publish"]
