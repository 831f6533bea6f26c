"""The package's rooms and the one direction imports go between them.

A room is a top-level module (`rlrun/refs.py`) or package (`rlrun/registry/`). Every import counts,
those inside functions and under TYPE_CHECKING too: a room may import only rooms on a lower layer,
so no two rooms import each other, directly or around a circle, and a newcomer can tell from the
layers where a change belongs. Changing a layer here is a design decision: say why in the commit.
Inside a room the same holds between its modules: no two import each other, directly or around a
circle (a package's face, its `__init__`, left out: it only gathers the room's names).
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
    {"trackers", "imports"},  # MLflow / W&B runs the session loop feeds, in the background; runs
    # trained elsewhere (the RL Zoo's) read into the registry as foreign runs, and the rule refusing them
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


def module_name(path: Path, package: Path = PACKAGE) -> str:
    """rlrun/search/plan.py -> rlrun.search.plan; a package's face keeps its `.__init__`."""
    return ".".join(path.relative_to(package.parent).with_suffix("").parts)


def import_targets(path: Path, package: Path = PACKAGE) -> list[str]:
    """What `path` names in its imports, anywhere in it (absolute and relative ones): each module,
    and for `from M import N` also M.N, which may be a module."""
    module = module_name(path, package).removesuffix(".__init__")
    home = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = home.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            targets += [base] + [f"{base}.{alias.name}" for alias in node.names]
    return targets


def imported_rooms(path: Path) -> set[str]:
    """The rooms `path` imports (absolute `rlrun.X` imports and relative ones), itself included."""
    known = rooms()
    return {t.split(".")[1] for t in import_targets(path) if t.startswith("rlrun.") and t.split(".")[1] in known}


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


def imports_inside_rooms(package: Path = PACKAGE) -> dict[str, set[str]]:
    """The imports between modules (files) of one room, faces left out: rlrun.session.loop ->
    rlrun.session.state."""
    files = {module_name(f, package) for f in package.rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for path in package.rglob("*.py"):
        module = module_name(path, package)
        if module.count(".") < 2 or module.endswith(".__init__"):  # a flat module is a room alone
            continue
        for target in import_targets(path, package):
            if target in files and target != module and target.split(".")[1] == module.split(".")[1]:
                edges.setdefault(module, set()).add(target)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The modules that import each other, directly or around a loop, each circle once."""

    def reachable(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for after in edges.get(todo.pop(), ()):
                if after not in seen:
                    seen.add(after)
                    todo.append(after)
        return seen

    reach = {module: reachable(module) for module in edges}
    found: list[list[str]] = []
    for module in sorted(edges):
        circle = sorted(other for other in reach[module] if module in reach.get(other, ()))
        if circle and circle not in found:
            found.append(circle)
    return found


def test_no_circles_between_the_modules_of_a_room() -> None:
    found = [" <-> ".join(circle) for circle in circles(imports_inside_rooms())]
    assert not found, f"modules of one room that import each other: {found}; move what both need below both"


def test_the_kernels_face_imports_no_algorithm() -> None:
    """Algorithms ask the kernels' table for a kernel (`rlrun.algorithms.kernels`); the table names
    only its kernels' modules, never an algorithm back (not even for a type)."""
    face = PACKAGE / "algorithms" / "kernels" / "__init__.py"
    back = [
        t
        for t in import_targets(face)
        if t.startswith("rlrun.algorithms.") and not t.startswith("rlrun.algorithms.kernels")
    ]
    assert not back, f"the kernels' face imports {back}"


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
