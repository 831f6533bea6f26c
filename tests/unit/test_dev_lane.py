"""The dev lane (issue 44): a contributor runs the unit tests and lint with rlrun and a light extra,
not the test extra's ~170 packages, and the README names it beside the full suite."""

from __future__ import annotations

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
        "pip install torch==2.13.0 -e '.[test]' && python -m pytest",
    ]
    tests = readme.split("## Tests", 1)[1].split("\n## ", 1)[0]
    assert "python -m pytest                              # everything" in tests
    assert f"-e '.[dev]' && {LANE}" in tests
