"""The small traces and conversation files shipped in loadtests/, generated deterministically here
(nothing is downloaded; a test checks the shipped files are exactly what this writes).

    python -m rig.load.generate          # rewrite them
    python -m rig.load.generate --check  # exit 1 if any differs

Traces follow the Mooncake format: timestamp (ms, Poisson arrivals), input_length, output_length
(lognormal), hash_ids. Requests share prefixes the way chat traffic does: a few system prompts
(groups of leading blocks every request of the group starts with, taken to a random depth), then
blocks of their own; the last block is partial. Conversations are ShareGPT-style JSON Lines."""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path

from rig.atomic import write_text_atomic
from rig.load.scenarios import CONVERSATION_DIR, TRACE_DIR


@dataclass(frozen=True)
class TraceShape:
    rows: int
    rate: float  # requests per second
    block: int  # tokens per hash id (Mooncake: 512)
    groups: int  # shared system prompts
    group_blocks: int  # blocks in each
    own_blocks: tuple[int, int]  # blocks of each request's own, inclusive range
    output_median: int
    output_sigma: float
    output_max: int
    seed: int


TRACES = {
    # Small enough for tiny-cpu on two cores: ~4 requests/s, 17-128 prompt tokens, short outputs.
    "mooncake-tiny": TraceShape(rows=80, rate=4.0, block=16, groups=3, group_blocks=4, own_blocks=(1, 4),
                                output_median=8, output_sigma=0.5, output_max=24, seed=20),
    # Sizes like the Mooncake traces' (512-token blocks, thousands of prompt tokens) for GPU servers.
    "mooncake-sample": TraceShape(rows=240, rate=2.0, block=512, groups=6, group_blocks=8, own_blocks=(1, 16),
                                  output_median=200, output_sigma=0.7, output_max=2048, seed=21),
}


def mooncake_rows(shape: TraceShape) -> list[dict[str, int | list[int]]]:
    rng = random.Random(shape.seed)
    next_id = 0
    groups = []
    for _ in range(shape.groups):
        groups.append(list(range(next_id, next_id + shape.group_blocks)))
        next_id += shape.group_blocks
    rows = []
    elapsed_ms = 0.0
    for _ in range(shape.rows):
        elapsed_ms += rng.expovariate(shape.rate) * 1000.0
        shared = rng.choice(groups)[: rng.randint(1, shape.group_blocks)]
        own = list(range(next_id, next_id + rng.randint(*shape.own_blocks)))
        next_id += len(own)
        hash_ids = shared + own
        input_length = (len(hash_ids) - 1) * shape.block + rng.randint(1, shape.block)
        output = round(rng.lognormvariate(math.log(shape.output_median), shape.output_sigma))
        rows.append({"timestamp": int(elapsed_ms), "input_length": input_length,
                     "output_length": max(1, min(shape.output_max, output)), "hash_ids": hash_ids})
    return rows


TOPICS = ["the harbour market", "a slow database query", "packing for a long hike", "a bread recipe", "learning to sail",
          "a failing unit test", "planning a garden", "the history of a lighthouse", "a noisy fan in a server room",
          "choosing a bicycle", "a tide table", "writing a cover letter"]
QUESTIONS = ["Can you explain {topic} to me?", "What should I know first about {topic}?", "Give me three tips on {topic}.",
             "What is the most common mistake with {topic}?", "How would you summarise {topic} in a paragraph?",
             "And what would you do differently next time?", "Can you go into more detail on the second point?",
             "How long does that usually take?", "What would a beginner get wrong here?", "Is there a simpler way?"]
WORDS = ["the", "a", "of", "to", "and", "in", "is", "it", "that", "for", "on", "with", "as", "was", "at", "by", "this", "be", "from", "or", "an", "are", "which", "not", "have", "but", "they", "harbour", "tide", "boat", "rope", "query", "index", "table", "cache", "bread", "flour", "oven", "trail", "map", "boots", "garden", "soil", "light", "keeper", "fan", "rack", "sail", "wind", "chain", "test", "build", "letter", "step", "time", "first", "next", "then", "more", "less", "small", "large", "early", "late"]


def conversation_rows(count: int, seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        topic = TOPICS[index % len(TOPICS)]
        turns = rng.randint(3, 6)
        messages: list[dict[str, str]] = []
        if index % 4 == 0:
            messages.append({"from": "system", "value": "You are a patient assistant who answers in plain words."})
        for turn in range(turns):
            question = QUESTIONS[0 if turn == 0 else rng.randrange(1, len(QUESTIONS))].format(topic=topic)
            reply = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 120))).capitalize() + "."
            messages += [{"from": "human", "value": question}, {"from": "gpt", "value": reply}]
        rows.append({"id": f"chat-{index:03d}", "conversations": messages})
    return rows


def jsonl(rows: list) -> str:
    return "".join(json.dumps(row, separators=(",", ":")) + "\n" for row in rows)


def files() -> dict[Path, str]:
    out = {TRACE_DIR / f"{name}.jsonl": jsonl(mooncake_rows(shape)) for name, shape in TRACES.items()}
    out[CONVERSATION_DIR / "chats-sample.jsonl"] = jsonl(conversation_rows(16, 22))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if a shipped file differs from what this writes")
    args = parser.parse_args()
    stale = []
    for path, text in files().items():
        if path.exists() and path.read_text() == text:
            continue
        stale.append(path)
        if not args.check:
            write_text_atomic(path, text)
    for path in stale:
        print(f"{'stale' if args.check else 'wrote'} {path}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
