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

A store that does not answer is never waited on for long by a reader: each request gives up after
`TIMEOUT_ENV` seconds (10 by default), and a read that cannot be answered is `StoreUnreachable`
(exit 3) in one line. A training session's writes go through its background uploader
(`rlrun.session.uploads`), which retries them (`patiently`) while training goes on; the small files
the registry publishes while a session runs (run.json) are put by a background publisher there
(`publishing_in_background`), so no registry transaction waits on the network.

fsspec was chosen over obstore and boto3: against an S3 server on loopback all three upload at the
server's speed (tests/benchmarks/object_store_snapshot.py), and fsspec finds credentials the cloud's
own way (botocore's chain for S3 — environment, profiles, SSO, instance roles — and
`AWS_ENDPOINT_URL` for MinIO and other S3-compatible stores; gcsfs and adlfs likewise, their own
settings named by `endpoint_setting`), handles gs:// and az:// with the same calls, and is kept by
the Dask project. The core never imports it: only a URL home does.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from rlrun.errors import BadInput, StoreUnreachable, install_hint

CACHE_ENV = "RLRUN_CACHE"
"""Where working copies of URL homes live (default ~/.cache/rlrun)."""
_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://(.*)$")
_EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "az": "azure", "abfs": "azure", "abfss": "azure"}
_ENDPOINTS = {
    "s3": "AWS_ENDPOINT_URL (an S3-compatible store other than AWS)",
    "gcs": "STORAGE_EMULATOR_HOST (a GCS emulator)",
    "azure": "AZURE_STORAGE_CONNECTION_STRING (or AZURE_STORAGE_ACCOUNT_NAME and its key)",
}
"""Per extra, the setting of the store's own library that names where its server is, when it is not
the cloud's (the endpoint rlrun never takes as an option: each library reads its own)."""
_MIRRORS: dict[Path, Mirror] = {}
TIMEOUT_ENV = "RLRUN_STORE_TIMEOUT"
"""Seconds a request to a store may go unanswered before it is given up (default 10): a reader
then says the store does not answer; a session's uploader tries again (`patiently`)."""
PATIENCE_ENV = "RLRUN_STORE_PATIENCE"
"""Seconds a session's uploader keeps retrying a store that does not answer before the session
fails (default 3600): training goes on meanwhile, until its queue of snapshots is full."""
T = TypeVar("T")


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
        _MIRRORS[local] = Mirror(url, local, filesystem(url))
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

    The store keeps whichever PUT came last, so the PUTs of one home's files take turns on this
    machine (`_turn`, a lock on a file beside the working copy), and each PUT reads the file as it
    is then: writers write the file inside the registry transaction that orders them (the run's or
    the search's row locked, a session's lease), so the last PUT carries the newest file. Inside
    `publishing_in_background` (a training session) the PUT is left to a background thread, so
    the registry transaction that wrote the file never waits for the store."""
    mirror = mirror_of(path)
    if mirror is None:
        return
    held: dict[Path, Mirror] | None = getattr(_HELD, "files", None)
    if held is not None:
        held[path] = mirror
        return
    _put_now(mirror, path)


def _put_now(mirror: Mirror, path: Path) -> None:
    """`publish`'s PUT, once no transaction holds it back: handed to the background publisher if
    one is running, else made here, in this machine's turn."""
    publisher = _PUBLISHER
    if publisher is not None:
        publisher.add(mirror, path)
        return
    with _turn(mirror):
        mirror.put(path)


_HELD = threading.local()
"""The files `publish` was given inside this thread's `held_until_committed` block."""


@contextmanager
def held_until_committed() -> Iterator[None]:
    """`publish` inside holds its files back and puts them once the block ends without an error:
    the registry's write transactions run in one, so a transaction that rewrites a manifest commits
    (and frees the registry's lock) before its PUT, and no transaction waits on a store (`rlrun
    stop` asked while the store hangs holds no session up). A block that fails puts nothing. The
    outermost of nested blocks puts."""
    if getattr(_HELD, "files", None) is not None:
        yield
        return
    held: dict[Path, Mirror] = {}
    _HELD.files = held
    try:
        yield
    finally:
        _HELD.files = None
    for path, mirror in held.items():
        _put_now(mirror, path)


@contextmanager
def publishing_in_background() -> Iterator[None]:
    """While inside, `publish` puts files from a background thread (the newest bytes of each file,
    once); on the way out every file handed to it is put (`patiently`) before this returns."""
    global _PUBLISHER
    if _PUBLISHER is not None:  # nested (a session run in its launcher's process): the outer one drains
        yield
        return
    publisher = _PUBLISHER = _Publisher()
    try:
        yield
    finally:
        _PUBLISHER = None
        publisher.drain()


class _Publisher:
    """One thread that puts the files `publish` was given, each in its turn, oldest first."""

    def __init__(self) -> None:
        self._pending: dict[Path, Mirror] = {}
        self._ready = threading.Condition()
        self._closing = False
        self._putting = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, name="rlrun-publish", daemon=True)
        self._thread.start()

    def add(self, mirror: Mirror, path: Path) -> None:
        with self._ready:
            self._pending[path] = mirror
            self._ready.notify_all()

    def settle(self) -> None:
        """Wait until every file handed over so far is put (the thread goes on; a test's hold)."""
        with self._ready:
            while self._pending or self._putting:
                self._ready.wait()

    def drain(self) -> None:
        """Wait until every file handed over is put; raise what stopped one."""
        with self._ready:
            self._closing = True
            self._ready.notify_all()
        self._thread.join()
        if self._error is not None:
            raise self._error

    def _work(self) -> None:
        while True:
            with self._ready:
                while not self._pending and not self._closing:
                    self._ready.wait()
                if not self._pending:
                    return
                path = next(iter(self._pending))
                mirror = self._pending.pop(path)
                self._putting = True
            try:
                _put_in_turn(mirror, path)
            except BaseException as error:  # said by `drain`, in the thread that ends the session
                self._error = self._error or error
            finally:
                with self._ready:
                    self._putting = False
                    self._ready.notify_all()


_PUBLISHER: _Publisher | None = None


def settled() -> None:
    """Wait until the background publisher, if one runs, has put every file handed to it so far."""
    publisher = _PUBLISHER
    if publisher is not None:
        publisher.settle()


def _put_in_turn(mirror: Mirror, path: Path) -> None:
    def put() -> None:
        with _turn(mirror):  # taken for one try at a time: a launcher's own `publish` waits one request at most
            if path.exists():  # else a run removed meanwhile
                mirror.put(path)

    patiently(put)


@contextmanager
def _turn(mirror: Mirror) -> Iterator[None]:
    """This machine's processes put a home's small files one at a time (a lock on a file beside
    its working copy): each reads the file when its turn comes, so the newest bytes land last."""
    import fcntl

    lock = mirror.local.parent / f".{mirror.local.name}.publishing"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)


def patiently(call: Callable[[], T], *, patience: float | None = None) -> T:
    """`call` (a write to a store), tried again while the store does not answer
    (`StoreUnreachable`), for up to `PATIENCE_ENV` seconds; the last error is raised then. Any
    other error (an answer that says no) is raised at once."""
    limit = patience if patience is not None else float(os.environ.get(PATIENCE_ENV) or 3600)
    started, pause = time.monotonic(), 0.5
    while True:
        try:
            return call()
        except StoreUnreachable:
            if time.monotonic() - started >= limit:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 5.0)


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
    fs, key = filesystem(url)
    data: bytes = fs.cat_file(key)
    return data


def endpoint_setting(url: str) -> str:
    """What to check besides the bucket and the credentials when the store at `url` is not reached:
    the setting its library reads for a server that is not the cloud's own."""
    scheme = _URL.match(url).group(1).lower()  # type: ignore[union-attr]
    return _ENDPOINTS.get(_EXTRAS.get(scheme, ""), f"the settings of fsspec's library for {scheme}://")


def _extra_of(url: str) -> str | None:
    """The extra that installs the library of `url`'s store (None: a scheme rlrun names none for)."""
    return _EXTRAS.get(_URL.match(url).group(1).lower())  # type: ignore[union-attr]


def filesystem(url: str, named: str | None = None) -> tuple[Any, str]:
    """The fsspec file system of `url` and its key, with a home's libraries, extras and settings
    (timeouts, retries, their own random stream); a missing library or an unknown scheme is
    BadInput naming `named` (default: `--home URL`)."""
    named = named or f"--home {url}"
    scheme = _URL.match(url).group(1).lower()  # type: ignore[union-attr]
    extra = _extra_of(url)
    try:
        import fsspec
        from fsspec.core import url_to_fs

        fsspec.get_filesystem_class(scheme)
        # No listings cache: another process (a resume, `rlrun gc`) may change the store at any time.
        fs, root = url_to_fs(url, use_listings_cache=False, skip_instance_cache=True, **_timeouts(extra))
        if extra == "s3":
            fs.retries = 1  # s3fs's own retries on top of botocore's (5 by default): botocore's 2 are enough
        _own_random_stream()
    except ImportError:
        fix = f"install it: {install_hint(extra)}" if extra else "install the fsspec package that handles it"
        raise BadInput(f"{named}: the library for {scheme}:// is not installed; {fix}") from None
    except ValueError as error:
        raise BadInput(
            f"{named}: {scheme}:// is not a storage this rlrun knows ({error}); give s3://, gs:// or az://"
        ) from None
    return fs, root.rstrip("/")


_LIBRARIES_DRAWING_RANDOM = (
    "botocore.retryhandler",
    "botocore.utils",
    "aiohttp.connector",
    "gcsfs.retry",
    "google.auth._exponential_backoff",
    "azure.core.pipeline.policies._authentication",
    "azure.core.pipeline.policies._authentication_async",
)
"""Modules of the stores' libraries that draw from Python's global `random` stream when called (retry
jitter: botocore's, gcsfs's and google-auth's; the order waiting connections are served in; the
jitter of azure-core's token refresh), imported here so that they are given their own stream before
they first draw. botocore's "standard" retry mode binds the global stream when it is imported, so S3
homes use its "legacy" mode (`_timeouts`)."""
_STORE_PACKAGES = ("aiobotocore", "aiohttp", "adlfs", "azure", "botocore", "gcsfs", "google", "msal", "s3fs")
"""The top-level packages of the stores' libraries: every module of theirs that holds the global
stream (`import random`) or one of its methods (`from random import random`) is given its own."""
_GIVEN_THEIR_OWN: set[str] = set()
"""The modules `_own_random_stream` has looked through: each file system opened looks only at new ones."""


def _own_random_stream() -> None:
    """Give the stores' libraries a `random` stream of their own. A training's snapshots record
    Python's global stream, and these libraries draw from it on background threads (the session's
    uploader) at moments the network decides: a retry during a store's outage would change what a
    snapshot holds, and a resumed run would no longer be the uninterrupted one bit for bit. (gcsfs's
    batched delete imports `random` inside the function, out of reach: `Mirror.delete` deletes one
    object at a time in GCS.)"""
    import importlib
    import random
    import sys
    import types

    for name in _LIBRARIES_DRAWING_RANDOM:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
    own, shared = random.Random(), getattr(random.random, "__self__")  # noqa: B009  # the global stream

    def rebound(value: Any) -> Any:  # a method of the global stream: the same method of `own`
        return getattr(own, value.__name__) if getattr(value, "__self__", None) is shared else value

    # The module's names (its classes too: azure's policies make a `random.Random()` of their own),
    # its functions drawing from `own`.
    stream = types.ModuleType("random")
    stream.__dict__.update({key: rebound(value) for key, value in vars(random).items()})
    for name, module in list(sys.modules.items()):
        if name in _GIVEN_THEIR_OWN or name.partition(".")[0] not in _STORE_PACKAGES:
            continue
        _GIVEN_THEIR_OWN.add(name)
        if not isinstance(module, types.ModuleType):
            continue
        for attribute, value in list(vars(module).items()):
            if value is random:
                setattr(module, attribute, stream)
            elif value is not (mine := rebound(value)):  # `from random import random`
                setattr(module, attribute, mine)


def _timeouts(extra: str | None) -> dict[str, Any]:
    """How long a request to the store may go unanswered (`TIMEOUT_ENV`), each library's way; a
    request that is not answered is tried twice in all, then given up (`Mirror` says so)."""
    seconds = float(os.environ.get(TIMEOUT_ENV) or 10)
    # GCS keeps aiohttp's own limits (5 minutes a request; gcsfs tries 6 times, 1 to 16 s apart).
    # gcsfs's requests_timeout bounds a whole request, body included: it cut a large snapshot's
    # upload at every try on a loaded machine (as it would on a slow link). Bounding the reads only,
    # gcsfs sends again a chunk of a resumable upload that the server had stored, whose range the
    # server then refuses: an answer, so the upload fails instead of waiting.
    if extra == "s3":
        return {
            "config_kwargs": {
                "connect_timeout": seconds,
                "read_timeout": seconds,
                "retries": {"mode": "legacy", "max_attempts": 2},
            }
        }
    return {}


def _answered(method: Callable[..., T]) -> Callable[..., T]:
    """A `Mirror` method whose store did not answer raises `StoreUnreachable`, one line naming it."""
    import functools

    @functools.wraps(method)
    def call(self: Mirror, *args: Any, **kwargs: Any) -> T:
        try:
            return method(self, *args, **kwargs)
        except Exception as error:
            if not no_answer(error):
                raise
            first = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise StoreUnreachable(
                f"the store of {self.url} does not answer ({first}); try again once it is up,"
                f" and check {endpoint_setting(self.url)}"
            ) from None

    return call


class Mirror:
    """A URL home: its store (`fs`, the home at `root` in it) and its working copy (`local`). Paths
    given to it are in the working copy; the object of a path is the same path under `root`."""

    def __init__(self, url: str, local: Path, opened: tuple[Any, str]) -> None:
        self.url, self.local = url, local
        self.fs, self.root = opened
        self.one_by_one = _extra_of(url) == "gcs"
        """Delete one object at a time: gcsfs's batched delete retries with jitter from Python's
        global stream, which it imports inside the function (`_own_random_stream` cannot reach it)."""

    def key(self, path: Path) -> str:
        return f"{self.root}/{path.relative_to(self.local).as_posix()}".rstrip("/")

    def path(self, key: str) -> Path:
        return self.local / key.removeprefix(self.root).lstrip("/")

    @_answered
    def put(self, path: Path, key: str | None = None) -> None:
        """Upload one file (multipart for large ones)."""
        self.fs.put_file(str(path), key or self.key(path))

    @_answered
    def put_many(self, pairs: list[tuple[Path, str]]) -> None:
        """Upload files at once (the library's own bulk upload: concurrent requests)."""
        if pairs:
            self.fs.put([str(path) for path, _ in pairs], [key for _, key in pairs])

    @_answered
    def get_many(self, pairs: list[tuple[str, Path]]) -> None:
        """Download objects at once, each to its path (folders made)."""
        for _, path in pairs:
            path.parent.mkdir(parents=True, exist_ok=True)
        if pairs:
            self.fs.get([key for key, _ in pairs], [str(path) for _, path in pairs])

    @_answered
    def put_bytes(self, key: str, data: bytes) -> None:
        self.fs.pipe_file(key, data)

    @_answered
    def get(self, key: str, path: Path) -> None:
        """Download one object to `path` (its folder made)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fs.get_file(key, str(path))

    @_answered
    def get_bytes(self, key: str) -> bytes | None:
        try:
            data: bytes = self.fs.cat_file(key)
        except FileNotFoundError:
            return None
        return data

    @_answered
    def modified(self, key: str) -> float:
        """When the object was last written (seconds since the epoch, the store's clock)."""
        return float(self.fs.modified(key).timestamp())

    @_answered
    def matching(self, pattern: str) -> list[str]:
        """The objects whose keys match a glob under the home (`*/run.json`), sorted."""
        return sorted(self.fs.glob(f"{self.root}/{pattern}"))

    @_answered
    def exists(self, key: str) -> bool:
        return bool(self.fs.exists(key))

    @_answered
    def keys(self, prefix: str) -> list[str]:
        """Every object under `prefix` (a folder's key), sorted; none when there is none."""
        try:
            return sorted(self.fs.find(prefix))
        except FileNotFoundError:
            return []

    @_answered
    def sizes(self, prefix: str) -> dict[str, int]:
        try:
            found = self.fs.find(prefix, detail=True)
        except FileNotFoundError:
            return {}
        return {key: int(info.get("size") or 0) for key, info in found.items()}

    @_answered
    def delete(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        if keys and self.one_by_one:
            for key in keys:
                with contextlib.suppress(FileNotFoundError):  # as a batch's delete ignores one gone already
                    self.fs.rm_file(key)
        elif keys:
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
            kind = StoreUnreachable if no_answer(error) else BadInput
            raise kind(
                f"--home {self.url} cannot be reached ({first}); check the bucket, the credentials and"
                f" {endpoint_setting(self.url)}"
            ) from None


def no_answer(error: BaseException) -> bool:
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
