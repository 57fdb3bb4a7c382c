"""Scenarios as data (loadtests/scenarios/*.yaml, or a user's own file); the prompts they send,
exact in tokens for the served tokenizer, are built by rig.load.prompts.

A scenario is user input exactly like a recipe: read by the strict YAML loader, validated by one
strict typed schema (no coercion, no unknown keys, a bound on every number, names by their
grammar so none can leave results/ or loadtests/), every problem one RigError line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    JsonValue,
    PrivateAttr,
    StrictBool,
    StrictStr,
    ValidationError,
    model_validator,
)

from rig import grammar
from rig.errors import Invalid, RigError, closest
from rig.load.bounds import (
    MAX_ARRIVALS,
    MAX_BLOCK_TOKENS,
    MAX_DURATION_S,
    MAX_OUTPUT_TOKENS,
    MAX_PROMPT_TOKENS,
    MAX_RATE,
    MAX_TIMEOUT_S,
    MAX_TURNS,
    MAX_USERS,
    MIN_DURATION_S,
    PROMPT_POOL,
    Name,
    Number,
    bounded_int,
    bounded_seconds,
)
from rig.load.datasets import read_conversations, read_trace
from rig.load.inputs import display, read_yaml
from rig.load.kinds import KINDS, Kind
from rig.load.workload import OutputLengthSpec, TraceLengths, UniformLengths
from rig.paths import REPO_ROOT
from rig.typed import Spec, first_problem, misspelled

LOADTESTS = REPO_ROOT / "loadtests"
SCENARIO_DIR = LOADTESTS / "scenarios"
PROMPT_DIR = LOADTESTS / "prompts"
TRACE_DIR = LOADTESTS / "traces"
CONVERSATION_DIR = LOADTESTS / "conversations"
SCENARIO_SCHEMA = 1


class Prefix(Spec):
    """Shared prefixes on purpose: `groups` distinct prefixes of `shared_tokens` each."""

    shared_tokens: bounded_int(1, MAX_PROMPT_TOKENS)
    groups: bounded_int(1, PROMPT_POOL) = 1


class Arrivals(Spec):
    """Open-loop arrivals as `vllm bench serve` draws them: Gamma gaps (burstiness 1 = Poisson)."""

    rate: bounded_seconds(0.0, MAX_RATE, open_low=True)  # requests per second
    burstiness: bounded_seconds(0.0, 100.0, open_low=True) = 1.0
    # The most requests in flight (AIPerf's --concurrency beside --request-rate, vLLM's
    # --max-concurrency): an arrival that finds all busy waits, and that wait is reported.
    max_concurrency: bounded_int(1, MAX_USERS) | None = None
    requests: bounded_int(1, MAX_ARRIVALS) | None = None  # a fixed count; else rate x duration_s
    drain_s: bounded_seconds(0.0, MAX_TIMEOUT_S) = 60.0  # after the last arrival, for requests in flight to finish


class Trace(Spec):
    """A Mooncake-format trace (timestamp ms, input_length, output_length, hash_ids) replayed at its
    timestamps divided by `speed`; equal hash ids are equal blocks of `block_tokens` tokens."""

    file: StrictStr = Field(min_length=1, max_length=512)  # a name in loadtests/traces/, or a .jsonl path beside the scenario
    speed: bounded_seconds(0.0, 1000.0, open_low=True) = 1.0
    block_tokens: bounded_int(1, MAX_BLOCK_TOKENS) = 512
    drain_s: bounded_seconds(0.0, MAX_TIMEOUT_S) = 60.0


class Conversation(Spec):
    """Multi-turn chats: each user holds one conversation at a time and sends its whole history."""

    turns: bounded_int(1, MAX_TURNS)
    think_time_s: bounded_seconds(0.0, 3600.0) = 0.0
    file: StrictStr | None = Field(None, min_length=1, max_length=512)  # ShareGPT-style; None: generated




# On a CPU server the client shares a few cores with the server, whose forward passes deschedule it
# (measured on 2 cores: delays of 0.7 ms mean over requests of ~0.15 s, a headline bound of 1.1-1.3%
# at c=1); the effects measured there are tens of percent (the demo's -51%). 5% is what such a box
# can state per round; the report prints each figure's bound all the same.
SMALL_CLIENT_ERROR_LIMIT = 0.05


class Scenario(Spec):
    schema_version: Literal[1] = Field(alias="schema", description="the scenario format (this schema)")
    name: Name
    version: bounded_int(1, 1_000_000)
    kind: Kind
    endpoint: Literal["chat", "completions"]
    prompt_set: Name
    prompt_tokens: bounded_int(1, MAX_PROMPT_TOKENS)
    max_tokens: bounded_int(1, MAX_OUTPUT_TOKENS)
    temperature: Annotated[Number, Field(ge=0, le=2)]
    seed: bounded_int(0, 2**63 - 1)
    users: bounded_int(1, MAX_USERS)
    duration_s: bounded_seconds(MIN_DURATION_S, MAX_DURATION_S)
    ramp_s: bounded_seconds(0.0, 3600.0) = 0.0
    spawn_rate: bounded_seconds(0.0, 100_000.0, open_low=True) | None = None
    distributed: StrictBool = False
    read_timeout_s: bounded_seconds(0.0, MAX_TIMEOUT_S, open_low=True) = 600.0
    # The most the client's own timing may move a figure (a share of it) for the figure to be used
    # (rig.load.client_error); the report prints each figure's bound beside it.
    client_error_limit: Annotated[Number, Field(gt=0, le=0.5)] = 0.01
    # Every request's prompt starts with a unique nonce, so no prefix cache can answer it. A
    # scenario that wants shared prefixes says so: prefix: {shared_tokens: N, groups: G}.
    unique_prompts: StrictBool = True
    prefix: Prefix | None = None
    output_lengths: OutputLengthSpec | None = None  # None: every request asks for max_tokens
    arrivals: Arrivals | None = None  # open_loop
    trace: Trace | None = None  # trace
    conversation: Conversation | None = None  # multi_turn
    small: dict[StrictStr, JsonValue] = Field(default_factory=dict, description="top-level values for CPU servers (--small)")
    _file: Path | None = PrivateAttr(default=None)  # the file it was read from: data paths are relative to it

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        for kind in KINDS.values():
            if kind.section is None:
                continue
            present = getattr(self, kind.section) is not None
            if present and self.kind != kind.name:
                raise ValueError(f"`{kind.section}` belongs to kind {kind.name}, this scenario is {self.kind}")
            if not present and self.kind == kind.name:
                raise ValueError(f"kind {kind.name} needs a `{kind.section}` section")
        own = KINDS[self.kind]
        if own.endpoint is not None and self.endpoint != own.endpoint:
            raise ValueError(f"kind {self.kind} needs endpoint {own.endpoint}")
        if self.prefix is not None and self.prefix.shared_tokens >= self.prompt_tokens:
            raise ValueError(f"prefix.shared_tokens ({self.prefix.shared_tokens}) leaves no room in prompt_tokens ({self.prompt_tokens})")
        lengths = self.output_lengths
        if isinstance(lengths, UniformLengths) and lengths.max > self.max_tokens:
            raise ValueError(f"output_lengths.max ({lengths.max}) is above max_tokens ({self.max_tokens}), which caps every request")
        if isinstance(lengths, TraceLengths) and not (own.replays or (self.conversation and self.conversation.file)):
            raise ValueError("output_lengths `trace` takes each request's length from a trace or a conversation file; this scenario has none")
        if self.arrivals is not None and self.arrivals.requests is None and self.arrivals.rate * self.duration_s > MAX_ARRIVALS:
            raise ValueError(f"rate x duration_s = {self.arrivals.rate * self.duration_s:.0f} arrivals is more than {MAX_ARRIVALS}")
        unknown = sorted(set(self.small) - set(type(self).model_fields) - {"schema"})
        if unknown:
            raise ValueError(f"small sets {', '.join(unknown)}, which is not a scenario field")
        return self

    @property
    def pool(self) -> int:
        """Locust users: the concurrency of a closed loop, the conversations of a multi-turn run,
        the most requests an open loop or a trace replay can have in flight."""
        if self.arrivals is not None and self.arrivals.max_concurrency is not None:
            return self.arrivals.max_concurrency
        return self.users

    @property
    def capped(self) -> bool:
        """An arrival waiting for a free user is the scenario's own queueing (True), or a shortfall of
        the client that voids the run (False)."""
        return self.arrivals is not None and self.arrivals.max_concurrency is not None

    def with_changes(self, **changes: Any) -> Scenario:
        """A copy with some values replaced, validated like the file (command-line overrides)."""
        data = {**self.model_dump(by_alias=True, exclude_none=True), **changes}
        changed = type(self).model_validate(data)
        changed._file = self._file
        return changed

    @property
    def file(self) -> Path:
        return self._file or SCENARIO_DIR / f"{self.name}.yaml"

    def scaled(self, small: bool) -> Scenario:
        """The scenario for a CPU server (--small): its `small` values, and the client error limit of
        a box whose client shares its few cores with the server (SMALL_CLIENT_ERROR_LIMIT) unless the
        scenario sets its own there."""
        if not small:
            return self
        return self.with_changes(**{"client_error_limit": SMALL_CLIENT_ERROR_LIMIT, **self.small})



_FIXES = {
    "extra_forbidden": "remove it or check its spelling against the scenario format in README.md",
    "missing": "add it",
    "literal_error": "use one of the listed values",
    "int_type": "write a plain whole number, unquoted (not true/false, not a string, not a float)",
    "float_type": "write a plain number, unquoted",
    "string_type": "quote the value so YAML reads it as a string",
    "bool_type": "write true or false, unquoted",
    "dict_type": "write a YAML mapping",
    "model_type": "write a YAML mapping",
    "union_tag_invalid": "set distribution to fixed, uniform, lognormal or trace",
    "union_tag_not_found": "set distribution to fixed, uniform, lognormal or trace",
    "greater_than": "use a larger value, within the bound",
    "greater_than_equal": "use a larger value, within the bound",
    "less_than": "use a smaller value, within the bound",
    "less_than_equal": "use a smaller value, within the bound",
    "string_too_long": "use a shorter value",
    "string_too_short": "write a value",
}
_FIELD_FIXES = {
    "name": "name it like the file: lowercase letters, digits and - (the run's directory under results/)",
    "prompt_set": f"name a prompt set in {display(PROMPT_DIR)}: lowercase letters, digits and -",
}


def _fix(error: dict[str, Any]) -> str:
    names = [str(part) for part in error["loc"] if not isinstance(part, int)]
    if error["type"] == "value_error" and names and names[-1] in _FIELD_FIXES:
        return _FIELD_FIXES[names[-1]]
    return _FIXES.get(error["type"], "see the scenario format in README.md")


def scenario_names() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


def scenario_fix(ref: str, other: str) -> str:
    """The fix for a scenario name that names none: the close name, and the others (and `other`)."""
    names = scenario_names()
    close = closest(ref.replace("_", "-"), names)
    known = f"{', '.join(names)}, {other}"
    return f"did you mean {close}? (the others: {known})" if close else f"use one of {known}"


def scenario_path(ref: str) -> Path:
    """A scenario name (loadtests/scenarios/NAME.yaml) or the path of a user's .yaml file."""
    if ref.endswith((".yaml", ".yml")):
        return Path(ref)
    fix = scenario_fix(ref, "or the path of a .yaml file")
    try:
        grammar.load_name(ref)
    except ValueError:
        raise RigError("command line", "--scenario", f"{ref[:60]!r} is not a scenario name", fix) from None
    path = SCENARIO_DIR / f"{ref}.yaml"
    if not path.exists():
        raise RigError("command line", "--scenario", f"no scenario {ref!r}", fix)
    return path


def _validated(data: Any, where: str, prefix: str = "") -> Scenario:
    if grammar.find_control_characters(data):
        field, char = grammar.find_control_characters(data)  # type: ignore[misc]
        raise RigError(where, prefix + field, f"contains the control character {char}", "remove it")
    try:
        return Scenario.model_validate(data)
    except ValidationError as error:
        typo = misspelled(error)
        if typo:
            loc, problem, fix = typo
            raise Invalid(where, prefix + ".".join(map(str, loc)), problem, fix) from None
        field, message = first_problem(error)
        raise Invalid(where, prefix + field, message, _fix(error.errors()[0])) from None


def load_scenario(ref: str) -> Scenario:
    """Parse and validate one scenario (and its small sizes, and the data files it names); every
    failure is one RigError line and nothing is written."""
    path = scenario_path(ref)
    where = display(path)
    raw = read_yaml(path, where, f"use one of {', '.join(scenario_names())}, or the path of a scenario .yaml file")
    if not isinstance(raw, dict):
        raise RigError(where, "(top level)", "a scenario must be a mapping", "start from a file in loadtests/scenarios/")
    scenario = _validated(raw, where)
    if scenario.name != path.stem:
        raise RigError(where, "name", f"name {scenario.name!r} differs from the file name",
                       f"rename the file to {scenario.name}.yaml or set name: {path.stem}")
    if scenario.small:
        small = _validated({**raw, **scenario.small}, where, "small: ")
        check_data(small, path, where)
    check_data(scenario, path, where)
    scenario._file = path
    return scenario


def check_data(scenario: Scenario, path: Path, where: str) -> None:
    """The files a scenario names exist and are valid, before anything boots or is written."""
    if not (PROMPT_DIR / f"{scenario.prompt_set}.txt").is_file():
        sets = ", ".join(sorted(p.stem for p in PROMPT_DIR.glob("*.txt")))
        raise RigError(where, "prompt_set", f"no prompt set {scenario.prompt_set!r}", f"use one of {sets}")
    if scenario.trace is not None:
        rows = read_trace(data_path(scenario.trace.file, TRACE_DIR, ".jsonl", path, where, "trace.file"), scenario.trace.block_tokens)
        lasts = (rows[-1].timestamp - rows[0].timestamp) / 1000.0 / scenario.trace.speed
        if lasts > MAX_DURATION_S:  # the replay's length: Locust's run time would not even fit its integer
            raise RigError(where, "trace.speed",
                           f"at speed {scenario.trace.speed:g} the trace lasts {lasts:.3g} s, more than {MAX_DURATION_S:g}",
                           "raise trace.speed, or replay a part of the trace")
    if scenario.conversation is not None and scenario.conversation.file is not None:
        read_conversations(data_path(scenario.conversation.file, CONVERSATION_DIR, ".jsonl", path, where, "conversation.file"))


def data_path(value: str, directory: Path, suffix: str, scenario_file: Path, where: str, field: str) -> Path:
    """A data file a scenario names: a plain name is a shipped file (directory/NAME.suffix); a path
    (only in a user's own scenario file) is read relative to that file. Data files are only read."""
    try:
        return directory / f"{grammar.load_name(value)}{suffix}"
    except ValueError:
        pass
    if grammar.control_character(value) or not value.endswith((".jsonl", ".json")):
        raise RigError(where, field, f"{value!r} is neither a name in {display(directory)} nor a .jsonl/.json path",
                       f"name a file in {display(directory)} (without {suffix}) or give a path ending in .jsonl")
    candidate = Path(value)
    return candidate if candidate.is_absolute() else scenario_file.parent / candidate


class GreedyPrompt(Spec):
    name: Name
    text: StrictStr = Field(min_length=1, max_length=10_000)


class GreedyPrompts(Spec):
    version: bounded_int(1, 1_000_000)
    max_tokens: bounded_int(1, MAX_OUTPUT_TOKENS)
    small: dict[Literal["max_tokens"], bounded_int(1, MAX_OUTPUT_TOKENS)] = Field(default_factory=dict)
    prompts: list[GreedyPrompt] = Field(min_length=1, max_length=64)


def greedy_prompts(small: bool) -> tuple[list[GreedyPrompt], int]:
    path = PROMPT_DIR / "greedy.yaml"
    where = display(path)
    raw = read_yaml(path, where, "restore loadtests/prompts/greedy.yaml")
    try:
        data = GreedyPrompts.model_validate(raw)
    except ValidationError as error:
        field, message = first_problem(error)
        raise Invalid(where, field, message, _fix(error.errors()[0])) from None
    max_tokens = data.small.get("max_tokens", data.max_tokens) if small else data.max_tokens
    return list(data.prompts), max_tokens
