"""Locust workers on a cluster's client nodes: one Slurm job step (`srun`) with one worker per node,
which joins this run's master as remote workers do (their records come back through Locust's
worker reports). The run's directory is on a filesystem the nodes see, so the workers read its
config.json where it is; they carry no RIG_PARENT_PID, as a remote worker started by hand does not.
Partition, account and time limit come from RIG_SLURM_PARTITION, RIG_SLURM_ACCOUNT, RIG_SLURM_TIME.
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from rig.boot.slurm_job import ACCOUNT_ENV, PARTITION_ENV, TIME_ENV, cancel_by_name
from rig.load.wire import RIG_PARENT_ENV
from rig.paths import REPO_ROOT

DEFAULT_TIME = "01:00:00"


def master_host(master_bind: str) -> str:
    """The address the workers reach the master at: the bind address, or this host's name for a wildcard."""
    return socket.getfqdn() if master_bind in ("0.0.0.0", "::") else master_bind  # noqa: S104 - a bind address, compared


def worker_step(workers: int, locust: list[str], master_bind: str, port: int, out_dir: Path,
                env: dict[str, str]) -> tuple[list[str], dict[str, str], str]:
    """(srun's argv, its environment, the job's name) for `workers` Locust workers, one per node."""
    name = f"rig-load-{out_dir.parent.name}-{out_dir.name}"[:120]
    argv = ["srun", "--nodes", str(workers), "--ntasks-per-node", "1", "--ntasks", str(workers), "--job-name", name,
            "--chdir", str(REPO_ROOT), "--time", env.get(TIME_ENV) or DEFAULT_TIME, "--kill-on-bad-exit=1"]
    for flag, variable in (("--partition", PARTITION_ENV), ("--account", ACCOUNT_ENV)):
        if env.get(variable):
            argv += [flag, env[variable]]
    argv += [*locust, "--worker", "--master-host", master_host(master_bind), "--master-port", str(port)]
    worker_env = {key: value for key, value in env.items() if key != RIG_PARENT_ENV}
    return argv, worker_env, name


def start(workers: int, locust: list[str], master_bind: str, port: int, out_dir: Path, env: dict[str, str],
          log: object) -> tuple[subprocess.Popen[bytes], str]:
    argv, worker_env, name = worker_step(workers, locust, master_bind, port, out_dir, env)
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=worker_env, start_new_session=True)  # type: ignore[arg-type]
    return process, name


def stop(name: str) -> None:
    """The workers' job, cancelled by name: whatever of it is left once the run ended."""
    cancel_by_name(name)


