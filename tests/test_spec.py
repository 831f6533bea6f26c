"""Spec validation: every problem is one line with its path, the value and a fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlrun.errors import SpecError
from rlrun.spec import apply_overrides, builtin_names, json_schema, load_spec, validate_spec
from rlrun.spec.agents import algorithm_names


def problems(*overrides: str, source: str | dict = "reinforce_cartpole") -> list[str]:
    with pytest.raises(SpecError) as caught:
        load_spec(source, list(overrides))
    return caught.value.problems


def test_every_builtin_validates_and_round_trips() -> None:
    assert "reinforce_cartpole" in builtin_names()
    for name in builtin_names():
        spec = load_spec(name)
        assert validate_spec(spec.to_json()) == spec


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("meta.max_fram=5", 'meta.max_fram: unknown key; did you mean "max_frame"?'),
        ("agent.gama=0.9", 'agent.gama: unknown key; did you mean "gamma"?'),
        (
            "agent.network.activation=tnh",
            'agent.network.activation = "tnh": not an accepted value; did you mean "tanh"?',
        ),
        ("agent.algorithm=reinfroce", 'agent.algorithm = "reinfroce": unknown algorithm; did you mean "reinforce"?'),
        ("env.id=CartPol-v1", 'env.id = "CartPol-v1": unknown Gymnasium environment; did you mean "CartPole-v1"?'),
        ("meta.max_frame=-5", "meta.max_frame = -5: -5 is negative"),
        ("meta.max_frame=1.5x", "meta.max_frame = \"1.5x\": '1.5x' is not a size"),
        ("meta.sessions=0", "meta.sessions = 0: input should be greater than 0"),
        ("agent.optimizer.lr=abc", 'agent.optimizer.lr = "abc": expected a number or a schedule'),
        ('agent.optimizer.lr={"kind": "linear", "start": 1}', "agent.optimizer.lr.end: required key is missing"),
        ('agent.optimizer.lr={"kind": "cosine"}', 'agent.optimizer.lr = {"kind": "cosine"}: unknown kind'),
        ("agent.network.hidden=[64, 0]", "agent.network.hidden.1 = 0: input should be greater than 0"),
        ("agent.optimizer.lr=-0.01", "agent.optimizer.lr = -0.01: must be greater than 0"),
        (
            'agent.optimizer.lr={"kind": "linear", "start": 0, "end": 1}',
            'agent.optimizer.lr = {"kind": "linear", "start": 0, "end": 1}: start is 0; it must be greater than 0',
        ),
        ("meta.max_frame=2e15", "meta.max_frame = 2000000000000000.0: 2e+15 is more than 1e15, the largest count"),
    ],
)
def test_one_line_per_problem_naming_path_value_and_fix(override: str, expected: str) -> None:
    found = problems(override)
    assert len(found) == 1, found
    assert found[0].startswith(expected), found[0]
    assert "\n" not in found[0]


def test_several_problems_are_all_reported() -> None:
    found = problems("meta.seed=-1", "agent.gama=0.9", "env.num_envs=0")
    assert sorted(p.split(":")[0].split(" =")[0] for p in found) == ["agent.gama", "env.num_envs", "meta.seed"]


def test_missing_sections_and_keys() -> None:
    found = problems(source={"name": "x", "agent": {"algorithm": "reinforce"}, "env": {"id": "CartPole-v1"}})
    assert found == ["meta: required key is missing; add it"]
    found = problems(source={"name": "x", "agent": {}, "env": {"id": "CartPole-v1"}, "meta": {"max_frame": 10}})
    assert found == [f"agent.algorithm: missing; add one of {', '.join(algorithm_names())}"]


def test_unknown_builtin_suggests_the_closest(tmp_path: Path) -> None:
    assert problems(source="reinforce_cartpol") == [
        'spec "reinforce_cartpol": no such file or built-in spec; did you mean "reinforce_cartpole"?'
    ]
    assert "does not exist" in problems(source=str(tmp_path / "nope.json"))[0]


def test_malformed_json_file_names_line_and_column(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x",\n "agent": }')
    (found,) = problems(source=str(bad))
    assert "not valid JSON (line 2, column 11" in found


def test_a_file_that_is_not_utf8_names_the_byte_and_the_fix(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.json"
    bad.write_bytes(b'{"name": "x",\n "note": "caf\xe9"}')
    assert problems(source=str(bad)) == [f"{bad}: not UTF-8 text (byte 0xe9 on line 2, column 14); save it as UTF-8"]


def test_a_folder_is_not_a_spec(tmp_path: Path) -> None:
    assert problems(source=str(tmp_path)) == [
        f"{tmp_path} is a folder, not a spec file; give a .json file or a built-in name (`rlrun spec list`)"
    ]


def test_a_byte_order_mark_is_read_past(tmp_path: Path) -> None:
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(load_spec("reinforce_cartpole").to_json()).encode())
    assert load_spec(str(path)) == load_spec("reinforce_cartpole")


def test_spec_file_with_sizes_loads(tmp_path: Path) -> None:
    document = load_spec("reinforce_cartpole").to_json()
    document["meta"]["max_frame"] = "1.5M"
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(document))
    assert load_spec(str(path)).meta.max_frame == 1_500_000


def test_overrides_parse_json_values_and_create_nested_keys() -> None:
    spec = load_spec(
        "reinforce_cartpole",
        [
            "meta.max_frame=20k",
            "agent.network.hidden=[32]",
            "env.kwargs.sutton_barto_reward=true",
            'agent.entropy_coef={"kind": "linear", "start": 0.01, "end": 0, "to_frame": 10000}',
        ],
    )
    assert spec.meta.max_frame == 20_000
    assert spec.agent.network.hidden == [32]  # type: ignore[attr-defined]
    assert spec.env.kwargs == {"sutton_barto_reward": True}
    assert spec.agent.entropy_coef.value(5000, 20_000) == pytest.approx(0.005)  # type: ignore[attr-defined]


def test_override_into_a_value_is_refused() -> None:
    with pytest.raises(SpecError, match=r"meta\.seed is 0, not an object"):
        apply_overrides({"meta": {"seed": 0}}, ["meta.seed.x=1"])
    with pytest.raises(SpecError, match=r"expected dotted\.key=value"):
        apply_overrides({}, ["meta.seed"])


def test_json_schema_covers_every_algorithm_with_docs() -> None:
    schema = json_schema()
    agent_refs = [ref["$ref"].split("/")[-1] for ref in schema["properties"]["agent"]["oneOf"]]
    assert agent_refs and all(ref in schema["$defs"] for ref in agent_refs)
    assert "Discount factor" in json.dumps(schema)
    assert schema["$defs"]["MetaSpec"]["properties"]["max_frame"]["description"].startswith("Frame budget")
