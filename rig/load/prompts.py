"""What the Locust user sends, exact in tokens for the served tokenizer: the prompt pool (each
prompt exactly `prompt_tokens` long behind its nonce and shared prefix), a trace's blocks and a
conversation file's turns. The tokenizer is the served model's own, read from its tokenizer.json
by the `tokenizers` library (no transformers needed), else the server's /tokenize.

A Mooncake-format trace row is {timestamp (ms), input_length, output_length, hash_ids}: the
prompt is a sequence of blocks of `block_tokens` tokens (the last one shorter), and rows that
share a hash id share that block. Here every hash id becomes one block of text, exact in tokens
for the served tokenizer, that starts with a tag derived from the id and the run's label: equal
ids are equal text (a prefix cache really can answer them), different ids never collide, and a
new run (a new round, another arm) starts cold."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from rig.errors import Damaged, Invalid, RigError
from rig.load.bounds import PROMPT_POOL
from rig.load.datasets import TRACE_FIX, read_conversations, read_trace
from rig.load.inputs import MAX_DATA_BYTES, display, read_regular
from rig.load.scenarios import CONVERSATION_DIR, PROMPT_DIR, TRACE_DIR, Scenario, data_path
from rig.load.wire import ConversationScript, Nonce, Prompt, ScriptedTurn, TraceReplay, TraceRequest
from rig.strict_yaml import load_json_file

TOKENIZER_CONFIG_MAX_BYTES = 16 << 20  # chat templates make these tens of kB
TOKENIZER_MAX_BYTES = 256 << 20  # the largest vocabularies' tokenizer.json are tens of MB
MAX_BLOCK_TEXT_TOKENS = 16_000_000  # all distinct blocks of one replay together (the Locust config holds them)


def _clean_up_tokenization(text: str) -> str:
    """transformers' clean-up of decoded text (a tokenizer_config.json may ask for it)."""
    for spaced, joined in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                           (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(spaced, joined)
    return text


def read_tokenizer_config(path: Path) -> object:
    """A checkpoint's tokenizer_config.json, size-capped and strictly parsed."""
    return load_json_file(path, TOKENIZER_CONFIG_MAX_BYTES, str(path),
                          fix="pass a checkpoint directory whose tokenizer_config.json is its own, unchanged")


class LocalTokenizer:
    """A model directory's tokenizer, encoding and decoding as transformers' AutoTokenizer does
    (no special tokens added on encode, none skipped on decode, the config's clean-up applied)."""

    def __init__(self, encode: Callable[[str], list[int]], decode: Callable[[list[int]], str]) -> None:
        self._encode, self._decode = encode, decode

    @classmethod
    def load(cls, model_dir: Path) -> LocalTokenizer | None:
        config_path = model_dir / "tokenizer_config.json"
        if not config_path.exists():
            return None
        if (model_dir / "tokenizer.json").exists():
            from tokenizers import Tokenizer

            path = model_dir / "tokenizer.json"
            fix = "restore the checkpoint's tokenizer.json"
            data = read_regular(path, str(path), TOKENIZER_MAX_BYTES, fix)  # regular, size-capped
            try:
                tokenizer = Tokenizer.from_str(data.decode("utf-8"))
            except Exception as error:  # the tokenizers library raises a bare Exception for a file it cannot parse
                problem = (str(error).splitlines() or [type(error).__name__])[0][:200]
                raise Damaged(str(path), "(file)", f"not a tokenizer the tokenizers library reads ({problem})", fix) from None
            config = read_tokenizer_config(config_path)
            clean = isinstance(config, dict) and config.get("clean_up_tokenization_spaces", False) is True

            def decode(ids: list[int]) -> str:
                text = tokenizer.decode(ids, skip_special_tokens=False)
                return _clean_up_tokenization(text) if clean else text

            return cls(lambda text: tokenizer.encode(text, add_special_tokens=False).ids, decode)
        try:  # a slow (sentencepiece) tokenizer only transformers reads; without it, the server's /tokenize
            from transformers import AutoTokenizer
        except ImportError:
            return None
        slow = AutoTokenizer.from_pretrained(model_dir)
        return cls(lambda text: slow.encode(text, add_special_tokens=False), slow.decode)

    def encode(self, text: str) -> list[int]:
        return list(self._encode(text))

    def decode(self, ids: list[int]) -> str:
        return str(self._decode(ids))


class TokenCounter:
    """The served model's tokenizer: its tokenizer.json read by the `tokenizers` library (the same
    Rust tokenizer a fast transformers tokenizer wraps; no torch or transformers needed on a client
    host), else transformers for a model shipped without tokenizer.json, else the server's /tokenize."""

    def __init__(self, model_dir: str | None, base_url: str | None = None, model: str | None = None) -> None:
        self.tokenizer: LocalTokenizer | None = LocalTokenizer.load(Path(model_dir)) if model_dir else None
        self.base_url, self.model = base_url, model

    @property
    def source(self) -> str:
        return "local tokenizer" if self.tokenizer is not None else "server /tokenize"

    def encode(self, text: str) -> list[int]:
        if self.tokenizer is not None:
            return self.tokenizer.encode(text)
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

        try:
            with client.session() as http:
                response = http.post(f"{self.base_url}/detokenize", json={"model": self.model, "tokens": ids}, timeout=60)
            response.raise_for_status()
            return str(response.json()["prompt"])
        except Exception as error:
            raise RigError("tokenizer", "RIG_MODEL_DIR", f"no local tokenizer and the server's /detokenize failed ({error})",
                           "set RIG_MODEL_DIR to the checkpoint directory") from None


class FixedPrompts(TokenCounter):
    """No tokenizer: for prompts a benchmark or a test gives as they are, against a server that
    needs none (the timed server); `source` says so in the run's summary."""

    def __init__(self, source: str = "fixed prompts") -> None:
        super().__init__(None)
        self._source = source

    @property
    def source(self) -> str:
        return self._source


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


def nonce_spec(counter: TokenCounter) -> Nonce | None:
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
    return Nonce(alphabet=tuple(alphabet), length=length, separator=NONCE_SEPARATOR, tokens=tokens)


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


PROMPT_SET_MAX_BYTES = 16 << 20  # the shipped sets are a few kB; a sparse multi-GB file is refused, not read


def prompt_set_text(name: str) -> str:
    """loadtests/prompts/<name>.txt as UTF-8 text: a regular file of at most PROMPT_SET_MAX_BYTES."""
    path = PROMPT_DIR / f"{name}.txt"
    where = display(path)
    data = read_regular(path, where, PROMPT_SET_MAX_BYTES, f"restore {where} or name another prompt set")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise Invalid(where, f"byte {error.start}", "not UTF-8 text", "save the prompt set as UTF-8") from None


def build_prompts(scenario: Scenario, counter: TokenCounter) -> tuple[list[Prompt], Nonce | None]:
    """A pool of prompts, each exactly `prompt_tokens` long for the served tokenizer once the Locust
    user puts its per-request nonce (and the scenario's shared prefix, if any) in front."""
    import random

    ids = counter.encode(prompt_set_text(scenario.prompt_set))
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
        pool.append(Prompt(name=f"{scenario.prompt_set}-{index}", text=text, tokens=scenario.prompt_tokens,
                           prefix=prefix or None, group=index % groups if prefix else None))
    return pool, nonce


def _corpus(scenario: Scenario, counter: TokenCounter, minimum: int) -> list[int]:
    ids = counter.encode(prompt_set_text(scenario.prompt_set))
    if not ids:
        raise RigError(f"loadtests/prompts/{scenario.prompt_set}.txt", "(text)", "encodes to no tokens", "put text in it")
    return ids * (minimum // len(ids) + 2)


def build_trace(scenario: Scenario, counter: TokenCounter, label: str, scenario_file: Path) -> TraceReplay:
    """What the Locust user replays: each row's send time (seconds after the start, already divided
    by the speed), its blocks, target tokens and output length; and the text of every block."""
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
        entries.append(TraceRequest(at=(row.timestamp - start) / 1000.0 / spec.speed, blocks=keys, tokens=row.input_length,
                                    output=row.output_length))
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
    return TraceReplay(rows=entries, blocks=blocks, file=display(path), sha256=hashlib.sha256(read_regular(path, display(path), MAX_DATA_BYTES, TRACE_FIX)).hexdigest(),
                       block_tokens=spec.block_tokens, speed=spec.speed)


def build_conversations(scenario: Scenario, counter: TokenCounter, scenario_file: Path) -> list[ConversationScript] | None:
    """The conversations of a file, each turn's recorded reply length counted with the served
    tokenizer; None for generated conversations (the Locust user builds them from the prompts)."""
    spec = scenario.conversation
    if spec is None or spec.file is None:
        return None
    where = display(scenario_file)
    rows = read_conversations(data_path(spec.file, CONVERSATION_DIR, ".jsonl", scenario_file, where, "conversation.file"))
    count_replies = scenario.output_lengths is not None and scenario.output_lengths.distribution == "trace"
    return [ConversationScript(id=row.id, system=row.system,
                               turns=[ScriptedTurn(text=user, output=counter.count(reply) if count_replies else None)
                                      for user, reply in row.pairs()[: spec.turns]])
            for row in rows]
