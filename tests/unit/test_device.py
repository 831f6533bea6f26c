"""`meta.device`, directly: which devices a spec may name, how a request resolves here, which
requests this machine refuses, when a snapshot moved between devices, and how a GPU op without a
deterministic kernel is caught. The GPU paths themselves need a GPU: `tests/benchmarks/gpu_device.py`."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import torch
from torch._prims_common import alert_not_deterministic

from rlrun.algorithms import build_agent
from rlrun.envs import make_env
from rlrun.errors import BadInput, SpecError
from rlrun.session.device import (
    CUBLAS_WORKSPACE,
    Where,
    check_device,
    moved,
    nondeterministic_ops,
    resolve_device,
    where,
)
from rlrun.snapshot import SnapshotMeta
from rlrun.spec import load_spec

CUDA = torch.cuda.is_available()
H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"


def test_the_default_is_the_cpu_and_every_form_validates() -> None:
    assert load_spec("ppo_cartpole").meta.device == "cpu"
    for device in ("auto", "cpu", "cuda", "cuda:0", "cuda:12"):
        assert load_spec("ppo_cartpole", [f"meta.device={device}"]).meta.device == device


@pytest.mark.parametrize("device", ["gpu", "cuda:", "cuda:x", "CPU", "mps", "cuda:-1"])
def test_an_unknown_device_is_one_line_naming_the_forms(device: str) -> None:
    with pytest.raises(SpecError) as raised:
        load_spec("ppo_cartpole", [f"meta.device={device}"])
    assert raised.value.problems == [
        f'meta.device = "{device}": not a device; use "auto", "cpu", "cuda" or "cuda:N" (N: the GPU\'s index)'
    ]


def test_auto_resolves_to_cuda_only_where_torch_sees_a_gpu() -> None:
    assert resolve_device("auto").type == ("cuda" if CUDA else "cpu")
    assert resolve_device("cpu") == torch.device("cpu")


def test_the_cpu_leaves_torch_switches_alone() -> None:
    before = torch.are_deterministic_algorithms_enabled()
    resolve_device("cpu")
    assert torch.are_deterministic_algorithms_enabled() == before
    assert where(torch.device("cpu")) == Where("cpu", None)


@pytest.mark.skipif(CUDA, reason="this machine has a GPU")
@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:3"])
def test_a_gpu_this_machine_lacks_is_bad_input_naming_the_fix(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    for attempt in (check_device, resolve_device):
        with pytest.raises(BadInput) as raised:
            attempt(device)
        message = str(raised.value)
        assert message.startswith(f'meta.device = "{device}": ')
        assert "--set meta.device=cpu (or auto)" in message and "\n" not in message
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == CUBLAS_WORKSPACE, "set before CUDA could start"


def test_a_gpu_index_beyond_the_machines_is_refused() -> None:
    with pytest.raises(BadInput) as raised:
        check_device("cuda:99")
    assert str(raised.value).startswith('meta.device = "cuda:99": ')


def test_cpu_and_auto_are_never_refused() -> None:
    check_device("cpu")
    check_device("auto")


@pytest.mark.parametrize(
    ("saved", "now", "exact"),
    [
        (Where("cpu", None), Where("cpu", None), True),
        (Where("cuda:0", H100), Where("cuda:1", H100), True),  # another GPU of the same model
        (Where("cuda:0", H100), Where("cpu", None), False),
        (Where("cpu", None), Where("cuda:0", H100), False),
        (Where("cuda:0", A100), Where("cuda:0", H100), False),
    ],
)
def test_a_snapshot_continues_exactly_only_on_the_same_kind_of_device(saved: Where, now: Where, exact: bool) -> None:
    reason = moved(saved, now)
    assert (reason is None) == exact
    if reason is not None:
        assert reason.startswith(f"snapshot taken on {saved}, resumed on {now}")


def test_snapshot_meta_records_the_device_and_older_files_have_none() -> None:
    meta = SnapshotMeta.from_json(_meta_json())
    assert (meta.device, meta.gpu) == (None, None) and "device" not in meta.to_json()
    on_gpu = replace(meta, device="cuda:0", gpu=H100)
    assert SnapshotMeta.from_json(on_gpu.to_json()) == on_gpu
    assert {k: on_gpu.to_json()[k] for k in ("device", "gpu")} == {"device": "cuda:0", "gpu": H100}
    on_cpu = replace(meta, device="cpu")
    assert "gpu" not in on_cpu.to_json() and SnapshotMeta.from_json(on_cpu.to_json()) == on_cpu


def _meta_json() -> dict[str, Any]:
    return {
        "kind": "final",
        "run_id": "r",
        "session_index": 0,
        "seed": 0,
        "clock": {"frame": 1, "episode": 0, "opt_step": 0, "wall_time": 0.0},
        "spec": {},
        "random": {"python": [], "numpy": {}, "eval_env": None},
        "env": None,
        "env_note": None,
        "obs": [],
        "obs_dtype": "<f4",
        "episode_return": [],
        "episode_length": [],
        "recent_returns": [],
        "last_losses": {},
        "evaluations": [],
        "best": None,
    }


@pytest.mark.parametrize("spec", ["ppo_cartpole", "dqn_cartpole", "reinforce_cartpole", "a2c_cartpole", "sac_pendulum"])
def test_an_agent_built_for_the_cpu_is_the_agent_built_before_devices(spec: str) -> None:
    """Weights are initialised on the CPU whatever the device; on the CPU nothing moves or copies."""
    loaded = load_spec(spec)
    env = make_env(loaded.env)
    default = build_agent(loaded, env.observation_space, env.action_space, 3).state_dict()
    on_cpu = build_agent(loaded, env.observation_space, env.action_space, 3, "cpu").state_dict()
    env.close()
    for name, module in default.items():
        if isinstance(module, dict) and all(isinstance(t, torch.Tensor) for t in module.values()):
            for key, tensor in module.items():
                assert tensor.device.type == "cpu" and torch.equal(tensor, on_cpu[name][key]), (name, key)


@pytest.fixture
def deterministic_warn_only() -> Iterator[None]:
    """torch's switch as a CUDA session sets it, restored afterwards."""
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def test_each_op_without_a_deterministic_kernel_is_reported_once(deterministic_warn_only: None) -> None:
    """torch's own alert (what its CUDA kernels raise, here raised on the CPU) is caught, once per
    op; other warnings still reach whoever was listening."""
    found: list[str] = []
    with warnings.catch_warnings(record=True) as outside:
        warnings.simplefilter("always")
        with nondeterministic_ops(found.append):
            for _ in range(3):
                alert_not_deterministic("scatter_add_cuda_kernel")
            alert_not_deterministic("index_put_ with accumulate=True on CUDA")
            warnings.warn("something else", UserWarning, stacklevel=1)
        alert_not_deterministic("after the block")
    assert found == ["scatter_add_cuda_kernel", "index_put_ with accumulate=True on CUDA"]
    assert [str(w.message).split(" does not")[0] for w in outside] == ["something else", "after the block"]


def test_an_ignore_filter_does_not_hide_a_nondeterministic_op(deterministic_warn_only: None) -> None:
    found: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with nondeterministic_ops(found.append):
            alert_not_deterministic("cumsum_cuda_kernel")
    assert found == ["cumsum_cuda_kernel"]
