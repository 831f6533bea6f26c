"""The rules that turn `env.workers: "auto"` and `meta.torch_threads: "auto"` into numbers, the
blocks of copies the workers step, and how the spec takes and refuses these settings."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rlrun.spec import EnvSpec, Spec, validate_spec
from rlrun.spec.consistency import check_edit
from rlrun.spec.cores import auto_threads, auto_workers, blocks, cores_per_session, torch_threads, usable_cores


@pytest.mark.parametrize(("num_envs", "cores", "sessions", "workers"), [
    (8, 2, 1, 1),     # two cores: one for the learner, and one worker gains nothing over the session's process
    (8, 16, 1, 8),    # never more workers than copies
    (64, 16, 1, 15),  # a core left to the learner
    (64, 16, 4, 3),   # four sessions share the machine: 4 cores each
    (64, 16, 32, 1),  # more sessions than cores: in process
    (1, 64, 1, 1),
])
def test_auto_workers(num_envs: int, cores: int, sessions: int, workers: int) -> None:
    assert auto_workers(num_envs, cores, sessions) == workers


@pytest.mark.parametrize(("cores", "sessions", "threads"), [(2, 1, 2), (16, 4, 4), (16, 3, 5), (2, 4, 1), (1, 1, 1)])
def test_auto_threads_are_the_sessions_share_of_the_cores(cores: int, sessions: int, threads: int) -> None:
    assert auto_threads(cores, sessions) == threads == cores_per_session(cores, sessions)


def test_a_number_is_kept_and_auto_is_resolved_on_this_machine() -> None:
    assert torch_threads(3, 1) == 3
    assert torch_threads("auto", 1) == usable_cores() >= 1


@pytest.mark.parametrize(("num_envs", "workers", "sizes"), [(8, 2, [4, 4]), (7, 3, [3, 2, 2]), (3, 3, [1, 1, 1])])
def test_blocks_are_contiguous_in_order_and_even(num_envs: int, workers: int, sizes: list[int]) -> None:
    parts = blocks(num_envs, workers)
    assert [len(p) for p in parts] == sizes
    assert [i for p in parts for i in p] == list(range(num_envs))


def test_workers_take_a_number_or_auto() -> None:
    assert EnvSpec(id="CartPole-v1", num_envs=4, workers=2).workers == 2
    assert EnvSpec(id="CartPole-v1", num_envs=4, workers="auto").workers == "auto"
    assert EnvSpec(id="CartPole-v1").workers == 1  # old specs: in the session's process, as before


@pytest.mark.parametrize(("settings", "message"), [
    ({"num_envs": 2, "workers": 3}, "more worker processes than the 2 copies"),
    ({"num_envs": 2, "workers": 0}, 'use a whole number from 1 to 1024, or "auto"'),
    ({"num_envs": 2, "workers": "many"}, 'use a whole number from 1 to 1024, or "auto"'),
    ({"num_envs": 2, "workers": 2, "vectorization": "async"}, '"async" already gives each copy its own process'),
])
def test_workers_refused(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        EnvSpec(id="CartPole-v1", **settings)


def _spec(**env: object) -> Spec:
    return validate_spec({"name": "t", "agent": {"algorithm": "reinforce"}, "env": {"id": "CartPole-v1", **env},
                          "meta": {"max_frame": 1000}})


def test_a_resume_may_change_workers_but_not_threads() -> None:
    old = _spec(num_envs=4)
    [workers] = check_edit(old, _spec(num_envs=4, workers=2), 500)
    assert (workers.path, workers.kind, workers.allowed) == ("env.workers", "record-only", True)
    threads_old = validate_spec({**old.to_json(), "meta": {**old.to_json()["meta"], "torch_threads": 2}})
    [threads] = check_edit(old, threads_old, 500)
    assert (threads.path, threads.kind, threads.allowed) == ("meta.torch_threads", "structural", False)
