"""The pre-flight, before anything is written: the cluster's address answers (`check_reachable`),
the user's env code is found to ship with the job (`shipped_modules`), and every node that may
run a session sees the runs home (and a SQLite registry) and imports the user's modules
(`check_storage`, its probe `find_markers` on each node); bad input naming the node, the path or
the module otherwise."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import site
import socket
import sysconfig
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rlrun import storage
from rlrun.errors import BadInput, ClusterUnreachable
from rlrun.registry import sqlite_file
from rlrun.spec.user_imports import WHERE

PROBE_SECONDS = 60.0


def check_reachable(address: str) -> None:
    """A HOST:PORT that refuses connections is bad input at once (Ray itself keeps trying)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=5).close()
    except OSError as error:
        raise ClusterUnreachable(
            f"no Ray cluster at --ray {address}: {error.strerror or error}; start one with"
            " `ray start --head` or give its address (--ray HOST:PORT)"
        ) from None


def shipped_modules(modules: Sequence[str]) -> list[str]:
    """The local paths Ray ships to the workers for the user's `modules` (dotted names): the folder
    of each one's top-level package, or its file, unless it is installed here (in site-packages or
    the standard library), as it must then be on every node. BadInput when one cannot be shipped."""
    paths: list[str] = []
    for module in modules:
        top = module.split(".")[0]
        found = importlib.util.find_spec(top)
        if found is None:
            raise BadInput(
                f"{top} (named by the spec) cannot be found on this machine to ship to the Ray workers; {WHERE}"
            )
        locations = list(found.submodule_search_locations or [])
        if len(locations) > 1:
            raise BadInput(
                f"{top} is a namespace package spread over {len(locations)} folders, which Ray cannot ship"
                " (py_modules takes one folder); give it an __init__.py, or install it on every node"
            )
        path = locations[0] if locations else found.origin
        if path is None or not os.path.exists(path):
            continue  # built in or frozen: part of Python itself
        if not _installed(Path(path)) and path not in paths:
            paths.append(path)
    return paths


def _installed(path: Path) -> bool:
    """Whether `path` lies in this Python's site-packages or standard library."""
    roots = [
        *site.getsitepackages(),
        site.getusersitepackages(),
        *(sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")),
    ]
    resolved = path.resolve()
    return any(resolved.is_relative_to(Path(root).resolve()) for root in roots if root)


def check_storage(
    ray: Any,
    home: Path,
    db_url: str,
    cpus: float,
    gpus: float,
    *,
    modules: Sequence[str] = (),
    every_node: bool = False,
) -> None:
    """Write a marker file into the home (and beside a SQLite registry) and have a probe task on
    every node that may run a session look for it, and import the user's `modules` as a session
    would (the job ships those not installed): a node that cannot see or import one is bad input naming the
    node and the path or module. `every_node`: every node of the cluster, the ones a detached
    supervisor may run on included. The markers are removed either way: nothing is left written.
    Without modules, a node that passed for the same places before, while the cluster lives, is not
    asked again (`_PassedNodes`)."""
    places = {"runs home": home}
    db_file = sqlite_file(db_url)
    if db_file is not None:
        places["SQLite registry"] = db_file.parent
    alive = [n for n in ray.nodes() if n.get("Alive")]
    nodes = [n for n in alive if can_host(n.get("Resources", {}), cpus, gpus)]
    if nodes and every_node:
        nodes = alive
    if not nodes:
        raise ClusterUnreachable(
            f"no node of the Ray cluster has {cpus:g} CPU(s) and {gpus:g} GPU(s) for a"
            " session; add nodes or ask for less (--cpus, --gpus)"
        )
    mirror = storage.mirror_of(home)
    # A user's module is imported afresh each time: it may have changed since. Places are not.
    passed = _PassedNodes(places, mirror) if not modules else None
    if passed is not None:
        nodes = [n for n in nodes if n["NodeID"] not in passed.read()]
    if nodes:
        _probe(ray, nodes, home, mirror, places, modules)
    if passed is not None:
        passed.add(n["NodeID"] for n in nodes)


def _probe(
    ray: Any, nodes: list[dict[str, Any]], home: Path, mirror: Any, places: dict[str, Path], modules: Sequence[str]
) -> None:
    """The markers written (the home's into its store, for a home in object storage: `mirror`), a
    probe on each of `nodes` reading them back, the markers removed."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    token = uuid.uuid4().hex
    made: list[Path] = []
    markers: dict[str, str] = {}
    try:
        if mirror is not None:  # a home in object storage (reached already: `storage.reach`): every node must too
            mirror.put_bytes(mirror.key(home / f".rlrun-probe-{token}"), token.encode())
            markers["runs home"] = f"{mirror.url}/.rlrun-probe-{token}"
        for what, folder in places.items():
            if what in markers:
                continue
            made += [p for p in (folder, *folder.parents) if not p.exists()]
            folder.mkdir(parents=True, exist_ok=True)
            marker = folder / f".rlrun-probe-{token}"
            marker.write_text(token)
            markers[what] = str(marker)
        probe = ray.remote(find_markers)
        found = [
            probe.options(
                num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
            ).remote(markers, token, list(modules))
            for n in nodes
        ]
        try:
            answers = ray.get(found, timeout=PROBE_SECONDS)
        except Exception as error:
            raise BadInput(
                f"the Ray cluster's nodes did not answer a storage check ({type(error).__name__}: {error});"
                " check that rlrun is installed on every node"
            ) from None
        for node, missing in zip(nodes, answers, strict=True):
            if missing:
                raise BadInput(_unreachable(node, missing[0], places, "SQLite registry" in places))
    finally:
        for written in markers.values():
            if storage.is_url(written):
                assert mirror is not None
                mirror.delete([mirror.key(home / written.rpartition("/")[2])])
            else:
                Path(written).unlink(missing_ok=True)
        for folder in sorted(made, key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                folder.rmdir()


class _PassedNodes:
    """The nodes that have read back the markers of these places, kept in the cluster's own
    key-value store: they live as long as the cluster does, and a node (re)started since has a new
    id. Each probe starts a Ray worker on every node, about 2 CPU-seconds a command on a
    three-node cluster; a resume or a search's next trial on the same home asks only new nodes.
    Two commands that add at once may lose one's nodes: they are probed again, nothing worse."""

    NAMESPACE = "rlrun-storage-check"

    def __init__(self, places: dict[str, Path], mirror: Any) -> None:
        described = {what: str(folder.resolve()) for what, folder in places.items()}
        if mirror is not None:
            described["runs home"] = mirror.url
        self._key = hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()

    def read(self) -> set[str]:
        from ray.experimental.internal_kv import _internal_kv_get

        stored = _internal_kv_get(self._key, namespace=self.NAMESPACE)
        return set(json.loads(stored)) if stored else set()

    def add(self, node_ids: Iterable[str]) -> None:
        from ray.experimental.internal_kv import _internal_kv_put

        added = set(node_ids)
        if added:
            value = json.dumps(sorted(self.read() | added))
            _internal_kv_put(self._key, value, overwrite=True, namespace=self.NAMESPACE)


def can_host(resources: dict[str, float], cpus: float, gpus: float) -> bool:
    return resources.get("CPU", 0) >= cpus and resources.get("GPU", 0) >= gpus


def _unreachable(node: dict[str, Any], what: str, places: dict[str, Path], sqlite: bool) -> str:
    where = f"node {node.get('NodeManagerAddress', '?')} ({node['NodeID'][:16]})"
    if what.startswith(_MODULE):
        module, _, error = what.removeprefix(_MODULE).partition(" ")
        return (
            f"{where} cannot import {module} {error}, which the spec names; install what it needs on"
            " every node (a module found here beside the spec or on PYTHONPATH is shipped to the workers)"
        )
    if what == "SQLite registry":
        return (
            f"{where} cannot reach the SQLite registry in {places[what]}; a registry for several hosts belongs"
            " on PostgreSQL (RLRUN_DB=postgresql+psycopg://...): SQLite's locking is unsafe on NFS"
        )
    if storage.mirror_of(places[what]) is not None:
        url = storage.address(places[what])
        return (
            f"{where} cannot reach the runs home {url} in object storage; give every node credentials for it"
            f" (as the cloud's own tools find them) and, where it needs one, {storage.endpoint_setting(url)}"
        )
    advice = " and RLRUN_DB on PostgreSQL" if sqlite else ""
    return (
        f"{where} cannot see the runs home {places[what]}; put --home on storage every node mounts at the same"
        f" path (NFS, a cluster file system){advice}"
    )


_MODULE = "module "


def find_markers(markers: dict[str, str], token: str, modules: Sequence[str] = ()) -> list[str]:
    """On a node: which of the marker files (by what they mark) it cannot read back, and which of the
    user's modules it cannot import as a session would ("module NAME (why)")."""
    from rlrun.spec.env_ids import import_failure

    missing = []
    for what, marker in markers.items():
        try:
            found = storage.read_url(marker) if storage.is_url(marker) else Path(marker).read_bytes()
            if found != token.encode():
                missing.append(what)
        except Exception:  # a store's library raises its own errors: the node cannot reach it
            missing.append(what)
    for module in modules:
        failure = import_failure(module)
        if failure is not None:
            missing.append(f"{_MODULE}{module} ({failure[0]})")
    return missing
