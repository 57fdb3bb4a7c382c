"""Where a run came from and what it ran: the provenance and the scenario as it ran, two parts of
a run's summary (rig.load.summary), each a typed record read by attribute."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rig.image import BootImage
from rig.load.scenarios import Arrivals, Conversation, Kind, Prefix, Scenario, Trace
from rig.load.wire import TraceReplay
from rig.load.workload import OutputLengthSpec
from rig.typed import Epoch, Typed

# ---- where a run came from ---------------------------------------------------------------------

class ImportedFrom(Typed):
    """A run measured by another tool (rig import)."""

    tool: str
    file: str
    sha256: str
    imported_at: Epoch
    records: int


class HostFacts(Typed):
    hostname: str
    cpu: str
    cpu_count: int | None
    python: str
    platform: str
    locust: str | None = None
    gpus: list[str] = Field(default_factory=list)


class ClientSetup(Typed):
    processes: int | None = None
    workers: int | None = None
    remote_workers: int | None = None
    distributed: bool | None = None
    users: int | None = None
    user_class: str | None = None
    spawn_rate: float | None = None
    http_user: str | None = None
    tokenizer: str | None = None
    tool: str | None = None  # an imported run: the tool that measured it


class Provenance(Typed):
    """Recipe, boot, engine, image, gates, host and client set-up of a run."""

    recipe: str | None
    variant: str | None
    engine: str
    image: BootImage | None
    adapter_gates: dict[str, str] = Field(default_factory=dict)  # redacted (rig/redaction.py)
    boot_id: str
    driver: str
    base_url: str | None
    served_model: str | None
    host: HostFacts | None
    client: ClientSetup
    time: Epoch
    imported: ImportedFrom | None = None


# ---- the scenario as it ran ----------------------------------------------------------------------

class TraceRun(Trace):
    """A trace scenario's section plus the file actually replayed and its digest."""

    sha256: str | None = None


class ScenarioRun(Typed):
    """What a run summary records about its scenario, and how it ran."""

    name: str
    version: int
    kind: Kind
    endpoint: Literal["chat", "completions"]
    users: int
    prompt_tokens: int
    max_tokens: int
    duration_s: float
    prefix: Prefix | None = None
    output_lengths: OutputLengthSpec | None = None
    arrivals: Arrivals | None = None
    trace: TraceRun | None = None
    conversation: Conversation | None = None
    settle_s: float | None = None  # the steady-state wait this boot's warmup measured (None: imported)
    unique_prompts: bool | None = None  # every prompt starts with a unique nonce (None: unknown, imported)

    @classmethod
    def of(cls, scenario: Scenario, settle_s: float | None, unique_prompts: bool | None,
           replayed: TraceReplay | None = None) -> ScenarioRun:
        """The scenario as a run ran it: a trace's file as replayed, with its digest."""
        trace = None
        if scenario.trace is not None:
            replay = {"file": replayed.file, "sha256": replayed.sha256} if replayed is not None else {}
            trace = TraceRun(**{**scenario.trace.model_dump(), **replay})
        return cls(name=scenario.name, version=scenario.version, kind=scenario.kind, endpoint=scenario.endpoint,
                   users=scenario.pool, prompt_tokens=scenario.prompt_tokens, max_tokens=scenario.max_tokens,
                   duration_s=scenario.duration_s, prefix=scenario.prefix, output_lengths=scenario.output_lengths,
                   arrivals=scenario.arrivals, trace=trace, conversation=scenario.conversation, settle_s=settle_s,
                   unique_prompts=unique_prompts)
