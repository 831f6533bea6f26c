"""Runs that travel: a whole run in one file (a *bundle*), for `rlrun push` and `rlrun pull`.

A bundle is one uncompressed tar (the standard library's `tarfile`, POSIX.1-2001 headers) whose
members are, in this order:

    rlrun-bundle.json           the bundle's manifest: the run (id, name, spec, status) and every
                                file below with its sha256 and size
    rlrun-bundle.json.sha256    the manifest's own sha256 (what `rlrun push` prints, and what
                                `rlrun pull --sha256` pins)
    <run id>/...                the run folder as it is in its home: run.json (the rows the registry
                                is rebuilt from: run, sessions, spec revisions, attempts, evaluations),
                                each session's metrics log, every checkpoint the registry lists
                                (replay memory included), videos

Every member is a regular file: a file hard-linked from another (a replay-memory segment that later
snapshots share) is stored once and listed in the manifest's `links`, which `pull` makes into hard
links again itself; the tar never holds a link, and no link in a tar is ever extracted. Nothing in
a bundle is unpickled by `pull`: it reads JSON and copies bytes (a snapshot's state is read, when it
is read, by the snapshot module, as for any run).

`pull` reads the tar as a stream, once: the manifest first (a run the home already has is refused
before anything more is read), then each file, written into a folder of its own beside the home's
run folders (`.pull-*`; beside the working copy of a home in object storage) and checked against the
manifest as it arrives; then every snapshot against its own MANIFEST.json, as `rlrun import` checks
a run folder (`rlrun.home.maintenance`), which then moves the folder into place (a rename), uploads
it to the store where the home is one, and registers the run, last. A bundle that is tampered with,
truncated, or holds anything the manifest does not list is refused (BadInput, exit 2) and leaves
nothing.

Only JSON and file operations: neither torch nor Gymnasium is imported.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import posixpath
import shutil
import tarfile
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NamedTuple

from rlrun import __version__, paths, storage
from rlrun.errors import BadInput, StoreUnreachable
from rlrun.fsutil import fsync_path, umask_mode
from rlrun.imports.foreign import refuse_foreign
from rlrun.registry import Registry, RunRecord
from rlrun.snapshot import layout

FORMAT = 1
KIND = "rlrun-run-bundle"
MANIFEST = "rlrun-bundle.json"
MANIFEST_HASH = f"{MANIFEST}.sha256"
SUFFIX = ".rlrun"
"""What `rlrun push` names a bundle it writes into a folder (`rlrun push latest s3://bucket/shared/`)."""
_STAGING = ".pull-"
_MANIFEST_LIMIT = 64 << 20  # a manifest lists files; more than this is not one
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Pushed:
    """What `push` wrote: the run, where, its size, and the manifest's sha256 (to pin on pull)."""

    run: RunRecord
    destination: str
    files: int
    size_bytes: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run.to_json(),
            "destination": self.destination,
            "files": self.files,
            "size_bytes": self.size_bytes,
            "sha256": self.sha256,
        }


@dataclass(frozen=True)
class Pulled:
    """What `pull` added to the home: the run as the registry now lists it, and the bundle's sha256."""

    run: RunRecord
    source: str
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run.to_json(), "source": self.source, "sha256": self.sha256}


# ---------------------------------------------------------------------------------------------
# push


def push(reference: str, destination: str, *, home: Path | str | None = None) -> Pushed:
    """Write the run `reference` names as a bundle to `destination`: a file path, or a URL any
    installed fsspec library reaches (`s3://…`, `gs://…`, `az://…`, `hf://…`); a folder (an existing
    one, or a path or URL ending in `/`) gets `<run id>.rlrun`. A bundle already there is replaced
    whole (a rename on disk, one PUT in a store): a reader finds the old one or the new one. A run
    that is still running is refused: its files are still changing.

    Args:
        reference: The run, as `rlrun show` takes it.
        destination: A file path or URL, or a folder (ending in `/`) to write `<run id>.rlrun` in.
        home: The runs home: a folder or an object-store URL (None: $RLRUN_HOME, else ./runs).

    Returns:
        The run, where the bundle went, its size and the manifest's sha256 (to pin on pull).
    """
    from rlrun.home.folders import open_registry
    from rlrun.refs import whole_run

    ref = whole_run(reference, "push")
    with open_registry(ref, home) as registry:
        run = registry.resolve(ref)
        refuse_foreign(run, "push")
        detail = registry.get_run(run.id)
        root = registry.home
    if run.status == "running":
        raise BadInput(f"run {run.id} is still running; stop it (`rlrun stop {run.id}`) or let it finish, then push it")
    target = _Target.of(destination, run.id)
    folder = paths.run_dir(root, run.id)
    checkpoints = {root / c.path: c.sha256 for c in detail.checkpoints}
    _bring_down(folder, checkpoints)
    for path, digest in checkpoints.items():  # never send a snapshot that is not what the registry recorded
        layout.verify(path, digest, deep=True)
    files = _run_files(folder, set(checkpoints))
    with target.writing() as file:
        written = _write_bundle(file, run, folder, files)
    return Pushed(run, target.name, len(files), target.size, written)


def _bring_down(folder: Path, checkpoints: dict[Path, str]) -> None:
    """A run of a home in object storage, whole in the working copy: its listed snapshots (segments
    included) and every other object of its folder (run.json, metrics logs, videos)."""
    from rlrun.snapshot import remote

    mirror = storage.mirror_of(folder)
    if mirror is None:
        return
    storage.reach(mirror.local)
    for path, digest in checkpoints.items():
        remote.materialize(path, digest)
    rest = [
        key
        for key in mirror.keys(mirror.key(folder))
        if "/checkpoints/" not in key and f"/{remote.SEGMENTS}/" not in key
    ]
    mirror.get_many([(key, mirror.path(key)) for key in rest])


def _run_files(folder: Path, checkpoints: set[Path]) -> list[Path]:
    """The files a bundle holds: all of the run folder's but the snapshots the registry does not
    list (torn, orphaned, or retired ones) and a store's segment objects (in `logs/` of each
    snapshot already)."""
    from rlrun.snapshot import remote

    chosen = []
    for file in sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()):
        parts = file.relative_to(folder).parts
        if remote.SEGMENTS in parts[:-1]:
            continue
        if "checkpoints" in parts[:-1]:
            snapshot = folder.joinpath(*parts[: parts.index("checkpoints") + 2])
            if snapshot not in checkpoints:
                continue
        chosen.append(file)
    return chosen


class _Entry(NamedTuple):
    name: str  # in the tar: <run id>/<path in the run folder>
    path: Path
    sha256: str
    size: int
    mtime: float

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "sha256": self.sha256, "size": self.size, "mtime": self.mtime}


def _write_bundle(out: IO[bytes], run: RunRecord, folder: Path, files: list[Path]) -> str:
    """The tar, manifest first; returns the manifest's sha256."""
    entries: list[_Entry] = []
    links: list[list[str]] = []
    first_of: dict[tuple[int, int], str] = {}
    for file in files:
        name = f"{run.id}/{file.relative_to(folder).as_posix()}"
        stat = file.stat()
        if stat.st_nlink > 1 and (stat.st_dev, stat.st_ino) in first_of:
            links.append([name, first_of[stat.st_dev, stat.st_ino]])
            continue
        first_of[stat.st_dev, stat.st_ino] = name
        entries.append(_Entry(name, file, layout.hash_file(file), stat.st_size, stat.st_mtime))
    document = {
        "format": FORMAT,
        "kind": KIND,
        "rlrun": __version__,
        "run": run.to_json(),
        "files": [entry.to_json() for entry in entries],
        "links": links,
    }
    manifest = json.dumps(document, indent=1, sort_keys=True).encode()
    digest = hashlib.sha256(manifest).hexdigest()
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        _add_bytes(tar, MANIFEST, manifest, run.created_at)
        _add_bytes(tar, MANIFEST_HASH, f"{digest}\n".encode(), run.created_at)
        for entry in entries:
            info = tarfile.TarInfo(entry.name)
            info.size, info.mtime, info.mode = entry.size, entry.mtime, 0o644
            with open(entry.path, "rb") as source:
                tar.addfile(info, source)
    return digest


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mtime: float) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), mtime, 0o644
    tar.addfile(info, io.BytesIO(data))


class _Target:
    """Where a bundle goes: a local file (written beside it, then renamed over it) or an object
    (written to a local temporary file, then uploaded in one PUT)."""

    def __init__(self, name: str, local: Path | None, store: tuple[Any, str] | None) -> None:
        self.name, self.local, self.store = name, local, store
        self.size = 0

    @classmethod
    def of(cls, destination: str, run_id: str) -> _Target:
        if not destination.strip():
            raise BadInput("name where to push the run: a file (run.rlrun) or a URL (s3://bucket/runs/run.rlrun)")
        if storage.is_url(destination):
            name = destination + f"{run_id}{SUFFIX}" if destination.endswith("/") else destination
            return cls(name, None, _filesystem(name, "push"))
        path = Path(destination.removeprefix("file://")).expanduser().absolute()
        if path.is_dir() or destination.endswith("/"):
            path = path / f"{run_id}{SUFFIX}"
        if not path.parent.is_dir():
            raise BadInput(f"cannot push to {path}: folder {path.parent} does not exist; make it first")
        return cls(str(path), path, None)

    @contextmanager
    def writing(self) -> Iterator[IO[bytes]]:
        folder = self.local.parent if self.local is not None else None
        handle, temporary = tempfile.mkstemp(prefix=".push-", suffix=".tmp", dir=folder)
        try:
            os.fchmod(handle, umask_mode())  # mkstemp's 0600 would keep the bundle from whoever it is for
            with os.fdopen(handle, "wb") as file:
                yield file
                file.flush()
                os.fsync(file.fileno())
                self.size = file.tell()
            if self.local is not None:
                os.replace(temporary, self.local)
                fsync_path(self.local.parent)
            else:
                fs, key = self.store  # type: ignore[misc]
                with _talking_to(self.name, "push"):
                    fs.put_file(temporary, key)
        finally:
            Path(temporary).unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------
# pull


def pull(source: str, *, home: Path | str | None = None, expected_sha256: str | None = None) -> Pulled:
    """Add the run in the bundle at `source` (a file path or a URL) to the home, as `rlrun import`
    adds a run folder: every file checked against the bundle's manifest (and the manifest against
    `expected_sha256` when given), every snapshot against its own; the run registered last. A run
    the home already has (its id, or its name on another run) is refused: nothing is written.

    Args:
        source: The bundle: a file path or a URL an installed fsspec library reaches.
        home: The runs home: a folder or an object-store URL (None: $RLRUN_HOME, else ./runs).
        expected_sha256: The manifest's sha256 as `push` reported it: a bundle that differs is
            refused.

    Returns:
        The run as the registry now lists it, and the bundle's sha256.
    """
    from rlrun.home.maintenance import check_imports, import_runs

    root = paths.resolve_home(home)
    storage.reach(root)
    with _opened(source) as stream:
        try:
            tar = tarfile.open(fileobj=stream, mode="r|")  # noqa: SIM115 (closed by the `with tar` below)
        except tarfile.TarError:
            raise BadInput(f"{source} is not an rlrun bundle (not a tar file); push one with `rlrun push`") from None
        with tar:
            members = _members(tar, source)
            manifest, digest = _read_manifest(tar, members, source, expected_sha256)
            run_id = manifest["run"]["id"]
            with Registry.open(root, create=False) as registry:
                if run_id in registry.run_ids() or paths.run_dir(root, run_id).exists():
                    raise BadInput(
                        f"run {run_id} is already in {paths.home_address(root)}; nothing pulled"
                        f" (`rlrun show {run_id}`; to keep both, pull into another --home)"
                    )
            made = [folder for folder in (root, *root.parents) if not folder.exists()]
            root.mkdir(parents=True, exist_ok=True)
            # Beside the run folders, so that moving the run in is a rename; outside a store's working
            # copy, whose run folders are read from the store (the files are not there yet).
            staging = (root if storage.mirror_of(root) is None else root.parent) / f"{_STAGING}{uuid.uuid4().hex[:12]}"
            try:
                _extract(tar, members, manifest, staging, source)
                with Registry.open(root, create=False) as registry:  # the checks `rlrun import` makes
                    checked = check_imports(registry, [staging / run_id])
                with Registry.open(root) as registry:
                    try:
                        (run,) = import_runs(registry, checked, move=True)
                    except BaseException:  # moved in, never registered: it goes, as the staging folder does
                        if run_id not in registry.run_ids():
                            shutil.rmtree(paths.run_dir(root, run_id), ignore_errors=True)
                        raise
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                for folder in made:  # a home this pull made, empty again: nothing written
                    with contextlib.suppress(OSError):
                        folder.rmdir()
                raise
            shutil.rmtree(staging, ignore_errors=True)
    return Pulled(run, source, digest)


@contextmanager
def _opened(source: str) -> Iterator[IO[bytes]]:
    """The bundle's bytes, read from the start once (a stream: a large bundle is never held whole)."""
    if storage.is_url(source):
        fs, key = _filesystem(source, "pull")
        with _talking_to(source, "pull"):
            try:
                stream = fs.open(key, "rb")
            except FileNotFoundError:
                raise BadInput(f"{source}: no such bundle; check the URL (`rlrun push` prints it)") from None
        with _talking_to(source, "pull", answers=False), stream:  # the download itself, bundle read
            yield stream
        return
    path = Path(source.removeprefix("file://")).expanduser()
    if not path.is_file():
        raise BadInput(f"{source}: no such bundle file; check the path (`rlrun push` prints it)")
    with open(path, "rb") as file:
        yield file


def _members(tar: tarfile.TarFile, source: str) -> Iterator[tarfile.TarInfo]:
    """The tar's members in order, each a plain file with a safe name; anything else refuses the bundle."""
    try:
        for member in tar:
            if not member.isreg():
                raise BadInput(
                    f"{source}: the bundle holds {member.name!r}, which is not a plain file (a link or a"
                    " device); refused, nothing pulled"
                )
            _check_name(member.name, source)
            yield member
    except (tarfile.TarError, EOFError) as error:
        raise _damaged(source, f"unreadable tar: {error}") from None


def _check_name(name: str, source: str) -> None:
    parts = name.split("/")
    if name.startswith("/") or "\\" in name or any(p in ("", ".", "..") for p in parts) or posixpath.isabs(name):
        raise BadInput(f"{source}: the bundle names a file {name!r} outside its run folder; refused, nothing pulled")


def _read_manifest(
    tar: tarfile.TarFile, members: Iterator[tarfile.TarInfo], source: str, expected: str | None
) -> tuple[dict[str, Any], str]:
    """The manifest and its sha256, checked against the hash stored beside it (and `expected`)."""
    manifest_member = next(members, None)
    if manifest_member is None or manifest_member.name != MANIFEST or manifest_member.size > _MANIFEST_LIMIT:
        raise BadInput(f"{source} is not an rlrun bundle (no {MANIFEST} first); push one with `rlrun push`")
    raw = _read_member(tar, manifest_member, source)
    hash_member = next(members, None)
    if hash_member is None or hash_member.name != MANIFEST_HASH or hash_member.size > 1024:
        raise _damaged(source, f"no {MANIFEST_HASH} after the manifest")
    digest = hashlib.sha256(raw).hexdigest()
    if _read_member(tar, hash_member, source).decode("ascii", "replace").strip() != digest:
        raise _damaged(source, "its manifest does not match its sha256")
    if expected is not None and digest != expected.strip().lower():
        raise BadInput(
            f"{source}: the bundle's sha256 is {digest}, not the {expected} asked for; refused, nothing pulled"
        )
    try:
        manifest = json.loads(raw)
        run_id = manifest["run"]["id"]
        names = [entry["name"] for entry in manifest["files"]] + [name for name, _ in manifest["links"]]
    except (ValueError, KeyError, TypeError) as error:
        raise _damaged(source, f"its manifest cannot be read ({type(error).__name__}: {error})") from None
    if manifest.get("kind") != KIND or manifest.get("format") != FORMAT:
        raise BadInput(
            f"{source}: a bundle of format {manifest.get('format')!r}; this rlrun reads format {FORMAT}:"
            " use a newer rlrun"
        )
    if len(set(names)) != len(names):
        raise _damaged(source, "its manifest lists a file twice")
    for name in names:
        _check_name(name, source)
        if not isinstance(run_id, str) or name.split("/")[0] != run_id or name.count("/") < 1:
            raise _damaged(source, f"its manifest lists {name!r}, outside run folder {run_id}")
    return manifest, digest


def _read_member(tar: tarfile.TarFile, member: tarfile.TarInfo, source: str) -> bytes:
    data = tar.extractfile(member)
    assert data is not None  # a regular file (checked)
    try:
        raw = data.read()
    except (tarfile.TarError, EOFError, OSError) as error:
        raise _damaged(source, f"unreadable tar: {error}") from None
    if len(raw) != member.size:
        raise _damaged(source, f"{member.name} is cut short")
    return raw


def _extract(
    tar: tarfile.TarFile, members: Iterator[tarfile.TarInfo], manifest: dict[str, Any], staging: Path, source: str
) -> None:
    """Write every file the manifest lists into `staging`, each checked as it is written: its
    size and sha256; then the links. A member the manifest does not list, twice, or missing is
    refused."""
    expected = {entry["name"]: entry for entry in manifest["files"]}
    done: set[str] = set()
    for member in members:
        entry = expected.get(member.name)
        if entry is None or member.name in done:
            raise _damaged(source, f"it holds {member.name!r}, which its manifest does not list (once)")
        if member.size != entry["size"]:
            raise _damaged(source, f"{member.name} is {member.size:,} bytes, its manifest says {entry['size']:,}")
        target = staging / member.name
        target.parent.mkdir(parents=True, exist_ok=True)
        data = tar.extractfile(member)
        assert data is not None
        digest, size = hashlib.sha256(), 0
        try:
            with open(target, "wb") as out:
                while chunk := data.read(_CHUNK):
                    digest.update(chunk)
                    size += out.write(chunk)
        except (tarfile.TarError, EOFError) as error:
            raise _damaged(source, f"unreadable tar: {error}") from None
        if size != entry["size"] or digest.hexdigest() != entry["sha256"]:
            raise _damaged(source, f"{member.name} does not match its sha256 (altered or cut short)")
        os.utime(target, (entry["mtime"], entry["mtime"]))
        done.add(member.name)
    missing = sorted(expected.keys() - done)
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise _damaged(source, f"it ends before {missing[0]}{more}, which its manifest lists: cut short")
    for name, original in manifest["links"]:
        if original not in done:
            raise _damaged(source, f"{name} links to {original!r}, which it does not hold")
        target = staging / name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            target.hardlink_to(staging / original)
        except OSError:  # a file system without hard links: a copy holds the same bytes
            shutil.copy2(staging / original, target)


def _damaged(source: str, why: str) -> BadInput:
    return BadInput(
        f"{source}: the bundle is damaged or was altered ({why}); refused, nothing pulled — push it again from its home"
    )


# ---------------------------------------------------------------------------------------------
# Object storage


def _filesystem(url: str, command: str) -> tuple[Any, str]:
    """The fsspec file system and key of a bundle's URL, as a home's (`rlrun.storage`: the same
    libraries, extras and settings); `hf://` is huggingface_hub's, where it is installed."""
    try:
        return storage.filesystem(url, named=f"rlrun {command}: {url}")
    except BadInput as error:
        hint = "; install huggingface_hub for hf://" if url.lower().startswith("hf://") else ""
        raise BadInput(f"{error}{hint}") from None


@contextmanager
def _talking_to(url: str, command: str, *, answers: bool = True) -> Iterator[None]:
    """A store that does not answer is exit 3 (try again later); with `answers`, one that answers
    no (no such bucket, access denied: an OSError from fsspec's libraries) is exit 2."""
    try:
        yield
    except (BadInput, StoreUnreachable):
        raise
    except Exception as error:
        silent = storage.no_answer(error)
        if not silent and not (answers and isinstance(error, OSError)):
            raise
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        kind = StoreUnreachable if silent else BadInput
        raise kind(
            f"rlrun {command} {url}: the store cannot be reached ({first}); check the bucket, the"
            f" credentials and {storage.endpoint_setting(url)}"
        ) from None
