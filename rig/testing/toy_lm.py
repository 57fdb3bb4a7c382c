"""A deterministic toy language model for the timed test server's non-streamed completions: the
logprob scoring and divergence code is tested against real HTTP responses in vLLM's format
(`/v1/completions`) and SGLang's (`/generate`) without a GPU. Tokens are bytes (text is UTF-8); only printable ASCII is ever generated.
`perturb` adds a small deterministic change to every logit: an arm that "changes numerics"."""

from __future__ import annotations

import hashlib
import math
import random

VOCAB = tuple(range(32, 127))
# Its vocabulary size as SGLang's model config would give it: ids 0..126. SGLang returns a prompt id
# >= vocab_size - 1 as 0 in input_token_logprobs (logprob_result_processor.py:53-55 in 0.5.23),
# so the toy's '~' (126) comes back as 0 there, as the last id of a real vocabulary does.
VOCAB_SIZE = 127
CONTEXT = 3  # tokens the next-token distribution depends on


def encode(text: str) -> list[int]:
    return list(text.encode())


def decode(ids: list[int]) -> str:
    return bytes(i % 256 for i in ids).decode(errors="replace")


def logprobs(context: list[int], perturb: float = 0.0) -> dict[int, float]:
    """log-softmax over VOCAB of logits seeded by the last CONTEXT tokens."""
    key = bytes(i % 256 for i in context[-CONTEXT:])
    seed = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")
    base = random.Random(seed)
    logits = {v: base.gauss(0.0, 3.0) for v in VOCAB}
    if perturb:
        nudge = random.Random(seed ^ 0x5EED)
        logits = {v: x + perturb * nudge.gauss(0.0, 1.0) for v, x in logits.items()}
    top = max(logits.values())
    total = math.log(sum(math.exp(x - top) for x in logits.values())) + top
    return {v: x - total for v, x in logits.items()}


def top_k(dist: dict[int, float], k: int, actual: int | None = None) -> dict[int, float]:
    chosen = dict(sorted(dist.items(), key=lambda item: -item[1])[:k])
    if actual is not None:
        chosen[actual] = dist.get(actual, -1e9)
    return chosen


def greedy(ids: list[int], steps: int, perturb: float = 0.0) -> list[tuple[int, dict[int, float]]]:
    """Greedy generation: each step's chosen token and the distribution it was chosen from."""
    context, out = list(ids), []
    for _ in range(steps):
        dist = logprobs(context, perturb)
        token = max(dist, key=dist.get)
        out.append((token, dist))
        context.append(token)
    return out


def complete(request: dict, perturb: float = 0.0) -> dict:
    """A vLLM-format /v1/completions response (non-streamed): greedy generation, `logprobs` top-k per
    generated token, `prompt_logprobs` per prompt position, token ids when asked."""
    prompt = request.get("prompt")
    ids = list(prompt) if isinstance(prompt, list) else encode(str(prompt or ""))
    max_tokens = int(request.get("max_tokens") or 16)
    k = int(request.get("logprobs") or 0)
    as_ids = bool(request.get("return_tokens_as_token_ids"))
    steps = greedy(ids, max_tokens, perturb)
    output = [token for token, _ in steps]
    tops = [{(f"token_id:{t}" if as_ids else decode([t])): lp for t, lp in top_k(dist, k).items()} for _, dist in steps]
    choice: dict = {"index": 0, "text": decode(output), "finish_reason": "length"}
    if k:
        choice["logprobs"] = {"tokens": [decode([t]) for t in output], "top_logprobs": tops}
    if request.get("return_token_ids"):
        choice["token_ids"], choice["prompt_token_ids"] = output, ids
    if request.get("prompt_logprobs") is not None:
        kp = int(request["prompt_logprobs"])
        choice["prompt_logprobs"] = [None] + [
            {str(t): {"logprob": lp, "rank": 1} for t, lp in top_k(logprobs(ids[:i], perturb), kp, ids[i]).items()}
            for i in range(1, len(ids))]
    return {"id": "cmpl-toy", "object": "text_completion", "model": request.get("model"), "choices": [choice],
            "usage": {"prompt_tokens": len(ids), "completion_tokens": len(output), "total_tokens": len(ids) + len(output)}}


def _sglang_entry(logprob: float | None, token: int) -> list:
    return [logprob, token, None]  # [logprob, token id, text]: text only with return_text_in_logprobs


def _sglang_clipped(token: int) -> int:
    return token if token < VOCAB_SIZE - 1 else 0


def tokenize(request: dict, perturb: float = 0.0) -> dict:
    """SGLang's /v1/tokenize (entrypoints/openai/protocol.py TokenizeRequest/TokenizeResponse)."""
    tokens = encode(str(request.get("prompt") or ""))
    return {"tokens": tokens, "count": len(tokens), "max_model_len": 4096}


def generate(request: dict, perturb: float = 0.0) -> dict:
    """An SGLang-format /generate response (non-streamed), as sglang 0.5.17 builds it
    (managers/scheduler_components/logprob_result_processor.py, tokenizer_manager.py): greedy
    generation; with return_logprob, `meta_info.input_token_logprobs` from logprob_start_len on
    (default -1: none), whose first entry has no logprob (`[None] + logprobs[:-1]`), so entry j is
    token start + j scored from the tokens before it; `output_token_logprobs`; and with
    top_logprobs_num the top-k lists per position of both."""
    ids = list(request["input_ids"]) if request.get("input_ids") is not None else encode(str(request.get("text") or ""))
    params = request.get("sampling_params") or {}
    max_new = int(params.get("max_new_tokens", 16))
    k = int(request.get("top_logprobs_num") or 0)
    steps = greedy(ids, max_new, perturb)
    output = [token for token, _ in steps]
    meta: dict = {"id": "toy", "finish_reason": {"type": "length", "length": max_new}, "prompt_tokens": len(ids),
                  "completion_tokens": len(output), "cached_tokens": 0}
    if request.get("return_logprob"):
        start = int(request.get("logprob_start_len", -1))
        positions = range(start, len(ids)) if 0 <= start < len(ids) else range(0)
        meta["input_token_logprobs"] = [_sglang_entry(None if i == start else logprobs(ids[:i], perturb)[ids[i]], _sglang_clipped(ids[i]))
                                        for i in positions]
        meta["output_token_logprobs"] = [_sglang_entry(dist[token], token) for token, dist in steps]
        if k:
            meta["input_top_logprobs"] = [None if i == start else [_sglang_entry(lp, t) for t, lp in top_k(logprobs(ids[:i], perturb), k).items()]
                                          for i in positions]
            meta["output_top_logprobs"] = [[_sglang_entry(lp, t) for t, lp in top_k(dist, k).items()] for _, dist in steps]
    return {"text": decode(output), "output_ids": output, "meta_info": meta}
