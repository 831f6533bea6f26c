"""Where a runs home's files are kept: on this machine's disk, or in object storage.

A home given as a URL (`s3://bucket/prefix`, `gs://…`, `az://…`, any URL fsspec handles) is kept in
object storage and worked on through a *working copy*: a local folder that mirrors the home's layout
(`working_copy`). Every module keeps reading and writing plain paths in the working copy, as in a
local home; the few moments that make a file durable or need one that another machine wrote ask
`mirror_of(path)` for the home's `Mirror` and push or pull through it. A local home has no mirror,
so its code path is exactly what it was (one dictionary lookup more).

What goes to the store, and when, is the owner's business: the snapshot format
(`rlrun.snapshot.remote`: objects first, manifest last, segments shared by reference), the metrics
log (uploaded with each snapshot), the run manifest (with each registry change). This module only
moves bytes and names objects.

fsspec was chosen over obstore and boto3: against an S3 server on loopback all three upload at the
server's speed (tests/benchmarks/object_store_snapshot.py), and fsspec finds credentials the cloud's
own way (botocore's chain for S3 — environment, profiles, SSO, instance roles — and
`AWS_ENDPOINT_URL` for MinIO and other S3-compatible stores; gcsfs and adlfs likewise, their own
settings named by `endpoint_setting`), handles gs:// and az:// with the same calls, and is kept by
the Dask project. The core never imports it: only a URL home does.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rlrun.errors import BadInput, StoreUnreachable, install_hint

CACHE_ENV = "RLRUN_CACHE"
"""Where working copies of URL homes live (default ~/.cache/rlrun)."""
_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://(.*)$")
_EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "az": "azure", "abfs": "azure", "abfss": "azure"}
_ENDPOINTS = {"s3": "AWS_ENDPOINT_URL (an S3-compatible store other than AWS)",
              "gcs": "STORAGE_EMULATOR_HOST (a GCS emulator)",
              "azure": "AZURE_STORAGE_CONNECTION_STRING (or AZURE_STORAGE_ACCOUNT_NAME and its key)"}
"""Per extra, the setting of the store's own library that names where its server is, when it is not
the cloud's (the endpoint rlrun never takes as an option: each library reads its own)."""
_MIRRORS: dict[Path, Mirror] = {}


def is_url(text: str | os.PathLike[str]) -> bool:
    """A home in object storage (`file://` is a plain folder, not a store)."""
    found = _URL.match(str(text))
    return found is not None and found.group(1).lower() != "file"


def working_copy(url: str) -> Path:
    """The local folder that mirrors the home at `url` on this machine."""
    scheme, rest = _URL.match(url).groups()  # type: ignore[union-attr]
    parts = [p for p in rest.split("/") if p not in ("", ".", "..")]
    base = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "rlrun").expanduser().absolute()
    return base.joinpath("homes", scheme.lower(), *parts)


def open_home(url: str, local: Path | None = None) -> Path:
    """The working copy of the home at `url` (`working_copy`, or `local` when given: a test's
    folder), its mirror registered for this process; BadInput (nothing written) when no installed
    library handles the URL. Nothing is contacted here."""
    url = url.rstrip("/")
    known = next((m.local for m in _MIRRORS.values() if m.url == url), None)
    if known is not None and local is None:
        return known
    local = local or working_copy(url)
    if local not in _MIRRORS:
        _MIRRORS[local] = Mirror(url, local, _filesystem(url))
    return local


def reach(home: Path) -> None:
    """Contact the store of a home in object storage (its bucket listed) before a command writes
    anything for it, the registry included: BadInput naming the problem and what to check when it
    cannot be reached (`Mirror.check`). A local home: nothing to do."""
    mirror = mirror_of(home)
    if mirror is not None:
        mirror.check()


def mirror_of(path: Path) -> Mirror | None:
    """The mirror of the URL home whose working copy holds `path`; None in a local home."""
    if not _MIRRORS:
        return None
    for parent in (path, *path.parents):
        if parent in _MIRRORS:
            return _MIRRORS[parent]
    return None


def address(home: Path) -> str:
    """How another process (another machine) names this home: its URL, or its folder."""
    mirror = _MIRRORS.get(home)
    return mirror.url if mirror is not None else str(home)


def publish(path: Path) -> None:
    """Copy a small file just written (atomically) in a URL home's working copy to its store, as
    one object: a PUT replaces an object whole, so a reader finds the old one or the new one, never
    a torn one. Nothing in a local home, where the atomic write was the whole job.

    The store keeps whichever PUT came last, so writers of one file must take turns around the
    write and the PUT together: the manifests are written inside the registry transaction that
    holds their run or search locked, and a session's files inside its fenced transaction
    (`Registry.fenced`), so a stale writer's PUT can never land after a newer one's."""
    mirror = mirror_of(path)
    if mirror is not None:
        mirror.put(path)


def published(path: Path) -> bytes | None:
    """The store's copy of a file of a URL home (None when it has none); the working copy's file in
    a local home (None when there is none)."""
    mirror = mirror_of(path)
    if mirror is not None:
        return mirror.get_bytes(mirror.key(path))
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def pull(path: Path) -> bool:
    """Replace the working copy's file with the store's (atomically); False, and nothing written,
    when the store has none. A local home's file is already the home's: True when it exists."""
    mirror = mirror_of(path)
    if mirror is None:
        return path.is_file()
    data = mirror.get_bytes(mirror.key(path))
    if data is None:
        return False
    from rlrun.fsutil import atomic_write

    atomic_write(path, data)
    return True


def read_url(url: str) -> bytes:
    """One object's bytes, named by its full URL (a probe on a cluster node)."""
    fs, key = _filesystem(url)
    data: bytes = fs.cat_file(key)
    return data


def endpoint_setting(url: str) -> str:
    """What to check besides the bucket and the credentials when the store at `url` is not reached:
    the setting its library reads for a server that is not the cloud's own."""
    scheme = _URL.match(url).group(1).lower()  # type: ignore[union-attr]
    return _ENDPOINTS.get(_EXTRAS.get(scheme, ""), f"the settings of fsspec's library for {scheme}://")


def _filesystem(url: str) -> tuple[Any, str]:
    scheme = _URL.match(url).group(1).lower()  # type: ignore[union-attr]
    extra = _EXTRAS.get(scheme)
    try:
        import fsspec
        from fsspec.core import url_to_fs

        fsspec.get_filesystem_class(scheme)
        # No listings cache: another process (a resume, `rlrun gc`) may change the store at any time.
        fs, root = url_to_fs(url, use_listings_cache=False, skip_instance_cache=True)
    except ImportError:
        fix = f"install it: {install_hint(extra)}" if extra else "install the fsspec package that handles it"
        raise BadInput(f"--home {url}: the library for {scheme}:// is not installed; {fix}") from None
    except ValueError as error:
        raise BadInput(f"--home {url}: {scheme}:// is not a storage this rlrun knows ({error}); give s3://, gs://"
                       " or az://") from None
    return fs, root.rstrip("/")


class Mirror:
    """A URL home: its store (`fs`, the home at `root` in it) and its working copy (`local`). Paths
    given to it are in the working copy; the object of a path is the same path under `root`."""

    def __init__(self, url: str, local: Path, opened: tuple[Any, str]) -> None:
        self.url, self.local = url, local
        self.fs, self.root = opened

    def key(self, path: Path) -> str:
        return f"{self.root}/{path.relative_to(self.local).as_posix()}".rstrip("/")

    def path(self, key: str) -> Path:
        return self.local / key.removeprefix(self.root).lstrip("/")

    def put(self, path: Path, key: str | None = None) -> None:
        """Upload one file (multipart for large ones)."""
        self.fs.put_file(str(path), key or self.key(path))

    def put_many(self, pairs: list[tuple[Path, str]]) -> None:
        """Upload files at once (the library's own bulk upload: concurrent requests)."""
        if pairs:
            self.fs.put([str(path) for path, _ in pairs], [key for _, key in pairs])

    def get_many(self, pairs: list[tuple[str, Path]]) -> None:
        """Download objects at once, each to its path (folders made)."""
        for _, path in pairs:
            path.parent.mkdir(parents=True, exist_ok=True)
        if pairs:
            self.fs.get([key for key, _ in pairs], [str(path) for _, path in pairs])

    def put_bytes(self, key: str, data: bytes) -> None:
        self.fs.pipe_file(key, data)

    def get(self, key: str, path: Path) -> None:
        """Download one object to `path` (its folder made)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fs.get_file(key, str(path))

    def get_bytes(self, key: str) -> bytes | None:
        try:
            data: bytes = self.fs.cat_file(key)
        except FileNotFoundError:
            return None
        return data

    def modified(self, key: str) -> float:
        """When the object was last written (seconds since the epoch, the store's clock)."""
        return float(self.fs.modified(key).timestamp())

    def matching(self, pattern: str) -> list[str]:
        """The objects whose keys match a glob under the home (`*/run.json`), sorted."""
        return sorted(self.fs.glob(f"{self.root}/{pattern}"))

    def exists(self, key: str) -> bool:
        return bool(self.fs.exists(key))

    def keys(self, prefix: str) -> list[str]:
        """Every object under `prefix` (a folder's key), sorted; none when there is none."""
        try:
            return sorted(self.fs.find(prefix))
        except FileNotFoundError:
            return []

    def sizes(self, prefix: str) -> dict[str, int]:
        try:
            found = self.fs.find(prefix, detail=True)
        except FileNotFoundError:
            return {}
        return {key: int(info.get("size") or 0) for key, info in found.items()}

    def delete(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        if keys:
            self.fs.rm(keys)

    def delete_tree(self, path: Path) -> None:
        """Delete every object under the folder `path` names."""
        self.delete(self.keys(self.key(path)))

    def check(self) -> None:
        """Reach the store (list the home): BadInput naming the problem when it cannot be."""
        try:
            self.fs.ls(self.root.split("/")[0])
        except Exception as error:  # any library's failure: one line, exit 3 (no answer) or 2 (an answer: no)
            first = str(error).splitlines()[0] if str(error) else type(error).__name__
            kind = StoreUnreachable if _no_answer(error) else BadInput
            raise kind(f"--home {self.url} cannot be reached ({first}); check the bucket, the credentials and"
                       f" {endpoint_setting(self.url)}") from None


def _no_answer(error: BaseException) -> bool:
    """Whether the store did not answer at all (refused, timed out, unknown host), through the
    chain of causes, whichever library raised it (botocore, aiohttp, google-auth, azure-core): as
    opposed to an answer that says no (no such bucket, access denied)."""
    seen: BaseException | None = error
    while seen is not None:
        name = type(seen).__name__
        if isinstance(seen, ConnectionError | TimeoutError) or "Connect" in name or "Timeout" in name:
            return True
        seen = seen.__cause__ or seen.__context__
    return False
