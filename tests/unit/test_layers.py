"""The package's rooms and the one direction imports go between them.

A room is a top-level module (`rlrun/refs.py`) or package (`rlrun/registry/`). Every import counts,
those inside functions and under TYPE_CHECKING too: a room may import only rooms on a lower layer,
so no two rooms import each other, directly or around a circle, and a newcomer can tell from the
layers where a change belongs. Changing a layer here is a design decision: say why in the commit.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "rlrun"

# Top to bottom. Rooms on one line are independent of each other.
LAYERS: list[set[str]] = [
    {"__main__", "__init__"},  # the command line's entry; the package's lazy public API
    {"cli"},  # parse, resolve, print; calls the library
    {"search", "compare"},  # trials are runs: through the training API; comparisons of
    # runs (reads the home through catalog, statistics by rliable)
    {"training", "enjoy", "catalog"},  # the train/resume API and executors; replaying a checkpoint;
    # the home read for people (reads home and session logs)
    {"session", "home"},  # one seed's training loop; the runs home as folders
    {"trackers"},  # MLflow / W&B runs the session loop feeds, in the background
    {"algorithms", "envs", "registry"},  # agents and memory; Gymnasium envs; the database
    {"spec", "snapshot"},  # the experiment's vocabulary; the snapshot format
    {"refs"},  # run references
    {"paths", "sizes"},
    {"storage"},  # where a home's files are kept: disk, or object storage
    {"errors", "clock", "ids", "seeding", "fsutil", "testhooks", "arithmetic"},
]
FLAT_MODULES_AT_MOST = 12


def rooms() -> set[str]:
    found = {p.stem for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    return found | {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}


def imported_rooms(path: Path) -> set[str]:
    """The rooms `path` imports (absolute `rlrun.X` imports and relative ones), itself included."""
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            targets += [base] + [f"{base}.{alias.name}" for alias in node.names]
    known = rooms()
    return {t.split(".")[1] for t in targets if t.startswith("rlrun.") and t.split(".")[1] in known}


def room_of(path: Path) -> str:
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def layer_of(room: str) -> int:
    for index, layer in enumerate(LAYERS):
        if room in layer:
            return index
    raise AssertionError(f"room {room!r} is on no layer: add it to LAYERS in {Path(__file__).name}")


def test_every_room_is_on_a_layer() -> None:
    for room in rooms():
        layer_of(room)


@pytest.mark.parametrize("source", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_go_down_the_layers(source: Path) -> None:
    room = room_of(source)
    upward = sorted(r for r in imported_rooms(source) - {room} if layer_of(r) <= layer_of(room))
    assert not upward, f"{source.relative_to(PACKAGE.parent)} ({room}) imports {upward}: not below it in LAYERS"


def test_few_flat_modules() -> None:
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(flat) <= FLAT_MODULES_AT_MOST, f"{len(flat)} flat modules: {flat}; give the new one a room"


def test_old_module_paths_still_import() -> None:
    """Modules moved into rooms keep their old import path (users' scripts): the same module object."""
    import importlib

    import rlrun

    for old, new in rlrun.MOVED.items():
        assert importlib.import_module(old) is importlib.import_module(new), old
    from rlrun.algorithms.configs.dqn import Config

    from rlrun.spec.agents.dqn import Config as Same

    assert Config is Same


def test_tests_take_shared_helpers_from_helper_modules() -> None:
    """A test file imports shared helpers from tests/helpers.py and its kin, never from conftest.py
    (fixtures and hooks only) or from another test file (whose import would collect its tests twice)."""
    tests = PACKAGE.parent / "tests"
    offenders = []
    for source in sorted(tests.rglob("*.py")):
        for node in ast.walk(ast.parse(source.read_text(), str(source))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            offenders += [
                f"{source.relative_to(tests)}: {name}"
                for name in names
                if name.split(".")[0] == "conftest" or name.split(".")[0].startswith("test_")
            ]
    assert not offenders, offenders


def test_a_session_task_is_described_without_torch() -> None:
    """`SessionTask` (what an executor runs) and the training API that builds tasks import neither
    torch nor gymnasium: the API types its tasks, and a registry-side caller pays for no trainer."""
    import subprocess
    import sys

    code = (
        "import sys; import rlrun.session.task, rlrun.training.api; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'gymnasium'}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
