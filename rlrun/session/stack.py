"""The software a run ran on (`software_stack`): the versions whose change changes a run's bits, as
its device does (`rlrun.session.device`). A session records it, a resume on another stack is marked
approximate with the reason (`stack_change`: "torch 2.13.0 → 2.14.0"), and `rlrun publish` writes
it as `versions.json` (`write_versions`).

Which packages count is decided by the run's env (its id and `env.packages`), never by what happens
to be installed: always Python, torch, NumPy and Gymnasium; ale-py (and OpenCV, which resizes its
frames) for an ALE game, MuJoCo or Box2D for the envs that simulate with them
(`rlrun.spec.env_ids.extra_for`), the user's own env packages by their distribution's version
("local" for a module no installed distribution provides), and CUDA and cuDNN when the networks
learn on a GPU. Versions come from `importlib.metadata` ("missing" for one not installed).

Torch-free at import: torch is imported only to name CUDA's and cuDNN's versions. A test fakes a
version with `RLRUN_TEST_FAKE_VERSIONS` (`rlrun.testhooks.faked_versions`)."""

from __future__ import annotations

import importlib.metadata
import json
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlrun import testhooks

if TYPE_CHECKING:
    from rlrun.spec import EnvSpec, Spec

ALWAYS = ("torch", "numpy", "gymnasium")
"""The distributions every run uses (Python's own version is named "python")."""
BY_EXTRA = {"atari": ("ale-py", "opencv-python-headless"), "mujoco": ("mujoco",), "box2d": ("Box2D",)}
"""The distributions each env extra (`rlrun.spec.env_ids.EXTRAS`) brings that shape a run's bits."""
VERSIONS_FILE = "versions.json"


def software_stack(env: str | EnvSpec | Spec, *, device: str | None = None) -> dict[str, str]:
    """The versions of the software a run of `env` (an env id, a spec's `env` section or a whole
    spec) uses, by name; CUDA's and cuDNN's too when `device` is a GPU ("cuda", "cuda:N")."""
    from rlrun.spec.env_ids import extra_for, user_modules

    env_id, packages = _env_of(env)
    names = [*ALWAYS, *BY_EXTRA.get(extra_for(env_id) or "", ())]
    stack = {"python": platform.python_version(), **{name: _version(name) for name in names}}
    for module in user_modules(env_id, packages):
        stack.update(_module_version(module))
    if device is not None and device.startswith("cuda"):
        stack.update(_cuda_versions())
    stack.update(testhooks.faked_versions())
    return stack


def versions(*distributions: str) -> dict[str, str]:
    """The installed versions of `distributions` ("missing" for one not installed)."""
    return {name: _version(name) for name in distributions}


def stack_change(saved: Mapping[str, str] | None, now: Mapping[str, str]) -> str | None:
    """Why a snapshot taken on the stack `saved` cannot continue exactly on `now` ("software
    changed: torch 2.13.0 → 2.14.0, numpy 2.4.6 → 2.5.0"), None when every version both name is
    the same. A snapshot that recorded no stack (older files) is taken as the same: nothing says
    otherwise. Only names both record are compared: CUDA's appear or go with the device, whose
    move is its own reason (`rlrun.session.device.moved`)."""
    changed = [f"{name} {old} → {now[name]}" for name, old in (saved or {}).items() if now.get(name, old) != old]
    return f"software changed: {', '.join(changed)}" if changed else None


def describe(stack: Mapping[str, str]) -> str:
    """One line: "python 3.12.3, torch 2.13.0, numpy 2.4.6, gymnasium 1.0.0"."""
    return ", ".join(f"{name} {version}" for name, version in stack.items())


def versions_bytes(stack: Mapping[str, str]) -> bytes:
    """`versions.json`'s content: the stack as sorted JSON, one name a line."""
    return (json.dumps(dict(stack), indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()


def write_versions(path: Path | str, stack: Mapping[str, str]) -> Path:
    """Write `stack` to `path` (a `versions.json` file, or a folder to write one in), atomically."""
    from rlrun.fsutil import atomic_write

    path = Path(path)
    if path.is_dir():
        path = path / VERSIONS_FILE
    atomic_write(path, versions_bytes(stack))
    return path


def recorded_stacks(home: Path, detail: Any) -> dict[int, dict[str, str]]:
    """The software each session of a run (`detail`: its `RunDetail`) ran on last, by session
    index: what its newest snapshot in the home's working copy records (a session with none there,
    or one older than the record, is left out; nothing is downloaded)."""
    from rlrun.snapshot.layout import META, read_meta

    found: dict[int, dict[str, str]] = {}
    for session in detail.sessions:
        taken = [c for c in detail.checkpoints if c.session_index == session.index]
        newest = max(taken, key=lambda c: c.frame, default=None)
        if newest is not None and (Path(home) / newest.path / META).is_file():
            stack = read_meta(Path(home) / newest.path).stack
            if stack:
                found[session.index] = stack
    return found


def read_versions(path: Path | str) -> dict[str, str]:
    """The stack a `versions.json` file holds."""
    found = json.loads(Path(path).read_text(encoding="utf-8"))
    return {str(name): str(version) for name, version in found.items()}


def _env_of(env: str | EnvSpec | Spec) -> tuple[str, list[str]]:
    if isinstance(env, str):
        return env, []
    from rlrun.spec import Spec

    section = env.env if isinstance(env, Spec) else env
    return section.id, list(section.packages)


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "missing"


def _module_version(module: str) -> dict[str, str]:
    """The user's env module's distribution and its version ("local": a module on the path that no
    installed distribution provides, whose code has no version to record)."""
    top = module.split(".")[0]
    distributions = importlib.metadata.packages_distributions().get(top)
    if not distributions:
        return {top: "local"}
    return {name: _version(name) for name in distributions}


def _cuda_versions() -> dict[str, str]:
    import torch

    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {"cuda": str(torch.version.cuda), "cudnn": str(cudnn)}
