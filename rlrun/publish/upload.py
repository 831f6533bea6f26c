"""Where a published repository goes: a folder, a URL any installed fsspec library reaches (the
home's storage layer, `rlrun.storage`, through `rlrun.home.bundle`'s store helpers), or a Hugging
Face Hub model repository, `hf://ORG/NAME`, through `huggingface_hub` (the `hub` extra, imported
only for hf://).

The destination is checked before any work (a bad Hub name, a missing extra, a folder whose parent
does not exist: one line, exit 2, nothing written). The files are made in a staging folder first and
then put in place, the model card last: a reader who finds the card finds the files it names.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rlrun import storage
from rlrun.errors import BadInput, install_hint
from rlrun.fsutil import fsync_path

HUB = "hf://"
CARD = "README.md"
_HUB_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?")
"""An owner's or a repository's name on the Hub: letters, digits, `.`, `_`, `-`, at most 96."""
_STAGING = ".publish-"


class Destination:
    """A checked destination: `kind` is "folder", "store" or "hub"; `address` what the card's
    `rlrun pull` names."""

    def __init__(self, given: str, kind: str, address: str, folder: Path | None = None) -> None:
        self.given, self.kind, self.address, self.folder = given, kind, address, folder

    @classmethod
    def of(cls, destination: str) -> Destination:
        """The destination `destination` names, checked: nothing is written yet."""
        given = destination.strip()
        if not given:
            raise BadInput("name where to publish the run: a folder, a URL (s3://bucket/models/x) or hf://ORG/NAME")
        if given.lower().startswith(HUB):
            return cls(given, "hub", f"{HUB}{hub_repository(given)}")
        if storage.is_url(given) and not given.startswith("file://"):
            from rlrun.home.bundle import filesystem_of

            filesystem_of(given, "publish")  # the library for its scheme, before any work
            return cls(given, "store", given.rstrip("/"))
        folder = Path(given.removeprefix("file://")).expanduser().absolute()
        if folder.exists() and not folder.is_dir():
            raise BadInput(f"cannot publish to {folder}: it is a file; name a folder (it is made if missing)")
        if not folder.parent.is_dir():
            raise BadInput(f"cannot publish to {folder}: folder {folder.parent} does not exist; make it first")
        return cls(given, "folder", str(folder), folder)

    @contextmanager
    def staging(self) -> Iterator[Path]:
        """An empty folder to make the repository in: inside the destination folder (so putting
        each file in place is a rename), else a temporary one; gone afterwards."""
        if self.folder is not None:
            self.folder.mkdir(exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=_STAGING, dir=self.folder) as made:
            yield Path(made)

    def put(self, staged: Path, run_id: str) -> None:
        """Every file of `staged` to the destination, the model card last."""
        names = sorted((p.name for p in staged.iterdir() if p.is_file()), key=lambda name: (name == CARD, name))
        if self.kind == "hub":
            _to_hub(staged, self.address.removeprefix(HUB), run_id)
        elif self.kind == "store":
            _to_store(staged, names, self.given.rstrip("/"))
        else:
            assert self.folder is not None
            for name in names:
                os.replace(staged / name, self.folder / name)
            fsync_path(self.folder)

    def other_bundles(self, bundle_name: str) -> list[str]:
        """Bundles of other runs already at the destination (a folder or a store; the Hub's
        repository is checked by its own history): a second one would leave `rlrun pull` of the
        repository not knowing which run it means."""
        from rlrun.home.bundle import SUFFIX

        if self.folder is not None:
            found = [p.name for p in self.folder.glob(f"*{SUFFIX}")]
        elif self.kind == "store":
            from rlrun.home.bundle import filesystem_of, talking_to

            fs, key = filesystem_of(self.given, "publish")
            with talking_to(self.given, "publish"):
                found = [str(p).rsplit("/", 1)[-1] for p in fs.glob(f"{key}/*{SUFFIX}")]
        else:
            found = []
        return [name for name in found if name != bundle_name]


def hub_repository(url: str) -> str:
    """`ORG/NAME` of `hf://ORG/NAME`, checked, with huggingface_hub installed; else one line."""
    name = url[len(HUB) :].strip("/")
    parts = name.split("/")
    if len(parts) != 2 or not all(_HUB_NAME.fullmatch(part) and ".." not in part for part in parts):
        raise BadInput(
            f"{url}: not a Hub model repository; write hf://ORG/NAME (letters, digits, '.', '_', '-';"
            " e.g. hf://my-org/ppo-CartPole-v1)"
        )
    try:
        import huggingface_hub  # noqa: F401  # the hub extra: only hf:// needs it
    except ImportError:
        raise BadInput(f"rlrun publish {url} needs huggingface_hub: {install_hint('hub')}") from None
    return name


def _to_store(staged: Path, names: list[str], url: str) -> None:
    from rlrun.home.bundle import filesystem_of, talking_to

    fs, key = filesystem_of(url, "publish")
    with talking_to(url, "publish"):
        for name in names:
            fs.put_file(str(staged / name), f"{key}/{name}")


def _to_hub(staged: Path, repository: str, run_id: str) -> None:
    """One commit of the whole folder to the model repository, made if it is not there."""
    from huggingface_hub import HfApi

    from rlrun.home.bundle import talking_to

    api = HfApi()
    with talking_to(f"{HUB}{repository}", "publish"):
        api.create_repo(repository, repo_type="model", exist_ok=True)
        api.upload_folder(
            folder_path=str(staged), repo_id=repository, repo_type="model", commit_message=f"rlrun publish {run_id}"
        )
