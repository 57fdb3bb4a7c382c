"""The Slurm driver: a boot is one Slurm job. The recipe's topology becomes the allocation
(rig/boot/slurm_job.py), the engine starts with `srun` on every node through the launcher
(rig/boot/slurm_launch.py), from the same environment the native driver would give it. The health
wait runs against the head; each node keeps its own log and fingerprint in the boot directory,
and the job id and node list go into the boot record. `down` cancels the job and waits until Slurm
says it ended. A job Slurm ends (time limit, node failure, an outside scancel) is a failed boot
with Slurm's state and reason, never a wait that does not end.

The boot directory must be on a filesystem every node sees (results/ under a shared home, as
Slurm clusters have), and rig's environment at the same path on every node.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import time
from collections.abc import Collection
from pathlib import Path

from rig.atomic import write_text_atomic
from rig.boot import slurm_job
from rig.boot.base import DRIVERS, BootFailed, BootPreempted
from rig.boot.health import await_healthy
from rig.boot.native import NativeDriver
from rig.boot.record import BootRecord
from rig.boot.slurm_launch import PLAN_FILE, LaunchPlan, fingerprint_name
from rig.boot.state import forget, new_boot, refuse_if_port_taken, refuse_if_up, remember
from rig.deploy.recipe import Resolved
from rig.engines import server_argv
from rig.errors import RigError
from rig.observe.fingerprint import Fingerprint
from rig.paths import REPO_ROOT

DIST_PORT_OFFSET = 1  # the head's rendezvous listens next to the server's port
ALLOCATION_WAIT_S = 600.0


class SlurmDriver(NativeDriver):
    name = "slurm"

    def plan(self, resolved: Resolved, model: str, port: int) -> LaunchPlan:
        """Every rank's argv: the native driver's, with the rank's own multi-node flags."""
        native = resolved.recipe.native
        python = native.interpreter() if native else None
        first = self.argv(resolved, model, port)
        argv = []
        for rank in range(resolved.topology.nodes):
            ranked = server_argv(resolved, model, resolved.recipe.serving.bind, node_rank=rank, python=python)
            ranked[ranked.index("--port") + 1] = str(port)
            ranked[0] = first[0]  # the program as the native driver resolves it (the venv's console script)
            argv.append(ranked)
        return LaunchPlan(argv=argv, dist_port=port + DIST_PORT_OFFSET)

    def up(self, resolved: Resolved, overlay: dict[str, str] | None = None, port: int | None = None,
           progress: bool = True, cold_caches: bool = False, unset: Collection[str] = ()) -> BootRecord:
        serving = resolved.recipe.serving
        port = port or serving.port
        refuse_if_up(resolved.recipe.name)
        refuse_if_port_taken(resolved, port)
        overlay = dict(overlay or {})
        record = new_boot(resolved, self.name, overlay, port)
        name = slurm_job.job_name(record.boot_id)
        try:
            model = self.model_path(resolved)
            env, _ = self.environment(resolved, overlay, record, cold_caches, unset)
            plan = self.plan(resolved, model, port)
            write_text_atomic(Path(record.boot_dir) / PLAN_FILE, plan.model_dump_json(indent=1))
            write_text_atomic(Path(record.boot_dir) / "command.txt", "\n".join(" ".join(a) for a in plan.argv) + "\n")
            if progress:
                print(f"{record.ref}: asking Slurm for {' '.join(slurm_job.allocation_args(resolved))}", file=sys.stderr)
            record.slurm_job = slurm_job.allocate(resolved, name, ALLOCATION_WAIT_S)
            remember(record)
            record.slurm_nodes = list(slurm_job.state(record.slurm_job).nodes)
            head = slurm_job.node_address(record.slurm_nodes[0])
            _refuse_loopback_off_head(resolved, head)
            record.base_url = f"http://{f'[{head}]' if ':' in head else head}:{port}"
            remember(record)
            self._step = start_step(record.slurm_job, resolved.topology.nodes, Path(record.boot_dir), env, record.boot_id)
        except BaseException as error:
            record.status, record.error = "failed", str(error) or type(error).__name__
            if record.slurm_job:
                self.down(record)
            else:  # interrupted while waiting for the allocation: a granted one must not outlive the boot
                slurm_job.cancel_by_name(name)
                forget(record)
            if isinstance(error, OSError):
                raise BootFailed(f"{record.ref}: the Slurm step could not start ({error}); log: {record.log_path}") from None
            raise
        try:
            record = await_healthy(self, record, serving, progress, resolved.recipe.engine.name)
        except BootFailed as error:
            ended = self.preempted(record)
            if ended is not None:
                raise BootPreempted(f"{record.ref}: Slurm ended job {record.slurm_job} before the server was healthy: "
                                    f"{ended}; log: {record.log_path}") from error
            raise
        record.fingerprint = self.job_fingerprint(record)
        remember(record)
        return record

    def job_fingerprint(self, record: BootRecord) -> Fingerprint | None:
        """The head node's fingerprint (with the boot's own image, manifests and caches, read on
        this host), the job's node list, and every node's fingerprint as it wrote it."""
        own = record.fingerprint
        paths = [Path(record.boot_dir) / fingerprint_name(rank) for rank in range(len(record.slurm_nodes))]
        if own is None or not paths or not all(path.is_file() for path in paths):
            return own
        nodes = [Fingerprint.model_validate(json.loads(path.read_text())) for path in paths]
        return nodes[0].model_copy(update={"image_id": own.image_id, "image_digests": own.image_digests,
                                       "adapter_manifests": own.adapter_manifests, "compile_cache": own.compile_cache,
                                       "slurm_nodes": ",".join(record.slurm_nodes), "nodes": nodes})

    def preempted(self, record: BootRecord) -> str | None:
        """Slurm's state and reason when Slurm ended the job without rig asking (the record's own
        `down` writes it as the job's end), else None."""
        if record.slurm_job is None:
            return None
        if record.slurm_end is not None or record.stopped is not None:
            return record.slurm_end  # rig stopped it: running until then, unless Slurm had ended it first
        now = slurm_job.state(record.slurm_job)
        return None if now.live else now.why_ended()

    def alive(self, record: BootRecord) -> str | None:
        if record.slurm_job is None:
            return "no Slurm job recorded"
        now = slurm_job.state(record.slurm_job)
        if not now.live:
            return now.why_ended()
        step = getattr(self, "_step", None)
        if step is not None and step.args[2] == record.slurm_job:  # our own srun: its exit is the step's end
            code = step.poll()
            return None if code is None else f"the engine's job step ended (srun exit code {code}) while job {record.slurm_job} runs"
        if now.state == "RUNNING" and not slurm_job.steps(record.slurm_job):
            return f"no job step of Slurm job {record.slurm_job} runs (the engine ended)"
        return None

    def foreign_listener(self, record: BootRecord) -> str | None:
        return None  # the head's port is served on the head node, whose processes this host cannot see

    def down(self, record: BootRecord) -> None:
        """Cancel the job and wait until Slurm says it ended, nothing of it left in squeue."""
        if record.slurm_job is not None:
            before = slurm_job.state(record.slurm_job)
            if not before.live:  # Slurm ended it first: its state and reason are the boot's end, a failed one
                record.slurm_end = before.why_ended()
                record.status = "failed"
                record.error = record.error or f"Slurm ended job {record.slurm_job} before rig stopped it: {record.slurm_end}"
            slurm_job.cancel(record.slurm_job)
        step = getattr(self, "_step", None)
        if step is not None:
            try:
                step.wait(timeout=30)
            except subprocess.TimeoutExpired:
                step.kill()
        record.stopped = time.time()
        if record.status != "failed":
            record.status = "stopped"
        forget(record)


DRIVERS[SlurmDriver.name] = SlurmDriver


def start_step(job: str, nodes: int, boot_dir: Path, env: dict[str, str], name: str) -> subprocess.Popen[bytes]:
    """The job's step: the launcher (rig/boot/slurm_launch.py) as one task on every node, reading
    BOOT_DIR/launch.json; a task that fails ends the step. srun runs in a session of its own (an
    interrupt of rig is not the engine's) and writes its own messages to BOOT_DIR/srun.log."""
    command = ["srun", "--jobid", job, "--nodes", str(nodes), "--ntasks", str(nodes), "--ntasks-per-node", "1",
               "--kill-on-bad-exit=1", "--job-name", name, "--chdir", str(REPO_ROOT),
               sys.executable, "-m", "rig.boot.slurm_launch", str(boot_dir)]
    with open(boot_dir / "srun.log", "ab") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=REPO_ROOT, start_new_session=True)


def _refuse_loopback_off_head(resolved: Resolved, head: str) -> None:
    """A server bound to loopback on a head node that is not this host answers no one here."""
    bind = resolved.recipe.serving.bind
    try:
        loopback_bind, loopback_head = ipaddress.ip_address(bind).is_loopback, ipaddress.ip_address(head).is_loopback
    except ValueError:
        loopback_bind, loopback_head = ipaddress.ip_address(bind).is_loopback, False
    if loopback_bind and not loopback_head:
        raise RigError(f"recipes/{resolved.recipe.name}.yaml", "serving.bind", f"the engine would listen on {bind} of "
                       f"Slurm node {head}, which rig on this host cannot reach", "bind 0.0.0.0 (the cluster's network) "
                       "in the recipe or a variant for Slurm boots")

