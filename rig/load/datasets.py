"""Traces and conversation files: reading them strictly and turning them into what the Locust user
sends.

A Mooncake-format trace row is {timestamp (ms), input_length, output_length, hash_ids}: the
prompt is a sequence of blocks of `block_tokens` tokens (the last one shorter), and rows that
share a hash id share that block. Here every hash id becomes one block of text, exact in tokens
for the served tokenizer, that starts with a tag derived from the id and the run's label: equal
ids are equal text (a prefix cache really can answer them), different ids never collide, and a
new run (a new round, another arm) starts cold.

A conversation file is ShareGPT-style JSON Lines: {"id", "conversations": [{"from": "human" |
"gpt" | "system", "value"}]}. The human turns are sent; the recorded gpt replies give each turn's
output length when the scenario asks for `output_lengths: {distribution: trace}`; the replies
sent back in the history are the ones the server streams during the run."""

from __future__ import annotations

import hashlib
import math
import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, StrictStr, field_validator

from rig.errors import RigError
from rig.load.inputs import display, read_rows
from rig.load.scenarios import (
    MAX_DURATION_S,
    MAX_OUTPUT_TOKENS,
    MAX_PROMPT_TOKENS,
    MAX_TURNS,
    PROMPT_DIR,
    Number,
    Scenario,
    TokenCounter,
    _body_in_context,
    _int,
    nonce_spec,
)
from rig.typed import Spec

MAX_HASH_IDS = 8_192  # per row: 4M tokens at Mooncake's 512-token blocks
MAX_DISTINCT_BLOCKS = 200_000
MAX_BLOCK_TEXT_TOKENS = 16_000_000  # all distinct blocks of one replay together (the Locust config holds them)
TRACE_FIX = "write one JSON object per line: timestamp (ms), input_length, output_length, hash_ids, as in Mooncake traces"
CONVERSATION_FIX = ('write one JSON object per line: {"id": ..., "conversations": [{"from": "human", "value": ...}, '
                    '{"from": "gpt", "value": ...}, ...]}')


class TraceRow(Spec):
    timestamp: Annotated[Number, Field(ge=0, le=MAX_DURATION_S * 1000)]
    input_length: _int(1, MAX_PROMPT_TOKENS)
    output_length: _int(1, MAX_OUTPUT_TOKENS)
    hash_ids: list[_int(0, 2**63 - 1)] = Field(min_length=1, max_length=MAX_HASH_IDS)


class Message(Spec):
    sender: Literal["human", "gpt", "system"] = Field(alias="from")
    value: StrictStr = Field(max_length=1_000_000)


class ConversationRow(Spec):
    id: StrictStr = Field(min_length=1, max_length=200)
    conversations: list[Message] = Field(min_length=2, max_length=2 * MAX_TURNS + 1)

    @field_validator("conversations")
    @classmethod
    def _alternating(cls, conversations: list[Message]) -> list[Message]:
        messages = conversations[1:] if conversations[0].sender == "system" else conversations
        expected = ["human", "gpt"] * (len(messages) // 2)
        if len(messages) % 2 or [m.sender for m in messages] != expected:
            raise ValueError("after an optional system message, turns must alternate human, gpt, ... and end with gpt")
        if any(not m.value.strip() for m in messages[::2]):
            raise ValueError("a human turn is empty")
        return conversations

    @property
    def system(self) -> str | None:
        return self.conversations[0].value if self.conversations[0].sender == "system" else None

    def pairs(self) -> list[tuple[str, str]]:
        messages = self.conversations[1:] if self.system is not None else self.conversations
        return [(messages[i].value, messages[i + 1].value) for i in range(0, len(messages), 2)]


def _stamp(path: Path) -> tuple[str, int, int]:
    try:
        info = os.stat(path)
        return str(path.resolve()), info.st_mtime_ns, info.st_size
    except OSError:
        return str(path), 0, 0


def read_trace(path: Path, block_tokens: int) -> list[TraceRow]:
    return _read_trace(_stamp(path), path, block_tokens)


@lru_cache(maxsize=8)
def _read_trace(stamp: tuple[str, int, int], path: Path, block_tokens: int) -> list[TraceRow]:
    where = display(path)
    rows = read_rows(path, where, TraceRow, TRACE_FIX)
    distinct: set[int] = set()
    for number, (previous, row) in enumerate(zip([None, *rows], rows), start=1):
        if previous is not None and row.timestamp < previous.timestamp:
            raise RigError(where, f"row {number}: timestamp", f"{row.timestamp} is earlier than the row before ({previous.timestamp})",
                           "sort the trace by timestamp")
        blocks = math.ceil(row.input_length / block_tokens)
        if blocks != len(row.hash_ids):
            raise RigError(where, f"row {number}: hash_ids", f"{len(row.hash_ids)} hash ids for input_length {row.input_length} "
                           f"at {block_tokens} tokens per block (expected {blocks})",
                           "set the scenario's trace.block_tokens to the trace's block size (Mooncake: 512)")
        distinct.update(row.hash_ids)
    if len(distinct) > MAX_DISTINCT_BLOCKS:
        raise RigError(where, "hash_ids", f"{len(distinct)} distinct blocks is more than {MAX_DISTINCT_BLOCKS}", "replay a part of the trace")
    return rows


def read_conversations(path: Path) -> list[ConversationRow]:
    return _read_conversations(_stamp(path), path)


@lru_cache(maxsize=8)
def _read_conversations(stamp: tuple[str, int, int], path: Path) -> list[ConversationRow]:
    where = display(path)
    if path.suffix == ".json":  # ShareGPT's own files are one JSON array
        return read_rows(path, where, ConversationRow, CONVERSATION_FIX,
                         unwrap=lambda data: data if isinstance(data, list) else _not_a_list())
    return read_rows(path, where, ConversationRow, CONVERSATION_FIX)


def _not_a_list() -> list[Any]:
    raise ValueError("the top level is not a list of conversations")


def _corpus(scenario: Scenario, counter: TokenCounter, minimum: int) -> list[int]:
    ids = counter.encode((PROMPT_DIR / f"{scenario.prompt_set}.txt").read_text())
    if not ids:
        raise RigError(f"loadtests/prompts/{scenario.prompt_set}.txt", "(text)", "encodes to no tokens", "put text in it")
    return ids * (minimum // len(ids) + 2)


def build_trace(scenario: Scenario, counter: TokenCounter, label: str, scenario_file: Path) -> dict[str, Any]:
    """What the Locust user replays: each row's send time (seconds after the start, already divided
    by the speed), its blocks, target tokens and output length; and the text of every block."""
    from rig.load.scenarios import TRACE_DIR, data_path

    spec = scenario.trace
    assert spec is not None
    where = display(scenario_file)
    path = data_path(spec.file, TRACE_DIR, ".jsonl", scenario_file, where, "trace.file")
    rows = read_trace(path, spec.block_tokens)
    nonce = nonce_spec(counter)
    if nonce is None:
        raise RigError(where, "trace", "no tag alphabet fits the served tokenizer, so blocks cannot be told apart",
                       "replay this trace against a server with a BPE tokenizer")
    needed: dict[tuple[int, int], None] = {}
    entries = []
    start = rows[0].timestamp
    for row in rows:
        keys = []
        for position, hash_id in enumerate(row.hash_ids):
            tokens = min(spec.block_tokens, row.input_length - position * spec.block_tokens)
            needed[(hash_id, tokens)] = None
            keys.append(f"{hash_id}:{tokens}")
        entries.append({"at": (row.timestamp - start) / 1000.0 / spec.speed, "blocks": keys, "tokens": row.input_length,
                        "output": row.output_length})
    total = sum(tokens for _, tokens in needed)
    if total > MAX_BLOCK_TEXT_TOKENS:
        raise RigError(where, "trace", f"its {len(needed)} distinct blocks hold {total} tokens, more than {MAX_BLOCK_TEXT_TOKENS}",
                       "replay a part of the trace")
    corpus = _corpus(scenario, counter, spec.block_tokens + 8)
    length = len(corpus) // 2
    blocks = {}
    for hash_id, tokens in needed:
        digest = int.from_bytes(hashlib.sha256(f"{label}/{hash_id}".encode()).digest()[:8], "big")
        picks = []
        for _ in range(nonce.length):
            digest, digit = divmod(digest, len(nonce.alphabet))
            picks.append(nonce.alphabet[digit])
        tag = "".join(picks) + "\n"
        if tokens < nonce.tokens:  # shorter than a tag: its first picks, one token each
            text: str | None = "".join(picks[:tokens])
        elif tokens == nonce.tokens:
            text = tag
        else:
            offset = (hash_id * 7919) % length
            body = _body_in_context(counter, corpus[offset:], tokens - nonce.tokens, "", [tag], tokens)
            text = None if body is None else tag + body
        if text is None:
            raise RigError(where, "trace", f"block {hash_id} cannot be cut to exactly {tokens} tokens", "report this tokenizer")
        blocks[f"{hash_id}:{tokens}"] = text
    return {"rows": entries, "blocks": blocks, "file": display(path),
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "block_tokens": spec.block_tokens, "speed": spec.speed}


def build_conversations(scenario: Scenario, counter: TokenCounter, scenario_file: Path) -> list[dict[str, Any]] | None:
    """The conversations of a file, each turn's recorded reply length counted with the served
    tokenizer; None for generated conversations (the Locust user builds them from the prompts)."""
    from rig.load.scenarios import CONVERSATION_DIR, data_path

    spec = scenario.conversation
    if spec is None or spec.file is None:
        return None
    where = display(scenario_file)
    rows = read_conversations(data_path(spec.file, CONVERSATION_DIR, ".jsonl", scenario_file, where, "conversation.file"))
    count_replies = scenario.output_lengths is not None and scenario.output_lengths.distribution == "trace"
    return [{"id": row.id, "system": row.system,
             "turns": [{"text": user, "output": counter.count(reply) if count_replies else None}
                       for user, reply in row.pairs()[: spec.turns]]}
            for row in rows]
