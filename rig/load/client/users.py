"""rig's Locust users: streaming OpenAI chat / completions through the requests-based HttpUser.

Three ways to generate load, one user class each (`rig loadtest` names the one its scenario needs):
- LLMUser: a closed loop; each user sends its next request when the last one ends.
- ArrivalUser: open-loop arrivals (Gamma gaps, as `vllm bench serve`) or a trace replayed at its
  timestamps (rig.load.client.schedule). Arrivals go to free users in order, and an arrival that
  finds every user busy waits: that wait is the client's queueing delay, recorded per request.
- ConversationUser: multi-turn chats; each user holds one conversation and sends its whole history.

The classes here are abstract; `bind_users(process)` makes the ones Locust runs, each bound to the
process's ClientProcess.
"""

from __future__ import annotations

import hashlib
import random
import time
from typing import TYPE_CHECKING, Any

import gevent
from locust import HttpUser, task
from locust.user.task import LOCUST_STATE_STOPPING

from rig.client import auth_headers
from rig.load.client.stream import CONNECT_TIMEOUT_S, draw_nonce, error_kind, payload, stream_into
from rig.load.records import RequestRecord
from rig.load.sse import StreamScan
from rig.load.wire import Prompt, dispatch_wait, dispatched_at

if TYPE_CHECKING:
    from rig.load.client.process import ClientProcess


class StreamingUser(HttpUser):
    """What every rig user does: one keep-alive connection, prompts and nonces from its own seeded
    sequence, and `send`, which streams one request and writes its record."""

    abstract = True  # Locust inherits @task methods: the kinds below each declare only their own
    process: ClientProcess  # set by bind_users

    def on_start(self) -> None:
        self.client.headers.update(auth_headers())
        process = self.process
        local = next(process.user_ids)
        self.user_key = f"{process.process_id}-u{local}"
        rate = process.settings.spawn_rate
        self.dispatched = dispatched_at(process.spawns, local, dispatch_wait(rate)) if rate else None
        self.opening: tuple[float, float] | None = None
        # Prompt choice and nonces follow (run label, worker, user): unique inside a run, and the
        # same sequence in the same round of every boot, so outputs can be compared across arms.
        self.worker = getattr(self.environment.runner, "worker_index", 0) or 0
        self.prompt_index = local * 7919
        self.rng = random.Random(f"{process.settings.nonce_seed}/{self.worker}/{local}")
        # Open the keep-alive connection before measuring: the first stream should not pay the TCP
        # handshake and the client's first-call costs (18 ms measured on loopback vs 3 ms after).
        began = time.time()
        self.client.get("/v1/models", name="connect", timeout=30)
        self.opening = (began, time.time())

    def next_prompt(self) -> tuple[Prompt, str | None]:
        prompts = self.process.settings.prompts
        self.prompt_index += 1
        return prompts[self.prompt_index % len(prompts)], draw_nonce(self.process.settings, self.rng)

    def new_record(self, prompt: str, target: int | None, nonce: str | None, max_tokens: int) -> RequestRecord:
        process_id = self.process.process_id
        record = RequestRecord(id=f"{process_id}-{next(self.process.request_ids)}", process=process_id, user=self.user_key,
                               prompt=prompt, prompt_tokens_target=target, prompt_nonce=nonce, t_send=0.0, max_tokens=max_tokens,
                               t_dispatched=self.dispatched[0] if self.dispatched else None,
                               dispatch_behind=self.dispatched[1] if self.dispatched else None, opening=self.opening)
        self.dispatched = self.opening = None  # the user's first request only
        return record

    def send(self, content: str | list[dict[str, str]], record: RequestRecord) -> str | None:
        """Streams one request and writes its record, also when the run's end cuts it; returns the
        output text of a complete response (None otherwise)."""
        process = self.process
        settings = process.settings
        path, body = payload(settings, content, record.max_tokens or process.lengths.cap)
        scan = StreamScan(settings.endpoint == "chat")
        text = None
        record.t_start = record.t_send = time.time()  # t_send until the request is written whole (process.written)
        me = id(gevent.getcurrent())
        process.written.pop(me, None)
        watch = process.stalls.watch(settings.read_timeout_s)  # the read timeout: no socket timeout per wait
        try:
            with self.client.post(path, json=body, stream=True, catch_response=True, name=settings.scenario,
                                  timeout=(CONNECT_TIMEOUT_S, None)) as response:
                record.t_send = process.written.pop(me, record.t_send)
                record.status = response.status_code
                if response.status_code != 200:
                    # Locust's session reports a refused or reset connection as status 0.
                    record.error = f"http_{response.status_code}" if response.status_code else "connection"
                    record.error_detail = str(getattr(response, "error", "") or response.text)[:300]
                    response.failure(record.error)
                    return None
                # Read to the end of the body, past [DONE]: an unread stream cannot go back to the
                # connection pool, and the next request would open a new connection.
                stream_into(response, scan, watch, process.passes)
                scan.close()
                if scan.finish_reason is None:
                    record.error = "stream_cut"
                    record.error_detail = scan.error_detail()
                    response.failure("stream ended without finish_reason")
                else:
                    response.success()
        except gevent.GreenletExit:
            record.error = "cut_by_window"
            raise
        except Exception as error:  # a run never crashes on a bad server: the record says what happened
            record.error = error_kind(error)
            record.error_detail = str(error)[:300]
        finally:
            process.stalls.release(watch)
            process.written.pop(me, None)
            record.t_end = time.time()
            record.chunks = scan.chunks
            record.chunk_waits_us = scan.waits_us or None
            record.t_first, record.t_last = scan.t_first, scan.t_last
            record.finish_reason = scan.finish_reason
            record.chunk_tokens = scan.chunk_tokens()
            record.usage = scan.usage()
            details = (record.usage or {}).get("prompt_tokens_details") or {}
            if details.get("cached_tokens") is not None:
                record.cached_tokens = int(details["cached_tokens"])
            output = scan.text()
            record.text_sha256 = hashlib.sha256(output.encode()).hexdigest() if output else None
            if settings.keep_text_chars:
                record.text = output[: settings.keep_text_chars]
            if record.error is None and record.finish_reason is not None:
                text = output
            process.writer.write(record.to_line())
        return text


class LLMUser(StreamingUser):
    """A closed loop: each user streams its requests back to back."""

    abstract = True

    @task
    def stream(self) -> None:
        # The next request goes out as the last one ends, inside this task. Between tasks Locust
        # sleeps the wait time, and a gevent sleep of 0 queues the user behind every read its loop's
        # pass has ready: at 250 streams a process, with an engine's step of chunks arriving at
        # once, 13 ms a request on an H200 with vLLM, a hold-back the aggregate's client bound
        # counts against every user. A failed request goes back to Locust (its sleep yields: a
        # refused connection fails without waiting, and a loop that never waits starves the
        # others), and so does a stopping user after its request, as Locust's own wait would.
        while True:
            prompt, nonce = self.next_prompt()
            record = self.new_record(prompt.name, prompt.tokens, nonce, self.process.lengths.draw(self.rng))
            if self.send((prompt.prefix or "") + (nonce or "") + prompt.text, record) is None or self._state == LOCUST_STATE_STOPPING:
                return


class ArrivalUser(StreamingUser):
    """Open-loop arrivals and trace replays: a free user takes the schedule's next arrival and sends
    it at its time (Locust's wait_time is where the arrival is claimed and waited for)."""

    abstract = True

    def on_start(self) -> None:
        super().on_start()
        self.arrival: tuple[int, float] | None = None
        self.queued = False
        schedule = self.process.schedule
        if not schedule.offsets:
            schedule.load(self.process.settings, self.worker)
        self.wait()  # claim the first arrival before the first task

    def wait_time(self) -> float:
        schedule = self.process.schedule
        schedule.started.wait()
        self.arrival = schedule.claim()
        if self.arrival is None:
            return 3600.0  # the schedule is done: idle until the run ends (it ends once drained)
        delay = self.arrival[1] - time.time()
        self.queued = delay < 0  # the arrival's time passed while every user was busy
        return max(0.0, delay)

    @task
    def stream(self) -> None:
        if self.arrival is None:
            return
        index, at = self.arrival
        lengths = self.process.lengths
        trace = self.process.settings.trace
        if trace is not None:
            row = trace.rows[index]
            record = self.new_record(f"trace-{index}", row.tokens, None, lengths.draw(self.rng, row.output))
            content = "".join(trace.blocks[key] for key in row.blocks)
        else:
            prompt, nonce = self.next_prompt()
            record = self.new_record(prompt.name, prompt.tokens, nonce, lengths.draw(self.rng))
            content = (prompt.prefix or "") + (nonce or "") + prompt.text
        record.arrival, record.t_scheduled, record.queued = index, at, self.queued
        try:
            self.send(content, record)
        finally:
            self.process.schedule.finished_one()


class ConversationUser(StreamingUser):
    """Multi-turn chats. Each user owns its conversation (no state shared between users, so no
    user waits on another), sends the whole history every turn (each earlier turn once: the user's
    message and the reply the server actually streamed), thinks between turns, and starts the
    next conversation after the last turn. A turn that fails ends its conversation: a history with
    a missing reply is not a conversation any more."""

    abstract = True

    def on_start(self) -> None:
        super().on_start()
        self.conversation: dict[str, Any] | None = None
        self.pause = 0.0

    def wait_time(self) -> float:
        return self.pause

    def begin(self) -> None:
        local = next(self.process.conversation_ids)
        settings = self.process.settings
        conversations, count = settings.conversations, settings.turns or 1
        processes = max(1, settings.arrival_processes)
        first = draw_nonce(settings, self.rng) or ""  # only the first message needs one: the whole history is unique after it
        if conversations:
            source = conversations[(local * processes + self.worker) % len(conversations)]
            turns = [{"text": turn.text, "output": turn.output} for turn in source.turns[:count]]
            name = source.id
            history = [{"role": "system", "content": source.system}] if source.system else []
        else:
            prompts = settings.prompts
            start = local * 7 + self.worker * 7919
            turns = [{"text": prompts[(start + k) % len(prompts)].text, "output": None} for k in range(count)]
            name = f"generated-{start % len(prompts)}"
            history = []
        turns[0]["text"] = first + turns[0]["text"]
        self.conversation = {"id": f"{self.process.process_id}-c{local}", "source": name, "turns": turns, "history": history,
                             "next": 0}

    @task
    def turn(self) -> None:
        if self.conversation is None:
            self.begin()
        conversation = self.conversation
        index = conversation["next"]
        turn = conversation["turns"][index]
        messages = conversation["history"] + [{"role": "user", "content": turn["text"]}]
        record = self.new_record(f"{conversation['source']}#{index}", None, None, self.process.lengths.draw(self.rng, turn.get("output")))
        record.conversation, record.turn = conversation["id"], index
        reply = self.send(messages, record)
        if reply is None or index + 1 >= len(conversation["turns"]):
            self.conversation, self.pause = None, 0.0
            return
        conversation["history"] = messages + [{"role": "assistant", "content": reply}]
        conversation["next"] = index + 1
        self.pause = self.process.settings.think_time_s


def bind_users(process: ClientProcess) -> tuple[type[StreamingUser], type[StreamingUser], type[StreamingUser]]:
    """The user classes Locust runs, bound to this process (same names: `rig loadtest` picks one by
    name). Locust runs every class of the Locust file that is not abstract."""
    host = process.config.base_url if process.config is not None else None

    def bound(kind: type[StreamingUser]) -> type[StreamingUser]:
        return type(kind.__name__, (kind,), {"process": process, "host": host, "abstract": False, "__module__": kind.__module__})

    return bound(LLMUser), bound(ArrivalUser), bound(ConversationUser)
