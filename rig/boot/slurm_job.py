"""A boot's Slurm job, through Slurm's own commands (salloc, squeue, scontrol, sacct, scancel).

A boot is one allocation (`salloc --no-shell`: the job owns its nodes until it is cancelled or
its time runs out) and one job step on every node of it (`srun`, rig/boot/slurm.py). The job is
named after the boot id, so it can be found by name even when rig died before it read the id.
What Slurm says about the job is read from its machine-readable output (`squeue -h -o`,
`scontrol -o`), never from a message meant for people.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass

from rig.deploy.recipe import Resolved
from rig.errors import Invalid, RigError

PARTITION_ENV = "RIG_SLURM_PARTITION"
ACCOUNT_ENV = "RIG_SLURM_ACCOUNT"
TIME_ENV = "RIG_SLURM_TIME"
DEFAULT_TIME = "02:00:00"
COMMAND_TIMEOUT_S = 60
# Job states in which the job still holds (or waits for) its nodes (squeue's %T); any other is an end.
LIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "RESIZING", "REQUEUED",
                         "REQUEUE_HOLD", "REQUEUE_FED", "SIGNALING", "STAGE_OUT", "STOPPED"})


class SlurmUnavailable(RigError):
    """The Slurm client commands are missing, or the controller does not answer."""


@dataclass(frozen=True)
class JobState:
    """Where a job stands, as Slurm reports it: its state, and the reason Slurm gives."""

    state: str  # RUNNING, PENDING, TIMEOUT, NODE_FAIL, CANCELLED, FAILED, ... ("" when Slurm no longer knows it)
    reason: str = ""
    nodes: tuple[str, ...] = ()

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES

    def why_ended(self) -> str:
        reason = f" ({self.reason})" if self.reason and self.reason != "None" else ""
        return f"Slurm job state {self.state or 'unknown (no longer in squeue or scontrol)'}{reason}"


def job_name(boot_id: str) -> str:
    return f"rig-{boot_id}"


def allocation_args(resolved: Resolved, environ: dict[str, str] | None = None) -> list[str]:
    """salloc's arguments for a boot of `resolved`: its topology as the allocation (one task per
    node; GPUs per node only where the recipe uses GPUs), a time limit, and the partition and
    account from the recipe's `slurm` section or the environment (RIG_SLURM_PARTITION, ...)."""
    environ = os.environ if environ is None else environ
    slurm = resolved.recipe.slurm
    topology = resolved.topology
    args = ["--nodes", str(topology.nodes), "--ntasks-per-node", "1"]
    if resolved.recipe.gpu and topology.gpus_per_node:
        args += ["--gpus-per-node", str(topology.gpus_per_node)]
    args += ["--time", environ.get(TIME_ENV) or (slurm.time if slurm else None) or DEFAULT_TIME]
    for flag, variable, field in (("--partition", PARTITION_ENV, "partition"), ("--account", ACCOUNT_ENV, "account")):
        value = environ.get(variable) or (getattr(slurm, field) if slurm else None)
        if value:
            args += [flag, value]
    if slurm:
        if slurm.constraint:
            args += ["--constraint", slurm.constraint]
        args += list(slurm.extra_args)
    return args


def _slurm(*command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    if shutil.which(command[0]) is None:
        raise SlurmUnavailable("environment", "PATH", f"{command[0]} is not installed here: this host is no Slurm client",
                               "run rig on a Slurm login node, or start the lab cluster with `make slurm-lab`")
    try:
        result = subprocess.run(list(command), capture_output=True, text=True, check=False, timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SlurmUnavailable("slurm", command[0], f"did not answer within {COMMAND_TIMEOUT_S} s",
                               "check the controller (`scontrol ping`)") from None
    if check and result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no message"])[-1]
        raise SlurmUnavailable("slurm", command[0], f"exited {result.returncode}: {last}",
                               "check the cluster (`sinfo`, `scontrol ping`) and SLURM_CONF")
    return result


def job_id(name: str) -> str | None:
    """The id of the live job named `name` (the boot's), or None."""
    ids = _slurm("squeue", "-h", "--name", name, "-o", "%i").stdout.split()
    return ids[0] if ids else None


def state(job: str) -> JobState:
    """The job's state: squeue while it is queued or runs, then scontrol (Slurm keeps an ended job
    for MinJobAge seconds), then sacct where accounting is kept."""
    found = _slurm("squeue", "-h", "-j", job, "-o", "%T|%r|%N", check=False)
    line = found.stdout.strip().splitlines()[0] if found.returncode == 0 and found.stdout.strip() else ""
    if line:
        state_, reason, nodes = (line.split("|") + ["", ""])[:3]
        if state_ in LIVE_STATES:
            return JobState(state_, reason, tuple(hostnames(nodes)) if nodes else ())
    shown = _slurm("scontrol", "-o", "show", "job", job, check=False)
    if shown.returncode == 0 and shown.stdout.strip():
        fields = dict(part.split("=", 1) for part in shown.stdout.split() if "=" in part)
        nodes = fields.get("NodeList", "")
        return JobState(fields.get("JobState", ""), fields.get("Reason", ""),
                        tuple(hostnames(nodes)) if nodes and nodes != "(null)" else ())
    if shutil.which("sacct"):
        accounted = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "State,Reason"], capture_output=True,
                                   text=True, check=False, timeout=COMMAND_TIMEOUT_S)
        rows = [row.split("|") for row in accounted.stdout.splitlines() if row.strip()] if accounted.returncode == 0 else []
        if rows:
            return JobState(rows[0][0].split()[0], rows[0][1] if len(rows[0]) > 1 else "")
    return JobState("")


def steps(job: str) -> list[str]:
    """The job's steps that run (squeue -s), e.g. ["123.0"]."""
    found = _slurm("squeue", "-h", "-s", "-j", job, "-o", "%i", check=False)
    return found.stdout.split() if found.returncode == 0 else []


def hostnames(nodelist: str) -> list[str]:
    """Slurm's compressed node list (n[1-2]) as names, in Slurm's order (the first is the head)."""
    return _slurm("scontrol", "show", "hostnames", nodelist).stdout.split()


def node_address(node: str) -> str:
    """The address Slurm reaches `node` at (its NodeAddr), the address the head serves on."""
    shown = _slurm("scontrol", "-o", "show", "node", node)
    fields = dict(part.split("=", 1) for part in shown.stdout.split() if "=" in part)
    return fields.get("NodeAddr") or node


def allocate(resolved: Resolved, name: str, timeout_s: float) -> str:
    """Ask for the boot's allocation and wait until Slurm grants it; the job id. A request Slurm
    refuses (no such partition, more nodes than it has) is Invalid, in Slurm's own words."""
    command = ["salloc", "--no-shell", "--job-name", name, *allocation_args(resolved)]
    if shutil.which("salloc") is None:
        _slurm("salloc")  # raises SlurmUnavailable
    try:
        result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        cancel_by_name(name)
        raise Invalid(f"recipes/{resolved.recipe.name}.yaml", "topology", f"Slurm did not grant the allocation within "
                      f"{timeout_s:.0f} s ({' '.join(command[1:])})", "check `squeue` and `sinfo`; ask for a free partition") from None
    job = job_id(name)
    if result.returncode != 0 or job is None:
        last = (result.stderr.strip().splitlines() or ["no message"])[-1]
        cancel_by_name(name)
        raise Invalid(f"recipes/{resolved.recipe.name}.yaml", "topology", f"Slurm refused the allocation: {last}",
                      f"check the request ({' '.join(command[1:])}) against `sinfo`; set {PARTITION_ENV}/{ACCOUNT_ENV}")
    return job


def cancel_by_name(name: str) -> None:
    _slurm("scancel", "--name", name, check=False)


def cancel(job: str, wait_s: float = 120.0) -> JobState:
    """scancel the job, then wait until Slurm says it ended (nothing of it left in squeue); its
    last state. A job still there after `wait_s` is an error: its nodes may still hold the engine."""
    _slurm("scancel", job, check=False)
    deadline = time.monotonic() + wait_s
    while True:
        now = state(job)
        if not now.live and not steps(job):
            return now
        if time.monotonic() > deadline:
            raise SlurmUnavailable(f"slurm job {job}", "(stop)", f"still {now.state} {wait_s:.0f} s after scancel",
                                   f"look at it (`scontrol show job {job}`) and cancel it with `scancel {job}`")
        time.sleep(0.5)
