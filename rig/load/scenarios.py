"""Scenarios as data (loadtests/scenarios/*.yaml) and prompts exact in tokens for the served tokenizer."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import yaml

from rig.errors import RigError
from rig.recipe import REPO_ROOT

LOADTESTS = REPO_ROOT / "loadtests"
SCENARIO_DIR = LOADTESTS / "scenarios"
PROMPT_DIR = LOADTESTS / "prompts"
PROMPT_POOL = 16


@dataclass(frozen=True)
class Scenario:
    name: str
    version: int
    kind: Literal["decode", "prefill", "concurrency"]
    endpoint: Literal["chat", "completions"]
    prompt_set: str
    prompt_tokens: int
    max_tokens: int
    temperature: float
    seed: int
    users: int
    duration_s: float
    ramp_s: float = 0.0
    spawn_rate: float | None = None
    distributed: bool = False
    read_timeout_s: float = 600.0
    # Every request's prompt starts with a unique nonce, so no prefix cache can answer it. A
    # scenario that wants shared prefixes says so: prefix: {shared_tokens: N, groups: G}.
    unique_prompts: bool = True
    prefix: dict[str, int] | None = None
    small: dict[str, Any] = field(default_factory=dict)

    def scaled(self, small: bool) -> Scenario:
        return replace(self, **self.small) if small else self


def scenario_names() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


def load_scenario(name: str) -> Scenario:
    path = SCENARIO_DIR / f"{name}.yaml"
    if not path.exists():
        raise RigError("command line", "--scenario", f"no scenario {name!r}", f"use one of {', '.join(scenario_names())}")
    data = yaml.safe_load(path.read_text())
    try:
        return Scenario(**data)
    except TypeError as error:
        raise RigError(str(path.relative_to(REPO_ROOT)), "(keys)", str(error), "use the keys of the other scenarios") from None


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
    shared = (scenario.prefix or {}).get("shared_tokens", 0)
    groups = max(1, (scenario.prefix or {}).get("groups", 1))
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


def greedy_prompts(small: bool) -> tuple[list[dict[str, Any]], int]:
    data = yaml.safe_load((PROMPT_DIR / "greedy.yaml").read_text())
    max_tokens = (data.get("small") or {}).get("max_tokens", data["max_tokens"]) if small else data["max_tokens"]
    return data["prompts"], int(max_tokens)
