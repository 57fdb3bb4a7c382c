"""The native process driver: runs the engine as a background process group on this machine
(tiny-cpu). A pid file, a log file, a health wait and a stop that leaves no process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rig.boot.base import BootRecord, await_healthy, new_boot, remember
from rig.engines import server_argv
from rig.errors import RigError
from rig.recipe import REPO_ROOT, Resolved
from rig.tinymodel import ensure_tiny_model

CACHE_DIR = Path(os.environ.get("RIG_CACHE_DIR", Path.home() / ".cache" / "rig"))
STOP_GRACE_S = 10.0


def _port_free(port: int, host: str) -> bool:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


class NativeDriver:
    name = "native"

    def model_path(self, resolved: Resolved) -> str:
        if resolved.recipe.model.source == "generated":
            return str(ensure_tiny_model(CACHE_DIR / "models"))
        return resolved.recipe.model.path

    def argv(self, resolved: Resolved, model_path: str, port: int) -> list[str]:
        argv = server_argv(resolved, model_path, resolved.recipe.serving.bind)
        argv[argv.index("--port") + 1] = str(port)
        executable = Path(sys.executable).parent / argv[0]
        if executable.exists():  # the CLI installed beside this interpreter (the project's venv)
            argv[0] = str(executable)
        return argv

    def up(self, resolved: Resolved, overlay: dict[str, str] | None = None, port: int | None = None,
           progress: bool = True) -> BootRecord:
        serving = resolved.recipe.serving
        port = port or serving.port
        if not _port_free(port, serving.bind):
            raise RigError(f"recipes/{resolved.recipe.name}.yaml", "serving.port",
                           f"port {port} on {serving.bind} is already in use", f"stop what uses it (`rig status`, `rig down {resolved.recipe.name}`) or pass --port")
        overlay = dict(overlay or {})
        record = new_boot(resolved, self.name, overlay, port)
        model = self.model_path(resolved)
        env = {**os.environ, **resolved.full_env(), **overlay,
               "RIG_ADAPTER_MANIFEST_DIR": record.manifest_dir, "RIG_BOOT_ID": record.boot_id}
        argv = self.argv(resolved, model, port)
        (Path(record.boot_dir) / "command.txt").write_text(" ".join(argv) + "\n")
        log = open(record.log_path, "ab")  # noqa: SIM115 - handed to the child, closed below
        try:
            process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env=env, cwd=REPO_ROOT, start_new_session=True)
        finally:
            log.close()
        record.pid = process.pid
        (Path(record.boot_dir) / "server.pid").write_text(f"{process.pid}\n")
        remember(record)
        self._process = process
        return await_healthy(self, record, serving, progress)

    def alive(self, record: BootRecord) -> str | None:
        process = getattr(self, "_process", None)
        if process is not None and process.pid == record.pid:
            code = process.poll()
            return None if code is None else f"exit code {code}"
        if record.pid is None:
            return "no pid"
        try:
            os.kill(record.pid, 0)
        except ProcessLookupError:
            return "process gone"
        return None

    def down(self, record: BootRecord) -> None:
        from rig.boot.base import forget

        if record.pid is not None:
            _stop_group(record.pid)
        process = getattr(self, "_process", None)
        if process is not None and process.pid == record.pid:
            process.wait(timeout=5)
        record.stopped = time.time()
        if record.status != "failed":
            record.status = "stopped"
        forget(record)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reap(pid: int) -> None:
    """Collect our own child's exit status so it does not linger as a zombie in the group."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not our child (stopped from another rig process): init reaps it


def _wait_gone(pgid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        _reap(pgid)
        if not _group_alive(pgid):
            return True
        time.sleep(0.1)
    return False


def _stop_group(pgid: int) -> None:
    """SIGTERM the whole process group, then SIGKILL what is left after a grace period."""
    if not _group_alive(pgid):
        return
    os.killpg(pgid, signal.SIGTERM)
    if not _wait_gone(pgid, STOP_GRACE_S):
        os.killpg(pgid, signal.SIGKILL)
        _wait_gone(pgid, 5.0)
