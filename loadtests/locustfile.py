"""rig's Locust users: streaming OpenAI chat / completions through the requests-based HttpUser.

Three ways to generate load, one user class each (`rig loadtest` names the one its scenario needs):
- LLMUser: a closed loop; each user sends its next request when the last one ends.
- ArrivalUser: open-loop arrivals (Gamma gaps, as `vllm bench serve`) or a trace replayed at its
  timestamps. The schedule is one sequence for the whole run (every process draws the same one
  and sends its share), arrivals go to free users in order, and an arrival that finds every user
  busy waits: that wait is the client's queueing delay, recorded per request.
- ConversationUser: multi-turn chats; each user holds one conversation and sends its whole history.

Every request writes its own timeline (send, first token, each chunk's arrival, end, token
counts from usage and from chunks, status, error) to this process's JSONL, also when the
run's end cuts it. Summaries are computed from these records by rig, never from Locust's
histograms. Configuration comes from the file named by RIG_LOAD_CONFIG (rig.load.wire.LoadConfig,
written by `rig loadtest`); run this file only through it (or with that variable set). Every file
this process writes for rig is a typed record of rig.load.wire or rig.load.records.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import os
import random
import select
import signal
import socket
import sys
import time
from itertools import count
from typing import Any

import gevent
import gevent.monkey
import psutil
import requests
import urllib3
import urllib3.connection
from gevent.event import Event
from gevent.socket import wait_read
from locust import HttpUser, events, task
from locust.runners import LocalRunner, MasterRunner, WorkerRunner
from locust.user.task import LOCUST_STATE_STOPPING

from rig.atomic import write_text_atomic
from rig.client import auth_headers
from rig.load.kernel_timer import KernelTimer, TimerUnavailable
from rig.load.loop_passes import LoopPasses
from rig.load.records import RequestRecord
from rig.load.sse import StreamScan
from rig.load.wire import (
    LAG_PERIOD_S,
    LAG_PROBE_KERNEL,
    LAG_PROBE_SLEEP,
    RIG_PARENT_ENV,
    WINDOW_FILE,
    ClientStats,
    LagProbe,
    LoadConfig,
    Prompt,
    WindowEvent,
    WindowEventName,
    client_file,
    dispatch_wait,
    dispatched_at,
    dispatcher_file,
)
from rig.load.workload import OutputLengths, gamma_offsets


def _stop_with_rig() -> None:
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


_stop_with_rig()
_CONFIG_PATH = os.environ.get("RIG_LOAD_CONFIG")
CONFIGURED: LoadConfig | None = LoadConfig.read(_CONFIG_PATH) if _CONFIG_PATH else None
OUT_DIR = CONFIGURED.out_dir if CONFIGURED is not None else "."


def config() -> LoadConfig:
    if CONFIGURED is None:
        raise RuntimeError("RIG_LOAD_CONFIG is not set: run this file through `rig loadtest`")
    return CONFIGURED

PROCESS_ID = f"{socket.gethostname()}-{os.getpid()}"


class RecordWriter:
    """Appends one JSON line per request, in batches: a write per request cost a system call per
    request; lines are flushed every FLUSH_S and when the process quits (Locust's SIGINT/SIGTERM
    handling and the run's end both quit it), so an interrupted run keeps what it measured, and a
    SIGKILL loses at most FLUSH_S of records. A worker on another machine (the run's directory is
    not here) ships its lines to the master with Locust's own worker reports instead; the master
    appends them to the same kind of file."""

    FLUSH_S = 0.5

    def __init__(self) -> None:
        self.handle = None
        self.shipping = CONFIGURED is not None and not os.path.isdir(OUT_DIR)
        self.outbox: list[str] = []
        self.pending: list[str] = []
        self.flusher: Any = None

    def write(self, line: str) -> None:
        if self.shipping:
            self.outbox.append(line)
            return
        self.pending.append(line)
        if self.flusher is None:
            self.flusher = gevent.spawn(self._flush_periodically)

    def _flush_periodically(self) -> None:
        while True:
            gevent.sleep(self.FLUSH_S)
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        if self.handle is None:
            self.handle = open(os.path.join(OUT_DIR, f"records-{PROCESS_ID}.jsonl"), "a")  # noqa: SIM115
        lines, self.pending = self.pending, []
        self.handle.write("".join(line + "\n" for line in lines))
        self.handle.flush()


WRITER = RecordWriter()
LAG: list[tuple[float, float]] = []  # (wall time, lag seconds)
LAG_PROBE = [LAG_PROBE_KERNEL]  # which event the monitor times (set when it starts)
# How long each read can have waited behind this process's own event loop (rig.load.loop_passes).
PASSES = LoopPasses()
CPU: list[float] = []
CPU_TIME: list[tuple[float, float]] = []  # (wall time, this process's user + system CPU seconds)
REQUEST_IDS = count()
USER_IDS = count()
ROLE: dict[str, Any] = {"environment": None}


def _lag_probe() -> KernelTimer | None:
    try:
        return KernelTimer()
    except TimerUnavailable:
        return None


def _lag_monitor() -> None:
    """Event-loop lag: how late the loop runs an event that is due. High lag means the client
    distorts timings. The event is a kernel timer the loop waits on as on a socket, so it is late
    exactly as a chunk's read is (rig.load.kernel_timer says why a gevent sleep is not); without one
    (not Linux), a gevent sleep, whose lag overstates a socket's by up to 1 ms. Each wait is drawn
    between half and all of LAG_PERIOD_S: a fixed period locks onto an engine whose step is near it
    (or a divisor of it) and then samples only the quiet part of every step. The once-a-second work
    (CPU samples, a collection past its budget) runs after the next event is due, so a pause it
    causes is in the next sample like any other stall."""
    process = psutil.Process()
    process.cpu_percent(None)
    last_cpu = time.monotonic()
    timer = _lag_probe()
    LAG_PROBE[0] = LAG_PROBE_KERNEL if timer is not None else LAG_PROBE_SLEEP
    phases = random.Random(os.getpid())
    while True:
        due = time.monotonic() + phases.uniform(LAG_PERIOD_S / 2, LAG_PERIOD_S)
        if time.monotonic() - last_cpu >= 1.0:
            CPU.append(process.cpu_percent(None))
            times = process.cpu_times()
            CPU_TIME.append((time.time(), times.user + times.system))
            last_cpu = time.monotonic()
            _collect_if_over_budget()
        if timer is not None:
            timer.arm(due)
            wait_read(timer.fileno())
            woke = time.monotonic()
            timer.consume()
        else:
            gevent.sleep(max(0.0, due - time.monotonic()))
            woke = time.monotonic()
        LAG.append((time.time(), woke - due))


# With the collector off, the reference cycles requests/urllib3 leave per request (measured: ~45
# objects, ~10 kB) are never freed. Past this many objects since the last collection the client
# collects once, and that pause is in the lag samples like any other: a run it disturbed says so.
GC_BUDGET = 1_000_000
GC_PAUSES: list[tuple[float, float]] = []  # (wall time, seconds the collection took)


def _collect_if_over_budget() -> None:
    if not gc.isenabled() and gc.get_count()[0] > GC_BUDGET:
        start = time.perf_counter()
        gc.collect()
        GC_PAUSES.append((time.time(), time.perf_counter() - start))


def _write_window(name: WindowEventName, at: float | None = None) -> None:
    event = WindowEvent(event=name, time=time.time() if at is None else at)
    with open(os.path.join(OUT_DIR, WINDOW_FILE), "a") as handle:
        handle.write(event.json_text(indent=None) + "\n")


class ArrivalSchedule:
    """The run's arrival times, shared by this process's users. Every process computes the same
    schedule and takes its share (arrival i goes to process i mod n), so the arrivals of a
    distributed run are the one schedule the scenario asked for. The schedule starts at an epoch
    the master (or the only process) sets just after every user has spawned."""

    def __init__(self) -> None:
        self.offsets: list[float] = []
        self.index = self.step = 0
        self.epoch: float | None = None
        self.started = Event()
        self.exhausted = False
        self.inflight = 0  # arrivals claimed by a user and not yet answered
        self.drained = False

    def load(self, worker: int) -> None:
        arrivals = config().arrivals
        if arrivals is not None and arrivals.offsets is not None:  # a trace: its own timestamps
            self.offsets = arrivals.offsets
        elif arrivals is not None:
            self.offsets = gamma_offsets(arrivals.rate, arrivals.burstiness, arrivals.count, arrivals.seed)  # type: ignore[arg-type]
        self.step = max(1, config().arrival_processes)
        self.index = worker % self.step

    def start(self, epoch: float) -> None:
        self.epoch = epoch
        self.started.set()

    def claim(self) -> tuple[int, float] | None:
        """The next arrival of this process's share, or None once the schedule is done."""
        if self.index >= len(self.offsets):
            self.exhausted = True
            self._check_drained()
            return None
        index = self.index
        self.index += self.step
        self.inflight += 1  # claimed and not yet answered: the run is not drained while a user waits to send it
        return index, self.epoch + self.offsets[index]  # type: ignore[operator]

    def finished_one(self) -> None:
        self.inflight -= 1
        self._check_drained()

    def _check_drained(self) -> None:
        """The schedule is done and nothing is in flight: end the run instead of idling to -t."""
        if not self.exhausted or self.inflight or self.drained:
            return
        self.drained = True
        runner = ROLE["environment"].runner
        if isinstance(runner, WorkerRunner):
            runner.send_message("rig_drained", PROCESS_ID)
        else:
            _write_window("drained")
            gevent.spawn(runner.quit)


SCHEDULE = ArrivalSchedule()
EPOCH_LEAD_S = 0.5  # the epoch is set this far ahead, so every worker has it before the first arrival
DRAINED: set[str] = set()


def _on_epoch(environment: Any, msg: Any, **_: Any) -> None:
    SCHEDULE.start(float(msg.data))


def _on_drained(environment: Any, msg: Any, **_: Any) -> None:
    DRAINED.add(str(msg.data))
    if len(DRAINED) >= config().arrival_processes:
        _write_window("drained")
        gevent.spawn(environment.runner.quit)


@events.init.add_listener
def _on_init(environment: Any, **_: Any) -> None:
    ROLE["environment"] = environment
    if isinstance(environment.runner, MasterRunner):
        environment.runner.register_message("rig_drained", _on_drained)
        gevent.spawn(_lag_monitor)  # the master's stalls start later batches late: its samples bound that
        return
    if isinstance(environment.runner, WorkerRunner):
        environment.runner.register_message("rig_epoch", _on_epoch)
        if os.environ.get(RIG_PARENT_ENV):  # on the master's host: its clock is this one
            _record_spawns(environment.runner)
    elif isinstance(environment.runner, LocalRunner):
        _record_rounds(environment.runner)
    # Thousands of live streams keep many objects alive; default GC thresholds then stop the
    # event loop for full collections of ~10 ms, which shows up as client lag. Collect rarely
    # until the users exist; during the measured run the collector is off (see _on_spawned).
    gc.freeze()
    gc.set_threshold(100_000, 50, 1000)
    PASSES.watch()
    gevent.spawn(_lag_monitor)


# The spawn's rounds as this process met them, each (when the round was dispatched, the users it and
# the rounds before asked this process for in all): a worker's spawn messages (the master's timestamp),
# or the local runner's own rounds.
SPAWNS: list[tuple[float, int]] = []


def _record_spawns(runner: WorkerRunner) -> None:
    """The master paces the spawn and a worker spawns each batch as it comes: a worker's stall holds
    back the batch it met, not the later ones, whose messages the master sends on its own clock
    (records' t_dispatched; rig.load.client_error). Locust keeps no list of them, so the worker's
    message handler is wrapped; a message of another shape is passed on unrecorded."""
    handle = runner.handle_message

    def recorded(message: Any) -> None:
        data = message.data if message.type == "spawn" else None
        if isinstance(data, dict) and isinstance(data.get("timestamp"), float) and isinstance(data.get("user_classes_count"), dict):
            SPAWNS.append((data["timestamp"], sum(data["user_classes_count"].values())))
        handle(message)

    runner.handle_message = recorded


def _record_rounds(runner: LocalRunner) -> None:
    """Locust's local runner paces the spawn on this process's own loop: round k is due k waits after
    the first (dispatch_wait), and a wake-up late by however little, a stretch the lag monitor saw as
    a short sample too, delays that round and every later one. Each round calls spawn_users once, the
    rounds that add nobody too (Locust keeps no list of them: the method is wrapped)."""
    spawn = runner.spawn_users

    def recorded(user_classes_spawn_count: dict[str, int], *args: Any, **kwargs: Any) -> Any:
        SPAWNS.append((time.time(), (SPAWNS[-1][1] if SPAWNS else 0) + sum(user_classes_spawn_count.values())))
        return spawn(user_classes_spawn_count, *args, **kwargs)

    runner.spawn_users = recorded


@events.spawning_complete.add_listener
def _on_spawned(user_count: int, **_: Any) -> None:
    environment = ROLE["environment"]
    runner = environment.runner if environment is not None else None
    if not isinstance(runner, MasterRunner):
        # Everything alive now (users, sessions, prompts) lives to the end: move it out of the
        # collector's reach, then stop collecting during the window. Reference counting still
        # frees a request's objects when it ends; only cycles wait for the stop.
        gc.collect()
        gc.freeze()
        gc.disable()
        _start_profile()
    if isinstance(runner, WorkerRunner):
        return
    _write_window("spawning_complete")
    if config().arrivals is not None:
        epoch = time.time() + EPOCH_LEAD_S
        _write_window("arrivals_start", epoch)
        if isinstance(runner, MasterRunner):
            runner.send_message("rig_epoch", epoch)
        else:
            SCHEDULE.start(epoch)


# benchmarks/client_capacity.py --profile: where this process's time goes during the window.
PROFILE: dict[str, Any] = {}


def _start_profile() -> None:
    if os.environ.get("RIG_PROFILE") and "profiler" not in PROFILE:
        import cProfile

        PROFILE["profiler"] = cProfile.Profile()
        PROFILE["profiler"].enable()


def _stop_profile() -> None:
    profiler = PROFILE.pop("profiler", None)
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(os.path.join(os.environ["RIG_PROFILE"], f"profile-{PROCESS_ID}.pstats"))


@events.test_stopping.add_listener
def _on_stopping(environment: Any, **_: Any) -> None:
    _stop_profile()
    gc.enable()
    if not isinstance(environment.runner, WorkerRunner):
        _write_window("stopping")


def _client_stats(process: str, lag: list, cpu: list[float], cpu_time: list, gc_pauses: list | None = None,
                  lag_probe: LagProbe = LAG_PROBE_KERNEL) -> ClientStats:
    # Raw samples: rig computes percentiles over the measurement window (spawning bursts excluded).
    return ClientStats(process=process, lag=[(round(t, 4), round(value, 6)) for t, value in lag], lag_probe=lag_probe,
                       gc_pauses=[(t, seconds) for t, seconds in gc_pauses or []],
                       cpu_percent_mean=sum(cpu) / len(cpu) if cpu else None, cpu_percent_max=max(cpu) if cpu else None,
                       cpu_time=[(round(t, 3), round(seconds, 3)) for t, seconds in cpu_time])


@events.report_to_master.add_listener
def _ship(client_id: str, data: dict[str, Any], **_: Any) -> None:
    if WRITER.shipping:
        data["rig"] = {"process": PROCESS_ID, "records": WRITER.outbox[:], "lag": LAG[:], "cpu": CPU[:], "cpu_time": CPU_TIME[:],
                       "gc_pauses": GC_PAUSES[:], "lag_probe": LAG_PROBE[0]}
        WRITER.outbox.clear()
        GC_PAUSES.clear()
        LAG.clear()
        CPU.clear()
        CPU_TIME.clear()


REMOTE: dict[str, dict[str, list]] = {}


@events.worker_report.add_listener
def _receive(client_id: str, data: dict[str, Any], **_: Any) -> None:
    shipped = data.get("rig")
    if not shipped:
        return
    process = shipped["process"]
    if shipped["records"]:
        with open(os.path.join(OUT_DIR, f"records-{process}.jsonl"), "a") as handle:
            handle.write("".join(line + "\n" for line in shipped["records"]))
    remote = REMOTE.setdefault(process, {"lag": [], "cpu": [], "cpu_time": [], "gc_pauses": [], "lag_probe": LAG_PROBE_SLEEP})
    remote["lag_probe"] = shipped.get("lag_probe", LAG_PROBE_SLEEP)
    remote["lag"] += shipped["lag"]
    remote["cpu"] += shipped["cpu"]
    remote["cpu_time"] += shipped.get("cpu_time", [])
    remote["gc_pauses"] += shipped.get("gc_pauses", [])


@events.quitting.add_listener
def _on_quit(environment: Any, **_: Any) -> None:
    _stop_profile()
    WRITER.flush()
    clients = {process: _client_stats(process, v["lag"], v["cpu"], v["cpu_time"], v["gc_pauses"], v["lag_probe"])
               for process, v in REMOTE.items()}
    files = {client_file(process): client for process, client in clients.items()}
    if isinstance(environment.runner, MasterRunner):
        files[dispatcher_file(PROCESS_ID)] = _client_stats(PROCESS_ID, LAG, CPU, CPU_TIME, GC_PAUSES, LAG_PROBE[0])
    elif not WRITER.shipping:
        files[client_file(PROCESS_ID)] = _client_stats(PROCESS_ID, LAG, CPU, CPU_TIME, GC_PAUSES, LAG_PROBE[0])
    for name, client in files.items():  # each file whole or absent: the runner reads them after the run
        write_text_atomic(os.path.join(OUT_DIR, name), client.json_text(indent=None))  # no .tmp left by a Ctrl-C


def _payload(content: str | list[dict[str, str]], max_tokens: int) -> tuple[str, dict[str, Any]]:
    # continuous_usage_stats: SGLang and vLLM then put the running usage on every chunk, so a
    # chunk's token count is known exactly (several per chunk under MTP or speculative decoding);
    # servers that do not know the field ignore it and report usage once, at the end.
    settings = config()
    body: dict[str, Any] = {"model": settings.model, "stream": True, "max_tokens": max_tokens,
                            "temperature": settings.temperature, "seed": settings.seed,
                            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    body.update(settings.extra_body)
    if settings.endpoint == "chat":
        body["messages"] = content if isinstance(content, list) else [{"role": "user", "content": content}]
        return "/v1/chat/completions", body
    body["prompt"] = content
    return "/v1/completions", body


def _nonce(rng: random.Random) -> str | None:
    """A unique leading nonce whose token count is fixed (its alphabet was checked against the
    served tokenizer when the prompts were built), so every prompt misses the prefix cache."""
    nonce = config().nonce
    return nonce.sample(rng) if nonce is not None else None


def _reads(response: Any) -> Any:
    """The body as the network delivers it: one HTTP chunk at a time for chunked streams (every
    SGLang, vLLM and uvicorn stream), else whatever one read returns. A fixed-size read would wait
    for a buffer to fill and stamp a burst of tokens with one late time."""
    raw = response.raw
    if raw.chunked and raw.supports_chunked_reads():
        return raw.stream(None, decode_content=True)
    return iter(lambda: raw.read1(65536), b"")


# When each greenlet's last request was written whole to its socket (wall clock, as the records): the
# request's send time. Stamped before requests built it, the send time ran ~0.6-0.7 ms early (building
# the request, and the hub's turn gevent gives others inside urllib3's dropped-connection check), an
# error that TTFT and E2E carry on top of the read's.
WRITTEN: dict[int, float] = {}


def _stamp_when_written(request: Any) -> Any:
    @functools.wraps(request)
    def stamped(self: Any, *args: Any, **kwargs: Any) -> None:
        request(self, *args, **kwargs)
        WRITTEN[id(gevent.getcurrent())] = time.time()
    return stamped


# urllib3's connection writes the request line, headers and body in request() and returns (requests
# and Locust's HttpSession send through it; HTTPS connections inherit it).
urllib3.connection.HTTPConnection.request = _stamp_when_written(urllib3.connection.HTTPConnection.request)


# Before it reuses a kept-alive connection, urllib3 checks that the server has not closed it: a poll
# of the socket with a timeout of 0. gevent's poll answers even that from the hub, so the user waits
# for every read its loop's pass has ready before its next request goes out: at 250 streams a
# process and an engine's step of chunks arriving at once, 13 ms a request on an H200 with vLLM,
# a hold-back of each user that the aggregate's client bound counts. The kernel's own poll with a
# timeout of 0 never blocks: asked directly, it answers at once and the request goes out now.
_KERNEL_POLL = gevent.monkey.get_original("select", "poll")


def _still_open(connection: urllib3.connection.HTTPConnection) -> bool:
    """urllib3's is_connected: a socket that is readable while idle was closed by the server (or sent
    what nobody asked for); either way it cannot carry the next request."""
    if connection.sock is None:
        return False
    poller = _KERNEL_POLL()
    poller.register(connection.sock, select.POLLIN)
    return not poller.poll(0)


urllib3.connection.HTTPConnection.is_connected = property(_still_open)  # type: ignore[assignment]


class Stalled(Exception):
    """Raised in a stream's greenlet by the stall watchdog: nothing arrived for its read timeout."""


class StallWatch:
    """One stream's watch: its greenlet, when something last arrived (wall clock, as the records),
    its timeout, and whether the watchdog fired."""

    __slots__ = ("greenlet", "last", "timeout_s", "fired")

    def __init__(self, timeout_s: float) -> None:
        self.greenlet, self.last, self.timeout_s, self.fired = gevent.getcurrent(), time.time(), timeout_s, False


class StallWatchdog:
    """Read timeouts for every stream of this process, kept by one greenlet. A socket timeout arms and
    cancels a gevent timer around every wait of every stream (~15% of the client's CPU at 3000
    streams); here a stream stamps each arrival, and
    every CHECK_S the watchdog raises Stalled in the greenlet of a stream silent for longer than its
    timeout. It is raised from the hub, after checking again that the stream is still watched and
    still silent, so it lands at the stream's own wait (inside the request, its only blocking
    point) and nowhere else; urllib3 then closes the connection (an interrupted response never goes
    back to the pool). A timeout fires between timeout_s and timeout_s + CHECK_S."""

    CHECK_S = 0.25

    def __init__(self) -> None:
        self.watched: dict[int, StallWatch] = {}
        self.greenlet: Any = None

    def watch(self, timeout_s: float) -> StallWatch:
        watch = StallWatch(timeout_s)
        self.watched[id(watch)] = watch
        if self.greenlet is None:
            self.greenlet = gevent.spawn(self._run)
        return watch

    def release(self, watch: StallWatch) -> None:
        self.watched.pop(id(watch), None)

    def _run(self) -> None:
        loop = gevent.get_hub().loop
        while True:
            gevent.sleep(self.CHECK_S)
            now = time.time()
            for watch in list(self.watched.values()):
                if not watch.fired and now - watch.last > watch.timeout_s:
                    loop.run_callback(self._expire, watch)

    def _expire(self, watch: StallWatch) -> None:
        if self.watched.get(id(watch)) is watch and not watch.fired and time.time() - watch.last > watch.timeout_s:
            watch.fired = True
            watch.greenlet.throw(Stalled(f"nothing arrived for {watch.timeout_s:g} s"))


STALLS = StallWatchdog()
CONNECT_TIMEOUT_S = 10.0


def stream_into(response: Any, scan: Any, watch: StallWatch) -> None:
    """Feeds the body to `scan` as it arrives, each read stamped once (the record's time and the
    stall watch's), with the most it can have waited behind the loop's own work (PASSES)."""
    for data in _reads(response):
        now = time.time()
        watch.last = now
        scan.feed(data, now, PASSES.waited_us(now))


def _error_kind(error: Exception) -> str:
    """A short kind for the record. The body is read from urllib3 directly (see _reads), so its
    errors arrive unwrapped: a connection that broke mid-body is a cut stream."""
    if isinstance(error, (Stalled, urllib3.exceptions.ReadTimeoutError)):
        return "read_timeout"
    if isinstance(error, urllib3.exceptions.ProtocolError):
        return "stream_cut"
    # A connection that never carried the request: refused, reset, timed out while connecting (by
    # type: requests.ConnectTimeout is a ConnectionError, Python's ConnectionError covers resets).
    if isinstance(error, (requests.exceptions.ConnectionError, urllib3.exceptions.NewConnectionError, ConnectionError)):
        return "connection"
    return type(error).__name__


LENGTHS = OutputLengths(CONFIGURED.output_lengths, CONFIGURED.max_tokens) if CONFIGURED is not None else OutputLengths(None, 1)


class StreamingUser(HttpUser):
    """What every rig user does: one keep-alive connection, prompts and nonces from its own seeded
    sequence, and `send`, which streams one request and writes its record."""

    abstract = True  # Locust inherits @task methods: the kinds below each declare only their own
    host = CONFIGURED.base_url if CONFIGURED is not None else None

    def on_start(self) -> None:
        self.client.headers.update(auth_headers())
        local = next(USER_IDS)
        self.user_key = f"{PROCESS_ID}-u{local}"
        rate = config().spawn_rate
        self.dispatched = dispatched_at(SPAWNS, local, dispatch_wait(rate)) if rate else None
        self.opening: tuple[float, float] | None = None
        # Prompt choice and nonces follow (run label, worker, user): unique inside a run, and the
        # same sequence in the same round of every boot, so outputs can be compared across arms.
        self.worker = getattr(self.environment.runner, "worker_index", 0) or 0
        self.prompt_index = local * 7919
        self.rng = random.Random(f"{config().nonce_seed}/{self.worker}/{local}")
        # Open the keep-alive connection before measuring: the first stream should not pay the TCP
        # handshake and the client's first-call costs (18 ms measured on loopback vs 3 ms after).
        began = time.time()
        self.client.get("/v1/models", name="connect", timeout=30)
        self.opening = (began, time.time())

    def next_prompt(self) -> tuple[Prompt, str | None]:
        prompts = config().prompts
        self.prompt_index += 1
        return prompts[self.prompt_index % len(prompts)], _nonce(self.rng)

    def new_record(self, prompt: str, target: int | None, nonce: str | None, max_tokens: int) -> RequestRecord:
        record = RequestRecord(id=f"{PROCESS_ID}-{next(REQUEST_IDS)}", process=PROCESS_ID, user=self.user_key, prompt=prompt,
                               prompt_tokens_target=target, prompt_nonce=nonce, t_send=0.0, max_tokens=max_tokens,
                               t_dispatched=self.dispatched[0] if self.dispatched else None,
                               dispatch_behind=self.dispatched[1] if self.dispatched else None, opening=self.opening)
        self.dispatched = self.opening = None  # the user's first request only
        return record

    def send(self, content: str | list[dict[str, str]], record: RequestRecord) -> str | None:
        """Streams one request and writes its record, also when the run's end cuts it; returns the
        output text of a complete response (None otherwise)."""
        settings = config()
        path, body = _payload(content, record.max_tokens or LENGTHS.cap)
        scan = StreamScan(settings.endpoint == "chat")
        text = None
        record.t_start = record.t_send = time.time()  # t_send until the request is written whole (WRITTEN)
        me = id(gevent.getcurrent())
        WRITTEN.pop(me, None)
        watch = STALLS.watch(settings.read_timeout_s)  # the read timeout: no socket timeout per wait
        try:
            with self.client.post(path, json=body, stream=True, catch_response=True, name=settings.scenario,
                                  timeout=(CONNECT_TIMEOUT_S, None)) as response:
                record.t_send = WRITTEN.pop(me, record.t_send)
                record.status = response.status_code
                if response.status_code != 200:
                    # Locust's session reports a refused or reset connection as status 0.
                    record.error = f"http_{response.status_code}" if response.status_code else "connection"
                    record.error_detail = str(getattr(response, "error", "") or response.text)[:300]
                    response.failure(record.error)
                    return None
                # Read to the end of the body, past [DONE]: an unread stream cannot go back to the
                # connection pool, and the next request would open a new connection.
                stream_into(response, scan, watch)
                scan.close()
                if scan.finish_reason is None:
                    record.error = "stream_cut"
                    record.error_detail = scan.error_detail()
                    response.failure("stream ended without finish_reason")
                else:
                    response.success()
        except gevent.GreenletExit:
            record.error = "cut_by_window"
            raise
        except Exception as error:  # a run never crashes on a bad server: the record says what happened
            record.error = _error_kind(error)
            record.error_detail = str(error)[:300]
        finally:
            STALLS.release(watch)
            WRITTEN.pop(me, None)
            record.t_end = time.time()
            record.chunks = scan.chunks
            record.chunk_waits_us = scan.waits_us or None
            record.t_first, record.t_last = scan.t_first, scan.t_last
            record.finish_reason = scan.finish_reason
            record.chunk_tokens = scan.chunk_tokens()
            record.usage = scan.usage()
            details = (record.usage or {}).get("prompt_tokens_details") or {}
            if details.get("cached_tokens") is not None:
                record.cached_tokens = int(details["cached_tokens"])
            output = scan.text()
            record.text_sha256 = hashlib.sha256(output.encode()).hexdigest() if output else None
            if settings.keep_text_chars:
                record.text = output[: settings.keep_text_chars]
            if record.error is None and record.finish_reason is not None:
                text = output
            WRITER.write(record.to_line())
        return text


class LLMUser(StreamingUser):
    """A closed loop: each user streams its requests back to back."""

    @task
    def stream(self) -> None:
        # The next request goes out as the last one ends, inside this task. Between tasks Locust
        # sleeps the wait time, and a gevent sleep of 0 queues the user behind every read its loop's
        # pass has ready: at 250 streams a process, with an engine's step of chunks arriving at
        # once, 13 ms a request on an H200 with vLLM, a hold-back the aggregate's client bound
        # counts against every user. A failed request goes back to Locust (its sleep yields: a
        # refused connection fails without waiting, and a loop that never waits starves the
        # others), and so does a stopping user after its request, as Locust's own wait would.
        while True:
            prompt, nonce = self.next_prompt()
            record = self.new_record(prompt.name, prompt.tokens, nonce, LENGTHS.draw(self.rng))
            if self.send((prompt.prefix or "") + (nonce or "") + prompt.text, record) is None or self._state == LOCUST_STATE_STOPPING:
                return


class ArrivalUser(StreamingUser):
    """Open-loop arrivals and trace replays: a free user takes the schedule's next arrival and sends
    it at its time (Locust's wait_time is where the arrival is claimed and waited for)."""

    def on_start(self) -> None:
        super().on_start()
        self.arrival: tuple[int, float] | None = None
        self.queued = False
        if not SCHEDULE.offsets:
            SCHEDULE.load(self.worker)
        self.wait()  # claim the first arrival before the first task

    def wait_time(self) -> float:
        SCHEDULE.started.wait()
        self.arrival = SCHEDULE.claim()
        if self.arrival is None:
            return 3600.0  # the schedule is done: idle until the run ends (it ends once drained)
        delay = self.arrival[1] - time.time()
        self.queued = delay < 0  # the arrival's time passed while every user was busy
        return max(0.0, delay)

    @task
    def stream(self) -> None:
        if self.arrival is None:
            return
        index, at = self.arrival
        trace = config().trace
        if trace is not None:
            row = trace.rows[index]
            record = self.new_record(f"trace-{index}", row.tokens, None, LENGTHS.draw(self.rng, row.output))
            content = "".join(trace.blocks[key] for key in row.blocks)
        else:
            prompt, nonce = self.next_prompt()
            record = self.new_record(prompt.name, prompt.tokens, nonce, LENGTHS.draw(self.rng))
            content = (prompt.prefix or "") + (nonce or "") + prompt.text
        record.arrival, record.t_scheduled, record.queued = index, at, self.queued
        try:
            self.send(content, record)
        finally:
            SCHEDULE.finished_one()


CONVERSATION_IDS = count()


class ConversationUser(StreamingUser):
    """Multi-turn chats. Each user owns its conversation (no state shared between users, so no
    user waits on another), sends the whole history every turn (each earlier turn once: the user's
    message and the reply the server actually streamed), thinks between turns, and starts the
    next conversation after the last turn. A turn that fails ends its conversation: a history with
    a missing reply is not a conversation any more."""

    def on_start(self) -> None:
        super().on_start()
        self.conversation: dict[str, Any] | None = None
        self.pause = 0.0

    def wait_time(self) -> float:
        return self.pause

    def begin(self) -> None:
        local = next(CONVERSATION_IDS)
        settings = config()
        conversations, count = settings.conversations, settings.turns or 1
        processes = max(1, settings.arrival_processes)
        nonce = _nonce(self.rng) or ""  # only the first message needs one: the whole history is unique after it
        if conversations:
            source = conversations[(local * processes + self.worker) % len(conversations)]
            turns = [{"text": turn.text, "output": turn.output} for turn in source.turns[:count]]
            name = source.id
            history = [{"role": "system", "content": source.system}] if source.system else []
        else:
            prompts = settings.prompts
            start = local * 7 + self.worker * 7919
            turns = [{"text": prompts[(start + k) % len(prompts)].text, "output": None} for k in range(count)]
            name = f"generated-{start % len(prompts)}"
            history = []
        turns[0]["text"] = nonce + turns[0]["text"]
        self.conversation = {"id": f"{PROCESS_ID}-c{local}", "source": name, "turns": turns, "history": history, "next": 0}

    @task
    def turn(self) -> None:
        if self.conversation is None:
            self.begin()
        conversation = self.conversation
        index = conversation["next"]
        turn = conversation["turns"][index]
        messages = conversation["history"] + [{"role": "user", "content": turn["text"]}]
        record = self.new_record(f"{conversation['source']}#{index}", None, None, LENGTHS.draw(self.rng, turn.get("output")))
        record.conversation, record.turn = conversation["id"], index
        reply = self.send(messages, record)
        if reply is None or index + 1 >= len(conversation["turns"]):
            self.conversation, self.pause = None, 0.0
            return
        conversation["history"] = messages + [{"role": "assistant", "content": reply}]
        conversation["next"] = index + 1
        self.pause = config().think_time_s
