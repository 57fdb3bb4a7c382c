"""The native process driver: runs the engine as a background process group on this machine,
from rig's own environment (tiny-cpu) or from the Python environment a recipe names (vLLM or
SGLang on bare-metal GPU hosts, under Slurm or systemd). A pid file, a log file, a health wait
and a stop that leaves no process behind."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Collection
from pathlib import Path

from rig import paths
from rig.atomic import write_text_atomic
from rig.boot import engine_env
from rig.boot import process as kernel
from rig.boot.base import DRIVERS, BootFailed
from rig.boot.health import await_healthy
from rig.boot.record import BootRecord
from rig.boot.state import forget, new_boot, refuse_if_port_taken, refuse_if_up, remember
from rig.deploy.recipe import Resolved
from rig.engines import ENGINES, NO_NETWORK_ENV, server_argv
from rig.errors import RigError
from rig.paths import REPO_ROOT
from rig.tinymodel import ensure_tiny_model

# The optional extra that holds the CPU demo server (transformers serve) and the model generator (torch).
CPU_DEMO_EXTRA = "cpu-demo"
STOP_GRACE_S = 10.0


class NativeDriver:
    name = "native"

    def model_path(self, resolved: Resolved) -> str:
        if resolved.recipe.model.source == "generated":
            try:
                return str(ensure_tiny_model(paths.cache_dir() / "models", resolved.recipe.model.generate or ""))
            except ImportError as error:  # torch and transformers are the cpu-demo extra, not rig's core
                raise RigError(f"recipes/{resolved.recipe.name}.yaml", "model.generate",
                               f"generating this model needs {error.name or 'torch and transformers'}, which is not installed",
                               f"pip install 'rig[{CPU_DEMO_EXTRA}]' (make setup installs it)") from None
        return resolved.recipe.model.path

    def argv(self, resolved: Resolved, model_path: str, port: int) -> list[str]:
        native = resolved.recipe.native
        argv = server_argv(resolved, model_path, resolved.recipe.serving.bind, python=native.interpreter() if native else None)
        argv[argv.index("--port") + 1] = str(port)
        executable = Path(sys.executable).parent / argv[0]
        if native is None and executable.exists():  # the CLI installed beside this interpreter (the project's venv)
            argv[0] = str(executable)
        return argv

    def environment(self, resolved: Resolved, overlay: dict[str, str], record: BootRecord,
                    cold_caches: bool, unset: Collection[str] = ()) -> tuple[dict[str, str], list[str]]:
        """(the server's environment, extra arguments). With a native Python environment named,
        PYTHONPATH is exactly rig's adapter overlay plus the recipe's entries: nothing of rig's own
        environment leaks in. RIG_API_KEY never reaches the engine under its own name. `unset`: names
        that another arm of a comparison sets, so this boot must not inherit them from rig's own
        environment (an arm's `KEY` alone takes its value from there: every boot would have it)."""
        engine = ENGINES[resolved.recipe.engine.name]
        inherited = {key: value for key, value in os.environ.items() if key not in unset}
        env = {**inherited, **NO_NETWORK_ENV, **resolved.full_env(), **overlay, **engine_env.visible_devices(resolved),
               "RIG_ADAPTER_MANIFEST_DIR": record.manifest_dir, "RIG_BOOT_ID": record.boot_id,
               "RIG_ENGINE": resolved.recipe.engine.name}
        native = resolved.recipe.native
        if native is None and importlib.util.find_spec(engine.package) is None:
            raise RigError(f"recipes/{resolved.recipe.name}.yaml", "engine.name",
                           f"{engine.name} is not installed in rig's environment ({sys.executable})",
                           f"pip install 'rig[{CPU_DEMO_EXTRA}]'" if engine.name == "transformers" else
                           f"install {engine.package} there, or name the engine's environment in the recipe's native section")
        if native is not None:
            interpreter = Path(native.interpreter())
            if not os.access(interpreter, os.X_OK):
                raise RigError(f"recipes/{resolved.recipe.name}.yaml", "native", f"{interpreter} is not an executable interpreter here",
                               "install the engine's environment on this host, or correct the path")
            entries = [str(engine_env.adapter_overlay(paths.cache_dir()))] if engine.plugin_group else []
            env["PYTHONPATH"] = os.pathsep.join(entries + list(native.pythonpath))
            env.pop("PYTHONHOME", None)
        if cold_caches:
            env.update(engine_env.fresh_caches(engine, Path(record.boot_dir) / "compile-cache"))
        env.update(engine_env.api_key_environment(resolved.recipe.engine.name, env))
        env.pop(engine_env.API_KEY_ENV, None)
        return env, []

    def up(self, resolved: Resolved, overlay: dict[str, str] | None = None, port: int | None = None,
           progress: bool = True, cold_caches: bool = False, unset: Collection[str] = ()) -> BootRecord:
        serving = resolved.recipe.serving
        port = port or serving.port
        refuse_if_up(resolved.recipe.name)  # before the port check: "still up" is the better answer
        refuse_if_port_taken(resolved, port)
        overlay = dict(overlay or {})
        record = new_boot(resolved, self.name, overlay, port)  # claims the recipe's state file
        held = kernel.HeldSignals()  # from the spawn until the server's pid is recorded, a Ctrl-C waits
        try:  # until the server runs, any failure (or Ctrl-C) marks the boot failed and releases the claim
            model = self.model_path(resolved)
            env, key_args = self.environment(resolved, overlay, record, cold_caches, unset)
            argv = self.argv(resolved, model, port) + key_args
            record.compile_cache = engine_env.cache_state(ENGINES[resolved.recipe.engine.name], env)
            shown = {k: env[k] for k in ("PYTHONPATH", "CUDA_VISIBLE_DEVICES") if k in env}
            write_text_atomic(Path(record.boot_dir) / "command.txt",
                              "".join(f"{k}={v} " for k, v in shown.items()) + " ".join(argv) + "\n")
            with open(record.log_path, "ab") as log:  # the child holds its own descriptor
                held.hold()
                process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           env=env, cwd=REPO_ROOT, start_new_session=True)
        except BaseException as error:
            record.status, record.error = "failed", str(error) or type(error).__name__
            forget(record)
            held.release()
            if isinstance(error, OSError):  # the program could not start: a failed boot, not a crash of rig
                raise BootFailed(f"{record.ref}: the server could not start ({error}); log: {record.log_path}") from None
            raise
        self._process = process
        record.pid = process.pid
        try:  # from here on an interruption (Ctrl-C, SIGTERM, SIGHUP) must not orphan the server
            started = kernel.identity(process.pid)
            if started is not None:
                record.pid_start_ticks, record.kernel_boot_time = started.start_ticks, started.kernel_boot
            write_text_atomic(Path(record.boot_dir) / "server.pid", f"{process.pid}\n")
            remember(record)
            held.release()  # a signal held since the spawn is delivered here, and stops the server below
        except BaseException as error:
            record.status, record.error = "failed", f"interrupted while starting ({str(error) or type(error).__name__})"
            self.down(record)
            held.release()
            raise
        return await_healthy(self, record, serving, progress, resolved.recipe.engine.name)

    def _verdict(self, record: BootRecord) -> tuple[kernel.Verdict, str]:
        if record.pid is None:
            return "gone", "no pid recorded"
        expected = (kernel.Identity(record.pid_start_ticks, record.kernel_boot_time)
                    if record.pid_start_ticks is not None and record.kernel_boot_time is not None else None)
        return kernel.check(record.pid, expected, record.boot_id)

    def alive(self, record: BootRecord) -> str | None:
        process = getattr(self, "_process", None)
        if process is not None and process.pid == record.pid:
            code = process.poll()
            return None if code is None else f"exit code {code}"
        verdict, why = self._verdict(record)
        if verdict == "ours" and kernel.exited(record.pid) and not kernel.group_members(record.pid):
            # A leader that exited with nobody reaping it (PID 1 of a container that reaps nothing)
            # still answers kill(0); with no member of its group running, the server is gone.
            return f"process {record.pid} exited (a zombie not yet reaped), and no process of its group runs"
        return None if verdict == "ours" else why

    def foreign_listener(self, record: BootRecord) -> str | None:
        """Why what answers on the boot's port may not be this boot's server, or None: every process
        listening there is of its process group or carries its boot id (a server another program
        started on the port between the port check and the bind answers /health as well, while
        this boot's dies of EADDRINUSE)."""
        address = urllib.parse.urlsplit(record.base_url)
        found = kernel.listeners(address.hostname or "127.0.0.1", address.port or 80)
        ours = set(kernel.group_members(record.pid)) if record.pid is not None else set()
        foreign = [pid for pid in found if pid is None or (pid not in ours and kernel.boot_id_of(pid) != record.boot_id)]
        if not foreign:
            return None
        names = ", ".join("a process of another user" if pid is None else f"pid {pid} ({kernel.command_name(pid)})" for pid in foreign)
        return f"port {address.port} is served by {names}, not by this boot's process group {record.pid}"

    def down(self, record: BootRecord) -> None:
        """Stop the boot's process group, only through a leader the kernel still identifies as
        this boot's; a state whose pid now names another process is reported and dropped, and
        that process is left alone."""
        process = getattr(self, "_process", None)
        survivors: list[int] = []
        if process is not None and process.pid == record.pid:  # our own child: the pid cannot have been reused
            survivors = _stop_group(record.pid)
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                survivors = survivors or [record.pid]
        elif record.pid is not None:
            verdict, why = self._verdict(record)
            if verdict == "other":
                print(f"rig: boot {record.boot_id}: {why}; not signalling it, dropping the stale state", file=sys.stderr)
                record.not_signalled = why
                record.error = f"stale state: {why}" + (f"; before that: {record.error}" if record.error else "")
            else:  # ours, or a leader gone with its group perhaps left: a live group's id is never reused
                survivors = _stop_group(record.pid)
        if survivors:  # still holding memory and GPUs: keep the state, so `rig down` can be tried again
            record.error = f"processes {survivors} survived SIGKILL"
            remember(record)
            raise RigError(f"boot {record.boot_id}", "(stop)", f"processes {', '.join(map(str, survivors))} of the server "
                           "survived SIGKILL", "look at them (`ps -o pid,stat,args -p PID`): a process in D state waits "
                           f"on the kernel or a GPU; run `rig down {record.recipe}` again once they are gone")
        record.stopped = time.time()
        if record.status != "failed":
            record.status = "stopped"
        record.compile_cache.grew = engine_env.cache_growth(record.compile_cache)
        forget(record)


DRIVERS[NativeDriver.name] = NativeDriver


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
        if not kernel.group_alive(pgid):
            return True
        time.sleep(0.1)
    return False


def _stop_group(pgid: int) -> list[int]:
    """_stop_in_order, and what an interrupt during it means: the first one lets the stop finish in
    order (an engine killed at once leaks shared memory), the next one kills the group now; either
    way the interrupt is raised once the group is stopped."""
    try:
        return _stop_in_order(pgid)
    except KeyboardInterrupt:
        print("rig: stopping the server in order; interrupt again to kill it now", file=sys.stderr)
        try:
            _stop_in_order(pgid)
        except KeyboardInterrupt:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _wait_gone(pgid, 5.0)
        raise


def _stop_in_order(pgid: int) -> list[int]:
    """Returns the processes still running after SIGKILL (none, normally). SIGTERM the leader first,
    so the engine shuts its own processes down in order (vLLM's API
    server stops EngineCore, which stops its workers; signalling all of them at once made the API
    server log EngineDeadError tracebacks and leak shared memory on the H200s); then SIGTERM what is
    left of the group, then SIGKILL after a grace period."""
    if not kernel.group_alive(pgid):
        return []
    try:
        try:
            os.kill(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass  # the leader is gone; its group may still hold processes
        if _wait_gone(pgid, STOP_GRACE_S):
            return []
        os.killpg(pgid, signal.SIGTERM)
        if not _wait_gone(pgid, STOP_GRACE_S / 2):
            os.killpg(pgid, signal.SIGKILL)
            if not _wait_gone(pgid, 15.0):
                return kernel.group_members(pgid)  # what is left: the caller must not forget this boot
    except ProcessLookupError:
        pass  # the group exited between the check and the signal
    return []
