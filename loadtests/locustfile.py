"""rig's Locust user: streaming OpenAI chat / completions through the requests-based HttpUser.

Every request writes its own timeline (send, first token, each chunk's arrival, end, token
counts from usage and from chunks, status, error) to this process's JSONL as it completes,
also when the run's end cuts it. Summaries are computed from these records by rig, never
from Locust's histograms. Configuration comes from the JSON file named by RIG_LOAD_CONFIG,
written by `rig loadtest`; run this file only through it (or with that variable set).
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import random
import socket
import time
from itertools import count
from pathlib import Path
from typing import Any

import gevent
import psutil
from locust import HttpUser, events, task
from locust.runners import MasterRunner, WorkerRunner

from rig.client import auth_headers, output_piece
from rig.load.records import RequestRecord

_CONFIG_PATH = os.environ.get("RIG_LOAD_CONFIG")
CONFIG: dict[str, Any] = json.loads(Path(_CONFIG_PATH).read_text()) if _CONFIG_PATH else {}
OUT_DIR = CONFIG.get("out_dir", ".")
PROCESS_ID = f"{socket.gethostname()}-{os.getpid()}"
LAG_PERIOD_S = 0.01


class RecordWriter:
    """Appends one JSON line per request and flushes it at once: an interrupted run keeps it.
    A worker on another machine (the run's directory is not here) ships its lines to the master
    with Locust's own worker reports instead; the master appends them to the same kind of file."""

    def __init__(self) -> None:
        self.handle = None
        self.shipping = bool(CONFIG) and not os.path.isdir(OUT_DIR)
        self.outbox: list[str] = []

    def write(self, line: str) -> None:
        if self.shipping:
            self.outbox.append(line)
            return
        if self.handle is None:
            self.handle = open(os.path.join(OUT_DIR, f"records-{PROCESS_ID}.jsonl"), "a", buffering=1)  # noqa: SIM115
        self.handle.write(line + "\n")


WRITER = RecordWriter()
LAG: list[tuple[float, float]] = []  # (wall time, lag seconds)
CPU: list[float] = []
REQUEST_IDS = count()
USER_IDS = count()
ROLE: dict[str, Any] = {"environment": None}


def _lag_monitor() -> None:
    """Event-loop lag: how late a 10 ms sleep wakes up. High lag means the client distorts timings."""
    process = psutil.Process()
    process.cpu_percent(None)
    last_cpu = time.monotonic()
    while True:
        start = time.perf_counter()
        gevent.sleep(LAG_PERIOD_S)
        LAG.append((time.time(), time.perf_counter() - start - LAG_PERIOD_S))
        if time.monotonic() - last_cpu >= 1.0:
            CPU.append(process.cpu_percent(None))
            last_cpu = time.monotonic()


def _write_window(name: str) -> None:
    with open(os.path.join(OUT_DIR, "window.jsonl"), "a") as handle:
        handle.write(json.dumps({"event": name, "time": time.time()}) + "\n")


@events.init.add_listener
def _on_init(environment: Any, **_: Any) -> None:
    ROLE["environment"] = environment
    if not isinstance(environment.runner, MasterRunner):
        # Thousands of live streams keep many objects alive; default GC thresholds then stop the
        # event loop for full collections of ~10 ms, which shows up as client lag. Collect rarely.
        gc.freeze()
        gc.set_threshold(100_000, 50, 1000)
        gevent.spawn(_lag_monitor)


@events.spawning_complete.add_listener
def _on_spawned(user_count: int, **_: Any) -> None:
    environment = ROLE["environment"]
    if environment is None or not isinstance(environment.runner, WorkerRunner):
        _write_window("spawning_complete")


@events.test_stopping.add_listener
def _on_stopping(environment: Any, **_: Any) -> None:
    if not isinstance(environment.runner, WorkerRunner):
        _write_window("stopping")


def _client_stats(process: str, lag: list, cpu: list[float]) -> dict[str, Any]:
    # Raw samples: rig computes percentiles over the measurement window (spawning bursts excluded).
    return {"process": process, "lag": [[round(t, 4), round(value, 6)] for t, value in lag],
            "cpu_percent_mean": sum(cpu) / len(cpu) if cpu else None, "cpu_percent_max": max(cpu) if cpu else None}


@events.report_to_master.add_listener
def _ship(client_id: str, data: dict[str, Any], **_: Any) -> None:
    if WRITER.shipping:
        data["rig"] = {"process": PROCESS_ID, "records": WRITER.outbox[:], "lag": LAG[:], "cpu": CPU[:]}
        WRITER.outbox.clear()
        LAG.clear()
        CPU.clear()


REMOTE: dict[str, dict[str, list]] = {}


@events.worker_report.add_listener
def _receive(client_id: str, data: dict[str, Any], **_: Any) -> None:
    shipped = data.get("rig")
    if not shipped:
        return
    process = shipped["process"]
    if shipped["records"]:
        with open(os.path.join(OUT_DIR, f"records-{process}.jsonl"), "a") as handle:
            handle.write("".join(line + "\n" for line in shipped["records"]))
    remote = REMOTE.setdefault(process, {"lag": [], "cpu": []})
    remote["lag"] += shipped["lag"]
    remote["cpu"] += shipped["cpu"]


@events.quitting.add_listener
def _on_quit(environment: Any, **_: Any) -> None:
    clients = {process: _client_stats(process, v["lag"], v["cpu"]) for process, v in REMOTE.items()}
    if not isinstance(environment.runner, MasterRunner) and not WRITER.shipping:
        clients[PROCESS_ID] = _client_stats(PROCESS_ID, LAG, CPU)
    for process, client in clients.items():
        with open(os.path.join(OUT_DIR, f"client-{process}.json"), "w") as handle:
            json.dump(client, handle)


def _payload(text: str) -> tuple[str, dict[str, Any]]:
    # continuous_usage_stats: SGLang and vLLM then put the running usage on every chunk, so a
    # chunk's token count is known exactly (several per chunk under MTP or speculative decoding);
    # servers that do not know the field ignore it and report usage once, at the end.
    body: dict[str, Any] = {"model": CONFIG["model"], "stream": True, "max_tokens": CONFIG["max_tokens"],
                            "temperature": CONFIG["temperature"], "seed": CONFIG["seed"],
                            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    body.update(CONFIG.get("extra_body", {}))
    if CONFIG["endpoint"] == "chat":
        body["messages"] = [{"role": "user", "content": text}]
        return "/v1/chat/completions", body
    body["prompt"] = text
    return "/v1/completions", body


def _nonce(rng: random.Random) -> str | None:
    """A unique leading nonce whose token count is fixed (its alphabet was checked against the
    served tokenizer when the prompts were built), so every prompt misses the prefix cache."""
    spec = CONFIG.get("nonce")
    if not spec:
        return None
    return "".join(rng.choice(spec["alphabet"]) for _ in range(spec["length"])) + spec["separator"]


def _output_piece(choice: dict[str, Any]) -> str | None:
    return output_piece(choice, chat=CONFIG["endpoint"] == "chat")


class LLMUser(HttpUser):
    """One simulated user: streams requests back to back (closed loop) over its own connection."""

    host = CONFIG.get("base_url")

    def on_start(self) -> None:
        self.client.headers.update(auth_headers())
        local = next(USER_IDS)
        self.user_key = f"{PROCESS_ID}-u{local}"
        # Prompt choice and nonces follow (run label, worker, user): unique inside a run, and the
        # same sequence in the same round of every boot, so outputs can be compared across arms.
        worker = getattr(self.environment.runner, "worker_index", 0) or 0
        self.prompt_index = local * 7919
        self.rng = random.Random(f"{CONFIG.get('nonce_seed', '')}/{worker}/{local}")
        # Open the keep-alive connection before measuring: the first stream should not pay the TCP
        # handshake and the client's first-call costs (18 ms measured on loopback vs 3 ms after).
        self.client.get("/v1/models", name="connect", timeout=30)

    @task
    def stream(self) -> None:
        prompts = CONFIG["prompts"]
        self.prompt_index += 1
        prompt = prompts[self.prompt_index % len(prompts)]
        nonce = _nonce(self.rng)
        path, body = _payload(prompt.get("prefix", "") + (nonce or "") + prompt["text"])
        record = RequestRecord(id=f"{PROCESS_ID}-{next(REQUEST_IDS)}", process=PROCESS_ID, user=self.user_key,
                               prompt=prompt["name"], prompt_tokens_target=prompt.get("tokens"), prompt_nonce=nonce,
                               t_send=time.time())
        text: list[str] = []
        cumulative = 0  # completion tokens the server reported so far (continuous usage)
        attributed = 0  # of those, tokens already assigned to an output chunk
        per_chunk: list[int] = []
        continuous = False
        try:
            with self.client.post(path, json=body, stream=True, catch_response=True, name=CONFIG["scenario"],
                                  timeout=(10, CONFIG.get("read_timeout_s", 600))) as response:
                record.status = response.status_code
                if response.status_code != 200:
                    # Locust's session reports a refused or reset connection as status 0.
                    record.error = f"http_{response.status_code}" if response.status_code else "connection"
                    record.error_detail = str(getattr(response, "error", "") or response.text)[:300]
                    response.failure(record.error)
                    return
                # Read to the end of the body, past [DONE]: an unread stream cannot go back to the
                # connection pool, and the next request would open a new connection.
                for line in response.iter_lines():
                    now = time.time()
                    if not line.startswith(b"data:"):
                        continue
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        continue
                    event = json.loads(data)
                    usage = event.get("usage")
                    if usage:
                        record.usage = usage
                        cumulative = int(usage.get("completion_tokens") or cumulative)
                    output = False
                    for choice in event.get("choices") or []:
                        piece = _output_piece(choice)
                        if piece:
                            output = True
                            text.append(piece)
                        if choice.get("finish_reason"):
                            record.finish_reason = choice["finish_reason"]
                    if output:
                        if record.t_first is None:
                            record.t_first = now
                        record.t_last = now
                        record.chunks.append(now)
                        continuous = continuous or bool(usage)
                        per_chunk.append(cumulative - attributed)
                        attributed = cumulative
                if record.finish_reason is None:
                    record.error = "stream_cut"
                    response.failure("stream ended without finish_reason")
                else:
                    response.success()
        except gevent.GreenletExit:
            record.error = "cut_by_window"
            raise
        except Exception as error:  # a run never crashes on a bad server: the record says what happened
            record.error = "connection" if "Connection" in type(error).__name__ else type(error).__name__
            record.error_detail = str(error)[:300]
        finally:
            record.t_end = time.time()
            if continuous and per_chunk:
                per_chunk[-1] += cumulative - attributed  # tokens reported after the last output chunk
                record.chunk_tokens = per_chunk
            details = (record.usage or {}).get("prompt_tokens_details") or {}
            if details.get("cached_tokens") is not None:
                record.cached_tokens = int(details["cached_tokens"])
            record.text_sha256 = hashlib.sha256("".join(text).encode()).hexdigest() if text else None
            if CONFIG.get("keep_text_chars"):
                record.text = "".join(text)[: CONFIG["keep_text_chars"]]
            WRITER.write(record.to_line())
