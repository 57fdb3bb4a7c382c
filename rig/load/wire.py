"""The files rig and its Locust processes hand each other during a run, one typed, versioned
record each, written and read through here on both sides:

- config.json (LoadConfig): what `rig loadtest` tells the Locust processes to do (RIG_LOAD_CONFIG);
- window.jsonl (WindowEvent): Locust's own moments (spawning complete, stopping, ...);
- client-<process>.json (ClientStats): each Locust process's raw lag, CPU and GC samples;
- runs.jsonl (RunNote): the runs made against a boot, where the warmup rule keeps its state;
- boots/NN-arm.in-progress.json (BootMarker): a comparison's boot under way, for a resumed run.

The request records themselves are rig.load.records. pydantic and rig's import-light modules
only: the locustfile imports this (also on remote workers), and it must stay cheap to import.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import Field, JsonValue

from rig.load.bounds import MAX_DURATION_S
from rig.load.workload import OutputLengthSpec
from rig.typed import Typed, Versioned

WIRE_SCHEMA = 1
Record = TypeVar("Record", bound=Versioned)
CONFIG_FILE = "config.json"
WINDOW_FILE = "window.jsonl"
RUNS_FILE = "runs.jsonl"


def client_file(process: str) -> str:
    return f"client-{process}.json"


def dispatcher_file(process: str) -> str:
    """The Locust master's own samples (a ClientStats): it sends no request, but it dispatches the
    users to the workers, so a stall of its loop starts every later batch late."""
    return f"dispatcher-{process}.json"


# ---- config.json ---------------------------------------------------------------------------------

class Nonce(Typed):
    """A unique leading nonce whose token count is fixed: `length` picks from `alphabet` plus the
    separator; every pick is one token of the served tokenizer and no two picks merge."""

    alphabet: tuple[str, ...]
    length: int
    separator: str
    tokens: int

    def sample(self, rng: Any) -> str:
        return "".join(rng.choice(self.alphabet) for _ in range(self.length)) + self.separator


class Prompt(Typed):
    """One prompt of the pool, exactly `tokens` long once the user puts its nonce (and the shared
    prefix) in front."""

    name: str
    text: str
    tokens: int | None = None
    prefix: str | None = None  # the group's shared prefix, when the scenario shares prefixes
    group: int | None = None


class ArrivalSchedule(Typed):
    """An open loop's Gamma schedule, drawn the same way by every process (rate, burstiness, count,
    seed), or a trace's own offsets."""

    rate: float | None = None
    burstiness: float | None = None
    count: int | None = None
    seed: int | None = None
    offsets: list[float] | None = None


class TraceRequest(Typed):
    at: float  # seconds after the schedule's start (already divided by the speed)
    blocks: list[str]  # keys of TraceReplay.blocks, in order
    tokens: int
    output: int


class TraceReplay(Typed):
    """What the Locust user replays of a trace: each row's time, blocks, target tokens and output
    length, and the text of every block (rig.load.prompts.build_trace)."""

    rows: list[TraceRequest]
    blocks: dict[str, str]
    file: str
    sha256: str
    block_tokens: int
    speed: float


class ScriptedTurn(Typed):
    text: str
    output: int | None  # the recorded reply's length in tokens, when the scenario takes lengths from it


class ConversationScript(Typed):
    id: str
    system: str | None
    turns: list[ScriptedTurn]


class LoadConfig(Versioned):
    """config.json: everything a Locust process needs to run its share of one scenario run."""

    schema_version: int = Field(WIRE_SCHEMA, alias="schema")
    scenario: str
    kind: str
    base_url: str
    model: str | None
    endpoint: Literal["chat", "completions"]
    max_tokens: int
    temperature: float
    seed: int
    extra_body: dict[str, JsonValue] = Field(default_factory=dict)  # the engine's length pinning
    prompts: list[Prompt]
    nonce: Nonce | None = None
    nonce_seed: str = ""
    out_dir: str
    read_timeout_s: float = 600.0
    keep_text_chars: int = 0
    arrival_processes: int = 1
    output_lengths: OutputLengthSpec | None = None
    arrivals: ArrivalSchedule | None = None
    trace: TraceReplay | None = None
    conversations: list[ConversationScript] | None = None
    turns: int | None = None
    think_time_s: float = 0.0
    spawn_rate: float | None = None  # Locust's -r: the master's pace of spawn messages (dispatch_wait)

    @classmethod
    def read(cls, path: Path | str) -> LoadConfig:
        return cls.parse(Path(path).read_bytes(), str(path))


# ---- window.jsonl, client-*.json -------------------------------------------------------------

WindowEventName = Literal["spawning_complete", "arrivals_start", "stopping", "drained"]


class WindowEvent(Versioned):
    schema_version: int = Field(WIRE_SCHEMA, alias="schema")
    event: WindowEventName
    time: float


LAG_PERIOD_S = 0.01  # the lag monitor's event is due at most this long after the last one ran (drawn from half of it up)
# The event the client's lag monitor times (loadtests/locustfile.py): a kernel timer the loop waits on
# as on a socket (rig.load.kernel_timer), or, where there is none, a gevent sleep, late by up to 1 ms
# more than a socket event is (files written before the kernel timer existed say nothing: a sleep).
LagProbe = Literal["kernel timer", "gevent sleep"]
LAG_PROBE_KERNEL: LagProbe = "kernel timer"
LAG_PROBE_SLEEP: LagProbe = "gevent sleep"


class ClientStats(Versioned):
    """One Locust process's raw samples; rig computes percentiles over the measurement window."""

    schema_version: int = Field(WIRE_SCHEMA, alias="schema")
    process: str
    lag: list[tuple[float, float]]  # (wall time, seconds the lag probe's event ran after it was due)
    lag_probe: LagProbe = LAG_PROBE_SLEEP
    gc_pauses: list[tuple[float, float]] = Field(default_factory=list)  # (wall time, seconds)
    cpu_percent_mean: float | None = None
    cpu_percent_max: float | None = None
    cpu_time: list[tuple[float, float]] = Field(default_factory=list)  # (wall time, user + system CPU seconds)


# ---- runs.jsonl, comparison markers -----------------------------------------------------------

class RunNote(Versioned):
    """One run against a boot, appended to the boot's runs.jsonl as it ends."""

    schema_version: int = Field(WIRE_SCHEMA, alias="schema")
    dir: str
    scenario: str
    warmup: bool
    complete: bool  # not interrupted: an interrupted warmup does not count
    settle_s: Annotated[float, Field(ge=0, le=MAX_DURATION_S)] | None  # the steady-state wait the run measured (None: no steady state)
    time: float
    workload: str | None = None  # rig.loadrun.session.workload_key of the scenario as it ran (None: noted before it was kept)


class BootMarker(Versioned):
    """A comparison's boot under way: a kill leaves it behind, so the resumed comparison can stop
    the server the killed attempt left running (its boot id, or the recipe's boot since then)."""

    schema_version: int = Field(WIRE_SCHEMA, alias="schema")
    attempt: int
    boot_id: str | None
    since: float


# ---- reading -----------------------------------------------------------------------------------

RIG_PARENT_ENV = "RIG_PARENT_PID"  # the rig process that started a Locust process (it stops when rig is gone)


def dispatch_wait(spawn_rate: float) -> float:
    """The master's pace: Locust's UsersDispatcher (2.47) sends one round of spawn messages, one to
    every worker, each max(1, floor(rate)) / rate seconds after the last round began, sleeping what
    the round left of it; a round late to begin (a wake-up late by however little) is never made up."""
    return max(1, math.floor(spawn_rate)) / spawn_rate


def dispatched_at(spawns: list[tuple[float, int]], index: int, wait: float) -> tuple[float, float] | None:
    """When the round of the spawn that started a process's user number `index` (from 0, in the order
    it spawned them) was dispatched, and how far that round ran behind the spawn's own pace (round k
    due `wait` x k after the first), from the rounds as the process met them, each (when it was
    dispatched, the users it and the rounds before asked this process to run in all): a worker's
    spawn messages (the master's timestamp; every round sends each worker one), or the local runner's
    own rounds. A message that came while the worker had not yet acted on the one before it replaced
    it (Locust kills the spawn it had not run), so the earliest message that asked for the user
    counts. None: no round asked for it."""
    asked = [(sent, k) for k, (sent, target) in enumerate(spawns) if target > index]
    if not asked:
        return None
    sent, k = min(asked)
    return sent, max(0.0, sent - spawns[0][0] - k * wait)


LINES_MAX_BYTES = 64 << 20  # a boot's runs, a run's window events: a few kB


def read_lines(path: Path, model: type[Record]) -> Iterator[Record]:
    """The records of a JSON Lines file, in order. A line cut by a kill mid-write (not JSON) is
    skipped; a whole line that is not this schema's record is refused in one line."""
    if not path.exists():
        return
    from rig.strict_yaml import read_regular  # here: the Locust processes never read these

    text = read_regular(path, LINES_MAX_BYTES, str(path)).decode(errors="replace")  # a FIFO in its place is refused, not waited on
    for number, line in enumerate(text.splitlines(), start=1):
        record = model.parse_line(line, f"{path} line {number}") if line.strip() else None
        if record is not None:  # None: cut by a kill mid-write
            yield record
