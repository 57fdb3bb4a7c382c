"""A small OpenAI-compatible streaming server whose token timing is known exactly.

For the metric tests and the client-capacity benchmark only (real servers are used
everywhere else): the first token is made `ttft` after the request, token i at ttft + i * itl;
a chunk carries `--tokens-per-chunk` tokens and leaves when its last one is made; usage comes on
the last chunk (on every chunk when the request asks for continuous usage), then `data: [DONE]`.
A token is a whitespace-separated word of the prompt's message contents; a stand-in prefix cache
remembers every prompt and every chat reply it streamed, in blocks of CACHE_BLOCK words (a chain
of block hashes, bounded like a real one: paged engines cache whole blocks) and reports the
longest remembered run of whole blocks as cached_tokens, so a conversation that sends its history
back shows its cached share growing turn by turn.
Deadlines are absolute, so sleep jitter does not accumulate. `--processes N` shares the
port through SO_REUSEPORT to serve thousands of streams.

With `--step S` it runs like an engine instead (`StepEngine`): one step every S seconds, at which
every running request emits one chunk, so N streams make a burst of N events per step, not a
smooth stream. At most `--max-num-seqs` requests run (vLLM's max_num_seqs); the rest wait in
arrival order and are admitted at a step boundary when one finishes. A request's first chunk comes
`--ttft` after its admission, rounded up to whole steps (its prefill), then one chunk per step.
`/metrics` reports running and waiting like vLLM. With --processes each process is one such engine.

    python -m rig.testing.timed_server --port 8400 --ttft 0.5 --itl 0.02 [--processes 4] [--die-after 3]
    python -m rig.testing.timed_server --port 8400 --step 0.05 --max-num-seqs 256 --ttft 0.1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
import uuid

from rig.errors import RigError
from rig.testing import toy_lm
from rig.testing.step_engine import StepEngine, StepStream


class TimedServer:
    def __init__(self, ttft: float, itl: float, die_after: float | None = None, tokens_per_chunk: int = 1,
                 continuous_usage: bool = True, perturb: float = 0.0, engine: StepEngine | None = None) -> None:
        self.engine = engine  # None: every stream on its own deadlines
        self.ttft, self.itl, self.die_after = ttft, itl, die_after
        self.perturb = perturb  # the toy model's logit change for non-streamed completions (rig/testing/toy_lm.py)
        self.tokens_per_chunk, self.continuous_usage = tokens_per_chunk, continuous_usage
        self.prefixes: dict[int, None] = {}  # the stand-in prefix cache: hashes of remembered word prefixes, oldest first
        self.first_request: float | None = None  # --die-after counts from here, not from start-up
        self.running = 0  # live streams and tokens sent, for the /metrics page (per process)
        self.generated = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Every write leaves when it is made, as an engine's server sends it. asyncio turns Nagle off
        # only for sockets whose proto is IPPROTO_TCP, and an accepted one has the listener's 0: a
        # chunk written under 40 ms after the response headers then waited for their delayed ACK
        # (measured: the first chunk of each keep-alive request read ~22 ms after it was written).
        connection = writer.get_extra_info("socket")
        if connection is not None:
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                request_line = await reader.readline()
                if not request_line:
                    break
                arrival = asyncio.get_running_loop().time()
                method, path, _ = request_line.decode().split(" ", 2)
                headers = {}
                while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    key, _, value = line.decode().partition(":")
                    headers[key.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", 0) or 0))
                if method == "GET" and path.startswith("/metrics"):
                    data = self.metrics_page()
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
                    await writer.drain()
                    continue
                if method == "GET":
                    payload = {"status": "ok"} if path.startswith("/health") else {"object": "list", "data": [{"id": "timed", "object": "model"}]}
                    data = json.dumps(payload).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
                    await writer.drain()
                    continue
                request = json.loads(body or b"{}")
                if not request.get("stream"):
                    # non-streamed completions are the quality tests' scored requests; anything else
                    # this server does not serve answers 404, as a real server would
                    route = {"/v1/completions": toy_lm.complete, "/generate": toy_lm.generate,
                             "/v1/tokenize": toy_lm.tokenize}.get(path.split("?")[0])
                    known = route is not None
                    data = json.dumps(route(request, self.perturb) if route else {"detail": "Not Found"}).encode()
                    status = b"200 OK" if known else b"404 Not Found"
                    writer.write(b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (status, len(data))
                                 + data)
                    await writer.drain()
                    continue
                self.running += 1
                try:
                    await self.stream(request, path, arrival, writer)
                finally:
                    self.running -= 1
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    CACHE_ENTRIES = 200_000
    CACHE_BLOCK = 8  # words per cached block: a shared first word or two (a nonce's first picks) is no hit

    def cached(self, words: list[str]) -> tuple[int, tuple[int, list[str]]]:
        """Tokens of the longest remembered run of whole leading blocks of `words`; remembers the
        prompt's whole blocks. Returns (cached tokens, where a reply continues the chain)."""
        chain = longest = 0
        block = self.CACHE_BLOCK
        whole = len(words) - len(words) % block
        for start in range(0, whole, block):
            chain = hash((chain, *words[start:start + block]))
            if longest == start and chain in self.prefixes:
                longest = start + block
            self._keep(chain)
        return longest, (chain, words[whole:])

    def remember(self, state: tuple[int, list[str]], words: list[str]) -> None:
        chain, rest = state
        words = rest + words
        block = self.CACHE_BLOCK
        for start in range(0, len(words) - len(words) % block, block):
            chain = hash((chain, *words[start:start + block]))
            self._keep(chain)

    def _keep(self, key: int) -> None:
        self.prefixes.pop(key, None)  # most recently used last
        self.prefixes[key] = None
        if len(self.prefixes) > self.CACHE_ENTRIES:
            del self.prefixes[next(iter(self.prefixes))]

    def metrics_page(self) -> bytes:
        """A small Prometheus page under vLLM's names, so server-metric scraping is tested end to end."""
        return (
            "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{model_name="timed"}} {len(self.engine.running) if self.engine else self.running}\n'
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
            "# TYPE vllm:num_requests_waiting gauge\n"
            f'vllm:num_requests_waiting{{model_name="timed"}} {len(self.engine.waiting) if self.engine else 0}\n'
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.\n"
            "# TYPE vllm:generation_tokens_total counter\n"
            f'vllm:generation_tokens_total{{model_name="timed"}} {self.generated}\n'
            "# HELP rig_timed_step_late_max_seconds The latest a step's chunks were all written after it was due.\n"
            "# TYPE rig_timed_step_late_max_seconds gauge\n"
            f"rig_timed_step_late_max_seconds {self.engine.late_max if self.engine else 0.0}\n"
        ).encode()

    async def stream(self, request: dict, path: str, arrival: float, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        chat = path.endswith("/chat/completions")
        tokens = int(request.get("max_tokens") or 16)
        rid = uuid.uuid4().hex
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")

        def send(event: dict | str) -> None:
            data = b"data: " + (event.encode() if isinstance(event, str) else json.dumps(event).encode()) + b"\n\n"
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))

        per_chunk = self.tokens_per_chunk
        if self.first_request is None:
            self.first_request = time.monotonic()
        continuous = bool((request.get("stream_options") or {}).get("continuous_usage_stats")) and self.continuous_usage
        chunks = -(-tokens // per_chunk)
        words = prompt_words(request)
        prompt_tokens = max(1, len(words))
        cached, chain = self.cached(words)

        def chunk(index: int, last: bool) -> None:
            carried = min(per_chunk, tokens - index * per_chunk)
            piece = "".join(f" t{index * per_chunk + j}" for j in range(carried))
            choice = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
            if last:
                choice["finish_reason"] = "length"
            event = {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion", "choices": [choice],
                     "server_time": time.time()}
            done = min(tokens, (index + 1) * per_chunk)
            if last or continuous:
                event["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": done, "total_tokens": done + prompt_tokens,
                                  "prompt_tokens_details": {"cached_tokens": cached}}
            send(event)
            self.generated += carried

        if self.engine is not None:  # engine-like: the step loop writes this stream's chunks
            stream = StepStream(chunk, chunks, writer.transport.is_closing)
            self.engine.submit(stream)
            await stream.done.wait()
            if writer.transport.is_closing():
                return
        for index in range(chunks if self.engine is None else 0):
            if self.die_after is not None and time.monotonic() - self.first_request > self.die_after:  # type: ignore[operator]
                os._exit(0)  # the fault test: the server dies mid-stream
            carried = min(per_chunk, tokens - index * per_chunk)
            # A chunk leaves when its last token is made: token j at ttft + j * itl.
            delay = arrival + self.ttft + (index * per_chunk + carried - 1) * self.itl - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            chunk(index, index == chunks - 1)
            await writer.drain()
        if chat:  # the reply's tokens are cached too (as an engine keeps a finished sequence's KV blocks)
            self.remember(chain, [f"t{i}" for i in range(tokens)])
        send("[DONE]")
        writer.write(b"0\r\n\r\n")
        await writer.drain()


def prompt_words(request: dict) -> list[str]:
    """The prompt's tokens for this server: the words of every message's content, in order."""
    messages = request.get("messages")
    if isinstance(messages, list):
        return [word for message in messages if isinstance(message, dict) for word in str(message.get("content") or "").split()]
    return str(request.get("prompt") or "").split()


def serve(port: int, ttft: float, itl: float, die_after: float | None, host: str = "127.0.0.1", tokens_per_chunk: int = 1,
          continuous_usage: bool = True, perturb: float = 0.0, step: float | None = None, max_num_seqs: int = 256) -> None:
    async def main() -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(4096)
        engine = StepEngine(step, max_num_seqs, ttft) if step else None
        handler = TimedServer(ttft, itl, die_after, tokens_per_chunk, continuous_usage, perturb, engine).handle
        server = await asyncio.start_server(handler, sock=sock, limit=1 << 20)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def start(port: int, *options: str) -> tuple[subprocess.Popen, str]:
    """This server in a process of its own, once its /health answers: (the process, its base URL).
    For benchmarks; the caller terminates it."""
    import urllib.request

    process = subprocess.Popen([sys.executable, "-m", "rig.testing.timed_server", "--port", str(port), *options])
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(base_url + "/health", timeout=1)
            return process, base_url
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.1)
    process.kill()
    process.wait()
    raise RigError("timed server", f"port {port}", "did not answer /health within 30 s", "pass a free --port")


def positive_seconds(text: str) -> float:
    value = float(text)
    if not 0.0005 <= value <= 10:
        raise argparse.ArgumentTypeError(f"{text!r}: a step of 0.0005 to 10 seconds")
    return value


def positive_count(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 1_000_000:
        raise argparse.ArgumentTypeError(f"{text!r}: 1 to 1000000")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ttft", type=float, default=0.5)
    parser.add_argument("--itl", type=float, default=0.02)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--die-after", type=float, help="exit this many seconds after the first streamed request")
    parser.add_argument("--tokens-per-chunk", type=int, default=1, help="tokens in each chunk (MTP / speculative decoding)")
    parser.add_argument("--no-continuous-usage", action="store_true", help="usage on the last chunk only, whatever is asked")
    parser.add_argument("--perturb", type=float, default=0.0, help="change the toy model's logits by this much (quality tests)")
    parser.add_argument("--step", type=positive_seconds, help="run like an engine: one step every STEP seconds (--itl is ignored)")
    parser.add_argument("--max-num-seqs", type=positive_count, default=256, help="with --step: requests running at once; the rest wait")
    args = parser.parse_args()
    options = (args.port, args.ttft, args.itl, args.die_after, "127.0.0.1", args.tokens_per_chunk, not args.no_continuous_usage,
               args.perturb, args.step, args.max_num_seqs)
    if args.processes == 1:
        serve(*options)
        return
    parent = os.getpid()
    fork = multiprocessing.get_context("fork")  # a forkserver's child would not be ours (getppid, PDEATHSIG)
    workers = [fork.Process(target=_serve_while_parent_lives, args=(parent, *options), daemon=True)
               for _ in range(args.processes)]

    def stop(signum: int, frame: object) -> None:  # terminate() or Ctrl-C of this process stops its workers too
        started = [worker for worker in workers if worker.pid is not None]
        for worker in started:
            worker.terminate()
        for worker in started:
            worker.join(5)
        sys.exit(128 + signum)

    # Held while the workers fork: a signal that arrived mid-fork ran the handler inside the fork's
    # own hooks (and was lost), or in a child not yet itself. It is delivered once all are started.
    stopping = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stopping)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for worker in workers:
        worker.start()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, stopping)
    for worker in workers:
        worker.join()


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _serve_while_parent_lives(parent: int, *options: object) -> None:
    """A worker of `--processes N`: the kernel sends it SIGTERM when the parent dies, even by
    SIGKILL (a killed benchmark left its workers serving, holding the port and the caller's pipes).
    It starts with SIGTERM and SIGINT held (the parent's mask): its own dispositions are set first."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's handler, inherited through fork
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; a terminal's Ctrl-C reaches it too
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # it died before the request above took effect
        return
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    serve(*options)


if __name__ == "__main__":
    main()
