"""Scenarios as data (loadtests/scenarios/*.yaml, or a user's own file) and prompts exact in tokens
for the served tokenizer.

A scenario is user input exactly like a recipe: read by the strict YAML loader, validated by one
strict typed schema (no coercion, no unknown keys, a bound on every number, names by their
grammar so none can leave results/ or loadtests/), every problem one RigError line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    PrivateAttr,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)

from rig import grammar
from rig.errors import RigError
from rig.load.inputs import display, read_yaml, validation_line
from rig.recipe import REPO_ROOT
from rig.typed import Spec

LOADTESTS = REPO_ROOT / "loadtests"
SCENARIO_DIR = LOADTESTS / "scenarios"
PROMPT_DIR = LOADTESTS / "prompts"
TRACE_DIR = LOADTESTS / "traces"
CONVERSATION_DIR = LOADTESTS / "conversations"
PROMPT_POOL = 16
SCENARIO_SCHEMA = 1

# Bounds: each is far above any real workload and far below what exhausts a machine.
MAX_USERS = 20_000  # Locust users of one run (c=3000 is the largest shipped)
MAX_PROMPT_TOKENS = 1 << 20
MAX_OUTPUT_TOKENS = 1 << 18
MAX_DURATION_S = 86_400.0
MAX_TIMEOUT_S = 7_200.0
MAX_RATE = 10_000.0  # requests per second
MAX_ARRIVALS = 1_000_000  # requests one open-loop schedule may hold
MAX_TURNS = 64
MAX_BLOCK_TOKENS = 4_096

Name = Annotated[StrictStr, AfterValidator(grammar.load_name)]
Number = StrictFloat | StrictInt  # a float field also takes a whole number; never a string or a bool


def _int(low: int, high: int) -> Any:
    return Annotated[StrictInt, Field(ge=low, le=high)]


def _seconds(low: float, high: float, open_low: bool = False) -> Any:
    return Annotated[StrictFloat, Field(gt=low, le=high) if open_low else Field(ge=low, le=high)]


class Prefix(Spec):
    """Shared prefixes on purpose: `groups` distinct prefixes of `shared_tokens` each."""

    shared_tokens: _int(1, MAX_PROMPT_TOKENS)
    groups: _int(1, PROMPT_POOL) = 1


class FixedLengths(Spec):
    distribution: Literal["fixed"]


class UniformLengths(Spec):
    distribution: Literal["uniform"]
    min: _int(1, MAX_OUTPUT_TOKENS)
    max: _int(1, MAX_OUTPUT_TOKENS)

    @model_validator(mode="after")
    def _ordered(self) -> UniformLengths:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is larger than max ({self.max})")
        return self


class LognormalLengths(Spec):
    distribution: Literal["lognormal"]
    median: _int(1, MAX_OUTPUT_TOKENS)
    sigma: _seconds(0.0, 4.0, open_low=True)


class TraceLengths(Spec):
    """Each request's own length: a trace row's output_length, a conversation's recorded reply."""

    distribution: Literal["trace"]


OutputLengthSpec = Annotated[FixedLengths | UniformLengths | LognormalLengths | TraceLengths, Field(discriminator="distribution")]


class Arrivals(Spec):
    """Open-loop arrivals as `vllm bench serve` draws them: Gamma gaps (burstiness 1 = Poisson)."""

    rate: _seconds(0.0, MAX_RATE, open_low=True)  # requests per second
    burstiness: _seconds(0.0, 100.0, open_low=True) = 1.0
    # The most requests in flight (AIPerf's --concurrency beside --request-rate, vLLM's
    # --max-concurrency): an arrival that finds all busy waits, and that wait is reported.
    max_concurrency: _int(1, MAX_USERS) | None = None
    requests: _int(1, MAX_ARRIVALS) | None = None  # a fixed count; else rate x duration_s
    drain_s: _seconds(0.0, MAX_TIMEOUT_S) = 60.0  # after the last arrival, for requests in flight to finish


class Trace(Spec):
    """A Mooncake-format trace (timestamp ms, input_length, output_length, hash_ids) replayed at its
    timestamps divided by `speed`; equal hash ids are equal blocks of `block_tokens` tokens."""

    file: StrictStr = Field(min_length=1, max_length=512)  # a name in loadtests/traces/, or a .jsonl path beside the scenario
    speed: _seconds(0.0, 1000.0, open_low=True) = 1.0
    block_tokens: _int(1, MAX_BLOCK_TOKENS) = 512
    drain_s: _seconds(0.0, MAX_TIMEOUT_S) = 60.0


class Conversation(Spec):
    """Multi-turn chats: each user holds one conversation at a time and sends its whole history."""

    turns: _int(1, MAX_TURNS)
    think_time_s: _seconds(0.0, 3600.0) = 0.0
    file: StrictStr | None = Field(None, min_length=1, max_length=512)  # ShareGPT-style; None: generated


Kind = Literal["decode", "prefill", "concurrency", "open_loop", "trace", "multi_turn"]
CLOSED_KINDS = ("decode", "prefill", "concurrency")
ARRIVAL_KINDS = ("open_loop", "trace")


class Scenario(Spec):
    schema_version: Literal[1] = Field(alias="schema", description="the scenario format (this schema)")
    name: Name
    version: _int(1, 1_000_000)
    kind: Kind
    endpoint: Literal["chat", "completions"]
    prompt_set: Name
    prompt_tokens: _int(1, MAX_PROMPT_TOKENS)
    max_tokens: _int(1, MAX_OUTPUT_TOKENS)
    temperature: Annotated[Number, Field(ge=0, le=2)]
    seed: _int(0, 2**63 - 1)
    users: _int(1, MAX_USERS)
    duration_s: _seconds(0.0, MAX_DURATION_S, open_low=True)
    ramp_s: _seconds(0.0, 3600.0) = 0.0
    spawn_rate: _seconds(0.0, 100_000.0, open_low=True) | None = None
    distributed: StrictBool = False
    read_timeout_s: _seconds(0.0, MAX_TIMEOUT_S, open_low=True) = 600.0
    # Every request's prompt starts with a unique nonce, so no prefix cache can answer it. A
    # scenario that wants shared prefixes says so: prefix: {shared_tokens: N, groups: G}.
    unique_prompts: StrictBool = True
    prefix: Prefix | None = None
    output_lengths: OutputLengthSpec | None = None  # None: every request asks for max_tokens
    arrivals: Arrivals | None = None  # open_loop
    trace: Trace | None = None  # trace
    conversation: Conversation | None = None  # multi_turn
    small: dict[StrictStr, Any] = Field(default_factory=dict, description="top-level values for CPU servers (--small)")
    _file: Path | None = PrivateAttr(default=None)  # the file it was read from: data paths are relative to it

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        sections = {"arrivals": "open_loop", "trace": "trace", "conversation": "multi_turn"}
        for section, kind in sections.items():
            present = getattr(self, section) is not None
            if present and self.kind != kind:
                raise ValueError(f"`{section}` belongs to kind {kind}, this scenario is {self.kind}")
            if not present and self.kind == kind:
                raise ValueError(f"kind {kind} needs a `{section}` section")
        if self.kind == "multi_turn" and self.endpoint != "chat":
            raise ValueError("multi_turn sends a conversation: it needs endpoint chat")
        if self.prefix is not None and self.prefix.shared_tokens >= self.prompt_tokens:
            raise ValueError(f"prefix.shared_tokens ({self.prefix.shared_tokens}) leaves no room in prompt_tokens ({self.prompt_tokens})")
        lengths = self.output_lengths
        if isinstance(lengths, UniformLengths) and lengths.max > self.max_tokens:
            raise ValueError(f"output_lengths.max ({lengths.max}) is above max_tokens ({self.max_tokens}), which caps every request")
        if isinstance(lengths, TraceLengths) and not (self.kind == "trace" or (self.conversation and self.conversation.file)):
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
        return self.with_changes(**self.small) if small and self.small else self

    def describe(self) -> dict[str, Any]:
        """What a run summary records about its scenario."""
        out = {"name": self.name, "version": self.version, "kind": self.kind, "endpoint": self.endpoint, "users": self.pool,
               "prompt_tokens": self.prompt_tokens, "max_tokens": self.max_tokens, "duration_s": self.duration_s,
               "prefix": self.prefix.model_dump() if self.prefix else None}
        for section in ("output_lengths", "arrivals", "trace", "conversation"):
            value = getattr(self, section)
            if value is not None:
                out[section] = value.model_dump()
        return out


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


def scenario_path(ref: str) -> Path:
    """A scenario name (loadtests/scenarios/NAME.yaml) or the path of a user's .yaml file."""
    if ref.endswith((".yaml", ".yml")):
        return Path(ref)
    try:
        grammar.load_name(ref)
    except ValueError:
        raise RigError("command line", "--scenario", f"{ref!r} is not a scenario name",
                       f"use one of {', '.join(scenario_names())}, or the path of a .yaml file") from None
    path = SCENARIO_DIR / f"{ref}.yaml"
    if not path.exists():
        raise RigError("command line", "--scenario", f"no scenario {ref!r}",
                       f"use one of {', '.join(scenario_names())}, or the path of a .yaml file")
    return path


def _validated(data: Any, where: str, prefix: str = "") -> Scenario:
    if grammar.find_control_characters(data):
        field, char = grammar.find_control_characters(data)  # type: ignore[misc]
        raise RigError(where, prefix + field, f"contains the control character {char}", "remove it")
    try:
        return Scenario.model_validate(data)
    except ValidationError as error:
        field, message = validation_line(error)
        raise RigError(where, prefix + field, message, _fix(error.errors()[0])) from None


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
    from rig.load.datasets import read_conversations, read_trace

    if scenario.trace is not None:
        read_trace(data_path(scenario.trace.file, TRACE_DIR, ".jsonl", path, where, "trace.file"), scenario.trace.block_tokens)
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


class TokenCounter:
    """The served model's tokenizer: from a local model directory, else the server's /tokenize."""

    def __init__(self, model_dir: str | None, base_url: str | None = None, model: str | None = None) -> None:
        self.tokenizer = None
        self.base_url, self.model = base_url, model
        if model_dir and (Path(model_dir) / "tokenizer_config.json").exists():
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(model_dir)

    @property
    def source(self) -> str:
        return "local tokenizer" if self.tokenizer is not None else "server /tokenize"

    def encode(self, text: str) -> list[int]:
        if self.tokenizer is not None:
            return self.tokenizer.encode(text, add_special_tokens=False)
        from rig import client

        try:
            with client.session() as http:
                response = http.post(f"{self.base_url}/tokenize", json={"model": self.model, "prompt": text,
                                                                      "add_special_tokens": False}, timeout=60)
            response.raise_for_status()
            return response.json()["tokens"]
        except Exception as error:
            raise RigError("tokenizer", "RIG_MODEL_DIR", f"no local tokenizer and the server's /tokenize failed ({error})",
                           "set RIG_MODEL_DIR to the checkpoint directory so prompts can be cut exactly in tokens") from None

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def decode(self, ids: list[int]) -> str:
        if self.tokenizer is not None:
            return self.tokenizer.decode(ids)
        from rig import client

        with client.session() as http:
            response = http.post(f"{self.base_url}/detokenize", json={"model": self.model, "tokens": ids}, timeout=60)
        response.raise_for_status()
        return response.json()["prompt"]


def exact_prompt(counter: TokenCounter, ids: list[int], tokens: int) -> tuple[str, int]:
    """Text that re-encodes to exactly `tokens` tokens (cutting a BPE stream can merge at the edge)."""
    for delta in (0, -1, 1, -2, 2, -3, 3, -4, 4):
        text = counter.decode(ids[: max(1, tokens + delta)])
        if len(counter.encode(text)) == tokens:
            return text, tokens
    text = counter.decode(ids[:tokens])
    return text, len(counter.encode(text))


NONCE_CANDIDATES = [f" {c}" for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"]
NONCE_SEPARATOR = "\n"
NONCE_SPACE = 2**32  # distinct nonces at least: a collision within a run is practically impossible
NONCE_SAMPLES = 4  # random nonces re-encoded with every prompt to prove the token count


@dataclass(frozen=True)
class NonceSpec:
    """A nonce is `length` picks from `alphabet` plus the separator; every pick is one token and no
    two picks merge, so every nonce is exactly `tokens` tokens long in front of any prompt body."""

    alphabet: tuple[str, ...]
    length: int
    tokens: int

    def to_json(self) -> dict[str, Any]:
        return {"alphabet": list(self.alphabet), "length": self.length, "separator": NONCE_SEPARATOR, "tokens": self.tokens}

    def sample(self, rng: Any) -> str:
        return "".join(rng.choice(self.alphabet) for _ in range(self.length)) + NONCE_SEPARATOR


def nonce_spec(counter: TokenCounter) -> NonceSpec | None:
    """Pick single-token candidates whose pairs never merge under the served tokenizer."""
    import math

    singles = [c for c in NONCE_CANDIDATES if len(counter.encode(c)) == 1]
    alphabet: list[str] = []
    for candidate in singles:
        if all(len(counter.encode(candidate + other)) == 2 and len(counter.encode(other + candidate)) == 2 for other in alphabet) \
                and len(counter.encode(candidate + candidate)) == 2:
            alphabet.append(candidate)
        if len(alphabet) == 16:
            break
    if len(alphabet) < 4:
        return None
    length = math.ceil(math.log(NONCE_SPACE) / math.log(len(alphabet)))
    tokens = len(counter.encode("".join(alphabet[i % len(alphabet)] for i in range(length)) + NONCE_SEPARATOR))
    return NonceSpec(tuple(alphabet), length, tokens)


def _body_in_context(counter: TokenCounter, ids: list[int], tokens: int, prefix: str, nonces: list[str], total: int) -> str | None:
    """A body that makes prefix + nonce + body exactly `total` tokens for every sample nonce. The
    cut is searched in context, because the body's first characters can merge with the nonce's
    separator (a newline before indented code is one token)."""
    for skip in range(4):
        for delta in (0, -1, 1, -2, 2, -3, 3):
            if tokens + delta < 1:
                continue
            text = counter.decode(ids[skip: skip + tokens + delta])
            if all(len(counter.encode(prefix + nonce + text)) == total for nonce in nonces):
                return text
    return None


def build_prompts(scenario: Scenario, counter: TokenCounter) -> tuple[list[dict[str, Any]], NonceSpec | None]:
    """A pool of prompts, each exactly `prompt_tokens` long for the served tokenizer once the Locust
    user puts its per-request nonce (and the scenario's shared prefix, if any) in front."""
    import random

    source = (PROMPT_DIR / f"{scenario.prompt_set}.txt").read_text()
    ids = counter.encode(source)
    if not ids:
        raise RigError(f"loadtests/prompts/{scenario.prompt_set}.txt", "(text)", "encodes to no tokens", "put text in it")
    where = f"loadtests/scenarios/{scenario.name}.yaml"
    nonce = nonce_spec(counter) if scenario.unique_prompts else None
    if scenario.unique_prompts and nonce is None:
        raise RigError(where, "unique_prompts", "no nonce alphabet fits the served tokenizer",
                       "set unique_prompts: false (prefix caches may then answer repeated prompts)")
    shared = scenario.prefix.shared_tokens if scenario.prefix else 0
    groups = scenario.prefix.groups if scenario.prefix else 1
    body_tokens = scenario.prompt_tokens - shared - (nonce.tokens if nonce else 0)
    if body_tokens < 1:
        raise RigError(where, "prompt_tokens", f"{scenario.prompt_tokens} tokens leave no room for the body after the "
                       f"shared prefix ({shared}) and the nonce ({nonce.tokens if nonce else 0})",
                       "raise prompt_tokens, lower prefix.shared_tokens, or set unique_prompts: false")
    stride = max(1, len(ids) // PROMPT_POOL)
    needed = scenario.prompt_tokens + PROMPT_POOL * stride + 8
    stream = (ids * (needed // len(ids) + 1))[:needed]
    prefixes = [exact_prompt(counter, stream[(g * 7 * stride) % len(ids):], shared)[0] if shared else "" for g in range(groups)]
    rng = random.Random(scenario.seed)
    pool = []
    for index in range(PROMPT_POOL):
        prefix = prefixes[index % groups]
        samples = [nonce.sample(rng) for _ in range(NONCE_SAMPLES)] if nonce else [""]
        text = _body_in_context(counter, stream[index * stride:], body_tokens, prefix, samples, scenario.prompt_tokens)
        if text is None:
            raise RigError(where, "prompt_tokens", f"prompt {index} cannot be cut to exactly {scenario.prompt_tokens} tokens "
                           "behind its prefix and nonce", "report this tokenizer; set unique_prompts: false meanwhile")
        entry = {"name": f"{scenario.prompt_set}-{index}", "text": text, "tokens": scenario.prompt_tokens}
        if prefix:
            entry.update(prefix=prefix, group=index % groups)
        pool.append(entry)
    return pool, nonce


class GreedyPrompt(Spec):
    name: Name
    text: StrictStr = Field(min_length=1, max_length=10_000)


class GreedyPrompts(Spec):
    version: _int(1, 1_000_000)
    max_tokens: _int(1, MAX_OUTPUT_TOKENS)
    small: dict[Literal["max_tokens"], _int(1, MAX_OUTPUT_TOKENS)] = Field(default_factory=dict)
    prompts: list[GreedyPrompt] = Field(min_length=1, max_length=64)


def greedy_prompts(small: bool) -> tuple[list[dict[str, Any]], int]:
    path = PROMPT_DIR / "greedy.yaml"
    where = display(path)
    raw = read_yaml(path, where, "restore loadtests/prompts/greedy.yaml")
    try:
        data = GreedyPrompts.model_validate(raw)
    except ValidationError as error:
        field, message = validation_line(error)
        raise RigError(where, field, message, _fix(error.errors()[0])) from None
    max_tokens = data.small.get("max_tokens", data.max_tokens) if small else data.max_tokens
    return [p.model_dump() for p in data.prompts], max_tokens
