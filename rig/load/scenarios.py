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
        import requests

        try:
            response = requests.post(f"{self.base_url}/tokenize", json={"model": self.model, "prompt": text,
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
        import requests

        response = requests.post(f"{self.base_url}/detokenize", json={"model": self.model, "tokens": ids}, timeout=60)
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


def build_prompts(scenario: Scenario, counter: TokenCounter) -> list[dict[str, Any]]:
    source = (PROMPT_DIR / f"{scenario.prompt_set}.txt").read_text()
    ids = counter.encode(source)
    if not ids:
        raise RigError(f"loadtests/prompts/{scenario.prompt_set}.txt", "(text)", "encodes to no tokens", "put text in it")
    pool = []
    stride = max(1, len(ids) // PROMPT_POOL)
    needed = scenario.prompt_tokens + PROMPT_POOL * stride + 8
    stream = (ids * (needed // len(ids) + 1))[:needed]
    for index in range(PROMPT_POOL):
        start = index * stride
        text, actual = exact_prompt(counter, stream[start:], scenario.prompt_tokens)
        pool.append({"name": f"{scenario.prompt_set}-{index}", "text": text, "tokens": actual})
    return pool


def greedy_prompts(small: bool) -> tuple[list[dict[str, Any]], int]:
    data = yaml.safe_load((PROMPT_DIR / "greedy.yaml").read_text())
    max_tokens = (data.get("small") or {}).get("max_tokens", data["max_tokens"]) if small else data["max_tokens"]
    return data["prompts"], int(max_tokens)
