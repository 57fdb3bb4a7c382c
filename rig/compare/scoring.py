"""Scoring a boot's outputs through the engine's own protocol (the engine registry's `scoring`):
the probe set, each boot's greedy continuations of it, and its teacher-forced scores of the
comparison's reference continuation. vLLM: `prompt_logprobs` on /v1/completions; SGLang: /generate
with `return_logprob` and `logprob_start_len`; an engine without logprobs: the text only."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rig import client
from rig.compare.model import BootQuality, Generation, Score
from rig.engines import ENGINES
from rig.errors import RigError
from rig.load.prompts import read_tokenizer_config
from rig.load.scenarios import PROMPT_DIR

TOP_K = 5
PROBE_CHARS = 240  # each prompt-set probe is this long a cut of the set's text


@dataclass(frozen=True)
class Probe:
    name: str
    text: str


def probes(prompt_sets: list[str]) -> list[Probe]:
    """The greedy-identity prompts plus cuts of each scenario's prompt set, fixed for a comparison."""
    greedy = yaml.safe_load((PROMPT_DIR / "greedy.yaml").read_text())
    chosen = [Probe(p["name"], p["text"]) for p in greedy["prompts"]]
    for name in dict.fromkeys(prompt_sets):
        text = (PROMPT_DIR / f"{name}.txt").read_text()
        step = max(1, (len(text) - PROBE_CHARS) // 3)
        chosen += [Probe(f"{name}-{i}", text[i * step: i * step + PROBE_CHARS]) for i in range(4)]
    return chosen


def _token_id(key: str) -> int:
    """vLLM with return_tokens_as_token_ids names a top-logprob entry `token_id:123`."""
    return int(key.rsplit(":", 1)[-1])


def _vllm_generate(http: Any, base_url: str, model: str, probe: Probe, max_tokens: int, pinning: dict[str, Any]) -> Generation:
    body = {"model": model, "prompt": probe.text, "max_tokens": max_tokens, "temperature": 0, "logprobs": TOP_K,
            "return_token_ids": True, "return_tokens_as_token_ids": True, **pinning}
    response = http.post(f"{base_url}/v1/completions", json=body, timeout=120)
    response.raise_for_status()
    choice = response.json()["choices"][0]
    tops = [{_token_id(k): float(v) for k, v in (top or {}).items()} for top in (choice.get("logprobs") or {}).get("top_logprobs") or []]
    return Generation(prompt_ids=choice.get("prompt_token_ids"), output_ids=choice.get("token_ids"), text=choice.get("text") or "",
                      top=tops or None)


def _vllm_score(http: Any, base_url: str, model: str, reference: Generation) -> Score:
    ids = list(reference.prompt_ids or []) + list(reference.output_ids or [])
    body = {"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0, "prompt_logprobs": TOP_K}
    response = http.post(f"{base_url}/v1/completions", json=body, timeout=120)
    response.raise_for_status()
    entries = response.json()["choices"][0]["prompt_logprobs"]
    start = len(reference.prompt_ids or [])
    logprobs, tops = [], []
    for position, token in enumerate(reference.output_ids or [], start=start):
        entry = {int(k): float(v["logprob"]) for k, v in (entries[position] or {}).items()}
        logprobs.append(entry[token])
        tops.append(entry)
    return Score(logprobs=logprobs, top=tops, sequence=sequence_digest(reference))


def _sglang_post(http: Any, base_url: str, body: dict[str, Any]) -> dict[str, Any]:
    response = http.post(f"{base_url}/generate", json={**body, "return_logprob": True, "top_logprobs_num": TOP_K}, timeout=120)
    response.raise_for_status()
    return response.json()


def _sglang_top(entries: list[list[Any]] | None) -> dict[int, float]:
    """One position's top-k as SGLang returns it: [[logprob, token id, text], ...]."""
    return {int(entry[1]): float(entry[0]) for entry in entries or []}


def _sglang_matches(returned: list[int], sent: list[int]) -> bool:
    """SGLang echoes a prompt id >= vocab_size - 1 as 0 in input_token_logprobs (0.5.23
    scheduler_components/logprob_result_processor.py:53-55, "clip padded hash values"): there a 0
    stands for any id, and only the other positions can be held to what was sent."""
    return len(returned) == len(sent) and all(r == s or r == 0 for r, s in zip(returned, sent))


JSON_INT_RANGE = (-(2**63), 2**64 - 1)  # the integers SGLang's JSON encoder (orjson) writes


def check_scoring_tokenizer(engine: str, model_dir: Callable[[], str | None]) -> None:
    """Refuse, before any boot, a checkpoint whose scoring would fail in every boot. SGLang's
    /v1/tokenize (which _sglang_generate needs) returns the tokenizer's model_max_length as an int
    (0.5.17 protocol.py TokenizeResponse.max_model_len): a tokenizer_config.json without one
    (transformers then reads int(1e30)), or with the integer 1000000000000000019884624838656 many
    checkpoints carry, makes orjson fail ("Integer exceeds 64-bit range"), and a float that is no
    integer of 64 bits (1e30, 2048.5) or a string fails pydantic's int; either way every call answers
    500 (entrypoints/openai/serving_tokenize.py); so does a directory with no
    tokenizer_config.json at all. `model_dir` (the served tokenizer's directory: --tokenizer-path when the
    recipe sets it) is asked only for SGLang. Checked where this host can read that directory; elsewhere
    the boots say so."""
    if ENGINES[engine].scoring != "sglang-input-logprobs":
        return
    directory = model_dir()
    if not directory:
        return
    path = Path(directory) / "tokenizer_config.json"
    try:
        if not Path(directory).is_dir():
            return
        present = path.is_file()
    except OSError:  # a directory this user may not enter (the server may): the boots say so
        return
    if present:
        if not os.access(path, os.R_OK):  # a file this user may not read (the server may): the boots say so
            return
        config = read_tokenizer_config(path)
        if not isinstance(config, dict):
            return  # not a tokenizer config rig can judge: the boots say whether SGLang read it
        length = config.get("model_max_length")
    else:  # transformers builds the tokenizer from tokenizer.json alone, with model_max_length int(1e30)
        length = None
    integral = (isinstance(length, int) and not isinstance(length, bool)) or (isinstance(length, float) and length.is_integer())
    if integral and JSON_INT_RANGE[0] <= length <= JSON_INT_RANGE[1]:
        return
    problem = ("missing: the directory has no tokenizer_config.json (transformers then reads int(1e30))" if not present
               else "missing (transformers then reads int(1e30))" if length is None
               else f"{str(length)[:40]} is no integer of 64 bits")
    raise RigError(str(path), "model_max_length", f"{problem}: SGLang's /v1/tokenize cannot encode it and answers 500 "
                   "to every call, so no boot of this comparison could be scored",
                   "set model_max_length to the model's context length (config.json's max_position_embeddings) "
                   "in a copy of the tokenizer's directory (tokenizer_config.json), and serve that copy")


def _sglang_generate(http: Any, base_url: str, model: str, probe: Probe, max_tokens: int, pinning: dict[str, Any]) -> Generation:
    """SGLang's native /generate (sglang 0.5.17 io_struct.GenerateReqInput) on the ids its own
    /v1/tokenize gives the probe's text, so the prompt's ids are known exactly (the echo in
    input_token_logprobs turns the vocabulary's last ids into 0); the continuation is `output_ids`."""
    tokenized = http.post(f"{base_url}/v1/tokenize", json={"model": model, "prompt": probe.text}, timeout=60)
    tokenized.raise_for_status()
    prompt = [int(i) for i in tokenized.json()["tokens"]]
    body = _sglang_post(http, base_url, {"input_ids": prompt, "logprob_start_len": 0,
                                         "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0, **pinning}})
    meta = body["meta_info"]
    if not _sglang_matches([int(entry[1]) for entry in meta["input_token_logprobs"]], prompt):
        raise ValueError("SGLang echoed other prompt ids than it was sent (logprob_start_len semantics changed?)")
    return Generation(prompt_ids=prompt, output_ids=[int(i) for i in body["output_ids"]], text=body.get("text") or "",
                      top=[_sglang_top(position) for position in meta.get("output_top_logprobs") or []] or None)


def _sglang_score(http: Any, base_url: str, model: str, reference: Generation) -> Score:
    """Teacher-forced: input_token_logprobs from logprob_start_len L start with token L (no logprob:
    sglang 0.5.17 prepends None and drops the sampled token), so entry j scores token L + j given the
    tokens before it. L = len(prompt) - 1 puts the continuation's tokens at entries 1..n."""
    prompt, output = list(reference.prompt_ids or []), list(reference.output_ids or [])
    body = _sglang_post(http, base_url, {"input_ids": prompt + output, "logprob_start_len": len(prompt) - 1,
                                         "sampling_params": {"max_new_tokens": 1, "temperature": 0}})
    meta = body["meta_info"]
    entries, tops = meta["input_token_logprobs"][1:], (meta.get("input_top_logprobs") or [])[1:]
    if not _sglang_matches([int(entry[1]) for entry in entries], output):
        raise ValueError("SGLang scored other tokens than the reference continuation (logprob_start_len semantics changed?)")
    return Score(logprobs=[float(entry[0]) for entry in entries], top=[_sglang_top(position) for position in tops],
                 sequence=sequence_digest(reference))


Generate = Callable[[Any, str, str, Probe, int, dict[str, Any]], Generation]
ScoreFn = Callable[[Any, str, str, Generation], Score]
# The engine registry's `scoring` values: how a server generates with token ids and scores a given
# sequence teacher-forced.
SCORING: dict[str, tuple[Generate, ScoreFn]] = {
    "vllm-prompt-logprobs": (_vllm_generate, _vllm_score),
    "sglang-input-logprobs": (_sglang_generate, _sglang_score),
}


def sequence_digest(generation: Generation) -> str:

    ids = list(generation.prompt_ids or []) + [-1] + list(generation.output_ids or [])
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:16]


def _text_generate(http: Any, base_url: str, model: str, probe: Probe, max_tokens: int, pinning: dict[str, Any]) -> Generation:
    body = {"model": model, "prompt": probe.text, "max_tokens": max_tokens, "temperature": 0, **pinning}
    response = http.post(f"{base_url}/v1/completions", json=body, timeout=120)
    response.raise_for_status()
    return Generation(prompt_ids=None, output_ids=None, text=response.json()["choices"][0].get("text") or "")


def collect(base_url: str, model: str, engine: str, chosen: list[Probe], max_tokens: int,
            reference: dict[str, Generation] | None, defines_reference: bool = True) -> BootQuality:
    """This boot's greedy continuations and, where the engine scores, the reference scored. Without a
    reference yet, only a boot that may define it (the baseline's) scores its own continuations."""
    row = ENGINES[engine]
    pinning = dict(row.length_pinning)
    quality = BootQuality(scoring=row.scoring)
    with client.session() as http:
        if row.scoring is not None:
            generate, score = SCORING[row.scoring]
            for probe in chosen:
                quality.generations[probe.name] = generate(http, base_url, model, probe, max_tokens, pinning)
            scored = reference if reference is not None else (quality.generations if defines_reference else {})
            for name, generation in scored.items():
                quality.scores[name] = score(http, base_url, model, generation)
            if not scored:
                quality.note = "no reference continuation yet (no baseline boot had scored): this boot's drift is not measured"
        else:
            for probe in chosen:
                quality.generations[probe.name] = _text_generate(http, base_url, model, probe, max_tokens, pinning)
            quality.note = (f"{engine} returns no logprobs: logprob drift is not measured; divergence is located in "
                            "the text (re-tokenised) only")
    return quality
