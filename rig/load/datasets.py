"""Traces and conversation files, read strictly (turning them into what the Locust user sends is
rig.load.prompts).

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

import math
import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, StrictStr, field_validator

from rig.errors import RigError
from rig.load.bounds import MAX_DURATION_S, MAX_OUTPUT_TOKENS, MAX_PROMPT_TOKENS, MAX_TURNS, Number, bounded_int
from rig.load.inputs import display, read_rows
from rig.typed import Spec

MAX_HASH_IDS = 8_192  # per row: 4M tokens at Mooncake's 512-token blocks
MAX_DISTINCT_BLOCKS = 200_000
TRACE_FIX = "write one JSON object per line: timestamp (ms), input_length, output_length, hash_ids, as in Mooncake traces"
CONVERSATION_FIX = ('write one JSON object per line: {"id": ..., "conversations": [{"from": "human", "value": ...}, '
                    '{"from": "gpt", "value": ...}, ...]}')


class TraceRow(Spec):
    timestamp: Annotated[Number, Field(ge=0, le=MAX_DURATION_S * 1000)]
    input_length: bounded_int(1, MAX_PROMPT_TOKENS)
    output_length: bounded_int(1, MAX_OUTPUT_TOKENS)
    hash_ids: list[bounded_int(0, 2**63 - 1)] = Field(min_length=1, max_length=MAX_HASH_IDS)


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
