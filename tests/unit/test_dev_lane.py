"""The dev lane (issue 44): a contributor runs the unit tests and lint with rlrun and a light extra,
not the test extra's ~170 packages, and the README names it beside the full suite."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LANE = "python -m pytest tests/unit tests/test_quality.py"


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower()


def test_the_dev_extra_holds_the_unit_and_lint_tools_and_nothing_heavy() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {_requirement_name(r) for r in extras["dev"]} == {"pytest", "ruff", "mypy"}
    # What the lane runs is what the full suite runs for these tests: the same tools, no other extra.
    assert {"pytest", "ruff", "mypy"} <= {_requirement_name(r) for r in extras["test"]}


def test_the_readme_names_the_dev_lane_beside_the_full_suite_and_keeps_its_opening() -> None:
    readme = (ROOT / "README.md").read_text()
    lines = [line.strip() for line in readme.splitlines() if line.strip()]
    assert lines[1:3] == [
        "pip install torch==2.13.0 -e . && rlrun train reinforce_cartpole",
        "pip install --no-compile torch==2.13.0 -e '.[test]' && python -m pytest",
    ]
    tests = readme.split("## Tests", 1)[1].split("\n## ", 1)[0]
    assert "python -m pytest                              # everything" in tests
    assert f"-e '.[dev]' && {LANE}" in tests


# The import names of the packages each extra brings (the test extra's Stable-Baselines3 too): a
# unit test that needs one skips without it, naming the extra, so that the dev lane passes on
# exactly what it installs (issue 53).
EXTRA_MODULES = {
    "Box2D": "box2d",
    "mujoco": "mujoco",
    "ale_py": "atari",
    "cv2": "atari",
    "minari": "minari",
    "h5py": "minari",
    "optuna": "search",
    "ray": "ray",
    "rliable": "compare",
    "pandas": "compare",
    "matplotlib": "plot",
    "tensorboard": "tensorboard",
    "psycopg": "postgres",
    "onnx": "onnx",
    "onnxscript": "onnx",
    "onnxruntime": "onnx",
    "s3fs": "s3",
    "gcsfs": "gcs",
    "adlfs": "azure",
    "mlflow": "mlflow",
    "wandb": "wandb",
    "imageio": "video",
    "mkdocs": "docs",
    "stable_baselines3": "test",
    "rl_zoo3": "test",
    "yaml": "sb3",
    "submitit": "slurm",
    "safetensors": "publish",
    "huggingface_hub": "hub",
}
SKIPS = {"importorskip", "skip", "skipif"}
MAKERS = {"make", "make_env", "make_vector_env", "load_spec", "validate_spec", "recorded_spec", "spec_from"}
"""What makes an env or checks a spec's env id: an env id that is only data (a table's key, a string
parsed) needs nothing."""
ENV_ID = re.compile(r"^([\w.]+:)?[\w/]+-v\d+$")


def test_every_extra_has_its_modules_named() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    light = {"dev", "all", "classic"}  # the dev lane's own tools; every extra at once
    assert set(extras) - light - set(EXTRA_MODULES.values()) == set(), "name the new extra's modules above"


def _needs(node: ast.AST) -> list[str]:
    """What `node` (a test file's function, or its module-level statements) uses that an extra
    brings: an import of one of its modules, an env id that needs one, a built-in spec whose env does."""
    from rlrun.spec import builtin_document, builtin_names
    from rlrun.spec.env_ids import EXTRAS, extra_for, split_env_id

    def gated_id(text: str) -> bool:  # LunarLanderContinuous-v3 is LunarLander's too
        name = split_env_id(text)[1]
        return bool(extra_for(text)) or any(name.startswith(family) for family in EXTRAS)

    gated = {name for name in builtin_names() if gated_id(builtin_document(name)["env"]["id"])}
    makes = any(_called(child) in MAKERS for child in ast.walk(node))
    needs = []
    for child in ast.walk(node):
        names: list[str] = []
        if isinstance(child, ast.Import):
            names = [alias.name for alias in child.names]
        elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
            names = [child.module]
        needs += [name for name in names if name.split(".")[0] in EXTRA_MODULES]
        if makes and isinstance(child, ast.Constant) and isinstance(child.value, str):
            text = child.value
            if (ENV_ID.match(text) and gated_id(text)) or text in gated:
                needs.append(text)
    return needs


def _called(node: ast.AST) -> str | None:
    """The name a call calls (`pytest.importorskip(...)`: importorskip), None for anything else."""
    if not isinstance(node, ast.Call):
        return None
    return getattr(node.func, "attr", None) or getattr(node.func, "id", None)


def _skips(node: ast.AST) -> bool:
    return any(_called(child) in SKIPS for child in ast.walk(node))


def _module_level(tree: ast.Module) -> list[ast.stmt]:
    """The module's own statements: not its functions and classes, nor `try`s and TYPE_CHECKING blocks."""
    return [
        s
        for s in tree.body
        if not isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Try)
        and not (isinstance(s, ast.If) and "TYPE_CHECKING" in ast.unparse(s.test))
    ]


def test_a_unit_test_that_needs_an_extra_skips_without_it() -> None:
    """Read, not run (running tests/unit without the extras would double the lane's time): each
    function of tests/unit (decorators included) that imports an extra's module, names an env id
    that needs one or a built-in spec whose env does, calls pytest.importorskip (or skip, or is
    marked skipif); a module-level use needs a module-level skip. What rlrun imports for a test
    inside its own code is not seen here: the dev lane's own venv checks that."""
    unguarded = []
    for path in sorted((ROOT / "tests" / "unit").glob("*.py")):
        tree = ast.parse(path.read_text())
        module = _module_level(tree)
        module_skips = any(_skips(s) for s in module)
        for statement in module:
            if not module_skips and (needs := _needs(statement)):
                unguarded.append(f"{path.name}:{statement.lineno}: {needs}")
        if module_skips:
            continue
        for node in tree.body:
            functions = [node] if isinstance(node, ast.FunctionDef) else []
            if isinstance(node, ast.ClassDef):
                functions = [f for f in node.body if isinstance(f, ast.FunctionDef)]
            for function in functions:
                if (needs := _needs(function)) and not _skips(function):
                    unguarded.append(f"{path.name}:{function.lineno} {function.name}: {needs}")
    assert unguarded == [], "use pytest.importorskip(MODULE, reason=...) naming the extra:\n" + "\n".join(unguarded)
