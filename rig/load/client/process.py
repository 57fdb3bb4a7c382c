"""One Locust process of a rig run, as one object: its configuration, what it measures about itself
(lag, CPU, collections), the spawn as it met it, its arrival schedule, its record writer and the
handlers Locust's events call (loadtests/locustfile.py wires them)."""

from __future__ import annotations

import gc
import os
import signal
import socket
import sys
import time
from itertools import count
from typing import Any

import gevent
from locust.runners import LocalRunner, MasterRunner, WorkerRunner

from rig.atomic import write_text_atomic
from rig.load.client import patches
from rig.load.client.monitor import LagMonitor, collect_rarely, collector_off
from rig.load.client.schedule import DRAINED_MESSAGE, EPOCH_LEAD_S, EPOCH_MESSAGE, ArrivalSchedule
from rig.load.client.shipping import Shipping
from rig.load.client.watchdog import StallWatchdog
from rig.load.client.writer import RecordWriter
from rig.load.loop_passes import LoopPasses
from rig.load.wire import RIG_PARENT_ENV, WINDOW_FILE, LoadConfig, WindowEvent, WindowEventName, client_file, dispatcher_file
from rig.load.workload import OutputLengths

CONFIG_ENV = "RIG_LOAD_CONFIG"
PROFILE_ENV = "RIG_PROFILE"  # benchmarks/client_capacity.py --profile: where this process's time goes during the window


def stop_with_rig() -> None:
    """rig starts Locust's processes in sessions of their own and stops them itself (SIGTERM, Locust's
    own shutdown); one whose rig is gone (killed: `timeout -k`, the OOM killer) gets the same SIGTERM
    from the kernel instead of running to its planned end beside whatever runs next. Both signals
    must be deliverable: a mask inherited from whatever started rig (a CI wrapper that blocked them)
    left the run going on to its planned end and the client statistics lost."""
    parent = os.environ.get(RIG_PARENT_ENV)
    if not parent or not sys.platform.startswith("linux"):
        return  # a remote worker, started by hand on another machine
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != int(parent):  # rig was gone before the request above was made
        os.kill(os.getpid(), signal.SIGTERM)


class ClientProcess:
    """Everything one Locust process keeps for rig. `start()` makes the one a Locust file uses."""

    def __init__(self, config: LoadConfig | None) -> None:
        self.config = config
        self.out_dir = config.out_dir if config is not None else "."
        self.process_id = f"{socket.gethostname()}-{os.getpid()}"
        self.writer = RecordWriter(self.out_dir, self.process_id, shipping=config is not None and not os.path.isdir(self.out_dir))
        self.monitor = LagMonitor()
        self.passes = LoopPasses()  # how long each read can have waited behind this process's own loop
        self.stalls = StallWatchdog()
        self.shipping = Shipping(self.process_id, self.out_dir, self.writer, self.monitor.samples)
        self.schedule = ArrivalSchedule(self._drained)
        self.lengths = OutputLengths(config.output_lengths, config.max_tokens) if config is not None else OutputLengths(None, 1)
        # The spawn's rounds as this process met them, each (when the round was dispatched, the users it
        # and the rounds before asked this process for in all): a worker's spawn messages (the master's
        # timestamp), or the local runner's own rounds (rig.load.client.patches).
        self.spawns: list[tuple[float, int]] = []
        self.written: dict[int, float] = {}  # each greenlet's last request's send time (patches.stamp_send_time)
        self.drained_workers: set[str] = set()  # a master's: the workers whose share of the schedule is done
        self.request_ids, self.user_ids, self.conversation_ids = count(), count(), count()
        self.environment: Any = None
        self.profiler: Any = None

    @classmethod
    def start(cls) -> ClientProcess:
        """The process's one ClientProcess: stops with rig, reads the configuration `rig loadtest` wrote
        (RIG_LOAD_CONFIG), and applies the process-wide patches."""
        stop_with_rig()
        path = os.environ.get(CONFIG_ENV)
        process = cls(LoadConfig.read(path) if path else None)
        patches.stamp_send_time(process.written)
        patches.poll_the_kernel()
        return process

    @property
    def settings(self) -> LoadConfig:
        if self.config is None:
            raise RuntimeError(f"{CONFIG_ENV} is not set: run this file through `rig loadtest`")
        return self.config

    def write_window(self, name: WindowEventName, at: float | None = None) -> None:
        event = WindowEvent(event=name, time=time.time() if at is None else at)
        with open(os.path.join(self.out_dir, WINDOW_FILE), "a") as handle:
            handle.write(event.json_text(indent=None) + "\n")

    def on_init(self, environment: Any, **_: Any) -> None:
        self.environment = environment
        runner = environment.runner
        if isinstance(runner, MasterRunner):
            runner.register_message(DRAINED_MESSAGE, self._worker_drained)
            gevent.spawn(self.monitor.run)  # the master's stalls start later batches late: its samples bound that
            return
        if isinstance(runner, WorkerRunner):
            runner.register_message(EPOCH_MESSAGE, self._epoch)
            if os.environ.get(RIG_PARENT_ENV):  # on the master's host: its clock is this one
                patches.record_worker_spawns(runner, self.spawns)
        elif isinstance(runner, LocalRunner):
            patches.record_local_rounds(runner, self.spawns)
        collect_rarely()
        self.passes.watch()
        gevent.spawn(self.monitor.run)

    def on_spawned(self, user_count: int, **_: Any) -> None:
        runner = self.environment.runner if self.environment is not None else None
        if not isinstance(runner, MasterRunner):
            collector_off()
            self._start_profile()
        if isinstance(runner, WorkerRunner):
            return
        self.write_window("spawning_complete")
        if self.settings.arrivals is not None:
            epoch = time.time() + EPOCH_LEAD_S
            self.write_window("arrivals_start", epoch)
            if isinstance(runner, MasterRunner):
                runner.send_message(EPOCH_MESSAGE, epoch)
            else:
                self.schedule.start(epoch)

    def on_stopping(self, environment: Any, **_: Any) -> None:
        self._stop_profile()
        gc.enable()
        if not isinstance(environment.runner, WorkerRunner):
            self.write_window("stopping")

    def on_quit(self, environment: Any, **_: Any) -> None:
        """The client files, each whole or absent: the runner reads them after the run."""
        self._stop_profile()
        self.writer.flush()
        files = {client_file(process): stats for process, stats in self.shipping.stats().items()}
        if isinstance(environment.runner, MasterRunner):
            files[dispatcher_file(self.process_id)] = self.monitor.samples.stats(self.process_id)
        elif not self.writer.shipping:
            files[client_file(self.process_id)] = self.monitor.samples.stats(self.process_id)
        for name, stats in files.items():
            write_text_atomic(os.path.join(self.out_dir, name), stats.json_text(indent=None))  # no .tmp left by a Ctrl-C

    def _drained(self) -> None:
        """This process's share of the schedule is done and answered: a worker tells its master; the
        only process ends the run."""
        runner = self.environment.runner
        if isinstance(runner, WorkerRunner):
            runner.send_message(DRAINED_MESSAGE, self.process_id)
        else:
            self.write_window("drained")
            gevent.spawn(runner.quit)

    def _epoch(self, environment: Any, msg: Any, **_: Any) -> None:
        """A worker's: the master set the schedule's epoch."""
        self.schedule.start(float(msg.data))

    def _worker_drained(self, environment: Any, msg: Any, **_: Any) -> None:
        self.drained_workers.add(str(msg.data))
        if len(self.drained_workers) >= self.settings.arrival_processes:
            self.write_window("drained")
            gevent.spawn(environment.runner.quit)

    def _start_profile(self) -> None:
        if os.environ.get(PROFILE_ENV) and self.profiler is None:
            import cProfile

            self.profiler = cProfile.Profile()
            self.profiler.enable()

    def _stop_profile(self) -> None:
        profiler, self.profiler = self.profiler, None
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(os.path.join(os.environ[PROFILE_ENV], f"profile-{self.process_id}.pstats"))
