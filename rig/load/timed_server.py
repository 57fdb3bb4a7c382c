"""A small OpenAI-compatible streaming server whose token timing is known exactly.

For the metric tests and the client-capacity benchmark only (real servers are used
everywhere else): the first token arrives `ttft` after the request, token i at
ttft + i * itl, each in its own chunk, usage on the last chunk, then `data: [DONE]`.
Deadlines are absolute, so sleep jitter does not accumulate. `--processes N` shares the
port through SO_REUSEPORT to serve thousands of streams.

    python -m rig.load.timed_server --port 8400 --ttft 0.5 --itl 0.02 [--processes 4] [--die-after 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import time
import uuid


class TimedServer:
    def __init__(self, ttft: float, itl: float, die_after: float | None = None) -> None:
        self.ttft, self.itl, self.die_after = ttft, itl, die_after
        self.started = time.monotonic()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
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
                if method == "GET":
                    payload = {"status": "ok"} if path.startswith("/health") else {"object": "list", "data": [{"id": "timed", "object": "model"}]}
                    data = json.dumps(payload).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
                    await writer.drain()
                    continue
                await self.stream(json.loads(body or b"{}"), path, arrival, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def stream(self, request: dict, path: str, arrival: float, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        chat = path.endswith("/chat/completions")
        tokens = int(request.get("max_tokens") or 16)
        rid = uuid.uuid4().hex
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")

        def send(event: dict | str) -> None:
            data = b"data: " + (event.encode() if isinstance(event, str) else json.dumps(event).encode()) + b"\n\n"
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))

        for index in range(tokens):
            if self.die_after is not None and time.monotonic() - self.started > self.die_after:
                os._exit(0)  # the fault test: the server dies mid-stream
            delay = arrival + self.ttft + index * self.itl - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            last = index == tokens - 1
            choice = {"index": 0, "delta": {"content": f" t{index}"}} if chat else {"index": 0, "text": f" t{index}"}
            if last:
                choice["finish_reason"] = "length"
            event = {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion", "choices": [choice],
                     "server_time": time.time()}
            if last:
                event["usage"] = {"prompt_tokens": 8, "completion_tokens": tokens, "total_tokens": tokens + 8}
            send(event)
            await writer.drain()
        send("[DONE]")
        writer.write(b"0\r\n\r\n")
        await writer.drain()


def serve(port: int, ttft: float, itl: float, die_after: float | None, host: str = "127.0.0.1") -> None:
    async def main() -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(4096)
        server = await asyncio.start_server(TimedServer(ttft, itl, die_after).handle, sock=sock, limit=1 << 20)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ttft", type=float, default=0.5)
    parser.add_argument("--itl", type=float, default=0.02)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--die-after", type=float)
    args = parser.parse_args()
    if args.processes == 1:
        serve(args.port, args.ttft, args.itl, args.die_after)
        return
    workers = [multiprocessing.Process(target=serve, args=(args.port, args.ttft, args.itl, args.die_after))
               for _ in range(args.processes)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


if __name__ == "__main__":
    main()
