"""The spec's `meta.slurm` section as submitit's parameters (the generic ones of its
`AutoExecutor`, and `slurm_` ones for what only SLURM has), said once: what is submitted and
what `sbatch --test-only` checks are made from the same parameters."""

from __future__ import annotations

from typing import Any

from rlrun.spec.sections import SlurmSpec

DEFAULT_TIME_MINUTES = 60
"""A job's time limit when the spec gives none."""


def submitit_parameters(slurm: SlurmSpec | None, name: str) -> dict[str, Any]:
    """`AutoExecutor.update_parameters`'s arguments for a job named `name`. Only what is given is
    passed: SLURM's and the partition's defaults stand for the rest."""
    slurm = slurm or SlurmSpec()
    given: dict[str, Any] = {
        "name": name,
        "timeout_min": slurm.time or DEFAULT_TIME_MINUTES,
        "cpus_per_task": slurm.cpus or 1,
        "tasks_per_node": 1,
        "nodes": 1,
        "stderr_to_stdout": True,
        "gpus_per_node": slurm.gpus,
        "mem_gb": slurm.memory,
        "slurm_partition": slurm.partition,
        "slurm_account": slurm.account,
        "slurm_qos": slurm.qos,
        "slurm_signal_delay_s": slurm.signal_delay,
        "slurm_additional_parameters": dict(slurm.sbatch) or None,
    }
    return {key: value for key, value in given.items() if value is not None}


def described(slurm: SlurmSpec | None) -> str:
    """The options as the command line gives them, for a message naming what SLURM refused."""
    if slurm is None:
        return "--slurm"
    flags = {"partition": "--partition", "time": "--time", "cpus": "--cpus", "gpus": "--gpus", "memory": "--memory"}
    given = slurm.model_dump(exclude_defaults=True)
    lines = given.pop("sbatch", {})
    shown = [f"{flags.get(key, f'meta.slurm.{key}')} {value}" for key, value in given.items()]
    shown += [f"--sbatch {key}={value}" for key, value in lines.items()]
    return "--slurm " + " ".join(shown) if shown else "--slurm"
