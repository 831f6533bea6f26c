"""The jobs as SLURM sees them, asked of its own commands (`squeue`, `scontrol`, `sbatch
--test-only`): how each job stands, whether the controller answers, whether it accepts a job's
options. Light on purpose: `rlrun ls` and `rlrun show` use it, and import neither torch nor
submitit."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Sequence

from rlrun.errors import BadInput, Unavailable

ANSWER_SECONDS = 20.0
"""How long a SLURM command may take before the controller counts as not answering."""

GONE = "ENDED"
"""A job SLURM no longer lists (it ended before `MinJobAge`): its run's record says how."""

WAITING = ("PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SUSPENDED")
"""States of a job that will run (again): queued, or requeued."""
ACTIVE = (*WAITING, "RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING")
"""States of a job that is not done with its session."""

DRIVER_LABEL = "slurm job "
"""How the registry names a search driven by a SLURM job (`searches.driver`: "slurm job 42")."""


def driver_label(job_id: str) -> str:
    return f"{DRIVER_LABEL}{job_id}"


def is_slurm_driver(driver: str | None) -> bool:
    """Whether a search's recorded driver is a SLURM job (its resume is submitted again)."""
    return bool(driver and driver.startswith(DRIVER_LABEL))


def _command(*argv: str) -> subprocess.CompletedProcess[str]:
    """Run a SLURM command: BadInput when it is missing (this is no SLURM client), Unavailable when
    the controller does not answer in time."""
    if shutil.which(argv[0]) is None:
        raise BadInput(
            f"--slurm: SLURM's `{argv[0]}` is not on PATH; run rlrun on a machine that submits SLURM jobs"
            " (a login node), or put SLURM's client commands on PATH"
        )
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=ANSWER_SECONDS, check=False)
    except subprocess.TimeoutExpired:
        raise Unavailable(
            f"the SLURM controller did not answer `{' '.join(argv[:2])}` within {ANSWER_SECONDS:g} s;"
            " nothing was written; try again when `scontrol ping` says UP"
        ) from None


def _unreachable(said: str) -> bool:
    return any(
        sign in said
        for sign in ("Unable to contact slurm controller", "Socket timed out", "Connection refused", "Zero Bytes")
    )


def check_controller() -> None:
    """Unavailable (exit 3) unless the controller answers: nothing is written before it does."""
    answer = _command("scontrol", "ping")
    if answer.returncode != 0 or " is UP" not in answer.stdout:
        said = _first_line(answer.stderr or answer.stdout) or "it is down"
        raise Unavailable(
            f"the SLURM controller does not answer ({said}); nothing was written;"
            " try again when `scontrol ping` says UP"
        )


def check_script(script: str, where: str) -> None:
    """Ask the controller whether it would accept the batch `script` (`sbatch --test-only`, which
    submits nothing): BadInput naming what SLURM refused and `where` the options come from."""
    with tempfile.NamedTemporaryFile("w", suffix=".sh", prefix="rlrun-check-") as file:
        file.write(script)
        file.flush()
        answer = _command("sbatch", "--test-only", file.name)
    if answer.returncode == 0:
        return
    said = _refusal(answer.stderr or answer.stdout)
    if _unreachable(said):
        raise Unavailable(f"the SLURM controller does not answer ({said}); nothing was written; try again later")
    raise BadInput(f"{where}: SLURM refuses the job ({said}); fix the option and try again")


def _refusal(text: str) -> str:
    """SLURM's reason, without its `sbatch: error:` prefixes (its last error line says it best)."""
    lines = [line.split("error:", 1)[-1].strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no reason given"


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def job_states(jobs: Sequence[str]) -> dict[str, str]:
    """Each job's state as `squeue` says it (PENDING, RUNNING, COMPLETED, ...), `GONE` for one it
    no longer lists; {} when SLURM cannot be asked (a display then shows no state)."""
    if not jobs or shutil.which("squeue") is None:
        return {}
    try:
        answer = subprocess.run(
            ["squeue", "-h", "--states=all", "-o", "%i %T", "-j", ",".join(jobs)],
            capture_output=True,
            text=True,
            timeout=ANSWER_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {}
    if answer.returncode != 0 and "Invalid job id" not in answer.stderr:
        return {}
    listed = dict(line.split(maxsplit=1) for line in answer.stdout.splitlines() if len(line.split()) == 2)
    return {job: listed.get(job, GONE) for job in jobs}
